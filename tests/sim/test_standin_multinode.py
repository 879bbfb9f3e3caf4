# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One stand-in server over two nodes (--nnodes 2): each node a sandbox with its own NVML state, in a
network namespace of its own, the two joined by a veth pair. The same command runs on both but
--node-rank; rank 0 hosts the rendezvous at --dist-init-addr."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from gpusim import net, standin
from gpusim.nvml import SIM_DIR
from gpusim.sandbox import VENV_PYTHON, Sandbox
from gpusim.standin import NetnsLaunch

pytestmark = pytest.mark.slow

PYTHON = VENV_PYTHON if os.path.exists(VENV_PYTHON) else None
TOTAL_MIB = 143771
SERVER_MIB = int(0.88 * TOTAL_MIB)
HEAD, WORKER = net.HEAD, net.WORKER  # the veth ends, each only inside its node's namespace


@pytest.fixture
def netns_pair():
    """Two network namespaces joined by a veth pair (net.netns_pair)."""
    with net.netns_pair() as names:
        yield names


@pytest.fixture
def group(tmp_path, netns_pair):
    """start(rank, tp_size, *flags, env=...) runs the stand-in as node RANK of a two-node server on its
    own sandbox (two GPUs) and namespace; every node gets the same port and --dist-init-addr."""
    model = standin.make_model_dir(str(tmp_path / "model"))
    port, dist_port = net.free_port(), net.free_port()
    boxes = [Sandbox(str(tmp_path / ("node%d" % rank)), gpus=2) for rank in (0, 1)]
    started = []

    def start(rank, tp_size, *flags, env=None) -> NetnsLaunch:
        sb = boxes[rank]
        if not sb.alive:
            sb.start()
        args = ["--host", "0.0.0.0", "--tp-size", str(tp_size), "--nnodes", "2", "--node-rank", str(rank),
                "--dist-init-addr", "%s:%d" % (HEAD, dist_port)] + list(flags)
        srv = NetnsLaunch(sb, netns_pair[rank], (HEAD, WORKER)[rank], model, args=args, env=env, port=port,
                          python=PYTHON).start()
        srv.dist_port = dist_port
        started.append(srv)
        return srv

    try:
        yield start
    finally:
        for srv in started:
            srv.stop()
        for sb in boxes:
            sb.close()


def wait_until(predicate, timeout=30, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))
        time.sleep(0.1)


def nvml(sb) -> list:
    """Per GPU what pynvml reads through the node's NVML double, asked from inside its sandbox."""
    result = sb.run([PYTHON, "-m", "gpusim.nvml", "--state", sb.state_dir, "describe"],
                    capture_output=True, text=True, check=True)
    return json.loads(result.stdout)["nvml"]


def used(srv) -> list:
    return [gpu["used_mib"] for gpu in nvml(srv.sb)]


def titled(srv) -> dict:
    """The server's sglang:: children by title."""
    return {" ".join(p["cmdline"]).strip(): p for p in srv.tree() if " ".join(p["cmdline"]).startswith("sglang::")}


@pytest.mark.parametrize("release, args, status, message", [
    ("0.5.23", ["--tp-size", "3", "--nnodes", "2"], 1, "AssertionError: tp_size must be divisible by number of nodes"),
    ("0.5.23", ["--nnodes", "2", "--dist-timeout", "1.5"], 2, "argument --dist-timeout: invalid int value: '1.5'"),
    ("0.5.14", ["--tp-size", "2", "--nnodes", "2"], 1, "nnodes=2: the SGLang stand-in runs one node"),
], ids=["tp-not-divisible", "dist-timeout-int", "0.5.14-one-node"])
def test_the_launch_checks_the_node_count_before_spawning(tmp_path, release, args, status, message):
    model = standin.make_model_dir(str(tmp_path / "model"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([standin.standin_root(), SIM_DIR]),
               GPUSIM_SGLANG_RELEASE=release)
    result = subprocess.run([PYTHON, "-m", "sglang.launch_server", "--model-path", model] + args, env=env,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == status and message in result.stderr, result.stderr[-2000:]
    assert "Init torch distributed begin." not in result.stderr, "no scheduler was started"


def test_rendezvous_then_rank0_generates_and_rank1_only_answers_health(group):
    head = group(0, 4, env={"SGLANG_HEALTH_CHECK_TIMEOUT": "2"})
    time.sleep(2)
    assert head.get("/health", timeout=2)[0] is None and head.proc.poll() is None, \
        "node 0 waits at the rendezvous for the other node"
    worker = group(1, 4)
    worker.wait_ready(90)
    head.wait_ready(90)

    # each node spawns its own share of the TP ranks, titled with their real rank numbers
    assert set(titled(head)) == {"sglang::scheduler_TP0", "sglang::scheduler_TP1", "sglang::detokenizer"}
    ranks = titled(worker)
    assert set(ranks) == {"sglang::scheduler_TP2", "sglang::scheduler_TP3"}, "no tokenizer or detokenizer on rank 1"
    gpus = nvml(worker.sb)
    assert [g["used_mib"] for g in gpus] == [SERVER_MIB] * 2 and used(head) == [SERVER_MIB] * 2
    assert gpus[0]["processes"] == [{"pid": ranks["sglang::scheduler_TP2"]["pid"], "used_mib": SERVER_MIB}]
    assert gpus[1]["processes"] == [{"pid": ranks["sglang::scheduler_TP3"]["pid"], "used_mib": SERVER_MIB}]

    # rank 0 serves; rank 1 runs the dummy health server only
    status, out = head.post("/generate", {"text": "hello there", "sampling_params": {"max_new_tokens": 5}})
    assert status == 200 and out["meta_info"]["completion_tokens"] == 5
    assert head.get("/health_generate")[0] == 200
    for path in ("/ping", "/health", "/health_generate"):
        assert worker.get(path) == (200, ""), path
    assert worker.post("/generate", {"text": "hi"}) == (404, {"detail": "Not Found"})
    assert worker.get("/server_info") == (404, {"detail": "Not Found"})
    assert worker.post("/health", {}) == (405, {"detail": "Method Not Allowed"})
    assert "Dummy health check server started in background thread at 0.0.0.0:%d" % worker.port in worker.log()

    # SIGTERM on rank 1 only logs: rank 0's ShutdownReq is what stops its schedulers
    worker.signal("TERM")
    wait_until(lambda: "SIGTERM received on node_rank 1; waiting for the rank-0 ShutdownReq broadcast" in worker.log(),
               what="the SIGTERM warning")
    time.sleep(1)
    assert worker.proc.poll() is None and set(titled(worker)) == set(ranks)

    # a scheduler of rank 1 dies: its dummy still answers 200, while the server can no longer generate
    worker.signal("KILL", pid=ranks["sglang::scheduler_TP3"]["pid"])
    wait_until(lambda: "sglang::scheduler_TP3" not in titled(worker), what="TP3 to die")
    for dummy in range(3):
        assert worker.get("/health") == (200, "")
    assert head.get("/health_generate", timeout=30)[0] == 503, "rank 0's ranks sit in their collectives"
    assert worker.get("/health") == (200, "") and worker.proc.poll() is None
    assert used(worker) == [SERVER_MIB, 0], "TP2 sits on its memory"


@pytest.mark.parametrize("rank, error", [
    (0, "torch.distributed.DistStoreError: Timed out after 3 seconds waiting for clients. 1/2 clients joined."),
    (1, "torch.distributed.DistNetworkError: TCP client failed to connect/validate to host %s:{port} - timed out "
        "(try=" % HEAD)], ids=["rank0", "rank1"])
def test_a_node_whose_peer_never_comes_exits_after_the_dist_timeout(group, rank, error):
    srv = group(rank, 2, "--dist-timeout", "3")
    started = time.monotonic()
    assert srv.wait_exit(60) != 0
    assert time.monotonic() - started >= 3
    log = srv.log()
    assert "Scheduler hit an exception: Traceback" in log
    assert error.format(port=srv.dist_port) in log
    assert "Received sigquit from a child process. It usually means the child failed." in log
    assert used(srv) == [0, 0], "nothing is allocated before the rendezvous"


def test_killing_rank0_leaves_rank1_on_its_gpus_until_the_dist_timeout(group):
    head = group(0, 2, "--dist-timeout", "10")
    worker = group(1, 2, "--dist-timeout", "10")
    worker.wait_ready(90)
    head.wait_ready(90)
    scheduler = titled(worker)["sglang::scheduler_TP1"]["pid"]
    assert used(worker) == [SERVER_MIB, 0]

    head.signal("KILL")  # node 0's tree dies with its launcher (PR_SET_PDEATHSIG)
    killed = time.monotonic()
    wait_until(lambda: not head.tree(), what="node 0 to die")
    while time.monotonic() - killed < 6:
        assert used(worker) == [SERVER_MIB, 0], "TP1 sits in its collective, holding its GPU"
        assert list(titled(worker)) == ["sglang::scheduler_TP1"]
        assert worker.get("/health") == (200, ""), "rank 1's dummy knows nothing of it"
        time.sleep(0.5)

    assert worker.wait_exit(30) == 0, "rank 1's launcher returns once its schedulers are gone"
    assert time.monotonic() - killed >= 10
    log = worker.log()
    assert "Watchdog caught collective operation timeout" in log
    assert "To avoid data inconsistency, we are taking the entire process down." in log
    assert "Scheduler or DataParallelController %d terminated with -6" % scheduler in log
    assert used(worker) == [0, 0]


def test_sigterm_to_rank0_stops_the_schedulers_of_every_node(group):
    head = group(0, 2)
    worker = group(1, 2)
    worker.wait_ready(90)
    head.wait_ready(90)
    scheduler = titled(worker)["sglang::scheduler_TP1"]["pid"]
    head.signal("TERM")
    assert head.wait_exit(60) == 0
    assert worker.wait_exit(30) == 0, "the ShutdownReq reached rank 1, well before the 600 s timeout"
    assert "Scheduler or DataParallelController %d terminated with 0" % scheduler in worker.log()
    assert used(worker) == [0, 0] and used(head) == [0, 0]

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""stop_sglang.yml on a shared GPU node: the server goes, every other tenant stays and is named.

The node (8 simulated H200) runs, beside the SGLang server started by hand:
- a plain Python training job in a session of its own, holding /dev/nvidia5 and 20 GiB of
  NVML memory on GPU 5;
- a second SGLang in a container (a nested PID namespace) on GPUs 2 and 3;
- a monitor that opens /dev/nvidiactl while the stop is under way.
Each tenant logs the signals it receives, so what reached it is judged from its side.
"""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from gpusim import standin
from gpusim.fleet import Fleet, Request, SimNode
from gpusim.tenants import Tenant

pytestmark = pytest.mark.slow


@pytest.fixture
def node(tmp_path):
    with SimNode(str(tmp_path / "node1"), gpus=8) as n:
        yield n


@pytest.fixture
def fleet(node, tmp_path):
    return Fleet(str(tmp_path), [node])


@pytest.fixture
def tenants(node):
    """The training job on GPU 5 and the containerised SGLang on GPUs 2 and 3, both ready."""
    sb = node.sandbox
    job = Tenant(sb, "train.py", ["--epochs", "3"], devices=["/dev/nvidia5", "/dev/nvidiactl", "/dev/nvidia-uvm"],
                 gpu=5, mib=20480)
    boxed = standin.ContainerLaunch(sb, node.model, args=["--tp-size", "2", "--base-gpu-id", "2"],
                                    env=dict(node.server_env, PYTHONPATH=node.sglang))
    boxed.start().wait_ready()
    yield job, boxed
    job.close()
    boxed.stop()


def live(procs, pids):
    alive = set(p["pid"] for p in procs if p["state"] != "Z")
    return sorted(set(pids) & alive)


def monitor_during_drain(node, log_path, found):
    """Start the monitor once the server logs that it drains (it holds a request meanwhile)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with open(log_path, errors="replace") as f:
            if "Draining requests and shutting down" in f.read():
                break
        time.sleep(0.05)
    found["monitor"] = Tenant(node.sandbox, "gpu_monitor.py", ["--interval", "1"], devices=["/dev/nvidiactl"])


def test_default_stop_leaves_every_other_tenant_running_and_names_it(node, fleet, tenants):
    job, boxed = tenants
    server = node.start_server(["--tp-size", "2", "--enable-metrics"])
    server_tree = [p["pid"] for p in server.tree()]
    boxed_tree = [p["pid"] for p in boxed.tree()]
    boxed_main = boxed.find_pid()
    # about 30 s of decoding: still in flight when the playbook reaches the drain, which took
    # more than the 7 s of 1500 tokens on a loaded machine (the monitor then started too late)
    request = Request(node.url, max_new_tokens=6000)
    request.start()
    time.sleep(0.5)
    found = {}
    starter = threading.Thread(target=monitor_during_drain,
                               args=(node, os.path.join(node.workdir, "hand-started.log"), found))
    starter.start()

    run = fleet.playbook("stop_sglang.yml", "-v")

    starter.join(120)
    request.join(120)
    monitor = found["monitor"]
    try:
        text = " ".join(run.output.split())
        procs = node.sandbox.procs()
        # stopped: the server's tree, and nothing else
        assert live(procs, server_tree) == []
        assert request.result[0] == 200, request.result
        # survived, without a single signal
        assert job.alive(procs) and job.signals() == []
        assert monitor.alive(procs) and monitor.signals() == []
        assert live(procs, boxed_tree) == sorted(boxed_tree)
        assert boxed.get("/health")[0] == 200
        decoys = list(node.sandbox.decoys.values())
        assert live(procs, decoys) == sorted(decoys)
        # the verification fails, naming what holds the GPUs by PID, user, command line, GPU and UUID
        assert run.rc != 0, run.output
        uuid5 = node.sandbox.node.gpu_uuids[5]
        assert ("GPU 5 %s: 20480 MiB used by pid %d (user root: %s --epochs 3" % (uuid5, job.pid, job.command)
                in text), run.output
        schedulers = [p["pid"] for p in boxed.tree(procs) if p["cmdline"][:1] == ["sglang::scheduler_TP0"]]
        assert "used by pid %d in another PID namespace (pid:[" % schedulers[0] in text, run.output
        assert "needs a reset" not in text
        # the stop itself names the holders and the container's server it left alone
        assert "Left running: pid %d (user root) %s" % (monitor.pid, monitor.command) in text, run.output
        assert "holds /dev/nvidiactl" in text
        assert "Not touched: pid %d" % boxed_main in text and "in another PID namespace" in text
    finally:
        monitor.close()


def test_opt_in_stops_the_holders_of_the_named_gpu_only_sigterm_first(node, fleet, tenants):
    job, boxed = tenants
    neighbour = Tenant(node.sandbox, "finetune.py", devices=["/dev/nvidia6"], gpu=6, mib=4096)
    monitor = Tenant(node.sandbox, "gpu_monitor.py", devices=["/dev/nvidiactl"])
    node.start_server(["--tp-size", "2", "--enable-metrics"])
    boxed_tree = [p["pid"] for p in boxed.tree()]

    run = fleet.playbook("stop_sglang.yml", "-e", json.dumps({"gpu_clean_stop_holders_of": [5],
                                                              "gpu_clean_gpus": ["0", "1", "4", "5", "7"]}))

    try:
        assert run.rc == 0, run.output
        procs = node.sandbox.procs()
        assert job.signals() == ["SIGTERM"] and not job.alive(procs)
        assert neighbour.alive(procs) and neighbour.signals() == []
        assert monitor.alive(procs) and monitor.signals() == []
        assert live(procs, boxed_tree) == sorted(boxed_tree)
        assert boxed.get("/health")[0] == 200
        used = node.used_mib()
        assert used[5] == 0 and used[6] == 4096 and used[2] > 1024 and used[3] > 1024, used
    finally:
        neighbour.close()
        monitor.close()

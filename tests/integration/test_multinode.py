# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One SGLang server over two nodes, restarted and stopped by the real playbooks.

Each node is a sandbox with its own NVML state and a network namespace of its own, the two joined
by a veth pair (net.netns_pair); Ansible reaches each through a Python wrapper that runs in both
(Sandbox.netns_python), so the server it starts listens, and meets its peer, at the node's own
address. The inventory group `pair` is the server: --nnodes, --node-rank and --dist-init-addr
come from it (sglang_launch_multinode_group)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import yaml

from gpusim import net
from gpusim.fleet import Fleet, SimNode

pytestmark = pytest.mark.slow

GROUP = "pair"


class Pair:
    """Two SimNodes (two GPUs each) serving one tp_size 4 server; the inventory of both."""

    def __init__(self, workdir: str, names: list):
        self.netns = names
        self.nodes = [SimNode(os.path.join(workdir, "node%d" % rank), gpus=2) for rank in (0, 1)]
        self.port, self.dist_port = net.free_port(), net.free_port()
        self.fleet = None
        self.workdir = workdir

    def __enter__(self) -> "Pair":
        for node in self.nodes:
            node.__enter__()
            node.port = self.port
        self.fleet = Fleet(self.workdir, self.nodes, groups={GROUP: [n.name for n in self.nodes]})
        self.write_inventory()
        return self

    def __exit__(self, *exc) -> None:
        for node in self.nodes:
            node.__exit__(*exc)

    def write_inventory(self, **extra) -> None:
        hosts = {}
        for rank, node in enumerate(self.nodes):
            values = node.host_vars(
                ansible_python_interpreter=node.sandbox.netns_python(self.netns[rank]),
                sglang_launch_host="0.0.0.0", sglang_launch_port=self.port,
                sglang_launch_multinode_group=GROUP, sglang_launch_dist_port=self.dist_port,
                sglang_launch_server_args={"tp_size": 4, "enable_metrics": True, "dist_timeout": 600},
                **extra)
            if rank == 0:
                values["sglang_launch_dist_host"] = net.HEAD
            hosts[node.name] = values
        inventory = {"all": {"children": {"gpu_nodes": {"hosts": hosts},
                                          GROUP: {"hosts": dict((n.name, {}) for n in self.nodes)}}}}
        with open(self.fleet.inventory, "w") as f:
            yaml.safe_dump(inventory, f)

    def playbook(self, name: str, *args):
        return self.fleet.playbook(name, "-e", "gpuops_canary_size=2", *args, timeout=600)


@pytest.fixture
def pair(tmp_path):
    with net.netns_pair() as names, Pair(str(tmp_path), names) as made:
        yield made


def titled(node: SimNode, pid: int) -> list:
    """The titled children (sglang::...) of the server PID on NODE, each with its environment."""
    procs = node.sandbox.procs()
    tree, seen = [], {pid}
    for proc in sorted(procs, key=lambda p: p["pid"]):
        if proc["ppid"] in seen:
            seen.add(proc["pid"])
            tree.append(proc)
    return [dict(p, environ=node.environ(p["pid"])) for p in tree if " ".join(p["cmdline"]).startswith("sglang::")]


def test_a_two_node_group_restarts_into_extraction_as_one_then_a_rerun_touches_neither(pair):
    run = pair.playbook("restart_extraction.yml")
    assert run.rc == 0, run.output[-6000:]
    head, worker = (node.record() for node in pair.nodes)
    assert head["mode"] == worker["mode"] == "extraction"
    argv = [" ".join(r["argv"]) for r in (head, worker)]
    for rank, line in enumerate(argv):
        assert "--nnodes 2 --node-rank %d" % rank in line or (
            "--nnodes 2" in line and "--node-rank %d" % rank in line), line
        assert "--dist-init-addr %s:%d" % (net.HEAD, pair.dist_port) in line, line
    # every GPU of both nodes holds the server's memory: each node runs its two of the four TP ranks
    for node in pair.nodes:
        assert all(mib > 1024 for mib in node.used_mib()), node.used_mib()
    # the worker's schedulers see the run's dump directory, as rank 0's do
    for node, record in zip(pair.nodes, (head, worker)):
        schedulers = [p for p in titled(node, record["pid"]) if " ".join(p["cmdline"]).startswith("sglang::scheduler")]
        assert len(schedulers) == 2, schedulers
        assert all(p["environ"].get("SGLANG_HS_DUMP_DIR") == record["dump_dir"] for p in schedulers), schedulers
    print(run.summary())

    again = pair.playbook("restart_extraction.yml")
    assert again.rc == 0, again.output[-6000:]
    assert [node.record()["pid"] for node in pair.nodes] == [head["pid"], worker["pid"]]
    assert all(counts["changed"] == 0 for counts in again.recap().values()), again.recap()


def test_a_limit_to_one_node_of_the_group_fails_before_anything_is_touched(pair):
    run = pair.playbook("restart_serving.yml", "-l", pair.nodes[0].name)
    assert run.rc != 0
    assert "names only part of the group %s: %s is not in it" % (GROUP, pair.nodes[1].name) in run.words(), \
        run.output[-4000:]
    for node in pair.nodes:
        assert node.main_pids() == [] and not os.path.exists(os.path.join(node.state_dir, "server.json"))


def test_rank0_killed_behind_the_back_then_the_stop_cleans_both_nodes_by_the_escalation(pair):
    run = pair.playbook("restart_serving.yml")
    assert run.rc == 0, run.output[-6000:]
    head = pair.nodes[0].record()
    pair.nodes[0].sandbox.run(["kill", "-KILL", str(head["pid"])], check=True)
    began = time.monotonic()
    stop = pair.playbook("stop_sglang.yml")
    seconds = time.monotonic() - began
    assert stop.rc == 0, stop.output[-6000:]
    for node in pair.nodes:
        assert node.main_pids() == [] and node.used_mib() == [0, 0], (node.name, node.sglang_procs())
    # the worker waited for no NCCL timeout (--dist-timeout 600): its SIGTERM only logs, SIGKILL followed
    print("the stop of both nodes took %.1f s" % seconds)


def test_a_node_that_fails_its_checks_fails_the_group_and_every_node_is_stopped(pair):
    """Rank 1 comes up with its rank 0, then fails its GPU check (it asks for more memory than the server takes):
    its own failure path stops its server, and rank 0, ready, is stopped with it rather than left waiting."""
    with open(pair.fleet.inventory) as f:
        inventory = yaml.safe_load(f)
    inventory["all"]["children"]["gpu_nodes"]["hosts"][pair.nodes[1].name]["sglang_launch_min_used_mib"] = 10 ** 7
    with open(pair.fleet.inventory, "w") as f:
        yaml.safe_dump(inventory, f)
    run = pair.playbook("restart_serving.yml")
    assert run.rc != 0
    recap = run.recap()
    assert recap[pair.nodes[0].name]["failed"] == 1 and recap[pair.nodes[1].name]["failed"] == 1, run.output[-6000:]
    assert "node(s) %s of the multi-node server failed; this node was stopped with it" % pair.nodes[1].name \
        in run.words(), run.output[-6000:]
    for node in pair.nodes:
        assert node.main_pids() == [] and node.used_mib() == [0, 0], (node.name, node.sglang_procs())


def test_a_group_that_fails_on_rank_1_with_the_rollback_asked_for_starts_its_previous_configuration_on_both(pair):
    """Rank 1's new server fails its GPU check (it asks for more memory than the server takes); rank 0's passes. The
    group fails: rank 0 is stopped, and both nodes start the serving configuration again together, each checked as
    its record says it was (rank 1 as a worker: its schedulers alive on its GPUs)."""
    run = pair.playbook("restart_serving.yml")
    assert run.rc == 0, run.output[-6000:]
    before = [node.record() for node in pair.nodes]
    with open(pair.fleet.inventory) as f:
        inventory = yaml.safe_load(f)
    inventory["all"]["children"]["gpu_nodes"]["hosts"][pair.nodes[1].name]["sglang_launch_min_used_mib"] = 10 ** 7
    with open(pair.fleet.inventory, "w") as f:
        yaml.safe_dump(inventory, f)

    run = pair.playbook("restart_extraction.yml", "-e", "sglang_launch_rollback=true")

    assert run.rc != 0
    words = run.words()
    for record in before:
        assert ("The previous configuration (%s) was started again on every node of the multi-node server and passed "
                "its checks" % record["marker"]) in words, run.output[-6000:]
    assert "node(s) %s of the multi-node server failed; this node was stopped with it" % pair.nodes[1].name in words
    for node, record in zip(pair.nodes, before):
        now = node.record()
        assert (now["status"], now["marker"], now["mode"]) == ("ok", record["marker"], "serving"), now
        assert now["rolled_back_from"].startswith("extraction-") and now["pid"] != record["pid"]
        assert node.main_pids() == [now["pid"]]
        assert all(mib > 1024 for mib in node.used_mib()), node.used_mib()
    print(run.summary())


# A /generate sent from inside a node's network namespace (rank 0's port is on its own address only): prints the
# status and the tokens generated.
GENERATE = """
import json, sys, urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
body = json.dumps({"text": "Explain tensor parallelism.", "sampling_params": {"max_new_tokens": int(sys.argv[2])}})
request = urllib.request.Request(sys.argv[1] + "/generate", body.encode(), {"content-type": "application/json"})
try:
    with opener.open(request, timeout=300) as answer:
        print(answer.status, json.loads(answer.read())["meta_info"]["completion_tokens"])
except Exception as e:
    print("error", e)
"""


def test_the_stop_of_a_group_stops_rank_0_first_and_its_requests_complete(pair):
    """A request of about 6 s runs on rank 0 when the group's stop begins; the escalation would SIGKILL the worker 2 s
    after its SIGTERM, which only logs on a node of rank 1 or more. Stopped then, the worker would leave rank 0's
    request in its collectives. The worker waits until rank 0 is gone (drained, then its ShutdownReq): the request
    completes, and both nodes end clean."""
    run = pair.playbook("restart_serving.yml")
    assert run.rc == 0, run.output[-6000:]
    request = subprocess.Popen(["ip", "netns", "exec", pair.netns[0], sys.executable, "-c", GENERATE,
                                "http://127.0.0.1:%d" % pair.port, "1200"], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(1)
        stop = pair.playbook("stop_sglang.yml", "-e", "sglang_stop_term_timeout=2", "-e", "sglang_stop_drain_timeout=60")
        answer = request.communicate(timeout=120)[0]
    finally:
        if request.poll() is None:
            request.kill()
            request.wait(30)
    assert stop.rc == 0, stop.output[-6000:]
    assert answer.split() == ["200", "1200"], answer
    for node in pair.nodes:
        assert node.main_pids() == [] and node.used_mib() == [0, 0], (node.name, node.sglang_procs())

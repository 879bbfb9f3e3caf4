# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Measurement: the downtime of a two-node group's restart against one node's, side by side in one run.

One multi-node server over two nodes, set up as tests/integration/test_multinode.py's Pair sets it up (each node a
SimNode in a network namespace of its own, the two joined by a veth pair, Ansible's interpreter running in the
node's namespace, the inventory group `pair` as sglang_launch_multinode_group), and one node alone of the same
shape in a namespace of its own. Each round restarts both, alternating which goes first, as the downtime
measurement restarts its node (downtime.run_loaded and downtime.split: the same load, the same split), so the
only difference is the group. Only rank 0 serves requests: the load is sent to its port from inside its
namespace. A worker's SIGTERM only logs; it exits on rank 0's ShutdownReq broadcast: so every node's exit is
counted from rank 0's SIGTERM line. No node gets past the rendezvous before every node has started: so every
node's load is counted from the last node's process start."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil

import yaml

from .common import WORK, Watch, log, summary
from .downtime import gpus_free, run_loaded, split, summarize, table
from .nodes import SIGTERM_LINE, BenchFleet, BenchNode, evict, shared_model
from .timeline import LoadGen, LogTail, process_start

from gpusim import net  # noqa: E402  (tests/sim is on sys.path through .common)

GROUP = "pair"
GOAL_S = 1.0
LABELS = {1: "one node", 2: "two-node group"}
DEFINITION = (
    "one node of {gpus} GPUs (the stand-in at TP={gpus}) and a group of two such nodes serving one server "
    "(TP={group_tp}, --nnodes 2, the inventory group `pair` as sglang_launch_multinode_group), each node in a "
    "network namespace of its own (the two of the group joined by a veth pair, as tests/integration/"
    "test_multinode.py sets them up) and Ansible's interpreter in it; the stand-in at SGLang 0.5.23's shutdown pace "
    "with a model of {weights} MiB of safetensors shards, evicted from the page cache before each trial. Each round "
    "takes both to serving mode with playbooks/restart_serving.yml (untimed), then restarts each with "
    "playbooks/restart_extraction.yml (bench/ansible.cfg, the roles' defaults, gpuops_canary_size = the node count) "
    "while a client inside rank 0's namespace sends one request at a time to rank 0's port (16 tokens, then "
    "{think} s pause; a failed request is retried after 50 ms), alternating which goes first. Split as the downtime "
    "measurement splits it (the same code), with the slowest node's exit and load: downtime = last request "
    "completed by the old server -> first completed by the new one (rank 0 alone serves). Slowest exit = rank 0's "
    "log's SIGTERM line -> the last node whose in-node NVML poller sees every GPU free (a worker's SIGTERM only "
    "logs; its schedulers exit on rank 0's ShutdownReq broadcast). Slowest load = the last node's new process "
    "start (/proc) -> rank 0's 'ready to roll' line (no node gets past the rendezvous before every node has "
    "started). Overhead = downtime - exit - load. For one node these are the downtime measurement's definitions. "
    "Exit spread = the last node's GPUs free - the first's; start spread = the last node's process start - the "
    "first's (both 0 for one node): the part of the overhead that the group's order of stop and start adds.")


class NetnsLoadGen(LoadGen):
    """A LoadGen whose thread sends from network namespace NETNS: rank 0 listens on its node's own address."""

    def __init__(self, netns, url, **kwargs):
        super().__init__(url, **kwargs)
        self.netns = netns

    def _run(self):
        enter_netns(self.netns)
        super()._run()


def enter_netns(name):
    """Move the calling thread (only it: a network namespace is per thread) into network namespace NAME."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(os.path.join("/run/netns", name), os.O_RDONLY)
    try:
        if libc.setns(fd, 0x40000000) != 0:        # CLONE_NEWNET
            err = ctypes.get_errno()
            raise OSError(err, "setns(%s): %s" % (name, os.strerror(err)))
    finally:
        os.close(fd)


class GroupFleet(BenchFleet):
    """NODES, node I in network namespace NETNS[I], all on one port: with two or more nodes one multi-node server,
    the inventory written as tests/integration/test_multinode.py's Pair writes it."""

    def __init__(self, workdir, nodes, netns, **host_vars):
        self.netns = netns
        self.port, self.dist_port = net.free_port(), net.free_port()
        for node in nodes:
            node.port = self.port
        super().__init__(workdir, nodes, **host_vars)

    def write_inventory(self, **host_vars):
        self.cpu_log = os.path.join(self.workdir, "node-cpu.log")       # not written: the CPU is not counted here
        multi = len(self.nodes) > 1
        args = {"tp_size": sum(n.gpus for n in self.nodes), "enable_metrics": True}
        if multi:
            args["dist_timeout"] = 600
        hosts = {}
        for rank, node in enumerate(self.nodes):
            values = node.host_vars(ansible_python_interpreter=node.sandbox.netns_python(self.netns[rank]),
                                    sglang_launch_host="0.0.0.0", sglang_launch_port=self.port,
                                    sglang_launch_server_args=args, **host_vars)
            if multi:
                values.update(sglang_launch_multinode_group=GROUP, sglang_launch_dist_port=self.dist_port)
                if rank == 0:
                    values["sglang_launch_dist_host"] = net.HEAD
            hosts[node.name] = values
        children = {"gpu_nodes": {"hosts": hosts}}
        if multi:
            children[GROUP] = {"hosts": dict((n.name, {}) for n in self.nodes)}
        with open(self.inventory, "w") as f:
            yaml.safe_dump({"all": {"children": children}}, f)

    def load(self, think):
        """A steady load on rank 0's port, sent from inside rank 0's namespace."""
        return NetnsLoadGen(self.netns[0], "http://127.0.0.1:%d" % self.port, think=think)

    def run(self, playbook, extra_vars=None, timeout=1800, tag="run"):
        """BenchFleet.run with a canary of the whole group (a multi-node server restarts in one batch)."""
        return super().run(playbook, dict({"gpuops_canary_size": len(self.nodes)}, **(extra_vars or {})), timeout, tag)


def _trial(fleet, model, think):
    """restart_serving.yml (untimed), then restart_extraction.yml under load, split with the slowest node's exit and
    load."""
    nodes = fleet.nodes
    serving = fleet.run("restart_serving.yml", tag="serving")
    if serving["rc"] != 0:
        return {"rc": serving["rc"], "error": "restart_serving.yml failed (rc %d)" % serving["rc"],
                "output_tail": serving["output"][-3000:]}
    old_log = nodes[0].record()["log"]
    watches = []
    try:
        for node in nodes:
            watches.append(Watch(node.sandbox))
        evict(model)
        tail = LogTail([os.path.join(n.log_dir, "*") for n in nodes])
        with tail, fleet.load(think) as load:
            run = run_loaded(fleet, "restart_extraction.yml", load)
        sigterm, dummy = tail.first(SIGTERM_LINE, path=old_log)
        frees = [gpus_free(watch, sigterm) for watch in watches]
    finally:
        for watch in watches:
            watch.close()
    starts = []
    for node in nodes:
        new = node.main_pids()
        starts.append(process_start(node.sandbox, new[-1]) if new else None)
    complete = None not in frees and None not in starts
    t = split(run, load, tail, sigterm, max(frees) if complete else None, max(starts) if complete else None)
    if complete:
        t.update(exit_spread=round(max(frees) - min(frees), 3), start_spread=round(max(starts) - min(starts), 3),
                 node_exit=[round(free - sigterm, 3) for free in frees],
                 node_start_after_free=[round(start - free, 3) for start, free in zip(starts, frees)])
    return t


def run(rounds, weights_mib=1024, shards=8, gpus=2, think=0.3):
    """ROUNDS of one node's restart and the two-node group's, alternating which goes first, on nodes of GPUS GPUs
    that share a model of WEIGHTS_MIB in SHARDS files; the rows of both, and the group's overhead less one node's."""
    model = shared_model(weights_mib, shards)
    workdir = os.path.join(WORK, "nodes", "multinode")
    shutil.rmtree(workdir, ignore_errors=True)      # no record or log of an earlier run's servers
    trials = []
    with contextlib.ExitStack() as stack:
        alone_ns, pair_ns = stack.enter_context(net.netns_pair()), stack.enter_context(net.netns_pair())
        nodes = [stack.enter_context(BenchNode(os.path.join(workdir, name), gpus=gpus, model=model))
                 for name in ("alone", "rank0", "rank1")]
        fleets = [GroupFleet(os.path.join(workdir, "one"), nodes[:1], alone_ns[:1], sglang_stop_cut_active_run=True),
                  GroupFleet(os.path.join(workdir, "two"), nodes[1:], pair_ns, sglang_stop_cut_active_run=True)]
        for r in range(rounds):
            for fleet in (fleets if r % 2 == 0 else fleets[::-1]):
                t = dict(_trial(fleet, model, think), nodes=len(fleet.nodes), round=r + 1)
                log("multinode %-14s round %d: %s" % (LABELS[t["nodes"]], r + 1, t.get("error") or _line(t)))
                trials.append(t)
    rows = {}
    for count, label in LABELS.items():
        ts = [t for t in trials if t["nodes"] == count]
        rows[label] = summarize(ts)
        rows[label].update((key, summary([t.get(key) for t in ts if "error" not in t]))
                           for key in ("exit_spread", "start_spread"))
    one, two = (rows[label]["overhead"]["median"] for label in LABELS.values())
    paired = [b["overhead"] - a["overhead"] for a, b in _pairs(trials)]
    return {"definition": DEFINITION.format(gpus=gpus, group_tp=2 * gpus, weights=weights_mib, think=think),
            "gpus_per_node": gpus, "weights_mib": weights_mib, "rows": rows, "goal_s": GOAL_S,
            "difference_s": None if None in (one, two) else round(two - one, 3),
            "paired_differences_s": [round(d, 3) for d in paired], "trials": trials}


def _line(t):
    return ("downtime %.2f s = slowest exit %.2f + slowest load %.2f + overhead %.2f s (exit spread %.2f s, start "
            "spread %.2f s; %d remote tasks stop->ready)" % (
                t["downtime"], t["old_exit_in_window"], t["new_load"], t["overhead"], t["exit_spread"],
                t["start_spread"], t["remote_tasks_stop_to_ready"]))


def _pairs(trials):
    """(one node's trial, the group's trial) of every round in which both completed."""
    by_round = {}
    for t in trials:
        if "error" not in t:
            by_round.setdefault(t["round"], {})[t["nodes"]] = t
    return [(r[1], r[2]) for dummy, r in sorted(by_round.items()) if 1 in r and 2 in r]


def _fmt(value):
    return "-" if value is None else "%.2f" % value


def goals(result):
    """Rows of the goals table: (goal, target, measured, met)."""
    diff = result.get("difference_s")
    if diff is None:
        return []
    one, two = (result["rows"][label] for label in LABELS.values())
    return [("a two-node group's restart (restart_extraction.yml): overhead over the slowest node's own exit and load, "
             "more than a single node's", "<= %.1f s" % result["goal_s"],
             "%.2f s (group %.2f s of %.2f s downtime, one node %.2f s of %.2f s)" % (
                 diff, two["overhead"]["median"], two["downtime"]["median"], one["overhead"]["median"],
                 one["downtime"]["median"]),
             "yes" if diff <= result["goal_s"] else "**no** (+%.2f s)" % (diff - result["goal_s"]))]


def markdown(result):
    out = ["## Downtime of a two-node group's restart against one node's", "", result["definition"], ""]
    out += table(result["rows"], first="Restart")
    two = result["rows"][LABELS[2]]
    out += ["", "Two-node group overhead minus one node's: %s s (goal <= %.1f s); per round: %s. In the group: exit "
            "spread %s s, start spread %s s (medians)." % (
                _fmt(result.get("difference_s")), result["goal_s"],
                ", ".join("%.2f" % d for d in result["paired_differences_s"]) or "-",
                _fmt(two["exit_spread"]["median"]), _fmt(two["start_spread"]["median"]))]
    failed = [t for t in result["trials"] if "error" in t]
    if failed:
        out += ["", "Failed trials: %d. First (%s): %s; output's end:" % (
            len(failed), LABELS.get(failed[0].get("nodes"), "?"), failed[0]["error"]), "",
            "```", failed[0].get("output_tail", "").strip()[-2000:], "```"]
    return out

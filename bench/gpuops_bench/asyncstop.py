# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Async stop: the stop of a fleet of light nodes as one plain gpu_reap task per node against the same
stop started with async/poll 0 and collected with an async_status loop, with fewer forks than nodes and
with a fork per node."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess

from . import stop
from .common import BENCH, WORK, log, ratio, summary
from .fleet import _start_all
from .nodes import SIGTERM_LINE, BenchFleet, BenchNode
from .timeline import LogTail, Tasks

PLAYBOOKS = {"sync": os.path.join(BENCH, "playbooks", "stop_sync.yml"),
             "async": os.path.join(BENCH, "playbooks", "stop_async.yml")}
POLL_DELAY = 1          # async_status's `delay`, seconds between two polls of a node's job
DEFINITION = (
    "{nodes} light nodes (gpusim.lightnode at SGLang 0.5.23's shutdown pace: 5 s watchdog wake-up, ~1 s release; "
    "the server started by hand before each run), each a sandbox of its own; one ansible-playbook run "
    "(bench/ansible.cfg, forks overridden) stops every node with gpu_reap and the time-to-clean measurement's "
    "arguments (`{args}`): *sync* = bench/playbooks/stop_sync.yml, one plain task per node, which holds a fork until "
    "its node is clean; *async* = bench/playbooks/stop_async.yml, the same task with `async` and `poll: 0`, then an "
    "`async_status` loop (`until: finished`, delay {delay} s), whose polls count as controller work. Wall time of "
    "ansible-playbook; controller CPU = CPU seconds of the ansible-playbook process tree less the nodes' Python "
    "interpreters (as in the fleet measurement; an async job runs detached inside its node, so its own CPU is in "
    "neither); *last SIGTERM at* = when the last node's server logged its SIGTERM, from the start of the run; "
    "*first task* = the play's first task: the stop itself (sync) or the start of the background job (async), "
    "median seconds per node from its start on a fork to its result, and when the last node's result came; "
    "*polls* = async_status calls per node. Forks {forks}, alternating, {rounds} rounds.")


def _exited(node, timeout=60):
    """Whether NODE's server has exited (within TIMEOUT: a stop that returned early would show here)."""
    try:
        node.server.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return False
    return True


def _restart(nodes):
    """A server on every node, started by hand; what an earlier failed run left running is killed first."""
    for n in nodes:
        if n.server is not None and n.server.proc.poll() is None:
            n.server.stop()
    _start_all(nodes)


def _first_task(timeline, start):
    """(median seconds per node of the play's first task, seconds from START until its last node's result):
    the stop itself in stop_sync.yml, the start of the background job in stop_async.yml."""
    records = Tasks(timeline).records
    first = records[0]["task"] if records else None
    began, ended = {}, {}
    for r in records:
        if r["task"] == first:
            (began if r["ev"] == "start" else ended)[r["host"]] = r["t"]
    spans = [ended[h] - began[h] for h in ended if h in began]
    if not spans:
        return None, None
    return round(summary(spans)["median"], 3), round(max(ended.values()) - start, 3)


def _trial(fleet, nodes, mode, forks, tag):
    async_dir = os.path.join(fleet.workdir, "async-jobs")
    shutil.rmtree(async_dir, ignore_errors=True)
    fleet.extra_env = {"ANSIBLE_FORKS": str(forks), "ANSIBLE_ASYNC_DIR": async_dir}
    extra = {"bench_reap": stop.REAP_ARGS, "bench_async_delay": POLL_DELAY}
    with LogTail([n.hand_log() for n in nodes]) as tail:
        result = fleet.run(PLAYBOOKS[mode], extra, tag=tag, timeout=900)
    sigterms = [tail.first(SIGTERM_LINE, after=result["start"], path=n.hand_log())[0] for n in nodes]
    exited = [_exited(n) for n in nodes]
    per_node, first_done = _first_task(result["timeline"], result["start"])
    retries = len(re.findall(r"^FAILED - RETRYING: ", result["output"], re.M))
    row = {"mode": mode, "forks": forks, "rc": result["rc"], "wall": round(result["wall"], 3),
           "controller_cpu": round(result["controller_cpu"], 3), "main_cpu": round(result["main_cpu"], 3),
           "node_cpu": round(result["node_cpu"], 3),
           "last_sigterm_s": None if None in sigterms else round(max(sigterms) - result["start"], 3),
           "first_sigterm_s": None if None in sigterms else round(min(sigterms) - result["start"], 3),
           "servers_exited": sum(exited), "first_task_per_node_s": per_node, "first_task_done_s": first_done,
           "polls": (len(nodes) + retries) if mode == "async" else 0}
    if result["rc"] != 0 or not all(exited) or None in sigterms:
        row["output_tail"] = result["output"][-3000:]
    return row


def run(rounds=2, nodes=16, forks=(2, 4, 16)):
    variants = [(f, m) for f in forks for m in ("sync", "async")]
    samples = []
    with contextlib.ExitStack() as stack:      # every sandbox is closed, whatever happens
        fleet_nodes = [stack.enter_context(BenchNode(os.path.join(WORK, "nodes", "async%02d" % (i + 1)), light=True))
                       for i in range(nodes)]
        fleet = BenchFleet(os.path.join(WORK, "async-stop"), fleet_nodes)
        for r in range(rounds):
            plan = variants[r % len(variants):] + variants[:r % len(variants)]   # rotate who goes first
            if r % 2:
                plan.reverse()
            for f, mode in plan:
                _restart(fleet_nodes)
                row = _trial(fleet, fleet_nodes, mode, f, "%s-forks%d-%d" % (mode, f, r))
                samples.append(row)
                log("async: %2d nodes, forks %2d, %-5s round %d: %s" % (
                    nodes, f, mode, r + 1, "rc %d, %d servers exited" % (row["rc"], row["servers_exited"])
                    if row.get("output_tail") else "%.1f s wall, controller %.1f CPU s (%.2f per node), "
                    "last SIGTERM at %.1f s, %d polls" % (row["wall"], row["controller_cpu"],
                                                          row["controller_cpu"] / nodes, row["last_sigterm_s"],
                                                          row["polls"])))
    rows = []
    for f, mode in variants:
        ss = [s for s in samples if (s["forks"], s["mode"]) == (f, mode)]
        ok = [s for s in ss if not s.get("output_tail")]
        rows.append({"forks": f, "mode": mode, "runs": "%d/%d" % (len(ok), len(ss)),
                     "wall_s": summary([s["wall"] for s in ok]),
                     "controller_cpu_s": summary([s["controller_cpu"] for s in ok]),
                     "controller_cpu_per_node_s": summary([s["controller_cpu"] / nodes for s in ok]),
                     "main_cpu_s": summary([s["main_cpu"] for s in ok]),
                     "node_cpu_per_node_s": summary([s["node_cpu"] / nodes for s in ok]),
                     "first_sigterm_s": summary([s["first_sigterm_s"] for s in ok]),
                     "last_sigterm_s": summary([s["last_sigterm_s"] for s in ok]),
                     "first_task_per_node_s": summary([s["first_task_per_node_s"] for s in ok]),
                     "first_task_done_s": summary([s["first_task_done_s"] for s in ok]),
                     "polls_per_node": summary([s["polls"] / nodes for s in ok]) if mode == "async" else None})
    by = dict(((r["forks"], r["mode"]), r) for r in rows)
    for f in forks:
        a, s = by[(f, "async")], by[(f, "sync")]
        a["wall_vs_sync"] = ratio(a["wall_s"]["median"], s["wall_s"]["median"])
        a["cpu_vs_sync"] = ratio(a["controller_cpu_s"]["median"], s["controller_cpu_s"]["median"])
    return {"definition": DEFINITION.format(nodes=nodes, args=json.dumps(stop.REAP_ARGS), delay=POLL_DELAY,
                                            forks=", ".join(str(f) for f in forks), rounds=rounds),
            "nodes": nodes, "forks": list(forks), "poll_delay_s": POLL_DELAY, "rows": rows, "samples": samples}


def _cell(summary_, digits=1):
    return "n/a" if summary_ is None or summary_["median"] is None else "%.*f" % (digits, summary_["median"])


def _range(summary_, digits=1):
    if summary_ is None or summary_["min"] is None:
        return "n/a"
    return "%.*f-%.*f" % (digits, summary_["min"], digits, summary_["max"])


def conclusion(result):
    """One line: where async wins, by how much, and what it costs, from this run's medians."""
    by = dict(((r["forks"], r["mode"]), r) for r in result["rows"])
    parts = []
    for f in result["forks"]:
        a, s = by[(f, "async")], by[(f, "sync")]
        if a["wall_vs_sync"] is None or a["cpu_vs_sync"] is None:
            continue
        parts.append("with forks %d on %d nodes async took %.2fx the wall time of the plain task (%.1f s against "
                     "%.1f s) and %.2fx its controller CPU (%.2f against %.2f CPU s per node)" % (
                         f, result["nodes"], a["wall_vs_sync"], a["wall_s"]["median"], s["wall_s"]["median"],
                         a["cpu_vs_sync"], a["controller_cpu_per_node_s"]["median"],
                         s["controller_cpu_per_node_s"]["median"]))
    if not parts:
        return None
    launch = [by[(f, "async")]["first_task_per_node_s"]["median"] for f in result["forks"]]
    plain = [by[(f, "sync")]["first_task_per_node_s"]["median"] for f in result["forks"]]
    text = "Async stop: " + "; ".join(parts) + "."
    if None not in launch + plain:
        text += (" Starting the background job took %.1f-%.1f s per node (ansible-core sends an async task without "
                 "pipelining: a temporary directory, the module and async_wrapper copied, then run), against %.1f-%.1f "
                 "s for the whole plain stop: async shortens a stop only where several nodes share a fork, and "
                 "lengthens it where each node has its own." % (min(launch), max(launch), min(plain), max(plain)))
    return text


def markdown(result):
    out = ["## Async stop: gpu_reap with async and async_status against the plain task", "",
           result["definition"], "",
           "| Forks | Stop | Wall (s) | min-max | vs sync | Controller CPU per node (s) | vs sync "
           "| of it main process, all nodes (s) | Nodes' Python CPU per node (s) | First task per node (s) "
           "| First task done at (s) | Last SIGTERM at (s) | Polls per node | Runs |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        sync = r["mode"] == "sync"
        out.append("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["forks"], r["mode"], _cell(r["wall_s"]), _range(r["wall_s"]),
            "1.00" if sync else "%.2f" % r["wall_vs_sync"] if r.get("wall_vs_sync") else "n/a",
            _cell(r["controller_cpu_per_node_s"], 2),
            "1.00" if sync else "%.2f" % r["cpu_vs_sync"] if r.get("cpu_vs_sync") else "n/a",
            _cell(r["main_cpu_s"]), _cell(r["node_cpu_per_node_s"], 2), _cell(r.get("first_task_per_node_s"), 2),
            _cell(r.get("first_task_done_s")), _cell(r["last_sigterm_s"]),
            "-" if sync else _cell(r["polls_per_node"]), r["runs"]))
    line = conclusion(result)
    if line:
        text = line[len("Async stop: "):]
        out += ["", text[0].upper() + text[1:]]
    return out

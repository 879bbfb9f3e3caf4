# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Downtime per node: restart_extraction.yml on one node whose server is under a steady request load.

Downtime = from the last request the old server completed to the first request the new server
completed. Split into the old server's own exit (SIGTERM, as its log shows it, until the NVML
poller inside the node sees every GPU free), the new server's load (its process start until its
log says it is ready) and the rest, the collection's overhead, also counted as the remote tasks
that ran between the stop and the ready."""

from __future__ import annotations

import os
import time

from .common import WORK, Watch, log, ratio, summary
from .nodes import READY_LINE, SIGTERM_LINE, BenchFleet, BenchNode, evict, shared_model
from .timeline import LoadGen, LogTail, Tasks, process_start

VARIANTS = {
    "default": {},
    "prefetch": {"sglang_launch_prefetch": True},
}
DEFINITION = (
    "one 8-GPU node, the SGLang stand-in at TP=8 started by hand at SGLang 0.5.23's shutdown pace (5 s watchdog "
    "wake-up, drain, ~1 s memory release per scheduler) with a model of {weights} MiB of safetensors shards, "
    "evicted from the page cache before each trial (the node's own files only); a client sends one request at a "
    "time (16 tokens, then {think} s pause; a failed request is retried after 50 ms) while "
    "playbooks/restart_extraction.yml runs with bench/ansible.cfg and the roles' defaults. Downtime = last "
    "request completed by the old server -> first completed by the new one. Old server's exit = its log's "
    "SIGTERM line -> the in-node NVML poller sees every GPU free (the part inside the downtime window). New "
    "server's load = its process start (/proc) -> its log's 'ready to roll' line. Overhead = downtime - exit - "
    "load (the load ends at the first completed request when one completes before the ready line is written, "
    "hence a negative 'ready -> first request'). Remote tasks = module executions on the node between the "
    "SIGTERM and the ready line (gpuops_timeline callback). 'prefetch' sets sglang_launch_prefetch: true.")


def _trial(variant, workdir, model, think):
    with BenchNode(workdir, model=model) as node:
        node.start()
        watch = Watch(node.sandbox)
        fleet = BenchFleet(workdir, [node], **VARIANTS[variant])
        evict(model)
        try:
            measured = restart_under_load(fleet, node, LogTail(node.log_globs()), watch, think, node.hand_log())
        finally:
            watch.close()
    t = {"variant": variant}
    t.update(measured)
    return t


def restart_under_load(fleet, node, tail, watch, think, old_log=None, playbook="restart_extraction.yml"):
    """Run PLAYBOOK through FLEET (a BenchFleet) while a LoadGen sends to NODE's server, TAIL (a LogTail or
    ContainerLogs, not yet entered) takes the servers' output and WATCH (a Watch in the node) the GPUs' state; the
    downtime split as DEFINITION says, the old server's SIGTERM line taken from OLD_LOG (any source when None).
    The node must still run: the new server's start time is read from its /proc."""
    with tail, LoadGen(node.url, think=think) as load:
        run = run_loaded(fleet, playbook, load)
    sigterm, dummy = tail.first(SIGTERM_LINE, path=old_log)
    new = node.main_pids()
    return split(run, load, tail, sigterm, gpus_free(watch, sigterm),
                 process_start(node.sandbox, new[-1]) if new else None)


def run_loaded(fleet, playbook, load):
    """Run PLAYBOOK through FLEET once LOAD (a LoadGen, entered) has had three requests completed, then wait (30 s
    at most) until one completes after the run's end; FLEET.run's result."""
    deadline = time.monotonic() + 30
    while sum(ok for dummy, dummy2, ok in load.done) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    run = fleet.run(playbook, tag="restart")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (load.done and load.done[-1][2]
                                               and load.done[-1][1] > run["start"] + run["wall"]):
        time.sleep(0.1)
    return run


def gpus_free(watch, sigterm):
    """When WATCH (a Watch) first saw every GPU of its node free at or after SIGTERM; None if never, or no SIGTERM."""
    return next((t for t, clean in watch.events if clean and sigterm and t >= sigterm), None)


def split(run, load, tail, sigterm, free, new_start):
    """The downtime split as DEFINITION says, from the events of one restart: RUN (BenchFleet.run's result), LOAD
    (the LoadGen, stopped), TAIL (the servers' lines), the old server's SIGTERM line, when the GPUs were free after
    it, and when the new server's main process started; an "error" where one of them is missing or the run failed."""
    ready, ready_log = tail.first(READY_LINE, after=free) if free else (None, None)
    load_read = tail.first(r"Load weight end\. elapsed=", after=free)[0] if free else None
    weight_s = None
    if load_read:
        lines = [line for t, p, line in tail.lines if t == load_read and "Load weight end" in line]
        weight_s = max(float(line.split("elapsed=")[1].split()[0]) for line in lines) if lines else None
    last_old = load.last_ok_before(free) if free else None
    first_new = load.first_ok_after(free) if free else None
    tasks = Tasks(run["timeline"])
    t = {"rc": run["rc"], "wall": round(run["wall"], 3)}
    if None in (sigterm, free, ready, new_start, last_old, first_new) or run["rc"] != 0:
        t["error"] = "incomplete timeline: sigterm=%s free=%s ready=%s new_start=%s last_old=%s first_new=%s rc=%s" % (
            sigterm, free, ready, new_start, last_old, first_new, run["rc"])
        t["output_tail"] = run["output"][-2000:]
        return t
    downtime = first_new - last_old
    exit_in_window = free - max(sigterm, last_old)
    load_s = min(ready, first_new) - new_start      # a request can complete before the ready line is written
    remote = tasks.remote(start=sigterm, end=ready)
    t.update(downtime=round(downtime, 3), old_exit=round(free - sigterm, 3),
             old_exit_in_window=round(exit_in_window, 3), new_load=round(load_s, 3), weight_load=weight_s,
             overhead=round(downtime - exit_in_window - load_s, 3),
             gap_free_to_start=round(new_start - free, 3), ready_to_first_request=round(first_new - ready, 3),
             last_old_after_sigterm=round(last_old - sigterm, 3),
             remote_tasks_stop_to_ready=len(remote), remote_tasks_total=len(tasks.remote()),
             remote_task_names=[r["task"] for r in remote],
             failed_requests=load.failures_between(last_old, first_new))
    return t


def run(rounds, weights_mib=1024, shards=8, think=0.3, variants=None):
    variants = [v for v in VARIANTS if variants is None or v in variants]
    model = shared_model(weights_mib, shards)
    trials, n = [], 0
    for r in range(rounds):
        order = variants if r % 2 == 0 else list(reversed(variants))
        for variant in order:
            n += 1
            t = _trial(variant, os.path.join(WORK, "nodes", "downtime%02d" % n), model, think)
            log("downtime %-9s round %d: %s" % (variant, r + 1, t.get("error") or
                "downtime %.2f s = exit %.2f + load %.2f + overhead %.2f s (%d remote tasks stop->ready)" % (
                    t["downtime"], t["old_exit_in_window"], t["new_load"], t["overhead"],
                    t["remote_tasks_stop_to_ready"])))
            trials.append(t)
    rows = dict((variant, summarize([t for t in trials if t["variant"] == variant])) for variant in variants)
    if "default" in rows and "prefetch" in rows:
        for key in ("downtime", "new_load", "weight_load"):
            rows["prefetch"][key + "_ratio"] = ratio(rows["prefetch"][key]["median"], rows["default"][key]["median"])
    return {"definition": DEFINITION.format(weights=weights_mib, think=think), "weights_mib": weights_mib,
            "rows": rows, "trials": trials}


def summarize(trials):
    """Medians and min-max of restart_under_load's figures over TRIALS, the failed ones counted in "runs" only."""
    ts = [t for t in trials if "error" not in t]
    out = dict((key, summary([t[key] for t in ts])) for key in (
        "downtime", "old_exit", "old_exit_in_window", "new_load", "weight_load", "overhead", "gap_free_to_start",
        "ready_to_first_request", "remote_tasks_stop_to_ready", "remote_tasks_total", "failed_requests", "wall"))
    out["runs"] = "%d/%d" % (len(ts), len(trials))
    if ts:
        out["remote_task_names"] = ts[0]["remote_task_names"]
    return out


def _fmt(s, digits=2):
    return "-" if not s or s.get("median") is None else ("%.*f" % (digits, s["median"]))


def goals(result):
    """Rows of the goals table: (goal, target, measured, met)."""
    row = result["rows"].get("default")
    if not row or row["overhead"]["median"] is None:
        return []
    over = row["overhead"]["median"]
    return [("collection's overhead within the downtime of one node (restart_extraction.yml)", "<= 3.0 s",
             "%.2f s of %.2f s downtime (exit %.2f s, load %.2f s); %s remote tasks between stop and ready" % (
                 over, row["downtime"]["median"], row["old_exit_in_window"]["median"], row["new_load"]["median"],
                 _fmt(row["remote_tasks_stop_to_ready"], 0)), "yes" if over <= 3.0 else "**no** (+%.2f s)" % (over - 3.0))]


def markdown(result):
    out = ["## Downtime per node: restart_extraction.yml under a steady load", "", result["definition"], ""]
    out += table(result["rows"])
    prefetch = result["rows"].get("prefetch", {})
    if prefetch.get("downtime_ratio"):
        out += ["", "With the prefetch: downtime %.2f of the default's, new server's load %.2f, weight load %s." % (
            prefetch["downtime_ratio"], prefetch["new_load_ratio"], prefetch.get("weight_load_ratio"))]
    names = result["rows"].get("default", {}).get("remote_task_names")
    if names:
        out += ["", "Remote tasks between the SIGTERM and the ready line (default, first run): " +
                "; ".join("%d. %s" % (i + 1, n) for i, n in enumerate(names)) + "."]
    return out


def table(rows, first="Variant"):
    """The markdown table of ROWS (label -> summarize()), a row per label under the heading FIRST."""
    out = ["| %s | Downtime (s) | min-max | Old server's exit (s) | New server's load (s) | of it weight load (s) "
           "| Overhead (s) | GPUs free -> new process (s) | Ready -> first request (s) | Remote tasks stop->ready "
           "| Remote tasks in all | Failed requests | Runs |" % first,
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for label, row in rows.items():
        out.append("| %s | %s | %s-%s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            label, _fmt(row["downtime"]), _fmt({"median": row["downtime"]["min"]}),
            _fmt({"median": row["downtime"]["max"]}), _fmt(row["old_exit_in_window"]), _fmt(row["new_load"]),
            _fmt(row["weight_load"]), _fmt(row["overhead"]), _fmt(row["gap_free_to_start"]),
            _fmt(row["ready_to_first_request"]), _fmt(row["remote_tasks_stop_to_ready"], 0),
            _fmt(row["remote_tasks_total"], 0), _fmt(row["failed_requests"], 0), row["runs"]))
    return out


def explain(result):
    """Where the overhead goal is missed: by how much, what fills the gap, and what would shorten it."""
    row = result["rows"].get("default")
    if not row or row["overhead"]["median"] is None or row["overhead"]["median"] <= 3.0:
        return []
    text = ("Downtime overhead: %.2f s per node against 3.0 s (missed by %.2f s). Nearly all of it, %.2f s, passes "
            "between the GPUs reading free and the new server's process start, with %s remote tasks between the "
            "SIGTERM and the ready line, each a module round trip (see 'Module overhead' for what one costs in this "
            "report)." % (
                row["overhead"]["median"], row["overhead"]["median"] - 3.0, row["gap_free_to_start"]["median"],
                _fmt(row["remote_tasks_stop_to_ready"], 0)))
    names = row.get("remote_task_names") or []
    if names:
        text += (" They are: %s. Besides gpu_reap's stop, gpu_verify and the start itself, they create directories "
                 "and write files that do not depend on the old server being gone; made before the stop (with the "
                 "other checks), they would leave three remote tasks inside the downtime: stop, verify, start. "
                 "gpu_reap's stop and gpu_verify could be one module call as well (gpu_reap waiting for the GPUs' "
                 "memory after the processes' exit), and the start could be a module that also waits for the port, "
                 "leaving one or two round trips between the old server's exit and the new server's start." % (
                     "; ".join(names)))
    return [text]

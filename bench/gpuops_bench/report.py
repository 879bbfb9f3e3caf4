# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Goals and the markdown report of a bench run."""

from __future__ import annotations

from . import asyncstop, downtime, fleet, gateway, multinode, prefetch, runstatus, supervised, systemd

NAMES = {
    "hand_a": "hand procedure A", "hand_b": "hand procedure B",
    "gpuops_adhoc": "gpu_reap with verify (ad hoc)", "stop_sglang": "playbooks/stop_sglang.yml",
    "stop_sglang_unbuffered": "stop_sglang.yml, PYTHONUNBUFFERED=1",
    "stop_call": "its call alone (bench/playbooks/stop_call.yml)",
}


def _s(value, unit="", digits=2):
    return "n/a" if value is None else "%.*f%s" % (digits, value, unit)


def _range(summary, digits=2):
    if summary["min"] is None:
        return "n/a"
    return "%.*f-%.*f" % (digits, summary["min"], digits, summary["max"])


def goals(results):
    """[(goal, target, measured, met)]; met is None where the measurement did not run."""
    rows = []
    for key, module_goals in (("downtime", downtime.goals), ("multinode", multinode.goals), ("stop", _stop_goals),
                              ("fleet", fleet.goals), ("prefetch", prefetch.goals), ("supervised", supervised.goals),
                              ("systemd", systemd.goals), ("status", runstatus.goals)):
        if results.get(key):
            rows += module_goals(results[key])
    scan = results.get("scan")
    if scan:
        rows.append(("scan cost against fuser %s (%d processes x %d files)" % (
            scan.get("device_glob", "/dev/nvidia*"), scan["processes"], scan["files_per_process"]), "ratio <= 1.00",
            "%s s vs %s s = %s" % (_s(scan["seconds"]["gpu_reap_scan"]["median"], "", 3),
                                   _s(scan["seconds"]["fuser"]["median"], "", 3), _s(scan["ratio"])), scan["met"]))
    detect = results.get("detect")
    if detect:
        for p, row in detect["intervals"].items():
            rows.append(("detection latency, poll_interval %s s" % p, "max <= %.0f ms" % row["bound_ms"],
                         "median %s, max %s" % (_s(row["latency_ms"]["median"], " ms", 0),
                                                _s(row["latency_ms"]["max"], " ms", 0)), row["met"]))
    return rows


def _stop_goals(stop):
    """Time to clean over the server's own exit (SIGTERM until the NVML poller sees every GPU free)."""
    rows = []
    methods = stop["variants"].get("prompt", {})
    poll = stop.get("poll_interval_s", 0.5)
    adhoc, pb = methods.get("gpuops_adhoc"), methods.get("stop_sglang")
    if adhoc and adhoc["module_over_own_exit_s"]["median"] is not None:
        over, bound = adhoc["module_over_own_exit_s"]["median"], 0.1 + poll
        rows.append(("time to clean, module path (gpu_reap with verify, elapsed) over the server's own exit",
                     "<= %.2f s (0.1 s + one %g s poll)" % (bound, poll),
                     "%.2f s (module %.2f s, own exit %.2f s)" % (
                         over, adhoc["module_seconds"]["median"], adhoc["own_exit_s"]["median"]),
                     "yes" if over <= bound else "**no** (+%.2f s)" % (over - bound)))
    if pb and pb["over_own_exit_s"]["median"] is not None:
        over = pb["over_own_exit_s"]["median"]
        rows.append(("time to clean, playbooks/stop_sglang.yml over the server's own exit", "<= 1.0 s",
                     "%.2f s (playbook %.2f s, own exit %.2f s)" % (
                         over, pb["seconds"]["median"], pb["own_exit_s"]["median"]),
                     "yes" if over <= 1.0 else "**no** (+%.2f s)" % (over - 1.0)))
    return rows


def markdown(results):
    meta = results["meta"]
    out = ["# gpuops bench: latest results", "",
           "`make bench` on %s (%s CPUs), %s, commit `%s`, %d rounds per comparison. Both sides of every "
           "comparison run in the same run, alternating; figures are medians (min-max). Absolute times are not "
           "comparable across machines or runs; the ratios are the result." % (
               meta["host"], meta["cpus"], meta["date"], meta["commit"], meta["rounds"]), ""]
    if meta.get("conditions"):
        out += ["Load conditions: " + meta["conditions"], ""]
    out += ["## Goals", "", "| Goal | Target | Measured | Met |", "|---|---|---|---|"]
    for goal, target, measured, met in goals(results):
        if not isinstance(met, str):
            met = {True: "yes", False: "**no**", None: "-"}[met]
        out.append("| %s | %s | %s | %s |" % (goal, target, measured, met))
    out.append("")
    for key, module in (("downtime", downtime), ("multinode", multinode), ("fleet", fleet), ("async", asyncstop),
                        ("prefetch", prefetch), ("gateway", gateway), ("supervised", supervised), ("systemd", systemd),
                        ("status", runstatus)):
        if results.get(key):
            out += module.markdown(results[key]) + [""]
    out += _stop(results.get("stop")) + _detect(results.get("detect")) + _scan(results.get("scan"))
    out += _overhead(results.get("overhead"))
    notes = results.get("notes") or []
    if notes:
        out += ["## Notes", ""] + ["- " + n for n in notes] + [""]
    return "\n".join(out)


def _stop(stop):
    if not stop:
        return []
    out = ["## Time to clean: over the server's own exit, and against the hand procedures", "",
           "Time to clean = " + stop["definition"], "",
           "The stand-in plays SGLang 0.5.23's shutdown: after SIGTERM its watchdog wakes within %g s, drains, sends "
           "ShutdownReq and each scheduler frees its GPU memory (about 1 s) before the tree exits. *SIGTERM at*: "
           "when the server's log showed the SIGTERM line, from the start; *own exit*: from that line until the NVML "
           "poller saw every GPU free, the physical limit of a polite stop; *over own exit*: time to clean less own "
           "exit; *module*: the `elapsed` that gpu_reap, which verifies the GPUs in the same call, returned. Decoys on every node: an unrelated "
           "`python3` job, `tail -f` of a log under `log/sglang/`, nvidia-persistenced and nv-hostengine (both hold "
           "/dev/nvidiactl). Hand procedure A kills the decoys and cuts SGLang's memory release: a reference, not a "
           "goal." % stop["watchdog_interval_s"], ""]
    for variant, methods in stop["variants"].items():
        title = {"prompt": "Server that exits on SIGTERM",
                 "ignore_sigterm": "Highest TP rank ignores SIGTERM",
                 "crowded": "Server that exits on SIGTERM, on a node of %d more processes of %d open files each"
                            % tuple(stop.get("crowd") or (0, 0))}.get(variant, variant)
        out += ["### %s" % title, "",
                "| Method | Time to clean (s) | min-max | vs A | SIGTERM at (s) | Own exit (s) | Over own exit (s) "
                "| Module (s) | Module over own exit (s) | Node clean | Decoys killed |",
                "|---|---|---|---|---|---|---|---|---|---|---|"]
        for m, row in methods.items():
            out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                NAMES.get(m, m), _s(row["seconds"]["median"]), _range(row["seconds"]), _s(row["ratio_to_hand_a"]),
                _s(row.get("sigterm_s", {}).get("median")), _s(row.get("own_exit_s", {}).get("median")),
                _s(row.get("over_own_exit_s", {}).get("median")), _s(row.get("module_seconds", {}).get("median")),
                _s(row.get("module_over_own_exit_s", {}).get("median")), row["clean"],
                ", ".join(row["decoys_killed"]) or "none"))
        pb = methods.get("stop_sglang", {})
        if pb.get("remote_tasks_before_sigterm", {}).get("median") is not None:
            out += ["", "stop_sglang.yml: its first task result came %s s after the start (ansible-playbook's start-up), "
                    "%s remote tasks ran before the SIGTERM and %s after the GPUs were free (median)." % (
                        _s(pb["first_task_s"]["median"]), _s(pb["remote_tasks_before_sigterm"]["median"], "", 0),
                        _s(pb["remote_tasks_after_free"]["median"], "", 0))]
        out.append("")
    out += ["Methods:", ""] + ["- %s: `%s`" % (NAMES.get(m, m), d) for m, d in stop["methods"].items()] + [""]
    return out


def _detect(detect):
    if not detect:
        return []
    out = ["## Detection latency", "", detect["definition"], "",
           "| poll_interval | median | min-max | bound | Met |", "|---|---|---|---|---|"]
    for p, row in detect["intervals"].items():
        out.append("| %s s | %s | %s ms | %.0f ms | %s |" % (
            p, _s(row["latency_ms"]["median"], " ms", 0), _range(row["latency_ms"], 0), row["bound_ms"],
            "yes" if row["met"] else "**no**"))
    return out + [""]


def _scan(scan):
    if not scan:
        return []
    labels = {"fuser": "`fuser %s`" % scan.get("device_glob", "/dev/nvidia*"),
              "gpu_reap_scan": "gpu_reap selection (in-process)",
              "gpu_reap_check_mode": "gpu_reap module, check mode (whole process)"}
    out = ["## Scan cost", "", scan["definition"].replace("PROCESSES", str(scan["processes"] - 1))
           .replace("FILES", str(scan["files_per_process"])), "",
           "| Scan | Seconds | min-max | vs fuser |", "|---|---|---|---|"]
    base = scan["seconds"]["fuser"]["median"]
    for k, s in scan["seconds"].items():
        ratio = s["median"] / base if base and s["median"] else None
        out.append("| %s | %s | %s | %s |" % (labels.get(k, k), _s(s["median"], "", 3), _range(s, 3), _s(ratio)))
    out += ["", "Both found the same holders: %s." % ("yes" if scan["same_holders_found"] else "**no**"), ""]
    return out


def _overhead(overhead):
    if not overhead:
        return []
    out = ["## Module overhead", "", overhead["definition"], "",
           "| Call | Config | Wall (s) | Module elapsed (s) | Overhead (s) |", "|---|---|---|---|---|"]
    for call, configs in overhead["calls"].items():
        for c, row in configs.items():
            cells = (call, c, _s(row["wall_s"]["median"]), _s(row["module_elapsed_s"]["median"], "", 3),
                     _s(row["overhead_s"]["median"]))
            out.append("| %s | %s | %s | %s | %s |" % cells)
    return out + [""]


def explain(results):
    """For every goal missed: by how much, why, and what would close it, from this run's figures."""
    out = []
    out += _explain_stop(results.get("stop"), results.get("overhead"))
    out += downtime.explain(results["downtime"]) if results.get("downtime") else []
    out += fleet.explain(results["fleet"]) if results.get("fleet") else []
    out += prefetch.explain(results["prefetch"]) if results.get("prefetch") else []
    scan = results.get("scan")
    if scan and not scan["met"]:
        out.append("Scan cost: gpu_reap's selection took %.3f s against fuser's %.3f s (ratio %.2f, goal 1.00). It "
                   "reads every process's stat, cmdline and exe and then readlink()s every open file descriptor in "
                   "Python; fuser stat()s them in C. What would close it: skip the per-process cmdline and exe "
                   "reads in the device phase (only /proc/PID/fd is needed) and test a link's '/dev/nvidia' prefix "
                   "before the glob match." % (scan["seconds"]["gpu_reap_scan"]["median"],
                                               scan["seconds"]["fuser"]["median"], scan["ratio"]))
    for p, row in (results.get("detect") or {}).get("intervals", {}).items():
        if not row["met"] and row["latency_ms"]["max"] is not None:
            out.append("Detection latency at poll_interval %s s: max %.0f ms against a bound of %.0f ms (over by "
                       "%.0f ms). Each poll reads every GPU through NVML and the module process must exit; on a "
                       "loaded 2-core machine a poll can be delayed by the scheduler." % (
                           p, row["latency_ms"]["max"], row["bound_ms"], row["latency_ms"]["max"] - row["bound_ms"]))
    return out


def _explain_stop(stop, overhead):
    """Where a time-to-clean goal is missed: by how much and what the time went to."""
    if not stop:
        return []
    out = []
    methods = stop["variants"].get("prompt", {})
    poll = stop.get("poll_interval_s", 0.5)
    call = None
    if overhead:
        call = overhead["calls"].get("gpu_verify (clean node)", {}).get("recommended", {}).get("overhead_s", {})
        call = call.get("median")
    trials = [t for t in stop.get("trials", []) if t["variant"] == "prompt"]
    adhoc = methods.get("gpuops_adhoc")
    if adhoc and adhoc["module_over_own_exit_s"]["median"] is not None:
        over = adhoc["module_over_own_exit_s"]["median"]
        ts = [t for t in trials if t["method"] == "gpuops_adhoc" and t.get("own_exit_s") is not None]
        verify = sorted(t["verify_elapsed"] for t in ts if t.get("verify_elapsed") is not None)
        if over > 0.1 + poll and verify:
            out.append("Module path: gpu_reap with verify took %.2f s over the server's own exit, %.2f s more than "
                       "the %.2f s allowed. The wait for the GPUs' share is a median %.2f s (its first NVML read "
                       "comes once the server's tree is gone, so one read should do); the rest is the stop: the "
                       "scan before the SIGTERM, and the wait from the GPUs' release to the exit of the last process "
                       "of the tree (the main process exits after its schedulers), which it notices at its next "
                       "/proc poll." % (over, over - 0.1 - poll, 0.1 + poll, verify[len(verify) // 2]))
    pb = methods.get("stop_sglang")
    if pb and pb["over_own_exit_s"]["median"] is not None and pb["over_own_exit_s"]["median"] > 1.0:
        over = pb["over_own_exit_s"]["median"]
        after = pb["seconds"]["median"] - pb["gpus_clean_s"]["median"]
        text = ("stop_sglang.yml: %.2f s over the server's own exit, %.2f s more than the 1.0 s allowed. The stop is one "
                "remote task (sglang_server's stop: host lock, find, drain, signal, wait for the exit, verify, "
                "unlock); %s remote tasks ran before the SIGTERM and %s after the GPUs were free. Before the SIGTERM: "
                "%.2f s, of which ansible-playbook's start-up until its first task result %.2f s" % (
                    over, over - 1.0, _s(pb["remote_tasks_before_sigterm"]["median"], "", 0),
                    _s(pb["remote_tasks_after_free"]["median"], "", 0), pb["sigterm_s"]["median"],
                    pb["first_task_s"]["median"]))
        start, end = pb.get("call_start_s", {}).get("median"), pb.get("call_end_s", {}).get("median")
        if None not in (start, end):
            text += (", the tasks that run on the controller only (argument checks, facts) until the call's start "
                     "%.2f s, and the call's own start until its SIGTERM (Ansible's worker, the module's transfer and "
                     "Python start-up, then find and drain) %.2f s. After the GPUs were free: %.2f s until the call's "
                     "result (its next poll of the processes and the GPUs, its exit) and %.2f s for the report, the "
                     "summary and ansible-playbook's exit." % (
                         start - pb["first_task_s"]["median"], pb["sigterm_s"]["median"] - start,
                         end - pb["gpus_clean_s"]["median"], pb["seconds"]["median"] - end))
        else:
            text += "; after the GPUs were free: %.2f s." % after
        alone = methods.get("stop_call", {}).get("over_own_exit_s", {}).get("median")
        if alone is not None:
            text += (" The same call alone in a one-task play (bench/playbooks/stop_call.yml): %.2f s over the server's "
                     "own exit; the fleet play around it (the run's name, the role's include and argument checks, the "
                     "report, the unlock's check, the summary) adds %.2f s." % (alone, over - alone))
        if call is not None:
            text += " A remote task costs about %.2f s here (measurement 'module overhead')." % call
        out.append(text)
    return out

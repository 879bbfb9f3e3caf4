# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Goals and the markdown report of a bench run."""

from __future__ import annotations

NAMES = {
    "hand_a": "hand procedure A", "hand_b": "hand procedure B",
    "gpuops_adhoc": "gpu_reap + gpu_verify (ad hoc)", "stop_sglang": "playbooks/stop_sglang.yml",
    "gpuops_group": "gpu_reap control-group + gpu_verify (ad hoc)",
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
    stop = results.get("stop")
    if stop:
        for variant, methods in stop["variants"].items():
            a, pb = methods.get("hand_a"), methods.get("stop_sglang")
            if not (a and pb):
                rows.append(("stop_sglang.yml <= 1/2 of procedure A (%s)" % variant, "ratio <= 0.50", "not measured",
                             None))
                continue
            r = pb["ratio_to_hand_a"]
            safe = pb["all_clean"] and not pb["decoys_killed"]
            measured = "%s s vs %s s = %s; clean %s; decoys killed: %s (A killed: %s)" % (
                _s(pb["seconds"]["median"]), _s(a["seconds"]["median"]), _s(r), pb["clean"],
                ", ".join(pb["decoys_killed"]) or "none", ", ".join(a["decoys_killed"]) or "none")
            rows.append(("stop_sglang.yml <= 1/2 of procedure A, node clean, decoys alive (%s server)" % variant,
                         "ratio <= 0.50", measured, r is not None and r <= 0.5 and safe))
    scan = results.get("scan")
    if scan:
        rows.append(("scan cost against fuser /dev/nvidia* (%d processes x %d files)" % (
            scan["processes"], scan["files_per_process"]), "ratio <= 1.00",
            "%s s vs %s s = %s" % (_s(scan["seconds"]["gpu_reap_scan"]["median"], "", 3),
                                   _s(scan["seconds"]["fuser"]["median"], "", 3), _s(scan["ratio"])), scan["met"]))
    detect = results.get("detect")
    if detect:
        for p, row in detect["intervals"].items():
            rows.append(("detection latency, poll_interval %s s" % p, "max <= %.0f ms" % row["bound_ms"],
                         "median %s, max %s" % (_s(row["latency_ms"]["median"], " ms", 0),
                                                _s(row["latency_ms"]["max"], " ms", 0)), row["met"]))
    return rows


def markdown(results):
    meta = results["meta"]
    out = ["# gpuops bench: latest results", "",
           "`make bench` on %s (%s CPUs), %s, commit `%s`, %d rounds per comparison. Both sides of every "
           "comparison run in the same run, alternating; figures are medians (min-max). Absolute times are not "
           "comparable across machines or runs; the ratios are the result." % (
               meta["host"], meta["cpus"], meta["date"], meta["commit"], meta["rounds"]), ""]
    out += ["## Goals", "", "| Goal | Target | Measured | Met |", "|---|---|---|---|"]
    for goal, target, measured, met in goals(results):
        out.append("| %s | %s | %s | %s |" % (goal, target, measured, {True: "yes", False: "**no**", None: "-"}[met]))
    out.append("")
    out += _stop(results.get("stop")) + _detect(results.get("detect")) + _scan(results.get("scan"))
    out += _fleet(results.get("fleet")) + _overhead(results.get("overhead"))
    notes = results.get("notes") or []
    if notes:
        out += ["## Notes", ""] + ["- " + n for n in notes] + [""]
    return "\n".join(out)


def _stop(stop):
    if not stop:
        return []
    out = ["## 1. Time to clean an 8-GPU node (SGLang stand-in at TP=8)", "",
           "Time to clean = " + stop["definition"], "",
           "Decoys on every node: an unrelated `python3` job, `tail -f` of the server log (under "
           "`log/sglang/`), nvidia-persistenced and nv-hostengine (both hold /dev/nvidiactl). The stand-in's "
           "shutdown watchdog checks every %g s, as SGLang's does. *GPUs free*: when the NVML poller first saw "
           "every GPU at baseline; *modules' own*: the `elapsed` gpu_reap and gpu_verify returned, i.e. the time "
           "to clean without Ansible's overhead." % stop["watchdog_interval_s"], ""]
    for variant, methods in stop["variants"].items():
        title = {"prompt": "Server that exits promptly on SIGTERM",
                 "ignore_sigterm": "Schedulers that ignore SIGTERM"}.get(variant, variant)
        out += ["### %s" % title, "",
                "| Method | Time to clean (s) | min-max | vs A | GPUs free (s) | Modules' own (s) | Node clean "
                "| Decoys killed |", "|---|---|---|---|---|---|---|---|"]
        for m, row in methods.items():
            out.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                NAMES.get(m, m), _s(row["seconds"]["median"]), _range(row["seconds"]), _s(row["ratio_to_hand_a"]),
                _s(row["gpus_clean_s"]["median"]), _s(row.get("module_seconds", {}).get("median")),
                row["clean"], ", ".join(row["decoys_killed"]) or "none"))
        out.append("")
    out += ["Methods:", ""] + ["- %s: `%s`" % (NAMES.get(m, m), d) for m, d in stop["methods"].items()] + [""]
    return out


def _detect(detect):
    if not detect:
        return []
    out = ["## 2. Detection latency", "", detect["definition"], "",
           "| poll_interval | median | min-max | bound | Met |", "|---|---|---|---|---|"]
    for p, row in detect["intervals"].items():
        out.append("| %s s | %s | %s ms | %.0f ms | %s |" % (
            p, _s(row["latency_ms"]["median"], " ms", 0), _range(row["latency_ms"], 0), row["bound_ms"],
            "yes" if row["met"] else "**no**"))
    return out + [""]


def _scan(scan):
    if not scan:
        return []
    labels = {"fuser": "`fuser /dev/nvidia*`", "gpu_reap_scan": "gpu_reap selection (in-process)",
              "gpu_reap_check_mode": "gpu_reap module, check mode (whole process)"}
    out = ["## 3. Scan cost", "", scan["definition"].replace("PROCESSES", str(scan["processes"] - 1))
           .replace("FILES", str(scan["files_per_process"])), "",
           "| Scan | Seconds | min-max | vs fuser |", "|---|---|---|---|"]
    base = scan["seconds"]["fuser"]["median"]
    for k, s in scan["seconds"].items():
        ratio = s["median"] / base if base and s["median"] else None
        out.append("| %s | %s | %s | %s |" % (labels.get(k, k), _s(s["median"], "", 3), _range(s, 3), _s(ratio)))
    out += ["", "Both found the same holders: %s." % ("yes" if scan["same_holders_found"] else "**no**"), ""]
    return out


def _fleet(fleet):
    if not fleet:
        return []
    out = ["## 4. Fleet: playbooks/restart_extraction.yml", "", fleet["definition"], "",
           "| Nodes | Config | Wall (s) | min-max | Waiting on servers | Ansible overhead |", "|---|---|---|---|---|---|"]
    for row in fleet["rows"]:
        out.append("| %d | %s | %s | %s | %s | %s |" % (
            row["nodes"], row["config"], _s(row["wall_s"]["median"]), _range(row["wall_s"]),
            _s(row["wait_share"] * 100 if row["wait_share"] is not None else None, "%", 0),
            _s(row["overhead_share"] * 100 if row["overhead_share"] is not None else None, "%", 0)))
    if fleet.get("chart"):
        out += ["", "![fleet scaling](%s)" % fleet["chart"]]
    return out + [""]


def _overhead(overhead):
    if not overhead:
        return []
    out = ["## 5. Module overhead", "", overhead["definition"], "",
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
    stop, over = results.get("stop"), results.get("overhead")
    call = None
    if over:
        call = over["calls"]["gpu_verify (clean node)"]["recommended"]["overhead_s"]["median"]
    for variant, methods in (stop or {}).get("variants", {}).items():
        a, pb, adhoc = methods.get("hand_a"), methods.get("stop_sglang"), methods.get("gpuops_adhoc")
        if not (a and pb) or pb["ratio_to_hand_a"] is None or pb["ratio_to_hand_a"] <= 0.5:
            continue
        target = a["seconds"]["median"] / 2
        text = ("%s server: stop_sglang.yml took %.1f s against procedure A's %.1f s; the goal (%.1f s) is missed by "
                "%.1f s." % (variant, pb["seconds"]["median"], a["seconds"]["median"], target,
                             pb["seconds"]["median"] - target))
        trials = [t for t in stop["trials"] if t["variant"] == variant and t["method"] == "gpuops_adhoc"]
        reap = [t["reap_elapsed"] for t in trials if t.get("reap_elapsed") is not None]
        if reap and adhoc:
            text += (" Of the ad-hoc pair's %.1f s, gpu_reap itself spent a median %.1f s waiting for the server, "
                     "which after SIGTERM exits only at its shutdown watchdog's next check (every %g s, so 0 to %g s);"
                     " the rest is Ansible" % (adhoc["seconds"]["median"], sorted(reap)[len(reap) // 2],
                                               stop["watchdog_interval_s"], stop["watchdog_interval_s"]))
            text += (" (%.2f s per ad-hoc module call on a clean node, measurement 5)." % call if call is not None
                     else ".")
        text += (" The playbook adds the host lock, the record, discovery, a metrics read and the drain check "
                 "before the stop and the unlock after it: about ten remote tasks. Procedure A has the GPUs free "
                 "after %.2f s (median, NVML poller): it signals every process at once, skipping the server's "
                 "drain, and kills the decoys with them; the rest of its time is fixed sleeps." % (
                     a["gpus_clean_s"]["median"] or 0))
        text += (" What would close it: once the drain has read zero requests in flight, signal the whole "
                 "process group (kill_mode control-group), which the server obeys at once, instead of waiting for "
                 "the watchdog,")
        group = methods.get("gpuops_group")
        if group and group["seconds"]["median"] is not None:
            text += (" and SIGKILL after 1 s what is left (measured here: that ad-hoc pair took %.1f s, %.2f of "
                     "procedure A, of which the modules' own time was %s s; node clean %s, decoys killed: %s)" % (
                         group["seconds"]["median"], group["ratio_to_hand_a"],
                         _s(group["module_seconds"]["median"]), group["clean"],
                         ", ".join(group["decoys_killed"]) or "none"))
        text += "; and fold the lock, record and discovery reads into fewer remote tasks (each costs %s s here)." % (
            _s(call))
        if group and group["seconds"]["median"] is not None and group["module_seconds"]["median"] is not None:
            text += (" Ansible's share of that pair alone was %.1f s against the %.1f s the goal allows: on this "
                     "2-core machine the goal is within reach of the modules, not of an Ansible run." % (
                         group["seconds"]["median"] - group["module_seconds"]["median"], target))
        out.append(text)
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

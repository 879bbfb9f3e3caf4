# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Prefetch: the stand-in's load with the model's files cold (evicted from the page cache) against
warm (read by gpuops.host.model_prefetch just before the start)."""

from __future__ import annotations

import os
import re
import time

from .common import WORK, log, ratio, summary
from .nodes import READY_LINE, BenchFleet, BenchNode, evict, shared_model
from .timeline import LogTail, process_start

DEFINITION = (
    "one 8-GPU node; the SGLang stand-in at TP=8 started by hand on a model of {weights} MiB in {shards} "
    "safetensors shards, whose schedulers read the shards from disk during the weight load (each TP rank its "
    "share, as SGLang 0.5.23's loader reads safetensors files: model_loader/weight_utils.py). Cold: the model's "
    "own files evicted from the page cache (posix_fadvise DONTNEED on those files only; the machine's caches are "
    "never dropped). Warm: `ansible node -m gpuops.host.model_prefetch -a path=MODEL` (bench/ansible.cfg) right "
    "before the start. Weight load = the longest 'Load weight end. elapsed=' of the ranks' log lines; start to "
    "ready = process start (/proc) -> the log's 'ready to roll' line. Alternating, {rounds} rounds.")
ELAPSED = re.compile(r"Load weight end\. elapsed=([0-9.]+) s")


def _start(node, tail):
    """Start the server by hand; (weight load seconds, start-to-ready seconds)."""
    since = time.monotonic()
    server = node.start()
    ready, dummy = tail.first(READY_LINE, after=since)
    deadline = time.monotonic() + 10
    while ready is None and time.monotonic() < deadline:
        time.sleep(0.05)
        ready, dummy = tail.first(READY_LINE, after=since)
    started = process_start(node.sandbox, server.pid)
    loads = [float(m.group(1)) for t, p, line in tail.lines if t >= since for m in [ELAPSED.search(line)] if m]
    server.stop()
    return (max(loads) if loads else None), (ready - started if ready else None)


def run(rounds, weights_mib=2048, shards=16):
    model = shared_model(weights_mib, shards)
    workdir = os.path.join(WORK, "nodes", "prefetch")
    trials = []
    with BenchNode(workdir, model=model) as node:
        fleet = BenchFleet(workdir, [node])
        with LogTail(node.log_globs()) as tail:
            for r in range(rounds):
                for case in (("cold", "warm") if r % 2 == 0 else ("warm", "cold")):
                    evict(model)
                    module = {}
                    if case == "warm":
                        args = {"path": model, "min_available_mib": 1024}
                        wall, results = fleet_adhoc(fleet, node, "model_prefetch", args)
                        status, result = results[node.name]
                        module = {"wall": round(wall, 3), "status": status, "bytes_read": result.get("bytes_read"),
                                  "seconds": result.get("seconds"), "mib_per_second": result.get("mib_per_second")}
                    weight, ready = _start(node, tail)
                    trials.append({"case": case, "weight_load": weight, "start_to_ready": ready, "module": module})
                    log("prefetch %-4s round %d: weight load %s s, start to ready %s s%s" % (
                        case, r + 1, weight, None if ready is None else round(ready, 2),
                        " (model_prefetch read %s MiB in %s s)" % (
                            (module.get("bytes_read") or 0) >> 20, module.get("seconds")) if module else ""))
    rows = {}
    for case in ("cold", "warm"):
        ts = [t for t in trials if t["case"] == case]
        rows[case] = {"weight_load": summary([t["weight_load"] for t in ts]),
                      "start_to_ready": summary([t["start_to_ready"] for t in ts])}
    warm = [t["module"] for t in trials if t["case"] == "warm"]
    rows["warm"]["module_seconds"] = summary([m.get("seconds") for m in warm])
    rows["warm"]["module_wall"] = summary([m.get("wall") for m in warm])
    rows["warm"]["module_mib_per_second"] = summary([m.get("mib_per_second") for m in warm])
    speedup = {key: ratio(rows["cold"][key]["median"], rows["warm"][key]["median"])
               for key in ("weight_load", "start_to_ready")}
    return {"definition": DEFINITION.format(weights=weights_mib, shards=shards, rounds=rounds),
            "weights_mib": weights_mib, "rows": rows, "speedup": speedup, "trials": trials}


def fleet_adhoc(fleet, node, module, args):
    """One ad-hoc module call against the node, with the fleet's inventory and configuration."""
    from .common import Ansible

    ansible = Ansible(fleet.config)
    ansible.env["ANSIBLE_COLLECTIONS_PATH"] = fleet.collections
    return ansible.adhoc(fleet.inventory, module, args, pattern=node.name)


def goals(result):
    speed = result["speedup"].get("weight_load")
    if speed is None:
        return []
    return [("prefetch: weight load on a warm page cache (model_prefetch) against cold", ">= 2.0x faster",
             "%.2fx (%.2f s cold, %.2f s warm); start to ready %sx" % (
                 speed, result["rows"]["cold"]["weight_load"]["median"], result["rows"]["warm"]["weight_load"]["median"],
                 result["speedup"].get("start_to_ready")), "yes" if speed >= 2.0 else "**no**")]


def markdown(result):
    rows = result["rows"]

    def cell(s):
        return "-" if s["median"] is None else "%.2f (%.2f-%.2f)" % (s["median"], s["min"], s["max"])

    return ["## Prefetch: model load cold against warm", "", result["definition"], "",
            "| Page cache | Weight load (s) | Start to ready (s) |", "|---|---|---|",
            "| cold | %s | %s |" % (cell(rows["cold"]["weight_load"]), cell(rows["cold"]["start_to_ready"])),
            "| warm | %s | %s |" % (cell(rows["warm"]["weight_load"]), cell(rows["warm"]["start_to_ready"])),
            "", "Speed-up warm against cold: weight load %sx, start to ready %sx. model_prefetch itself: %s s to read "
            "%d MiB (%s MiB/s), %s s for the whole ad-hoc call." % (
                result["speedup"]["weight_load"], result["speedup"]["start_to_ready"],
                rows["warm"]["module_seconds"]["median"], result["weights_mib"],
                rows["warm"]["module_mib_per_second"]["median"], rows["warm"]["module_wall"]["median"])]


def explain(result):
    speed = result["speedup"].get("weight_load")
    out = []
    if speed is not None and speed < 2.0:
        out.append("Prefetch: the weight load was %.2fx faster warm than cold, short of 2x. The cold load reads from "
                   "a disk that the host caches as well (a virtual disk), so cold reads here are faster than a real "
                   "node's NVMe or network storage." % speed)
    ready = result["speedup"].get("start_to_ready")
    if ready is not None:
        out.append("Prefetch: from process start to ready the gain is %.2fx: the weight reads are one part of the "
                   "stand-in's start, beside its process start-up (eleven Python processes on two cores), the fixed "
                   "load and graph-capture time and the 1 s warm-up wait." % ready)
    return out

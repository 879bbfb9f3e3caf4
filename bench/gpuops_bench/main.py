# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Command line of make bench."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import time
import traceback

from . import (asyncstop, chart, detect, downtime, fleet, gateway, multinode, overhead, prefetch, report, runstatus,
               scancost, stop, supervised, systemd)
from .common import BENCH, REPO, log

MEASUREMENTS = ("downtime", "multinode", "stop", "fleet", "prefetch", "detect", "scan", "overhead", "async", "gateway",
                "supervised", "systemd", "status")


def _commit():
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=False)
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain"], capture_output=True, text=True,
                               check=False)
        return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "") if head.returncode == 0 else "none"
    except OSError:
        return "unknown"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="bench/run.py", description=__doc__)
    parser.add_argument("--rounds", type=int, default=int(os.environ.get("BENCH_ROUNDS", 3)),
                        help="rounds per comparison (default 3, or $BENCH_ROUNDS)")
    parser.add_argument("--quick", action="store_true", default=bool(os.environ.get("BENCH_QUICK")),
                        help="one round, fewer fleet sizes: a smoke run (or $BENCH_QUICK=1)")
    parser.add_argument("--only", default=os.environ.get("BENCH_ONLY", ""),
                        help="comma list of %s; the others are kept from the last results" % ",".join(MEASUREMENTS))
    parser.add_argument("--watchdog", type=float, default=5.0,
                        help="the stand-in's shutdown watchdog interval in measurement 1 (SGLang's is 5 s)")
    parser.add_argument("--fleet-rounds", type=int, default=int(os.environ.get("BENCH_FLEET_ROUNDS", 0)),
                        help="rounds of the fleet measurement (default: rounds / 3, at least 1; it is the slowest)")
    parser.add_argument("--fleet-sizes", type=lambda v: tuple(int(n) for n in v.split(",")), default=(1, 8, 16, 32),
                        help="light-node fleet sizes (default 1,8,16,32); the settings are compared at 8 nodes")
    parser.add_argument("--fleet-settings", type=lambda v: [s.strip() for s in v.split(",") if s.strip()],
                        default=None, help="Ansible settings compared in the fleet measurement (default: all of %s)"
                        % ", ".join(fleet.SETTINGS))
    parser.add_argument("--fleet-baseline", metavar="REV", default=None,
                        help="a git revision of the collection (e.g. e25e1b8) run beside the working tree at every "
                        "fleet size, with bench/ansible.cfg, in the same rounds")
    parser.add_argument("--async-rounds", type=int, default=2,
                        help="rounds of the async stop measurement (default 2)")
    parser.add_argument("--async-nodes", type=int, default=16, help="light nodes of the async stop measurement")
    parser.add_argument("--async-forks", type=lambda v: tuple(int(n) for n in v.split(",")), default=(2, 4, 16),
                        help="forks compared in the async stop measurement (default 2,4,16)")
    parser.add_argument("--gateway-nodes", type=int, default=4, help="nodes of the gateway rollout measurement")
    parser.add_argument("--weights-mib", type=int, default=1024,
                        help="size of the model's weight files in the downtime and prefetch measurements")
    parser.add_argument("--downtime-variants", type=lambda v: [s.strip() for s in v.split(",") if s.strip()],
                        default=None, help="variants of the downtime measurement (default: all of %s)"
                        % ", ".join(downtime.VARIANTS))
    parser.add_argument("--stop-methods", type=lambda v: [s.strip() for s in v.split(",") if s.strip()],
                        default=None, help="methods of the time-to-clean measurement (default: all of %s)"
                        % ", ".join(stop.METHODS))
    parser.add_argument("--processes", type=int, default=2000, help="extra processes in the scan measurement")
    parser.add_argument("--report", action="store_true",
                        help="measure nothing: rewrite latest.md from latest.json (after a change to the report)")
    parser.add_argument("--out", default=os.path.join(BENCH, "results"), help="directory for latest.json/.md")
    args = parser.parse_args(argv)
    rounds = 1 if args.quick else max(1, args.rounds)
    only = [m.strip() for m in args.only.split(",") if m.strip()] or list(MEASUREMENTS)
    unknown = set(only) - set(MEASUREMENTS)
    if unknown:
        parser.error("--only: unknown %s; choose from %s" % (", ".join(sorted(unknown)), ", ".join(MEASUREMENTS)))

    if set(args.downtime_variants or ()) - set(downtime.VARIANTS):
        parser.error("--downtime-variants: choose from %s" % ", ".join(downtime.VARIANTS))
    if set(args.stop_methods or ()) - set(stop.METHODS):
        parser.error("--stop-methods: choose from %s" % ", ".join(stop.METHODS))

    latest = os.path.join(args.out, "latest.json")
    results = {}
    if (args.report or set(only) != set(MEASUREMENTS)) and os.path.exists(latest):
        with open(latest) as f:
            results = json.load(f)
    if args.report:
        if "meta" not in results:
            parser.error("--report: no results to re-render in %s" % latest)
        results["notes"] = notes(results)
        results["meta"]["conditions"] = conditions(results)
        return write(results, args.out)
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "host": "%s %s" % (platform.system(), platform.release()), "cpus": os.cpu_count(),
            "python": platform.python_version(), "commit": _commit(), "rounds": rounds, "quick": args.quick}
    # A partial run (--only) keeps the header of the run that measured the rest; each measurement's own date,
    # load and commit are in its "run" record.
    if "meta" not in results or set(only) == set(MEASUREMENTS):
        results["meta"] = meta
    runs = {
        "stop": lambda: stop.run(rounds, watchdog=args.watchdog, methods=args.stop_methods),
        "supervised": lambda: supervised.run(rounds),
        "systemd": lambda: systemd.run(rounds),
        "detect": lambda: detect.run(max(rounds, 3) if not args.quick else 1),
        "scan": lambda: scancost.run(max(rounds, 3) if not args.quick else 1, processes=args.processes),
        "overhead": lambda: overhead.run(max(rounds, 3) if not args.quick else 1),
        "status": lambda: runstatus.run(max(rounds, 5) if not args.quick else 1),
        "fleet": lambda: (fleet.run(1, sizes=(1, 2), settings=["recommended"], baseline_rev=args.fleet_baseline)
                          if args.quick else
                          fleet.run(args.fleet_rounds or max(1, rounds // 3), sizes=args.fleet_sizes,
                                    settings=args.fleet_settings, baseline_rev=args.fleet_baseline)),
        "downtime": lambda: downtime.run(rounds if not args.quick else 1, weights_mib=args.weights_mib,
                                         variants=args.downtime_variants),
        "multinode": lambda: multinode.run(rounds if not args.quick else 1, weights_mib=args.weights_mib),
        "prefetch": lambda: prefetch.run(rounds if not args.quick else 1, weights_mib=args.weights_mib),
        "async": lambda: (asyncstop.run(1, nodes=4, forks=(2, 4)) if args.quick else
                          asyncstop.run(max(1, args.async_rounds), nodes=args.async_nodes,
                                        forks=args.async_forks)),
        "gateway": lambda: gateway.run(1 if args.quick else max(1, rounds // 3), nodes=args.gateway_nodes),
    }
    errors = results.setdefault("errors", {})
    started = time.monotonic()
    for name in MEASUREMENTS:
        if name not in only:
            continue
        log("%s: starting (%.0f s into the run)" % (name, time.monotonic() - started))
        errors.pop(name, None)
        try:
            load, began = os.getloadavg(), time.monotonic()
            results[name] = runs[name]()
            results[name]["run"] = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                                    "seconds": round(time.monotonic() - began), "load_before": list(load),
                                    "load_after": list(os.getloadavg()), "commit": meta["commit"]}
        except Exception as e:  # one failed measurement must not lose the others
            log("%s failed:\n%s" % (name, traceback.format_exc()))
            results.pop(name, None)
            errors[name] = "%s: %s" % (type(e).__name__, e)
    if results["meta"] is meta:
        meta["seconds"] = round(time.monotonic() - started, 1)
    results["meta"]["conditions"] = conditions(results)
    results["notes"] = notes(results)
    return write(results, args.out, round(time.monotonic() - started, 1))


def conditions(results):
    """When each measurement ran and under what load (the 1-minute load average counts every process on the
    machine, other users' included), in words."""
    parts = []
    for name in MEASUREMENTS:
        run = (results.get(name) or {}).get("run")
        if run and run.get("carried_from"):
            parts.append("%s at %s, carried over from an earlier run (commit %s), not measured again" % (
                name, run["date"], run["carried_from"]))
        elif run:
            parts.append("%s ended %s (%d s; load average %.1f before, %.1f after%s)" % (
                name, run["date"], run["seconds"], run["load_before"][0], run["load_after"][0],
                "" if run.get("commit") in (None, results.get("meta", {}).get("commit"))
                else "; commit %s" % run["commit"]))
    text = "%s, on %d CPUs." % ("; ".join(parts), os.cpu_count()) if parts else ""
    if results.get("meta", {}).get("overlap"):
        text += " " + results["meta"]["overlap"]
    return text


def write(results, out, seconds=None):
    """Write latest.json and latest.md to OUT and print the report; 1 when a measurement failed."""
    os.makedirs(out, exist_ok=True)
    latest = os.path.join(out, "latest.json")
    with open(latest + ".tmp", "w") as f:
        json.dump(results, f, indent=1)
    os.replace(latest + ".tmp", latest)
    text = report.markdown(results) + "\n\n![Time to clean per method; fleet wall time per node count](latest.svg)"
    with open(os.path.join(out, "latest.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(out, "latest.svg"), "w") as f:
        f.write(chart.svg(results))
    print(text)
    print("Wrote %s, %s and latest.svg (the run took %.0f s)." % (
        os.path.relpath(latest), os.path.relpath(os.path.join(out, "latest.md")),
        results["meta"]["seconds"] if seconds is None else seconds))
    return 1 if results.get("errors") else 0


def notes(results):
    """Explanations that the figures alone do not give."""
    out = ["Measurement %s failed: %s" % (k, v) for k, v in sorted(results.get("errors", {}).items())]
    out += results.get("fleet", {}).get("notes", [])
    out += report.explain(results)
    out += [line for line in [asyncstop.conclusion(results["async"])] if line] if results.get("async") else []
    return out

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Measurement 2: detection latency, from the last GPU process's exit to gpu_verify returning clean."""

from __future__ import annotations

import json
import os
import random
import subprocess
import time

from .common import AGENTS, VENV_PYTHON, WORK, collections_path, log, summary

from gpusim.sandbox import Sandbox  # noqa: E402  (tests/sim is on sys.path through .common)

MODULE = "ansible_collections.gpuops.host.plugins.modules.gpu_verify"
GOAL_MS = 100
DEFINITION = (
    "a process holding memory on all 8 GPUs exits at a random instant while gpu_verify (run directly as a module "
    "process inside the node, expected_count=8, timeout=30) is polling; latency = time the gpu_verify process has "
    "exited with clean=true minus the holder's exit instant (its memory is released at exit: release lag 0). "
    "Goal: at most 100 ms plus one poll interval.")


def run(rounds, intervals=(1.0, 0.5, 0.1)):
    rng = random.Random(8)
    workdir = os.path.join(WORK, "nodes", "detect")
    os.makedirs(workdir, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=collections_path())
    trials = dict((p, []) for p in intervals)
    skipped = 0
    with Sandbox(workdir, gpus=8, decoys=True) as sb:
        sb.node.set_release_lag(0)
        args = {}
        for p in intervals:
            args[p] = os.path.join(workdir, "verify-%g.json" % p)
            with open(args[p], "w") as f:
                json.dump({"ANSIBLE_MODULE_ARGS": {"expected_count": 8, "timeout": 30, "poll_interval": p}}, f)
        for r in range(rounds):
            for p in (intervals if r % 2 == 0 else tuple(reversed(intervals))):
                exit_at = time.monotonic() + 1.5 + rng.uniform(0, p)
                holder = sb.popen([VENV_PYTHON, os.path.join(AGENTS, "holder.py"), "100000", "%.6f" % exit_at],
                                  stdout=subprocess.PIPE, text=True, cwd="/")
                if holder.stdout.readline().strip() != "ready":
                    raise RuntimeError("holder did not start")
                verify = sb.popen([VENV_PYTHON, "-m", MODULE, args[p]], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, cwd="/")
                out, err = verify.communicate(timeout=60)
                done = time.monotonic()
                exited = float(holder.stdout.readline().split()[1])
                holder.wait(10)
                result = json.loads(out)
                if not result.get("clean") or result.get("polls", 0) < 2:
                    skipped += 1      # started after the exit: nothing was detected
                    log("detect: poll %g s round %d not counted (polls=%s clean=%s)" % (
                        p, r + 1, result.get("polls"), result.get("clean")))
                    continue
                trials[p].append({"latency_ms": round((done - exited) * 1000, 1), "polls": result["polls"],
                                  "module_elapsed": result["elapsed"]})
                log("detect: poll %g s round %d: %.0f ms" % (p, r + 1, (done - exited) * 1000))
    report = {"definition": DEFINITION, "goal_ms": "100 + poll interval", "skipped": skipped, "intervals": {}}
    for p in intervals:
        lat = summary([t["latency_ms"] for t in trials[p]])
        bound = GOAL_MS + p * 1000
        report["intervals"]["%g" % p] = {"latency_ms": lat, "bound_ms": bound,
                                         "met": lat["max"] is not None and lat["max"] <= bound,
                                         "trials": trials[p]}
    return report

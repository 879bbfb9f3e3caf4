# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Measurement 3: cost of selecting device holders among many processes, gpu_reap against fuser."""

from __future__ import annotations

import json
import os

from .common import AGENTS, VENV_PYTHON, WORK, collections_path, log, ratio, summary

from gpusim.sandbox import Sandbox  # noqa: E402  (tests/sim is on sys.path through .common)

# The per-GPU device files, as agents/scan.py's GPU_DEVICES: gpu_reap's `devices` and fuser's arguments.
GPU_DEVICES = "/dev/nvidia[0-9]*"

DEFINITION = (
    "inside one node with PROCESSES extra idle processes holding FILES open files each (half tmp files, half "
    "/dev/null; 8 of them also hold /dev/nvidiaN), alternating which goes first: `fuser %s` (a "
    "subprocess, fork+exec included) against gpu_reap's device-holder selection over the same files called "
    "in-process (_procs.ProcFS().snapshot() + _reap_selection.Selection.choose(devices=True) with "
    "devices: ['%s'], the device_holders phase), and a whole check-mode gpu_reap module process with "
    "device_holders: true and the same devices (Python start-up and imports, the selector phase and the report "
    "of foreign GPU holders included). Goal: gpu_reap scan / fuser <= 1." % (GPU_DEVICES, GPU_DEVICES))


def run(rounds, processes=2000, files=50):
    workdir = os.path.join(WORK, "nodes", "scan")
    os.makedirs(workdir, exist_ok=True)
    argsfile = os.path.join(workdir, "reap-check.json")
    with open(argsfile, "w") as f:
        json.dump({"ANSIBLE_MODULE_ARGS": {"device_holders": True, "devices": [GPU_DEVICES],
                                           "_ansible_check_mode": True}}, f)
    with Sandbox(workdir, gpus=8, decoys=True) as sb:
        out = sb.run([VENV_PYTHON, os.path.join(AGENTS, "scan.py"), str(processes), str(files), str(rounds), argsfile],
                     env=dict(os.environ, PYTHONPATH=collections_path()), capture_output=True, text=True,
                     timeout=600, cwd="/")
    if out.returncode:
        raise RuntimeError("scan agent failed: %s" % out.stderr[-2000:])
    data = json.loads(out.stdout)
    times = dict((k, summary(v)) for k, v in data["times"].items())
    found = data["found"]
    agree = len(set(tuple(v) for v in found.values())) == 1
    r = ratio(times["gpu_reap_scan"]["median"], times["fuser"]["median"])
    log("scan: fuser %.3f s, gpu_reap scan %.3f s (ratio %s), same holders found: %s" % (
        times["fuser"]["median"], times["gpu_reap_scan"]["median"], r, agree))
    return {"definition": DEFINITION, "device_glob": data["device_glob"], "processes": data["processes"],
            "files_per_process": files, "rounds": rounds, "seconds": times, "ratio": r,
            "ratio_check_mode_module": ratio(times.get("gpu_reap_check_mode", {}).get("median"),
                                             times["fuser"]["median"]),
            "met": r is not None and r <= 1.0, "same_holders_found": agree, "holders_found": found}

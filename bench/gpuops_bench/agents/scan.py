# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Scan cost of selecting device holders, run inside a simulated node.

Usage: scan.py PROCESSES FILES ROUNDS [MODULE_ARGS_FILE]. Forks PROCESSES idle processes
holding FILES open files each (half temporary files, half /dev/null), eight of which also
hold /dev/nvidiaN as schedulers do; then, alternating which goes first, times ``fuser``
over the GPU device files (``GPU_DEVICES``) against gpu_reap's device-holder selection
over the same glob (a /proc snapshot plus ``Selection.choose(devices=True)``, in this
process) and, when MODULE_ARGS_FILE is given, a check-mode gpu_reap module run. Prints one
JSON object.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import tempfile
import time

# The per-GPU device files: what gpu_reap's `devices` names and fuser is given.
GPU_DEVICES = "/dev/nvidia[0-9]*"

# gpu_reap's parameters beyond the defaults of its argument spec (_reap_options.argument_spec): device_holders over
# GPU_DEVICES.
DEVICE_HOLDERS = {"device_holders": True, "devices": [GPU_DEVICES]}


def spawn(count, files, gpu_holders=True):
    """Fork COUNT children that hold FILES files open until our pipe closes, the first eight of them (with
    GPU_HOLDERS) each a GPU device file too; return the pipe, the children's PIDs and the holders."""
    tmp = tempfile.mkdtemp(prefix="scan-")
    fds = [os.open(os.path.join(tmp, "f%d" % i), os.O_RDWR | os.O_CREAT, 0o600) for i in range(files // 2)]
    fds += [os.open("/dev/null", os.O_RDONLY) for dummy in range(files - len(fds))]
    r, w = os.pipe()
    pids, holders = [], {}
    gpus = sorted(glob.glob(GPU_DEVICES)) if gpu_holders else []
    for i in range(count):
        pid = os.fork()
        if pid == 0:
            os.close(w)
            if i < len(gpus):
                os.open(gpus[i], os.O_RDWR)
            os.read(r, 1)
            os._exit(0)
        pids.append(pid)
        if i < len(gpus):
            holders[pid] = gpus[i]
    for fd in fds + [r]:
        os.close(fd)
    return w, pids, holders


def main(argv):
    count, files, rounds = int(argv[1]), int(argv[2]), int(argv[3])
    module_args = argv[4] if len(argv) > 4 else None
    w, pids, holders = spawn(count, files)

    from ansible_collections.gpuops.host.plugins.module_utils import (
        _namespaces, _procs, _reap_options, _reap_selection)

    devices = sorted(glob.glob(GPU_DEVICES))
    params = dict((name, spec.get("default")) for name, spec in _reap_options.argument_spec().items())
    options = _reap_options.parse_options(dict(params, **DEVICE_HOLDERS))

    def fuser():
        t = time.monotonic()
        out = subprocess.run(["fuser"] + devices, capture_output=True, text=True, check=False)
        dt = time.monotonic() - t
        return dt, set(int(p.rstrip("cefFrm")) for p in out.stdout.split())

    def reap_scan():
        t = time.monotonic()
        procs = _procs.ProcFS()
        place = _namespaces.Place(procs, os.getpid())
        selection = _reap_selection.Selection(options, procs, os.getpid(), place)
        picked = selection.choose(procs.snapshot(), devices=True)
        dt = time.monotonic() - t
        return dt, set(picked) | set(selection.protected) | set(selection.elsewhere)

    def module():
        t = time.monotonic()
        out = subprocess.run([sys.executable, "-m", "ansible_collections.gpuops.host.plugins.modules.gpu_reap",
                              module_args], capture_output=True, text=True, check=False)
        dt = time.monotonic() - t
        result = json.loads(out.stdout)
        if result.get("failed"):
            raise RuntimeError("gpu_reap failed: %s" % result.get("msg"))
        return dt, set(p["pid"] for key in ("would_stop", "protected", "other_namespaces")
                       for p in result.get(key, []))

    methods = {"fuser": fuser, "gpu_reap_scan": reap_scan}
    if module_args:
        methods["gpu_reap_check_mode"] = module
    times = dict((name, []) for name in methods)
    found = {}
    for n in range(rounds + 1):      # round 0 warms the page cache and is not counted
        order = list(methods) if n % 2 else list(reversed(list(methods)))
        for name in order:
            dt, pids_found = methods[name]()
            found[name] = sorted(pids_found)
            if n:
                times[name].append(dt)
    os.close(w)
    print(json.dumps({"processes": count + 1, "files_per_process": files, "device_glob": GPU_DEVICES,
                      "devices": devices,
                      "holders": sorted(holders), "times": times, "found": found}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

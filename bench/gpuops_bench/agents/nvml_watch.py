# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Independent NVML poller, run inside a simulated node (not part of the collection).

A GPU is at baseline when NVML lists no process on it and its v2 ``used`` memory is at
most 32 MiB (gpu_verify's default limit). Prints ``ready CLEAN DIRTY`` after the first
reading, then ``<time.monotonic()> clean|dirty <GPUs not at baseline>`` on every change,
until its standard input closes. ``--once`` prints an nvidia-smi-like table and exits:
the check that ends hand procedure A.
"""

from __future__ import annotations

import sys
import threading
import time

import pynvml

MAX_USED_MIB = 32


def reading():
    """{index: (used MiB, number of processes)} for every GPU."""
    gpus = {}
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        mem = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
        gpus[i] = (mem.used // 2**20, len(pynvml.nvmlDeviceGetComputeRunningProcesses(h)))
    return gpus


def dirty(gpus):
    return sorted(i for i, (used, procs) in gpus.items() if used > MAX_USED_MIB or procs)


def main(argv):
    pynvml.nvmlInit()
    if argv[1:2] == ["--once"]:
        for i, (used, procs) in sorted(reading().items()):
            print("GPU %d  %7d MiB used  %d processes" % (i, used, procs))
        return 0
    interval = float(argv[1]) if len(argv) > 1 else 0.01
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    last = dirty(reading())
    print("ready %d %d" % (len(reading()) - len(last), len(last)), flush=True)
    while not done.wait(interval):
        now = dirty(reading())
        if now != last:
            print("%.6f %s %s" % (time.monotonic(), "dirty" if now else "clean", ",".join(map(str, now))), flush=True)
            last = now
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

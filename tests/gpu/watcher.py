# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Start a memory holder and measure, through NVML, how long its memory outlives it.

Usage: watcher.py --result FILE [--gpu N] [--interval-ms 10] -- HOLDER ARGV...

The watcher reads the GPU's idle memory, starts the holder as its own child, waits for
its ``ready`` line and prints one JSON line (``holder_pid``, readings) on stdout. From then
on it polls NVML every ``--interval-ms`` while a thread blocks in waitpid, so the holder's
exit is timed when it happens (and the zombie is reaped at once). It stops once the holder
has exited and the GPU's used memory is back at the idle level (plus ``--tolerance-mib``),
or ``--release-timeout`` seconds after the exit, and writes everything to ``--result``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time

import pynvml

MIB = 1024 * 1024


class Gpu(object):
    def __init__(self, index):
        pynvml.nvmlInit()
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        self.v2 = True
        try:
            self.v2 = pynvml.nvmlDeviceGetMemoryInfo(self.handle, version=pynvml.nvmlMemory_v2).reserved > 0
        except pynvml.NVMLError:
            self.v2 = False

    def used(self):
        """v2 used (v1 used where the driver lacks v2), MiB."""
        if self.v2:
            return pynvml.nvmlDeviceGetMemoryInfo(self.handle, version=pynvml.nvmlMemory_v2).used / MIB
        return pynvml.nvmlDeviceGetMemoryInfo(self.handle).used / MIB

    def reading(self):
        v1 = pynvml.nvmlDeviceGetMemoryInfo(self.handle)
        reading = {'v1_used_mib': v1.used // MIB, 'total_mib': v1.total // MIB, 'v2_used_mib': None, 'reserved_mib': None}
        if self.v2:
            v2 = pynvml.nvmlDeviceGetMemoryInfo(self.handle, version=pynvml.nvmlMemory_v2)
            reading.update(v2_used_mib=v2.used // MIB, reserved_mib=v2.reserved // MIB)
        return reading


def stamp():
    return {'wall': time.time(), 'mono': time.monotonic()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--result', required=True)
    parser.add_argument('--gpu', type=int, default=0)
    parser.add_argument('--interval-ms', type=float, default=10.0)
    parser.add_argument('--tolerance-mib', type=int, default=32)
    parser.add_argument('--ready-timeout', type=float, default=120.0)
    parser.add_argument('--release-timeout', type=float, default=60.0)
    parser.add_argument('--max-seconds', type=float, default=240.0, help='give up watching a holder that never exits')
    parser.add_argument('holder', nargs=argparse.REMAINDER)
    args = parser.parse_args()
    holder_argv = args.holder[1:] if args.holder[:1] == ['--'] else args.holder

    gpu = Gpu(args.gpu)
    idle = []
    while len(idle) < 20:
        idle.append(gpu.used())
        time.sleep(args.interval_ms / 1000.0)
    result = {'gpu': args.gpu, 'memory_api': 'v2' if gpu.v2 else 'v1', 'idle': gpu.reading(),
              'baseline_used_mib': max(idle), 'tolerance_mib': args.tolerance_mib, 'interval_ms': args.interval_ms}

    started = stamp()
    holder = subprocess.Popen(holder_argv, stdout=subprocess.PIPE, universal_newlines=True)
    exited = {}

    def reap():
        status = holder.wait()
        exited.update(stamp(), status=status)

    ready = {}

    def wait_ready():
        for line in holder.stdout:      # anything a library prints before the ready line is skipped
            if line.startswith('ready '):
                ready['line'] = line
                return

    reader = threading.Thread(target=wait_ready)
    reader.daemon = True
    reader.start()
    reader.join(args.ready_timeout)
    if 'line' not in ready:
        holder.kill()
        holder.wait()
        result['error'] = 'holder printed no ready line in %.0f s (exit status %s)' % (
            time.monotonic() - started['mono'], holder.returncode)
        write(args.result, result)
        sys.stdout.write(json.dumps({'error': result['error']}) + '\n')
        return 1
    result['ready'] = dict(stamp(), seconds_from_start=round(time.monotonic() - started['mono'], 3))
    result['held'] = gpu.reading()
    result['holder_pid'] = holder.pid
    waiter = threading.Thread(target=reap)
    waiter.daemon = True
    waiter.start()
    sys.stdout.write(json.dumps({'holder_pid': holder.pid, 'idle': result['idle'], 'held': result['held']}) + '\n')
    sys.stdout.flush()

    held_used = gpu.used()
    samples = []                # (mono, used MiB)
    dropped = released = None
    tick = time.monotonic()
    while True:
        now, wall = time.monotonic(), time.time()
        used = gpu.used()
        samples.append((now, used))
        if dropped is None and used < held_used - (held_used - result['baseline_used_mib']) / 2:
            dropped = {'mono': now, 'wall': wall, 'used_mib': round(used, 1)}
        if released is None and used <= result['baseline_used_mib'] + args.tolerance_mib:
            released = {'mono': now, 'wall': wall, 'used_mib': round(used, 1)}
        if exited and (released or now - exited['mono'] > args.release_timeout):
            break
        if not exited and now - started['mono'] > args.max_seconds:
            result['error'] = 'holder still alive after %.0f s' % args.max_seconds
            break
        tick = max(tick + args.interval_ms / 1000.0, time.monotonic())     # late polls are not made up
        time.sleep(max(0.0, tick - time.monotonic()))

    result['exit'] = exited or None
    result['released'] = released
    result['dropped'] = dropped         # first reading below half of what the holder added
    for key, event in (('drop_lag_ms', dropped), ('release_lag_ms', released)):
        result[key] = round((event['mono'] - exited['mono']) * 1000, 1) if exited and event else None
    gaps = [b[0] - a[0] for a, b in zip(samples, samples[1:])]
    result['polls'] = {'count': len(samples), 'mean_interval_ms': round(1000 * sum(gaps) / len(gaps), 2) if gaps else None,
                       'max_interval_ms': round(1000 * max(gaps), 2) if gaps else None}
    if exited:
        # the readings around the exit: 0.2 s before it until 0.1 s past the exit or the release
        end = max(exited['mono'], (released or {}).get('mono', samples[-1][0])) + 0.1
        result['samples'] = [[round((t - exited['mono']) * 1000, 2), round(u, 1)] for t, u in samples
                             if exited['mono'] - 0.2 <= t <= end]
    write(args.result, result)
    return 0 if exited and released else 1


def write(path, result):
    with open(path, 'w') as f:
        json.dump(result, f, indent=1)


if __name__ == '__main__':
    sys.exit(main())

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Judging NVML snapshots: is a GPU clean, and if not, what holds it; waiting until all are.

Snapshots are the plain dicts that ``_nvml.Nvml.snapshot()`` returns; the clock and sleep
are injected, so everything here runs without NVML.
"""

from __future__ import annotations

import time
from collections import namedtuple

# max_used_mib: most memory a clean GPU may show (v2 used, or v1 used minus v1_reserved_mib)
# allow_processes: processes listed by NVML do not by themselves make a GPU dirty
# v1_reserved_mib: what the v1 call counts as used on an idle GPU (driver-reserved memory)
Limits = namedtuple('Limits', ['max_used_mib', 'allow_processes', 'v1_reserved_mib'])


def argument_spec():
    """Options of every module that judges GPUs (see the gpuops.host.nvml doc fragment)."""
    return dict(
        gpus=dict(type='list', elements='str', default=[]),
        max_used_mib=dict(type='int', default=32),
        allow_processes=dict(type='bool', default=False),
        v1_reserved_mib=dict(type='int', default=1024),
    )


def v1_warning(limits):
    processes = '' if limits.allow_processes else ' and no process listed'
    return ('The NVIDIA driver has no v2 memory call (nvmlDeviceGetMemoryInfo_v2); the v1 call was read '
            'instead, whose used memory includes driver-reserved memory: a GPU is clean with used at most '
            'v1_reserved_mib + max_used_mib (%d MiB)%s' % (limits.v1_reserved_mib + limits.max_used_mib, processes))


class SelectionError(Exception):
    """The requested GPUs do not exist on the host."""


def _holders(processes):
    return ', '.join('pid %d (%s)' % (p['pid'], p['name']) for p in processes)


def gpu_problem(gpu, limits):
    """What keeps a GPU from being clean, in words; None when it is clean."""
    if gpu.get('error') == 'NVML_ERROR_GPU_IS_LOST':
        return 'GPU lost (NVML_ERROR_GPU_IS_LOST)'
    if gpu.get('error'):
        return 'NVML cannot read the GPU: %s (%s)' % (gpu['error'], gpu.get('error_text'))
    used = gpu['used_mib']
    if gpu['reserved_mib'] is None:         # v1 reading: used includes the driver's reservation
        over = used - limits.v1_reserved_mib > limits.max_used_mib
    else:
        over = used > limits.max_used_mib
    live = [p for p in gpu['processes'] if p['exists']]
    gone = [p for p in gpu['processes'] if not p['exists']]
    parts = []
    if live and (over or not limits.allow_processes):
        parts.append('%d MiB used by %s' % (used, _holders(live)))
    for p in gone:
        held = '%d MiB' % p['used_mib'] if p['used_mib'] is not None else 'memory'
        parts.append('%s held by pid %d which no longer exists' % (held, p['pid']))
    if gone:
        parts[-1] += ': GPU needs a reset'
    if over and not gpu['processes']:
        limit = limits.max_used_mib if gpu['reserved_mib'] is not None else limits.max_used_mib + limits.v1_reserved_mib
        parts.append('%d MiB used with no process listed (limit %d MiB)' % (used, limit))
    return '; '.join(parts) or None


def select(gpus, wanted):
    """The GPUs named in ``wanted`` (indices or UUIDs, as strings or ints), all when it is empty."""
    if not wanted:
        return list(gpus)
    chosen = []
    for item in wanted:
        item = str(item).strip()
        if item.isdigit():
            match = [g for g in gpus if g['index'] == int(item)]
        else:
            uuid = item if item.upper().startswith(('GPU-', 'MIG-')) else 'GPU-' + item
            match = [g for g in gpus if (g['uuid'] or '').lower() == uuid.lower()]
        if not match:
            raise SelectionError('GPU %s not found: the host shows %d GPUs (%s)' % (
                item, len(gpus), ', '.join('%d %s' % (g['index'], g['uuid']) for g in gpus)))
        if match[0] not in chosen:
            chosen.append(match[0])
    return chosen


def gpu_key(gpu):
    """Reports are keyed by UUID; a GPU whose UUID NVML never returned is ``index-N``."""
    return gpu['uuid'] or 'index-%d' % gpu['index']


def assess(snapshot, limits, wanted=None, expected_count=None):
    """Report on one snapshot: per-GPU facts with ``clean``/``problem``, and the verdict."""
    gpus = {}
    dirty = []
    for gpu in select(snapshot['gpus'], wanted):
        facts = dict((k, v) for k, v in gpu.items() if k not in ('error', 'error_text'))
        facts['problem'] = gpu_problem(gpu, limits)
        facts['clean'] = facts['problem'] is None
        key = gpu_key(gpu)
        gpus[key] = facts
        if not facts['clean']:
            dirty.append(key)
    problems = []
    if expected_count is not None and snapshot['count'] != expected_count:
        problems.append('the host shows %d GPUs, expected %d' % (snapshot['count'], expected_count))
    lost = [key for key in dirty if gpus[key]['problem'].startswith('GPU lost')]
    return {
        'clean': not dirty and not problems,
        'gpus': gpus,
        'dirty': dirty,
        'problems': problems,
        'count': snapshot['count'],
        'driver_version': snapshot['driver_version'],
        'memory_api': snapshot['memory_api'],
        # waiting does not bring back a GPU that fell off the bus
        'final': bool(problems or lost),
    }


def wait_until_clean(read, limits, wanted=None, expected_count=None, timeout=60.0, poll_interval=1.0,
                     clock=time.monotonic, sleep=time.sleep):
    """Read and assess until every selected GPU is clean, ``timeout`` passes, or waiting cannot help.

    ``read`` returns a snapshot; ``timeout`` 0 reads once. Returns the last report with
    ``elapsed`` (seconds from the first reading until the verdict) and ``polls``.
    """
    start = clock()
    polls = 0
    while True:
        report = assess(read(), limits, wanted, expected_count)
        polls += 1
        elapsed = clock() - start
        if report['clean'] or report['final'] or elapsed >= timeout:
            break
        sleep(min(poll_interval, timeout - elapsed))
    del report['final']
    report['elapsed'] = round(elapsed, 3)
    report['polls'] = polls
    return report


def failure_message(report, timeout):
    """One line saying why, then one line per dirty GPU naming what holds it."""
    lines = ['%d of %d checked GPUs not clean after %.1f s (timeout %g s)' % (
        len(report['dirty']), len(report['gpus']), report['elapsed'], timeout)]
    if not report['dirty']:
        lines = ['GPU check failed after %.1f s' % report['elapsed']]
    lines.extend(report['problems'])
    for key in report['dirty']:
        gpu = report['gpus'][key]
        lines.append('GPU %d %s: %s' % (gpu['index'], key, gpu['problem']))
    return '\n'.join(lines)

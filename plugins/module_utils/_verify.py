# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Judging NVML snapshots: is a GPU clean, and if not, what holds it; waiting until all are.

Snapshots are the plain dicts that ``_nvml.Nvml.snapshot()`` returns; the clock and sleep
are injected, so everything here runs without NVML. ``Verification`` is the wait that
gpu_verify runs, and gpu_reap with its ``verify`` option runs right after the stop.
"""

from __future__ import annotations

import math
import time
from collections import namedtuple

from ansible_collections.gpuops.host.plugins.module_utils._pci import nvidia_gpus

# Seconds between two readings while waiting. A reading of every GPU takes a few NVML calls per
# GPU (memory, process lists) and a /proc lookup per listed process: milliseconds, so a short
# interval costs little and bounds how late a release is noticed.
POLL_INTERVAL = 0.1

# max_used_mib: most memory a clean GPU may show (v2 used, or v1 used above v1_reserved_mib)
# allow_processes: processes listed by NVML do not by themselves make a GPU dirty (v2 only)
# v1_reserved_mib: what the v1 call reads as used on this host's GPUs when idle; None when not known
Limits = namedtuple('Limits', ['max_used_mib', 'allow_processes', 'v1_reserved_mib'])


def argument_spec():
    """Options of every module that judges GPUs (see the gpuops.host.nvml doc fragment)."""
    return dict(
        gpus=dict(type='list', elements='str', default=[]),
        max_used_mib=dict(type='int', default=32),
        allow_processes=dict(type='bool', default=False),
        v1_reserved_mib=dict(type='int'),
    )


def wait_argument_spec():
    """Options of a wait for clean GPUs: gpu_verify's, and the suboptions of gpu_reap's verify."""
    spec = argument_spec()
    spec.update(
        expected_count=dict(type='int'),
        timeout=dict(type='float', default=60),
        poll_interval=dict(type='float', default=POLL_INTERVAL),
    )
    return spec


def v1_warning(limits):
    if limits.v1_reserved_mib is None:
        return ('The NVIDIA driver has no v2 memory call (nvmlDeviceGetMemoryInfo_v2); the v1 call was read '
                'instead, whose used memory includes driver-reserved memory, so zero memory cannot be proven: a GPU '
                'counts as clean only with no process listed and v1_reserved_mib set to its v1 used memory when idle')
    return ('The NVIDIA driver has no v2 memory call (nvmlDeviceGetMemoryInfo_v2); the v1 call was read '
            'instead, whose used memory includes driver-reserved memory: a GPU is clean with no process listed and '
            'used at most v1_reserved_mib + max_used_mib (%d MiB)' % (limits.v1_reserved_mib + limits.max_used_mib))


def check_seconds(name, value, positive=False):
    """ValueError unless ``value`` is a finite number of seconds (more than 0 with ``positive``)."""
    if value is None or not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError('%s must be a finite number of seconds, %s; got %r' % (
            name, 'more than 0' if positive else '0 or more', value))
    return value


class SelectionError(Exception):
    """The requested GPUs do not exist on the host."""


def _holder(p):
    """``pid 4242 (user alice: python3 train.py)``, or where it runs when that is elsewhere."""
    what = p.get('cmdline') or p.get('name') or '?'
    who = 'user %s: %s' % (p['user'], what) if p.get('user') else what
    where = ' %s' % p['where'] if p.get('where') else ''
    return 'pid %d%s (%s)' % (p['pid'], where, who)


def _holders(processes):
    return ', '.join(_holder(p) for p in processes)


def gpu_problem(gpu, limits):
    """What keeps a GPU from being clean, in words; None when it is clean."""
    if gpu.get('error') == 'NVML_ERROR_GPU_IS_LOST':
        return 'GPU lost (NVML_ERROR_GPU_IS_LOST)'
    if gpu.get('error'):
        return 'NVML cannot read the GPU: %s (%s)' % (gpu['error'], gpu.get('error_text'))
    used = gpu['used_mib']
    v1 = gpu['reserved_mib'] is None        # v1 reading: used includes the driver's reservation
    if not v1:
        over = used > limits.max_used_mib
    elif limits.v1_reserved_mib is not None:
        over = used - limits.v1_reserved_mib > limits.max_used_mib
    else:
        over = None                         # cannot be told
    live = [p for p in gpu['processes'] if p['exists']]
    hidden = [p for p in gpu['processes'] if not p['exists'] and p.get('where')]
    gone = [p for p in gpu['processes'] if not p['exists'] and not p.get('where')]
    parts = []
    if live and (over or v1 or not limits.allow_processes):
        parts.append('%d MiB used by %s' % (used, _holders(live)))
    for p in hidden:
        held = '%d MiB' % p['used_mib'] if p['used_mib'] is not None else 'memory'
        parts.append('%s held by pid %d, which is not a process of this PID namespace: NVML lists the host\'s '
                     'PIDs, so run the check in the host PID namespace to name it' % (held, p['pid']))
    for p in gone:
        held = '%d MiB' % p['used_mib'] if p['used_mib'] is not None else 'memory'
        parts.append('%s held by pid %d which no longer exists' % (held, p['pid']))
    if gone:
        parts[-1] += ': GPU needs a reset'
    if not gpu['processes']:
        if over is None:
            parts.append('%d MiB used as the v1 memory call reads it, driver-reserved memory included: zero cannot '
                         'be proven without v1_reserved_mib (this GPU\'s v1 used memory when idle)' % used)
        elif over:
            limit = limits.max_used_mib + (limits.v1_reserved_mib if v1 else 0)
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


def count_problem(count, expected_count, pci_gpus):
    """Why the number of GPUs NVML shows is wrong, or None.

    ``expected_count`` is the caller's number; without one, the NVIDIA GPUs on the PCI bus
    (``pci_gpus``, their addresses) are the reference, where sysfs shows any.
    """
    if expected_count is not None:
        if count != expected_count:
            return 'the host shows %d GPUs, expected %d' % (count, expected_count)
        return None
    if pci_gpus and count != len(pci_gpus):
        return ('NVML shows %d GPUs, the PCI bus %d NVIDIA GPUs (%s): a GPU has fallen off the bus or its driver did '
                'not bind' % (count, len(pci_gpus), ', '.join(pci_gpus)))
    return None


def assess(snapshot, limits, wanted=None, expected_count=None, pci_gpus=None):
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
    problem = count_problem(snapshot['count'], expected_count, pci_gpus)
    if problem:
        problems.append(problem)
    lost = [key for key in dirty if gpus[key]['problem'].startswith('GPU lost')]
    return {
        'clean': not dirty and not problems,
        'gpus': gpus,
        'dirty': dirty,
        'problems': problems,
        'count': snapshot['count'],
        'expected_count': expected_count if expected_count is not None else len(pci_gpus or []) or None,
        'driver_version': snapshot['driver_version'],
        'memory_api': snapshot['memory_api'],
        # waiting does not bring back a GPU that fell off the bus
        'final': bool(problems or lost),
    }


def wait_until_clean(read, limits, wanted=None, expected_count=None, timeout=60.0, poll_interval=1.0,
                     pci_gpus=None, clock=time.monotonic, sleep=time.sleep):
    """Read and assess until every selected GPU is clean, ``timeout`` passes, or waiting cannot help.

    ``read`` returns a snapshot; ``timeout`` 0 reads once. Returns the last report with
    ``elapsed`` (seconds from the first reading until the verdict) and ``polls``.
    """
    start = clock()
    polls = 0
    while True:
        report = assess(read(), limits, wanted, expected_count, pci_gpus)
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


class Verification:
    """A wait until the GPUs are clean, as the options of ``wait_argument_spec`` ask for it.

    Checks the options when built (ValueError, its message naming the option with ``prefix``);
    ``sysfs_root`` is where the NVIDIA GPUs on the PCI bus are counted when no expected count is
    given. ``warnings`` holds what the caller should warn about before the wait.
    """

    def __init__(self, params, sysfs_root='/sys', prefix=''):
        self.timeout = check_seconds(prefix + 'timeout', params['timeout'])
        self.poll_interval = check_seconds(prefix + 'poll_interval', params['poll_interval'], positive=True)
        self.limits = Limits(params['max_used_mib'], params['allow_processes'], params['v1_reserved_mib'])
        self.wanted = params['gpus']
        self.expected_count = params['expected_count']
        self.pci = nvidia_gpus(sysfs_root) if self.expected_count is None else None
        self.warnings = []
        if self.pci == []:
            self.warnings.append(
                'sysfs shows no NVIDIA GPU on the PCI bus (/sys/bus/pci/devices), so the GPU count NVML reports was '
                'not checked; set %sexpected_count' % prefix)

    def check_selection(self, snapshot):
        """SelectionError when a GPU asked for is not on the host: checked before anything is stopped."""
        select(snapshot['gpus'], self.wanted)

    def wait(self, read, clock=time.monotonic, sleep=time.sleep):
        """The report of ``wait_until_clean``; ``read`` returns a snapshot."""
        return wait_until_clean(read, self.limits, self.wanted, self.expected_count, self.timeout,
                                self.poll_interval, pci_gpus=self.pci, clock=clock, sleep=sleep)

    def report_warnings(self, report):
        """What to warn about after the wait (the v1 memory call)."""
        return [v1_warning(self.limits)] if report['memory_api'] == 'v1' else []

    def failure(self, report):
        return failure_message(report, self.timeout)

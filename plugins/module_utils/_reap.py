# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One run of gpu_reap: check that /proc can be trusted, select, stop, report, and with a
verification wait until the GPUs are clean.

Selection (``_reap_selection``) and escalation (``_reap_escalation``) are injected with
the process table, clock and sleep, so every path is testable without real processes.
"""

from __future__ import annotations

import os
import time
from contextlib import ExitStack

from ansible_collections.gpuops.host.plugins.module_utils._namespaces import Place
from ansible_collections.gpuops.host.plugins.module_utils._nvml import HAS_PYNVML, Nvml, NvmlError, gpu_inventory, pynvml
from ansible_collections.gpuops.host.plugins.module_utils._reap_escalation import POLL_INTERVAL, Escalation
from ansible_collections.gpuops.host.plugins.module_utils._reap_options import ReapError, parse_options
from ansible_collections.gpuops.host.plugins.module_utils._reap_selection import Phase, Selection, describe
from ansible_collections.gpuops.host.plugins.module_utils._verify import Verification

_STATE_NOTES = {
    'D': 'uninterruptible sleep, usually blocked in the GPU driver: SIGKILL takes effect only when '
         'that kernel call returns, which may need a GPU reset or a reboot',
    'T': 'stopped',
    't': 'stopped by a debugger',
}


class ReapFailure(Exception):
    """The run did not stop everything it selected; ``result`` holds everything that was done."""

    def __init__(self, msg, result):
        super().__init__(msg)
        self.result = result


class MissingLibrary(Exception):
    """nvidia-ml-py is not importable, and ``reason`` needs it."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


class Reaper:
    """Selects processes in ``procs`` (a ``_procs.ProcFS`` or a stand-in) and stops them.

    ``place`` is a ``_namespaces.Place``; ``nvml_listing`` what ``_nvml.gpu_process_pids``
    returned; ``gpu_devices`` maps /dev/nvidiaN minor numbers to ``{index, uuid}``.
    """

    def __init__(self, options, procs, self_pid, place, nvml_listing=None, gpu_devices=None, euid=None,
                 clock=time.monotonic, sleep=time.sleep, poll_interval=POLL_INTERVAL):
        self.options = options
        self.procs = procs
        self.euid = os.geteuid() if euid is None else euid
        self.gpu_devices = gpu_devices or {}
        self.selection = Selection(options, procs, self_pid, place, nvml_listing)
        self.escalation = Escalation(options, procs, self._rescan, clock, sleep, poll_interval)
        self.clock = clock
        self.targets = Phase()
        self.foreign = []
        self.planned = False
        self._started = clock()
        if options.nvml_processes and not place.nvml_pids_are_local:
            raise ReapError(
                'nvml_processes: NVML lists processes by the PIDs of the host PID namespace (%s), and gpu_reap runs '
                'in %s, where the same numbers name other processes or none; run it in the host PID namespace'
                % (place.host_pid_namespace, place.pid_namespace or 'a PID namespace it cannot read'))

    # -- checks before any signal --

    def _check_visible(self):
        hidden = self.procs.hidden()
        if hidden and self.euid != 0:
            raise ReapError(
                '/proc is mounted with %s and gpu_reap runs as UID %d: processes of other users are invisible, so '
                'nothing can be selected or reported reliably; run it as root (become: true)' % (hidden, self.euid))

    def _check_readable(self, table):
        """Refuse when a selector needs files of processes that could not be read (other users'
        without root), leaving aside those never signalled anyway (PID 1, protected names)."""
        pids = sorted(p for p in self.selection.denied if p in table and not self.selection.excluded(table[p]))
        if pids and (self.options.environ or self.options.device_holders or self.options.nvml_processes):
            raise ReapError(
                'cannot read the environment or open files of %d processes (permission denied, UID %d): %s; '
                'the selection would be incomplete, so nothing was signalled; run gpu_reap as root (become: true)'
                % (len(pids), self.euid, ', '.join(str(p) for p in pids[:10]) + (' ...' if len(pids) > 10 else '')))

    def _check_size(self, phase, known=()):
        total = len(set(phase) | set(known))
        if total > self.options.max_processes:
            sample = '; '.join('%d %s' % (t.proc.pid, t.proc.command) for t in list(phase.values())[:5])
            raise ReapError(
                'the selection has %d processes, more than max_processes (%d), so nothing was signalled: a selector '
                'is probably too broad. First of them: %s' % (total, self.options.max_processes, sample))

    def _phase(self, table, devices):
        phase = Phase(self.selection.choose(table, devices=devices, known=self.targets), devices)
        self._check_readable(table)
        self._check_size(phase, self.targets)
        return phase

    # -- runs --

    def _rescan(self, phase):
        known = dict(self.targets)
        known.update(phase)
        return self.selection.choose(self.procs.snapshot(), devices=phase.devices, known=known)

    def plan(self):
        """What a run would stop now (check mode): both phases from one snapshot. Signals nothing."""
        self._check_visible()
        table = self.procs.snapshot()
        self.targets = self._phase(table, False)
        if self.options.device_holders:
            self.targets.update(self._phase(table, True))
        self.planned = True
        self.foreign = self.selection.foreign(table, self.targets, self.gpu_devices)
        return self.targets

    def run(self):
        """Stop everything selected; device holders after the selected processes.

        The GPU holders left alone (``foreign``) are looked for while the last phase's targets exit, right after its
        first signals: the scan reads the open files of every process of the node (about 0.5 s for 2,000 processes of 50
        files each, make bench), which the wait for an SGLang server's own shutdown hides. Once the targets are gone,
        only the processes started since are read; those found earlier that were selected later, or that have
        exited since, are left out."""
        self._check_visible()
        phases = (False, True) if self.options.device_holders else (False,)
        early = {}

        def scan(phase):
            table, selected = self.procs.snapshot(), dict(self.targets)
            selected.update(phase)
            early.update(table=table, foreign=self.selection.foreign(table, selected, self.gpu_devices))

        for devices in phases:
            phase = self._phase(self.procs.snapshot(), devices)
            if phase:
                last = devices == phases[-1]
                self.escalation.stop(phase, meanwhile=(lambda: scan(phase)) if last else None)
                self.targets.update(phase)
        table = self.procs.snapshot()
        if not early:
            self.foreign = self.selection.foreign(table, self.targets, self.gpu_devices)
            return self.targets
        scanned = early['table']
        fresh = dict((pid, proc) for pid, proc in table.items()
                     if pid not in scanned or scanned[pid].start != proc.start)
        found = [f for f in early['foreign'] if f['pid'] not in self.targets and self.procs.alive(scanned[f['pid']])]
        found.extend(self.selection.foreign(fresh, self.targets, self.gpu_devices))
        self.foreign = sorted(found, key=lambda f: f['pid'])
        return self.targets

    # -- results --

    def elapsed(self):
        return round(self.clock() - self._started, 3)

    def result(self):
        """The module's return values; raises ReapFailure when targets survived SIGKILL or
        could not be signalled."""
        s = self.selection
        targets = [self.targets[pid] for pid in self.targets]
        failed = [] if self.planned else [t for t in targets if t.error]
        remaining = [] if self.planned else [t for t in targets if not t.gone and not t.error]
        result = {
            'changed': bool(targets) if self.planned else any(t.signals for t in targets),
            'stopped': [] if self.planned else [t.report() for t in targets if not t.error],
            'zombies': [s.zombies[pid] for pid in sorted(s.zombies)],
            'protected': [s.protected[pid] for pid in sorted(s.protected)],
            'other_namespaces': [s.elsewhere[pid] for pid in sorted(s.elsewhere)],
            'foreign': self.foreign,
            'unsignalled': [dict(describe(t.proc, t.matched_by), error=t.error, signals=t.signals) for t in failed],
            'remaining': [dict(describe(t.proc, t.matched_by), state=self._state(t), signals=t.signals)
                          for t in remaining],
            'nvml_unmapped': s.nvml_unmapped,
            'elapsed': self.elapsed(),
            'diff': {
                'before': ''.join('%d %s\n' % (t.proc.pid, t.proc.command) for t in targets),
                'after': '' if self.planned else ''.join(
                    '%d %s\n' % (t.proc.pid, t.proc.command) for t in targets if not t.gone),
            },
        }
        if self.planned:
            result['would_stop'] = [describe(t.proc, t.matched_by) for t in targets]
        if failed or remaining:
            raise ReapFailure(self._failure_message(failed, remaining, targets), result)
        return result

    def _state(self, target):
        now = self.procs.current(target.proc)
        return now.state if now is not None else '?'

    def _failure_message(self, failed, remaining, targets):
        parts = []
        done = [t for t in targets if t.gone]
        if failed:
            parts.append('%d process%s could not be signalled: %s' % (
                len(failed), '' if len(failed) == 1 else 'es',
                '; '.join('%d (%s): %s' % (t.proc.pid, t.proc.command, t.error) for t in failed)))
        if remaining:
            notes = []
            items = []
            for t in remaining:
                state = self._state(t)
                items.append('%d (%s, %s)' % (t.proc.pid, state, t.proc.command))
                if state in _STATE_NOTES and state not in notes:
                    notes.append(state)
            msg = '%d process%s still alive %.1f s after SIGKILL: %s' % (
                len(remaining), '' if len(remaining) == 1 else 'es', self.options.kill_timeout, '; '.join(items))
            for state in notes:
                msg += '. %s = %s' % (state, _STATE_NOTES[state])
            parts.append(msg)
        parts.append('stopped %d: %s' % (len(done), ', '.join('%d' % t.proc.pid for t in done) or 'none'))
        return '. '.join(parts)


def reap(reaper, check_mode, verification=None, nvml=None, clock=time.monotonic, sleep=time.sleep):
    """The result of one gpu_reap run: in check mode the plan; else the stop and, with a
    ``verification`` (``_verify.Verification``), the wait until the GPUs are clean, read from
    ``nvml`` (an open ``_nvml.Nvml``) as soon as every target is gone.

    GPUs the verification names are looked up before anything is signalled (SelectionError).
    Raises ReapFailure with everything done so far when a target survived or could not be
    signalled (the GPUs are then not waited for), or when the GPUs did not turn clean.
    """
    if verification is not None and verification.wanted:
        verification.check_selection(nvml.snapshot())
    if check_mode:
        reaper.plan()
        return reaper.result()
    reaper.run()
    result = reaper.result()
    if verification is None:
        return result
    try:
        report = verification.wait(nvml.snapshot, clock=clock, sleep=sleep)
    except NvmlError as e:
        result.update(elapsed=reaper.elapsed(), nvml_error=e.code)
        raise ReapFailure('stopped %d processes, then could not read the GPUs: %s' % (len(result['stopped']), e), result)
    result.update(verify=report, elapsed=reaper.elapsed())
    if not report['clean']:
        raise ReapFailure('%s\nstopped %d processes: %s' % (
            verification.failure(report), len(result['stopped']),
            ', '.join(str(t['pid']) for t in result['stopped']) or 'none'), result)
    return result


class Run:
    """One gpu_reap run from the module's parameters (``verify`` included), for every module that stops processes:
    gpu_reap, and sglang_server's stop.

    Built, it has checked every option (ReapError, ValueError) and found nvidia-ml-py where the run needs it
    (MissingLibrary): before anything is read or signalled. Entered, it opens NVML when it verifies and looks up the
    GPUs that the verification names (NvmlError, SelectionError: a driver that cannot be read, or a GPU that is not
    there, fails the run before any signal); called, it reaps.
    ``warnings`` collects what to warn about.
    """

    def __init__(self, params, procs, self_pid, sysfs_root='/sys'):
        self.procs = procs
        self.self_pid = self_pid
        self.place = Place(procs, self_pid)
        self.options = parse_options(params)
        self.check = None
        if params.get('verify') is not None:
            self.check = Verification(params['verify'], sysfs_root, prefix='verify.')
            if not HAS_PYNVML:
                raise MissingLibrary('for verify')
        if self.options.nvml_processes and not HAS_PYNVML:
            raise MissingLibrary('for nvml_processes')
        self.warnings = list(self.check.warnings) if self.check is not None else []
        self._nvml = None
        self._open = ExitStack()

    def __enter__(self):
        with ExitStack() as stack:
            if self.check is not None:
                self._nvml = stack.enter_context(Nvml())
                if self.check.wanted:
                    self.check.check_selection(self._nvml.snapshot())
            self._open = stack.pop_all()
        return self

    def __exit__(self, *exc):
        return self._open.__exit__(*exc)

    def _gpus(self):
        """NVML's device numbers and process list: required for nvml_processes, else best effort."""
        if not HAS_PYNVML:
            return {}, []
        try:
            devices, listing = gpu_inventory(pynvml)
        except NvmlError as e:
            if self.options.nvml_processes:
                raise ReapError('nvml_processes: cannot list GPU processes: %s' % e)
            return {}, []
        return devices, listing if self.place.nvml_pids_are_local else []

    def __call__(self, check_mode):
        devices, listing = self._gpus()
        reaper = Reaper(self.options, self.procs, self.self_pid, self.place, nvml_listing=listing, gpu_devices=devices)
        result = reap(reaper, check_mode, self.check, self._nvml)
        if 'verify' in result:
            self.warnings.extend(self.check.report_warnings(result['verify']))
        return result

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Selection and escalation engine of gpu_reap.

``parse_options`` validates plain option values; ``Reaper`` selects processes from a
process table and stops them, with the clock, the sleep and the process table (which
also sends the signals) injected, so every path is testable without real processes.
"""

from __future__ import annotations

import fnmatch
import math
import os
import re
import signal
import time

# Command lines of an SGLang server and of its titled children, anchored at the first
# argument so that `grep sglang`, `tail -f /var/log/sglang/server.log` or
# `vim /etc/sglang/serve.yaml` are never selected (a bare `sglang` would select them).
SGLANG_PATTERNS = (
    r'^\S*python[0-9.]*\s+(-\S+\s+)*-m\s+sglang\.launch_server(\s|$)',
    r'^(\S*python[0-9.]*\s+(-\S+\s+)*)?(\S*/)?sglang\s+serve(\s|$)',
    r'^sglang::',
)

PRESETS = {'sglang': SGLANG_PATTERNS}

DEFAULT_DEVICES = (
    '/dev/nvidia[0-9]*', '/dev/nvidiactl', '/dev/nvidia-uvm', '/dev/nvidia-uvm-tools', '/dev/nvidia-modeset',
)

# Processes that legitimately hold NVIDIA devices or keep the host reachable.
DEFAULT_PROTECT = (
    'nvidia-persistenced', 'nv-hostengine', 'dcgm-exporter', 'nv-fabricmanager', 'nvidia-fabricmanager',
    'nvidia-powerd', 'Xorg', 'Xwayland', 'nvidia-cuda-mps-control', 'nvidia-cuda-mps-server',
    'sshd', 'sshd-session', 'systemd', 'init', 'tini', 'dumb-init', 'catatonit', 'runit', 'runsvdir',
    's6-svscan', 'openrc-init',
)

# Any NVIDIA device: a PID that NVML lists is only taken as local when it holds one.
NVIDIA_DEVICES = ('/dev/nvidia*',)

POLL_INTERVAL = 0.02
# In mixed mode, once the roots have exited, how long the rest may take to follow them
# (their own shutdown or PR_SET_PDEATHSIG) before SIGKILL.
SETTLE_SECONDS = 1.0
# How often /proc is scanned for new children while waiting for targets to exit.
TRACK_INTERVAL = 0.25

_STATE_NOTES = {
    'D': 'uninterruptible sleep, usually blocked in the GPU driver: SIGKILL takes effect only when '
         'that kernel call returns, which may need a GPU reset or a reboot',
    'T': 'stopped',
    't': 'stopped by a debugger',
}


class ReapError(Exception):
    """Bad options: raised before anything is read or signalled."""


class ReapFailure(Exception):
    """Processes survived SIGKILL; ``result`` holds everything that was done."""

    def __init__(self, msg, result):
        super(ReapFailure, self).__init__(msg)
        self.result = result


def signal_name(signum):
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


def parse_signal(value):
    """``SIGTERM``, ``term``, ``15`` -> 15; ReapError for anything else."""
    text = str(value).strip()
    try:
        if text.isdigit():
            return signal.Signals(int(text)).value
        name = text.upper()
        return signal.Signals[name if name.startswith('SIG') else 'SIG' + name].value
    except (KeyError, ValueError):
        raise ReapError('term_signal: unknown signal %r; use a name such as SIGTERM, SIGINT, SIGHUP or SIGQUIT, '
                        'or a signal number' % (value,))


def _compile(what, text):
    try:
        return re.compile(text)
    except re.error as e:
        raise ReapError('%s: invalid regular expression %r: %s' % (what, text, e))


class Options:
    """Validated options of one run (see ``parse_options``)."""

    def __init__(self, patterns=(), environ=(), pids=(), device_holders=False, nvml_processes=False,
                 devices=DEFAULT_DEVICES, protect=DEFAULT_PROTECT, kill_mode='mixed', term_signal=signal.SIGTERM,
                 term_timeout=30.0, kill_timeout=10.0, descendants=True):
        self.patterns = list(patterns)            # [(text, compiled)]
        self.environ = list(environ)              # [(name, text, compiled)]
        self.pids = set(pids)
        self.device_holders = device_holders
        self.nvml_processes = nvml_processes
        self.devices = list(devices)
        self.protect = set(protect)
        self.kill_mode = kill_mode
        self.term_signal = int(term_signal)
        self.term_timeout = float(term_timeout)
        self.kill_timeout = float(kill_timeout)
        self.descendants = descendants


def parse_options(params):
    """Options from the module's parameters; ReapError names the first bad value."""
    patterns = []
    for preset in params.get('presets') or []:
        if preset not in PRESETS:
            raise ReapError('presets: unknown preset %r; known: %s' % (preset, ', '.join(sorted(PRESETS))))
        patterns.extend(PRESETS[preset])
    for i, text in enumerate(params.get('patterns') or []):
        if not text:
            raise ReapError('patterns[%d] is empty: an empty pattern would select every process' % i)
        patterns.append(text)
    compiled = [(text, _compile('patterns', text)) for text in patterns]

    environ = []
    for name, text in sorted((params.get('environ') or {}).items()):
        if not name or '=' in name:
            raise ReapError('environ: %r is not an environment variable name' % (name,))
        text = '' if text is None else str(text)
        environ.append((name, text, _compile('environ[%s]' % name, text)))

    pids = params.get('pids') or []
    bad = [p for p in pids if int(p) <= 0]
    if bad:
        raise ReapError('pids: %s is not a process ID' % bad[0])

    if not (compiled or environ or pids or params.get('device_holders') or params.get('nvml_processes')):
        raise ReapError('no selector given: set at least one of patterns, presets, environ, pids, device_holders '
                        'or nvml_processes (gpu_reap never selects every process)')

    for key in ('term_timeout', 'kill_timeout'):
        value = params.get(key)
        if value is None or math.isnan(value) or value < 0:
            raise ReapError('%s must be a number of seconds, 0 or more; got %r' % (key, value))

    devices = params.get('devices') or list(DEFAULT_DEVICES)
    protect = list(params.get('protect') or [])
    if params.get('protect_defaults', True):
        protect.extend(DEFAULT_PROTECT)
    kill_mode = params.get('kill_mode') or 'mixed'
    if kill_mode not in ('mixed', 'control-group'):
        raise ReapError('kill_mode must be mixed or control-group; got %r' % (kill_mode,))

    return Options(
        patterns=compiled, environ=environ, pids=[int(p) for p in pids],
        device_holders=bool(params.get('device_holders')), nvml_processes=bool(params.get('nvml_processes')),
        devices=devices, protect=protect, kill_mode=kill_mode,
        term_signal=parse_signal(params.get('term_signal') or 'SIGTERM'),
        term_timeout=params['term_timeout'], kill_timeout=params['kill_timeout'],
        descendants=params.get('descendants', True),
    )


class Phase(dict):
    """``{pid: Target}`` of one phase; ``devices`` tells which selector it uses."""

    def __init__(self, targets=None, devices=False):
        super(Phase, self).__init__(targets or {})
        self.devices = devices


class Target:
    """A selected process and what was done to it."""

    def __init__(self, proc, matched_by):
        self.proc = proc
        self.matched_by = matched_by
        self.signals = []
        self.started = None     # clock when its phase sent its first signal
        self.seconds = None     # from then until its exit was noticed
        self.gone = False

    def report(self):
        return {
            'pid': self.proc.pid, 'ppid': self.proc.ppid, 'name': self.proc.name,
            'cmdline': self.proc.command, 'matched_by': self.matched_by,
            'signals': self.signals, 'seconds': self.seconds,
        }


def _describe(proc, reasons=None):
    entry = {'pid': proc.pid, 'ppid': proc.ppid, 'name': proc.name, 'cmdline': proc.command}
    if reasons is not None:
        entry['matched_by'] = reasons
    return entry


_MATCHERS = {}


def device_matcher(globs):
    """A test ``path -> bool`` for shell globs: one compiled expression, behind the globs' common
    literal prefix, so that the tens of thousands of open files of a busy host (sockets, pipes,
    libraries) cost a string comparison each."""
    if not globs:
        return lambda path: False
    if globs not in _MATCHERS:
        prefix = os.path.commonprefix([re.split(r'[*?[]', g, maxsplit=1)[0] for g in globs])
        rx = re.compile('|'.join('(?:%s)' % fnmatch.translate(g) for g in globs))
        _MATCHERS[globs] = lambda path: path.startswith(prefix) and rx.match(path) is not None
    return _MATCHERS[globs]


class Reaper:
    """Select processes in ``procs`` (a ``_procs.ProcFS`` or a stand-in) and stop them.

    ``nvml_listing`` is what ``_nvml.gpu_process_pids`` returned (when nvml_processes is set).
    """

    def __init__(self, options, procs, self_pid, nvml_listing=None, clock=time.monotonic, sleep=time.sleep,
                 poll_interval=POLL_INTERVAL):
        self.options = options
        self.procs = procs
        self.self_pid = self_pid
        self.guarded = set(procs.ancestry(self_pid))
        self.nvml_listing = list(nvml_listing or [])
        self.clock = clock
        self.sleep = sleep
        self.poll_interval = poll_interval
        self.targets = {}       # pid -> Target, every phase
        self.zombies = {}
        self.protected = {}
        self.nvml_unmapped = []
        self._nvml = None       # {pid: (start time, reasons)} once the NVML listing is resolved
        self._pid_starts = None  # {pid: start time} of the processes ``pids`` named at the first scan
        self._started = clock()

    # -- selection ---------------------------------------------------------------------

    def excluded(self, proc):
        """Why ``proc`` must never be signalled, or None."""
        if proc.pid == 1:
            return 'PID 1'
        if proc.kernel_thread:
            return 'kernel thread'
        if proc.pid == self.self_pid:
            return 'gpu_reap itself'
        if proc.pid in self.guarded:
            return 'ancestor of gpu_reap'
        hits = proc.names() & self.options.protect
        if hits:
            return 'protected name %s' % sorted(hits)[0]
        return None

    def _holds(self, pid, globs):
        matches = device_matcher(tuple(globs))
        return sorted(set(f for f in self.procs.open_files(pid) if matches(f)))

    def _nvml_matches(self, table):
        """{pid: [reason]} for NVML-listed PIDs that are processes of this PID namespace.

        The listing is resolved against the first table only; later scans match the same
        processes (same start time), never a PID reused since.
        """
        if self._nvml is None:
            self._nvml = {}
            for entry in self.nvml_listing:
                pid = entry['pid']
                proc = table.get(pid)
                if proc is None or proc.zombie or not self._holds(pid, NVIDIA_DEVICES):
                    why = 'no such process here' if proc is None or proc.zombie else 'holds no /dev/nvidia* here'
                    self.nvml_unmapped.append(dict(entry, reason='%s (NVML reports host PIDs)' % why))
                    continue
                self._nvml.setdefault(pid, (proc.start, []))[1].append('nvml %s' % entry['gpu_uuid'])
        return dict((pid, reasons) for pid, (start, reasons) in self._nvml.items()
                    if pid in table and table[pid].start == start)

    def _selector_matches(self, proc, nvml):
        o = self.options
        reasons = []
        if self._pid_starts.get(proc.pid) == proc.start:
            reasons.append('pid')
        text = ' '.join(proc.cmdline) if proc.cmdline else proc.comm
        reasons.extend('pattern %s' % raw for raw, rx in o.patterns if rx.search(text))
        if o.environ and not proc.zombie:
            env = self.procs.environ(proc.pid)
            if env is not None and all(n in env and rx.search(env[n]) for n, dummy, rx in o.environ):
                reasons.append('environ %s' % ', '.join('%s=~%s' % (n, raw) for n, raw, dummy in o.environ))
        reasons.extend(nvml.get(proc.pid, []))
        return reasons

    def select(self, table, devices=False, known=None):
        """``{pid: Target}`` newly selected in ``table``; records zombies and protected ones.

        With ``devices`` the selector is "holds a file matching ``devices``" (the second
        phase), else patterns, environ, pids and NVML. ``known`` targets (``{pid: Target}``)
        are not selected again, but their new children are.
        """
        known = known or {}
        if devices:
            chosen = {}
            for pid, proc in table.items():
                held = [] if proc.zombie else self._holds(pid, self.options.devices)
                if held:
                    chosen[pid] = ['device %s' % f for f in held]
        else:
            if self._pid_starts is None:
                # PIDs given are the processes that have them now, not whoever reuses them later
                self._pid_starts = dict((pid, table[pid].start) for pid in self.options.pids if pid in table)
            nvml = self._nvml_matches(table) if self.options.nvml_processes else {}
            chosen = dict((pid, r) for pid, r in ((pid, self._selector_matches(p, nvml)) for pid, p in table.items()) if r)

        picked = {}
        for pid in sorted(chosen):
            proc = table[pid]
            if pid in known:
                continue
            why = self.excluded(proc)
            if why:
                self.protected[pid] = dict(_describe(proc, chosen[pid]), reason=why)
            elif proc.zombie:
                self._zombie(proc, table)
            else:
                picked[pid] = Target(proc, chosen[pid])

        if self.options.descendants:
            children = {}
            for proc in table.values():
                children.setdefault(proc.ppid, []).append(proc)
            # children of the targets already known count too: those spawned since the last scan
            still_here = set(pid for pid, t in known.items() if pid in table and table[pid].start == t.proc.start)
            stack = sorted(set(picked) | still_here)
            while stack:
                parent = stack.pop(0)
                for child in sorted(children.get(parent, []), key=lambda p: p.pid):
                    if child.pid in picked or child.pid in known:
                        continue
                    why = self.excluded(child)
                    if why:
                        self.protected[child.pid] = dict(_describe(child, ['descendant of %d' % parent]), reason=why)
                        continue
                    if child.zombie:
                        self._zombie(child, table)
                        continue
                    picked[child.pid] = Target(child, ['descendant of %d' % parent])
                    stack.append(child.pid)
        return picked

    def _zombie(self, proc, table):
        parent = table.get(proc.ppid)
        self.zombies[proc.pid] = dict(
            _describe(proc), parent_name=parent.name if parent else None,
            parent_cmdline=parent.command if parent else None)

    # -- escalation ----------------------------------------------------------------------

    def _signal(self, target, signum):
        if target.gone:
            return
        now = self.procs.current(target.proc)
        if now is None or now.zombie or not self.procs.send_signal(target.proc, signum):
            self._mark_gone(target)
            return
        target.signals.append(signal_name(signum))
        if now.state in ('T', 't') and signum != signal.SIGKILL:
            # like systemd: a stopped process only acts on the signal once continued
            if self.procs.send_signal(target.proc, signal.SIGCONT):
                target.signals.append('SIGCONT')

    def _mark_gone(self, target):
        if not target.gone:
            target.gone = True
            if target.started is not None:
                target.seconds = round(self.clock() - target.started, 3)

    def _wait(self, targets, deadline, phase=None):
        """Poll until every target has exited or ``deadline``; return those still alive.

        With ``phase`` (the phase's targets), /proc is scanned every TRACK_INTERVAL for
        processes the targets start meanwhile, before their parent can exit and orphan them.
        """
        tracked = self.clock()
        while True:
            alive = []
            for t in targets:
                if not t.gone and not self.procs.alive(t.proc):
                    self._mark_gone(t)
                if not t.gone:
                    alive.append(t)
            now = self.clock()
            if not alive or now >= deadline:
                return alive
            if phase is not None and now - tracked >= TRACK_INTERVAL:
                tracked = now
                self._rescan(phase)
            self.sleep(max(0.0, min(self.poll_interval, deadline - now)))

    def _known(self, phase):
        known = dict(self.targets)
        known.update(phase)
        return known

    def _rescan(self, phase):
        """Add what the phase's selector finds now (new children above all) to the phase."""
        fresh = self.select(self.procs.snapshot(), devices=phase.devices, known=self._known(phase))
        now = self.clock()
        for t in fresh.values():
            t.started = now
        phase.update(fresh)
        return fresh

    def _escalate(self, phase):
        """Stop one phase's targets: the polite signal, then SIGKILL; rescans before SIGKILL."""
        o = self.options
        start = self.clock()
        for t in phase.values():
            t.started = start
        if o.kill_mode == 'mixed':
            first = [t for t in phase.values() if t.proc.ppid not in phase]
        else:
            first = list(phase.values())
        for t in first:
            self._signal(t, o.term_signal)
        term_deadline = start + o.term_timeout
        alive = self._wait(first, term_deadline, phase)
        if o.kill_mode == 'mixed' and not alive:
            self._wait(list(phase.values()), min(term_deadline, self.clock() + SETTLE_SECONDS), phase)

        kill_deadline = None
        while True:
            self._rescan(phase)
            alive = [t for t in phase.values() if not t.gone and self.procs.alive(t.proc)]
            for t in phase.values():
                if t not in alive:
                    self._mark_gone(t)
            now = self.clock()
            if not alive:
                return
            if kill_deadline is None:
                kill_deadline = now + o.kill_timeout
            unsignalled = [t for t in alive if 'SIGKILL' not in t.signals]
            if not unsignalled and now >= kill_deadline:
                return
            for t in unsignalled:
                self._signal(t, signal.SIGKILL)
            if self._wait(alive, kill_deadline) and self.clock() >= kill_deadline:
                return

    # -- runs ----------------------------------------------------------------------------

    def plan(self):
        """What a run would stop now (check mode): both phases from one snapshot."""
        table = self.procs.snapshot()
        self.targets = Phase(self.select(table))
        if self.options.device_holders:
            self.targets.update(self.select(table, devices=True, known=self.targets))
        return self.targets

    def run(self):
        """Stop everything selected; device holders after the selected processes."""
        for devices in (False, True) if self.options.device_holders else (False,):
            phase = Phase(self.select(self.procs.snapshot(), devices=devices, known=self.targets), devices)
            if phase:
                self._escalate(phase)
                self.targets.update(phase)
        return self.targets

    # -- results -------------------------------------------------------------------------

    def result(self, check_mode=False):
        """The module's return values; raises ReapFailure when targets survived SIGKILL."""
        targets = [self.targets[pid] for pid in self.targets]
        remaining = [] if check_mode else [t for t in targets if not t.gone]
        lines = ['%d %s' % (t.proc.pid, t.proc.command) for t in targets]
        result = {
            'changed': bool(targets) if check_mode else any(t.signals for t in targets),
            'stopped': [] if check_mode else [t.report() for t in targets],
            'zombies': [self.zombies[pid] for pid in sorted(self.zombies)],
            'protected': [self.protected[pid] for pid in sorted(self.protected)],
            'remaining': [dict(_describe(t.proc, t.matched_by), state=self._state(t), signals=t.signals)
                          for t in remaining],
            'nvml_unmapped': self.nvml_unmapped,
            'elapsed': round(self.clock() - self._started, 3),
            'diff': {
                'before': ''.join(line + '\n' for line in lines),
                'after': '' if check_mode else ''.join('%d %s\n' % (t.proc.pid, t.proc.command) for t in remaining),
            },
        }
        if check_mode:
            result['would_stop'] = [_describe(t.proc, t.matched_by) for t in targets]
        if remaining:
            raise ReapFailure(self._failure_message(remaining), result)
        return result

    def _state(self, target):
        now = self.procs.current(target.proc)
        return now.state if now is not None else '?'

    def _failure_message(self, remaining):
        parts, notes = [], []
        for t in remaining:
            state = self._state(t)
            parts.append('%d (%s, %s)' % (t.proc.pid, state, t.proc.command))
            if state in _STATE_NOTES and state not in notes:
                notes.append(state)
        msg = '%d process%s still alive %.1f s after SIGKILL: %s' % (
            len(remaining), '' if len(remaining) == 1 else 'es', self.options.kill_timeout, '; '.join(parts))
        for state in notes:
            msg += '. %s = %s' % (state, _STATE_NOTES[state])
        return msg

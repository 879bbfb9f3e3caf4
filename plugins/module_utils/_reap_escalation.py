# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""How gpu_reap stops a phase's targets: signals, waits and rescans.

Every target gets a time from which SIGKILL is due. The polite signal goes first to the
roots (``mixed``, as systemd's KillMode=mixed) or to every target (``control-group``);
a target found by a rescan while waiting gets the polite signal too when it is a root (or
in ``control-group``), with its own full wait, so nothing is killed without warning that
would have been warned in the first scan.
"""

from __future__ import annotations

import errno
import os
import signal

from ansible_collections.gpuops.host.plugins.module_utils._reap_options import signal_name

POLL_INTERVAL = 0.02
# In mixed mode, once the roots have exited, how long the rest may take to follow them
# (their own shutdown or PR_SET_PDEATHSIG) before SIGKILL.
SETTLE_SECONDS = 1.0
# How often /proc is scanned for new children while waiting for targets to exit.
TRACK_INTERVAL = 0.25


class Escalation:
    """Stops phases of targets. ``rescan(phase)`` returns ``{pid: Target}`` newly selected
    for the phase (new children above all); ``procs`` checks and signals processes."""

    def __init__(self, options, procs, rescan, clock, sleep, poll_interval=POLL_INTERVAL):
        self.options = options
        self.procs = procs
        self.rescan = rescan
        self.clock = clock
        self.sleep = sleep
        self.poll_interval = poll_interval

    def _signal(self, target, signum):
        """Send ``signum`` to a target still alive; a target that cannot be signalled keeps
        the error and is not waited for."""
        if target.gone or target.error:
            return
        now = self.procs.current(target.proc)
        try:
            if now is None or now.zombie or not self.procs.send_signal(target.proc, signum):
                self._mark_gone(target)
                return
            target.signals.append(signal_name(signum))
            if now.state in ('T', 't') and signum != signal.SIGKILL:
                # like systemd: a stopped process only acts on the signal once continued
                if self.procs.send_signal(target.proc, signal.SIGCONT):
                    target.signals.append('SIGCONT')
        except OSError as e:
            target.error = '%s sending %s: %s' % (
                errno.errorcode.get(e.errno, str(e.errno)), signal_name(signum), os.strerror(e.errno or 0))

    def _mark_gone(self, target):
        if not target.gone:
            target.gone = True
            if target.started is not None:
                target.seconds = round(self.clock() - target.started, 3)

    def _is_root(self, target, phase):
        return self.options.kill_mode == 'control-group' or target.proc.ppid not in phase

    def _admit(self, phase, fresh, term_deadline):
        """Add targets found by a rescan: roots get the polite signal and a full wait."""
        now = self.clock()
        for pid in sorted(fresh):
            t = fresh[pid]
            t.started = now
            phase[pid] = t
        for pid in sorted(fresh):
            t = fresh[pid]
            if self._is_root(t, phase):
                t.kill_at = now + self.options.term_timeout
                self._signal(t, self.options.term_signal)
            else:
                t.kill_at = max(now, term_deadline)

    def stop(self, phase, meanwhile=None):
        """Stop every target of ``phase`` (a ``_reap_selection.Phase``); returns those still
        alive ``kill_timeout`` seconds after SIGKILL. ``meanwhile``, where given, is called once
        right after the first signals: work that the targets' own exit hides."""
        o = self.options
        start = self.clock()
        term_deadline = start + o.term_timeout
        first = [phase[pid] for pid in sorted(phase) if self._is_root(phase[pid], phase)]
        for t in phase.values():
            t.started = start
            t.kill_at = term_deadline
        for t in first:
            self._signal(t, o.term_signal)
        if meanwhile is not None:
            meanwhile()
        scanned = start
        settled = False
        while True:
            now = self.clock()
            if now - scanned >= TRACK_INTERVAL:
                scanned = now
                self._admit(phase, self.rescan(phase), term_deadline)
            for t in phase.values():
                if not t.gone and not self.procs.alive(t.proc):
                    self._mark_gone(t)
            alive = [t for t in phase.values() if not t.gone and not t.error]
            if not alive:
                return []
            now = self.clock()
            if o.kill_mode == 'mixed' and not settled and all(t.gone for t in first):
                settled = True
                for t in alive:
                    if not t.signals:   # a root found later keeps the wait its own signal gave it
                        t.kill_at = min(t.kill_at, now + SETTLE_SECONDS)
            if any(t.killed_at is None and now >= t.kill_at for t in alive):
                # catch what was started since the last scan, before its parent can be killed
                scanned = now
                self._admit(phase, self.rescan(phase), term_deadline)
                for t in [phase[pid] for pid in sorted(phase)]:
                    if not t.gone and not t.error and t.killed_at is None and now >= t.kill_at:
                        self._signal(t, signal.SIGKILL)
                        t.killed_at = now
                continue
            if all(t.killed_at is not None and now >= t.killed_at + o.kill_timeout for t in alive):
                return alive
            events = [t.kill_at if t.killed_at is None else t.killed_at + o.kill_timeout for t in alive]
            self.sleep(min([self.poll_interval] + [e - now for e in events if e > now]))

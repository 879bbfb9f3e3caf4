# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What gpu_reap stops, and why each process was chosen or spared.

A run selects roots (by command line, environment, PID, NVML listing or held device),
then what belongs to them: the session a root leads, orphans of a root's session whose
leader has exited (re-parented to PID 1), and descendants. Every candidate is checked
against what must never be signalled, and against where it runs: a process in another
PID namespace or container is seen but not touched unless the caller opts in.
"""

from __future__ import annotations

import fnmatch
import os
import re

from ansible_collections.gpuops.host.plugins.module_utils import _gateway_procs as gateway
from ansible_collections.gpuops.host.plugins.module_utils._reap_options import NVIDIA_DEVICES

_MATCHERS = {}
_GPU_DEVICE = re.compile(r'^/dev/nvidia([0-9]+)$')


def device_matcher(globs):
    """A test ``path -> bool`` for shell globs: one compiled expression, behind the globs' common
    literal prefix, so that the tens of thousands of open files of a busy host (sockets, pipes,
    libraries) cost a string comparison each."""
    globs = tuple(globs)
    if not globs:
        return lambda path: False
    if globs not in _MATCHERS:
        prefix = os.path.commonprefix([re.split(r'[*?[]', g, maxsplit=1)[0] for g in globs])
        rx = re.compile('|'.join('(?:%s)' % fnmatch.translate(g) for g in globs))
        _MATCHERS[globs] = lambda path: path.startswith(prefix) and rx.match(path) is not None
    return _MATCHERS[globs]


def describe(proc, reasons=None):
    entry = {'pid': proc.pid, 'ppid': proc.ppid, 'pgid': proc.pgid, 'sid': proc.sid, 'name': proc.name,
             'cmdline': proc.command}
    if reasons is not None:
        entry['matched_by'] = reasons
    return entry


class Target:
    """A selected process and what was done to it."""

    def __init__(self, proc, matched_by):
        self.proc = proc
        self.matched_by = matched_by
        self.signals = []
        self.error = None       # why it could not be signalled (EPERM, ...)
        self.started = None     # clock when its phase sent its first signal
        self.seconds = None     # from then until its exit was noticed
        self.kill_at = None     # clock from which SIGKILL is due
        self.killed_at = None   # clock when SIGKILL was sent
        self.gone = False

    def report(self):
        return dict(describe(self.proc, self.matched_by), signals=self.signals, seconds=self.seconds)


class Phase(dict):
    """``{pid: Target}`` of one phase; ``devices`` tells which selector it uses."""

    def __init__(self, targets=None, devices=False):
        super().__init__(targets or {})
        self.devices = devices


class Selection:
    """Chooses targets in process tables read from ``procs`` (a ``_procs.ProcFS`` or a stand-in).

    ``place`` (a ``_namespaces.Place``) says where the module runs; ``nvml_listing`` is what
    ``_nvml.gpu_process_pids`` returned, used only where NVML's PIDs are this namespace's.
    """

    def __init__(self, options, procs, self_pid, place, nvml_listing=None):
        self.options = options
        self.procs = procs
        self.self_pid = self_pid
        self.place = place
        self.guarded = set(procs.ancestry(self_pid))
        self.nvml_listing = list(nvml_listing or [])
        self.protected = {}     # pid -> entry with reason: matched or reached, never signalled
        self.elsewhere = {}     # pid -> entry with reason: in another PID namespace or container
        self.zombies = {}       # pid -> entry of the first sighting, with the parent that left it
        self.nvml_unmapped = []
        self.denied = set()     # PIDs whose environ or open files could not be read
        self._nvml = None       # {pid: (start time, reasons)} once the NVML listing is resolved
        self._pid_starts = None  # {pid: start time} of the processes ``pids`` named at the first scan
        self._zombie_starts = {}  # {pid: start time} of the zombies in ``zombies``
        self._gateways = {}     # {pid: gateway pid} of the table being chosen from (gateway.members)
        self._named_now = set()  # the PIDs that ``pids`` named, in the table being chosen from

    # -- why a process is spared --

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
        if self.options.users and proc.pid not in self._named_now:
            user = self.procs.owner(proc.pid)
            if user is not None and user not in self.options.users:
                return "another user's process (%s)" % user
        gw = self._gateways.get(proc.pid)
        if gw == proc.pid:
            return 'SGLang Model Gateway'
        if gw is not None:
            return 'started by the SGLang Model Gateway %d: stopped through it, or when named in pids' % gw
        return None

    def _spare(self, proc, reasons, table):
        """Record ``proc`` as spared and return True, or False when it may be selected."""
        why = self.excluded(proc)
        if why:
            self.protected[proc.pid] = dict(describe(proc, reasons), reason=why)
            return True
        if not self.options.other_namespaces:
            where = self.place.elsewhere(proc.pid)
            if where:
                self.elsewhere[proc.pid] = dict(describe(proc, reasons), reason=where)
                return True
        if proc.zombie:
            # Later scans see it again while its parent exits: first with the parent's command
            # line already gone, then re-parented to init until init collects it. The first
            # sighting names the parent that left it uncollected.
            if self._zombie_starts.get(proc.pid) != proc.start:
                self._zombie_starts[proc.pid] = proc.start
                parent = table.get(proc.ppid)
                self.zombies[proc.pid] = dict(
                    describe(proc), parent_name=parent.name if parent else None,
                    parent_cmdline=parent.command if parent else None)
            return True
        return False

    # -- roots --

    def holds(self, pid, globs):
        matches = device_matcher(globs)
        return sorted(set(f for f in self.procs.open_files(pid, self.denied) if matches(f)))

    def _nvml_matches(self, table):
        """{pid: [reason]} for NVML-listed PIDs that are processes here holding an NVIDIA device.

        The listing is resolved against the first table only; later scans match the same
        processes (same start time), never a PID reused since.
        """
        if self._nvml is None:
            self._nvml = {}
            for entry in self.nvml_listing:
                pid = entry['pid']
                proc = table.get(pid)
                if proc is None or proc.zombie or not self.holds(pid, NVIDIA_DEVICES):
                    why = 'no such process here' if proc is None or proc.zombie else 'holds no /dev/nvidia* here'
                    self.nvml_unmapped.append(dict(entry, reason=why))
                    continue
                self._nvml.setdefault(pid, (proc.start, []))[1].append('nvml %s' % entry['gpu_uuid'])
        return dict((pid, reasons) for pid, (start, reasons) in self._nvml.items()
                    if pid in table and table[pid].start == start)

    def _root_reasons(self, proc, nvml):
        o = self.options
        reasons = []
        if self._pid_starts.get(proc.pid) == proc.start:
            reasons.append('pid')
        text = ' '.join(proc.cmdline) if proc.cmdline else proc.comm
        reasons.extend('pattern %s' % raw for raw, rx in o.patterns if rx.search(text))
        if o.environ and not proc.zombie:
            env = self.procs.environ(proc.pid, self.denied)
            if env is not None and all(n in env and rx.search(env[n]) for n, dummy, rx in o.environ):
                reasons.append('environ %s' % ', '.join('%s=~%s' % (n, raw) for n, raw, dummy in o.environ))
        reasons.extend(nvml.get(proc.pid, []))
        return reasons

    def _named(self, table):
        """The PIDs of TABLE that ``pids`` named: the processes that had them at the first scan."""
        if self._pid_starts is None:
            # PIDs given are the processes that have them now, not whoever reuses them later
            self._pid_starts = dict((pid, table[pid].start) for pid in self.options.pids if pid in table)
        return set(pid for pid, start in self._pid_starts.items() if pid in table and table[pid].start == start)

    def roots(self, table, devices=False):
        """``{pid: [reason]}`` of the processes the selectors name directly."""
        if devices:
            chosen = {}
            for pid, proc in table.items():
                held = [] if proc.zombie else self.holds(pid, self.options.devices)
                if held:
                    chosen[pid] = ['device %s' % f for f in held]
            return chosen
        self._named(table)
        nvml = self._nvml_matches(table) if self.options.nvml_processes else {}
        found = ((pid, self._root_reasons(proc, nvml)) for pid, proc in table.items())
        return dict((pid, reasons) for pid, reasons in found if reasons)

    # -- what belongs to the roots --

    def _members(self, table, picked, known):
        """``[(proc, reason)]`` of the sessions of the selected processes: all of a session that a
        selected process leads, and the orphans (parent PID 1) of a selected process's session
        and process group whose session leader has exited.

        The process group keeps apart jobs that a login shell started in one session (each in a
        group of its own) and that outlived it; a server's children share its group.
        """
        led, orphaned = set(), set()
        for pid in sorted(set(picked) | set(known)):
            proc = table.get(pid)
            if proc is None or proc.zombie or proc.sid <= 0:
                continue
            if proc.session_leader:
                led.add(proc.sid)
                continue
            leader = table.get(proc.sid)
            if leader is None or leader.zombie or leader.sid != proc.sid:
                orphaned.add((proc.sid, proc.pgid))
        found = []
        for proc in sorted(table.values(), key=lambda p: p.pid):
            if proc.pid in picked or proc.pid in known:
                continue
            if proc.sid in led:
                found.append((proc, 'session %d' % proc.sid))
            elif (proc.sid, proc.pgid) in orphaned and proc.ppid == 1:
                found.append((proc, 'orphan of session %d' % proc.sid))
        return found

    def choose(self, table, devices=False, known=None):
        """``{pid: Target}`` newly selected in ``table``; records what was spared and why.

        ``known`` targets (``{pid: Target}``) are not selected again, but what belongs to them
        (new children, session members) is.
        """
        known = dict((pid, t) for pid, t in (known or {}).items()
                     if pid in table and table[pid].start == t.proc.start)
        self._named_now = self._named(table)
        self._gateways = gateway.members(table, exempt=self._named_now) if self.options.protect_gateways else {}
        picked = {}
        for pid, reasons in sorted(self.roots(table, devices).items()):
            if pid not in known and not self._spare(table[pid], reasons, table):
                picked[pid] = Target(table[pid], reasons)

        grown = True
        while grown:
            grown = self.options.descendants and self._descendants(table, picked, known)
            if self.options.sessions:
                for proc, reason in self._members(table, picked, known):
                    if proc.pid not in self.protected and not self._spare(proc, [reason], table):
                        picked[proc.pid] = Target(proc, [reason])
                        grown = True
        return picked

    def _descendants(self, table, picked, known):
        children = {}
        for proc in table.values():
            children.setdefault(proc.ppid, []).append(proc)
        grown = False
        stack = sorted(set(picked) | set(known))
        while stack:
            parent = stack.pop(0)
            for child in sorted(children.get(parent, []), key=lambda p: p.pid):
                if child.pid in picked or child.pid in known or child.pid in self.protected:
                    continue
                reason = 'descendant of %d' % parent
                if self._spare(child, [reason], table):
                    continue
                picked[child.pid] = Target(child, [reason])
                stack.append(child.pid)
                grown = True
        return grown

    # -- GPU holders left outside --

    def foreign(self, table, targets, gpu_devices=None):
        """GPU holders that were not selected: ``[{pid, user, cmdline, devices, gpus, ...}]``.

        ``gpu_devices`` maps /dev/nvidiaN minor numbers to ``{index, uuid}`` (from NVML);
        PIDs that NVML lists (where its PIDs are this namespace's) add what they hold.
        """
        gpu_devices = gpu_devices or {}
        listed = {}
        if self.place.nvml_pids_are_local:
            for entry in self.nvml_listing:
                listed.setdefault(entry['pid'], []).append(entry)
        denied = set()
        found = []
        matches = device_matcher(NVIDIA_DEVICES)
        for pid in sorted(table):
            proc = table[pid]
            if pid in targets or proc.zombie or proc.kernel_thread or pid == self.self_pid or pid in self.guarded:
                continue
            held = sorted(set(f for f in self.procs.open_files(pid, denied) if matches(f)))
            if not held and pid not in listed:
                continue
            if proc.names() & self.options.protect:
                continue
            gpus = {}
            for path in held:
                m = _GPU_DEVICE.match(path)
                if m:
                    minor = int(m.group(1))
                    info = gpu_devices.get(minor, {})
                    gpus[minor] = {'device': path, 'index': info.get('index'), 'uuid': info.get('uuid'),
                                   'used_mib': None}
            for entry in listed.get(pid, []):
                minor = [m for m, info in gpu_devices.items() if info.get('uuid') == entry['gpu_uuid']]
                key = minor[0] if minor else entry['gpu_uuid']
                gpu = gpus.setdefault(key, {'device': '/dev/nvidia%d' % key if minor else None,
                                            'index': entry['gpu_index'], 'uuid': entry['gpu_uuid']})
                gpu['used_mib'] = entry['used_mib']
            found.append(dict(
                describe(proc), user=self.procs.owner(pid), devices=held,
                gpus=[gpus[k] for k in sorted(gpus, key=str)], where=self.place.elsewhere(pid)))
        self.denied |= denied
        return found

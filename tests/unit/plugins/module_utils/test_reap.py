# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import re
import signal

import pytest

from ansible_collections.gpuops.host.plugins.module_utils._procs import Proc
from ansible_collections.gpuops.host.plugins.module_utils._reap import (
    DEFAULT_DEVICES, SGLANG_PATTERNS, Reaper, ReapError, ReapFailure, Phase, Target, device_matcher, parse_options,
    parse_signal,
)

SELF = 900      # the module's process in the fake world; its parent is 899 (the ansible shell)


class World:
    """A process table with a fake clock: processes exit when signals and time say so.

    Behaviour on the polite signal (``on_term``): ``('exit', seconds)``, ``('drain', seconds)``
    (exit and SIGKILL its own descendants then, as an SGLang server does), ``('spawn', pid)``
    (fork a new child at once, then exit a second later), or ``'ignore'``. SIGKILL ends a
    process at once unless it is in state D. An exited process becomes a zombie while its
    parent lives, else it disappears.
    """

    def __init__(self):
        self.now = 0.0
        self.table = {}
        self.behaviour = {}
        self.env = {}
        self.fds = {}
        self.pending = []       # (time, pid, action)
        self.held = {}          # pid -> signal waiting for SIGCONT
        self.sent = []          # (time, pid, signal name)
        self.next_start = 1000
        self.add(1, 0, ['/sbin/init'], comm='systemd', exe='/usr/lib/systemd/systemd')
        self.add(2, 0, [], comm='kthreadd', flags=0x00200000)
        self.add(899, 1, ['/bin/sh', '-c', 'python3 AnsiballZ_gpu_reap.py && sleep 0'], comm='sh', exe='/bin/sh')
        self.add(SELF, 899, ['python3', 'AnsiballZ_gpu_reap.py'], comm='python3', exe='/usr/bin/python3.11')

    def add(self, pid, ppid, cmdline, comm=None, exe='/usr/bin/python3.11', state='S', env=None, fds=(),
            on_term=('exit', 0.5), flags=0):
        comm = comm or (cmdline[0].split('/')[-1][:15] if cmdline else '?')
        self.next_start += 1
        self.table[pid] = Proc(pid, ppid, state, comm, self.next_start, pgid=pid, sid=pid, flags=flags,
                               cmdline=cmdline, exe=exe)
        self.behaviour[pid] = on_term
        self.env[pid] = env or {}
        self.fds[pid] = list(fds)
        return self.table[pid]

    def sglang(self, tp=2, base=100, on_term=('drain', 2.0), child_term=('exit', 0.2), env=None):
        """A launcher, its titled children and an untitled resource tracker."""
        self.add(base, 1, ['python3', '-m', 'sglang.launch_server', '--tp-size', str(tp)], env=env,
                 on_term=on_term)
        for r in range(tp):
            self.add(base + 1 + r, base, ['sglang::scheduler_TP%d' % r], comm='sglang::schedul',
                     fds=['/dev/nvidia%d' % r, '/dev/nvidiactl'], on_term=child_term, env=env)
        self.add(base + 10, base, ['sglang::detokenizer'], comm='sglang::detoke', on_term=child_term, env=env)
        self.add(base + 11, base, ['python3', '-c', 'from multiprocessing.resource_tracker import main;main(5)'],
                 on_term=child_term, env=env)

    # -- clock --

    def clock(self):
        return self.now

    def sleep(self, seconds):
        assert seconds >= 0
        self.now += seconds
        for item in sorted(p for p in self.pending if p[0] <= self.now):
            self.pending.remove(item)
            self._act(item[1], item[2])

    def _act(self, pid, action):
        if pid not in self.table or self.table[pid].zombie:
            return
        if action == 'drain':
            for child in self.descendants(pid):
                self._exit(child)
        self._exit(pid)

    def descendants(self, pid):
        found = [p for p in self.table if self.table[p].ppid == pid]
        for child in list(found):
            found.extend(self.descendants(child))
        return found

    def _exit(self, pid):
        proc = self.table.get(pid)
        if proc is None or proc.zombie:
            return
        for child in self.table.values():
            if child.ppid == pid:
                child.ppid = 1
        if proc.ppid in self.table and proc.ppid != 1:
            proc.state = 'Z'
            proc.cmdline = []
        else:
            del self.table[pid]
        # init reaps its zombies at once
        for zpid in [p for p, z in self.table.items() if z.zombie and z.ppid == 1]:
            del self.table[zpid]

    # -- the ProcFS interface --

    def _copy(self, p):
        return Proc(p.pid, p.ppid, p.state, p.comm, p.start, p.pgid, p.sid, p.flags, list(p.cmdline), p.exe)

    def snapshot(self):
        return dict((pid, self._copy(p)) for pid, p in self.table.items())

    def stat(self, pid):
        return self._copy(self.table[pid]) if pid in self.table else None

    def environ(self, pid):
        return dict(self.env[pid]) if pid in self.table and not self.table[pid].zombie else None

    def open_files(self, pid):
        return list(self.fds[pid]) if pid in self.table and not self.table[pid].zombie else []

    def ancestry(self, pid):
        chain = []
        while pid in self.table and pid not in chain:
            chain.append(pid)
            pid = self.table[pid].ppid
        return chain

    def current(self, proc):
        now = self.table.get(proc.pid)
        return self._copy(now) if now is not None and now.start == proc.start else None

    def alive(self, proc):
        now = self.current(proc)
        return now is not None and not now.zombie

    def send_signal(self, proc, signum):
        if not self.alive(proc):
            return False
        self.sent.append((round(self.now, 3), proc.pid, signal.Signals(signum).name))
        self._deliver(proc.pid, signum)
        return True

    def _deliver(self, pid, signum):
        me = self.table[pid]
        if signum == signal.SIGKILL:
            if me.state != 'D':
                self._exit(pid)
        elif signum == signal.SIGCONT:
            me.state = 'S'
            if pid in self.held:
                self._deliver(pid, self.held.pop(pid))
        elif me.state == 'T':
            self.held[pid] = signum
        elif self.behaviour[pid] != 'ignore':
            what, arg = self.behaviour[pid]
            if what == 'spawn':
                self.add(arg, pid, ['python3', '-c', 'compile worker'], on_term='ignore')
                self.pending.append((self.now + 1.0, pid, 'exit'))
            else:
                self.pending.append((self.now + arg, pid, what))

    def signals_to(self, pid):
        return [name for dummy, p, name in self.sent if p == pid]


def params(**kw):
    base = dict(patterns=None, presets=None, environ=None, pids=None, device_holders=False, nvml_processes=False,
                devices=list(DEFAULT_DEVICES), protect=None, protect_defaults=True, descendants=True,
                kill_mode='mixed', term_signal='SIGTERM', term_timeout=30.0, kill_timeout=10.0)
    base.update(kw)
    return base


def reaper(world, nvml_listing=None, **kw):
    return Reaper(parse_options(params(**kw)), world, SELF, nvml_listing=nvml_listing, clock=world.clock,
                  sleep=world.sleep)


def stopped(result):
    return sorted(s['pid'] for s in result['stopped'])


# -- options ---------------------------------------------------------------------------------

@pytest.mark.parametrize('kw, message', [
    ({}, 'no selector given'),
    ({'patterns': [], 'pids': [], 'environ': {}}, 'no selector given'),
    ({'patterns': ['sglang(']}, "patterns: invalid regular expression 'sglang('"),
    ({'patterns': ['ok', '']}, 'patterns[1] is empty'),
    ({'environ': {'RUN': '[x'}}, "environ[RUN]: invalid regular expression '[x'"),
    ({'environ': {'A=B': 'x'}}, "'A=B' is not an environment variable name"),
    ({'pids': [0]}, 'pids: 0 is not a process ID'),
    ({'pids': [5], 'term_timeout': -1.0}, 'term_timeout must be a number of seconds, 0 or more; got -1.0'),
    ({'pids': [5], 'kill_timeout': float('nan')}, 'kill_timeout must be a number of seconds'),
    ({'pids': [5], 'term_signal': 'SIGFOO'}, "term_signal: unknown signal 'SIGFOO'"),
    ({'pids': [5], 'term_signal': '99'}, "term_signal: unknown signal '99'"),
    ({'presets': ['vllm']}, "presets: unknown preset 'vllm'"),
])
def test_bad_options(kw, message):
    with pytest.raises(ReapError) as e:
        parse_options(params(**kw))
    assert message in str(e.value)


@pytest.mark.parametrize('value, expected', [
    ('SIGTERM', signal.SIGTERM), ('term', signal.SIGTERM), ('15', signal.SIGTERM), ('SIGINT', signal.SIGINT),
    ('hup', signal.SIGHUP),
])
def test_parse_signal(value, expected):
    assert parse_signal(value) == expected


def test_device_holders_alone_is_a_selector():
    assert parse_options(params(device_holders=True)).device_holders


def test_protect_defaults_false_keeps_only_given_names():
    assert parse_options(params(pids=[5], protect=['x'], protect_defaults=False)).protect == {'x'}
    assert 'nvidia-persistenced' in parse_options(params(pids=[5])).protect


# -- the sglang preset -------------------------------------------------------------------------

@pytest.mark.parametrize('cmdline, selected', [
    ('python -m sglang.launch_server --model-path /m --tp-size 4', True),
    ('/opt/venv/bin/python3.11 -u -m sglang.launch_server --port 30000', True),
    ('/opt/venv/bin/python3 /opt/venv/bin/sglang serve --model-path /m', True),
    ('sglang serve --model-path /m', True),
    ('sglang::scheduler_TP3', True),
    ('sglang::detokenizer', True),
    ('sglang::scheduler_DP0_PP1_TP0_EP0', True),
    ('grep sglang', False),
    ('grep --color=auto sglang serve', False),
    ('tail -f /var/log/sglang/server.log', False),
    ('vim /etc/sglang/serve.yaml', False),
    ('pgrep -af sglang::', False),
    ('python3 -m http.server 8000', False),
    ('python3 train.py --note sglang.launch_server', False),
    ('bash -c python -m sglang.launch_server', False),
])
def test_sglang_patterns(cmdline, selected):
    assert any(re.search(p, cmdline) for p in SGLANG_PATTERNS) is selected


# -- selection ---------------------------------------------------------------------------------

def test_selection_by_pattern_takes_descendants_and_spares_bystanders():
    w = World()
    w.sglang(tp=2)
    w.add(300, 1, ['python3', 'unrelated.py'])
    w.add(301, 1, ['tail', '-f', '/var/log/sglang/server.log'], exe='/usr/bin/tail')
    w.add(302, 1, ['grep', 'sglang'], exe='/usr/bin/grep')
    r = reaper(w, presets=['sglang'])
    planned = r.plan()
    assert sorted(planned) == [100, 101, 102, 110, 111]
    assert planned[111].matched_by == ['descendant of 100']
    assert planned[101].matched_by == ['pattern ^sglang::']
    assert w.sent == []


def test_bare_pattern_still_spares_the_module_and_its_ancestors():
    w = World()
    w.add(300, 1, ['python3', 'unrelated.py'])
    r = reaper(w, patterns=['python3|sh'], protect_defaults=False)
    r.plan()
    result = r.result(check_mode=True)
    assert [s['pid'] for s in result['would_stop']] == [300]
    reasons = dict((p['pid'], p['reason']) for p in result['protected'])
    assert reasons == {899: 'ancestor of gpu_reap', SELF: 'gpu_reap itself'}


def test_pid1_kernel_threads_and_protected_names_are_never_selected():
    w = World()
    w.add(400, 2, [], comm='kworker/0:1', flags=0x00200000)
    w.add(401, 1, ['/usr/bin/nvidia-persistenced', '--verbose'], comm='nvidia-persiste',
          exe='/usr/bin/nvidia-persistenced', fds=['/dev/nvidiactl'])
    w.add(402, 1, ['/opt/exporter'], exe='/opt/exporter', fds=['/dev/nvidia0'])
    r = reaper(w, pids=[1, 2, 400, 401, 402], protect=['exporter'])
    r.plan()
    assert r.targets == {}
    reasons = dict((p['pid'], p['reason']) for p in r.result(check_mode=True)['protected'])
    assert reasons == {1: 'PID 1', 2: 'kernel thread', 400: 'kernel thread',
                       401: 'protected name nvidia-persistenced', 402: 'protected name exporter'}


def test_protect_defaults_false_still_spares_pid1_and_self():
    w = World()
    w.add(401, 1, ['/usr/bin/nvidia-persistenced'], exe='/usr/bin/nvidia-persistenced')
    r = reaper(w, pids=[1, SELF, 401], protect_defaults=False)
    assert sorted(r.plan()) == [401]


def test_environ_selects_orphans_and_needs_every_variable():
    w = World()
    w.add(500, 1, ['sglang::scheduler_TP0'], env={'GPUOPS_RUN': 'extract-42', 'SPT_NOENV': '1'})
    w.add(501, 1, ['python3', 'x.py'], env={'GPUOPS_RUN': 'extract-421'})
    w.add(502, 1, ['python3', 'y.py'], env={'SPT_NOENV': '1'})
    r = reaper(w, environ={'GPUOPS_RUN': '^extract-42$', 'SPT_NOENV': '1'})
    planned = r.plan()
    assert sorted(planned) == [500]
    assert planned[500].matched_by == ['environ GPUOPS_RUN=~^extract-42$, SPT_NOENV=~1']


def test_descendants_false_selects_only_matches():
    w = World()
    w.sglang(tp=1)
    assert sorted(reaper(w, presets=['sglang'], descendants=False).plan()) == [100, 101, 110]


def test_zombies_are_reported_with_their_parent_not_targeted():
    w = World()
    w.sglang(tp=2)
    w.table[102].state = 'Z'
    w.table[102].cmdline = []
    r = reaper(w, presets=['sglang'], term_timeout=5)
    r.run()
    result = r.result()
    assert result['zombies'] == [{'pid': 102, 'ppid': 100, 'name': 'sglang::schedul', 'cmdline': '[sglang::schedul]',
                                  'parent_name': 'python3',
                                  'parent_cmdline': 'python3 -m sglang.launch_server --tp-size 2'}]
    assert 102 not in stopped(result)
    assert result['remaining'] == []


def test_nvml_pids_are_checked_against_this_namespace():
    w = World()
    w.add(600, 1, ['python3', 'train.py'], fds=['/dev/nvidia3'])
    w.add(601, 1, ['python3', 'web.py'])        # same number as a host PID NVML knows
    listing = [{'gpu_uuid': 'GPU-a', 'gpu_index': 3, 'pid': 600, 'used_mib': 1000},
               {'gpu_uuid': 'GPU-b', 'gpu_index': 4, 'pid': 601, 'used_mib': 2000},
               {'gpu_uuid': 'GPU-b', 'gpu_index': 4, 'pid': 777777, 'used_mib': 3000}]
    r = reaper(w, nvml_listing=listing, nvml_processes=True)
    planned = r.plan()
    assert sorted(planned) == [600]
    assert planned[600].matched_by == ['nvml GPU-a']
    unmapped = dict((u['pid'], u['reason']) for u in r.nvml_unmapped)
    assert unmapped == {601: 'holds no /dev/nvidia* here (NVML reports host PIDs)',
                        777777: 'no such process here (NVML reports host PIDs)'}


# -- escalation --------------------------------------------------------------------------------

def test_mixed_mode_signals_only_the_root_when_the_tree_drains():
    w = World()
    w.sglang(tp=4)
    r = reaper(w, presets=['sglang'])
    r.run()
    result = r.result()
    assert w.sent == [(0.0, 100, 'SIGTERM')]
    assert stopped(result) == [100, 101, 102, 103, 104, 110, 111]
    assert result['changed'] is True
    assert all(s['seconds'] == 2.0 for s in result['stopped'])
    assert result['elapsed'] == pytest.approx(2.0, abs=0.05)
    assert result['diff']['before'].startswith('100 python3 -m sglang.launch_server --tp-size 4\n')
    assert result['diff']['after'] == ''


def test_mixed_mode_kills_everything_left_after_term_timeout():
    w = World()
    w.sglang(tp=2, on_term='ignore')
    r = reaper(w, presets=['sglang'], term_timeout=3)
    r.run()
    result = r.result()
    assert w.signals_to(100) == ['SIGTERM', 'SIGKILL']
    assert w.signals_to(101) == ['SIGKILL']
    assert [t for t, p, s in w.sent if s == 'SIGKILL'] == [3.0] * 5
    assert result['remaining'] == []


def test_mixed_mode_kills_children_that_outlive_their_root():
    w = World()
    w.sglang(tp=2, on_term=('exit', 1.0), child_term='ignore')
    r = reaper(w, presets=['sglang'], term_timeout=30)
    r.run()
    assert w.signals_to(101) == ['SIGKILL']
    # the root left after 1 s; the rest got the settle time, not the whole term_timeout
    assert [t for t, p, s in w.sent if s == 'SIGKILL'][0] == pytest.approx(2.0, abs=0.05)


def test_control_group_mode_signals_every_target():
    w = World()
    w.sglang(tp=2, on_term='ignore', child_term=('exit', 0.1))
    r = reaper(w, presets=['sglang'], kill_mode='control-group', term_timeout=2)
    r.run()
    assert sorted(p for t, p, s in w.sent if s == 'SIGTERM') == [100, 101, 102, 110, 111]
    assert w.signals_to(100) == ['SIGTERM', 'SIGKILL']
    assert w.signals_to(101) == ['SIGTERM']


def test_term_signal_and_sigcont_for_stopped_processes():
    w = World()
    w.add(700, 1, ['python3', 'train.py'], state='T')
    r = reaper(w, pids=[700], term_signal='INT')
    r.run()
    assert w.signals_to(700) == ['SIGINT', 'SIGCONT']
    assert r.result()['stopped'][0]['signals'] == ['SIGINT', 'SIGCONT']


def test_children_spawned_meanwhile_are_caught_by_the_rescan():
    w = World()
    w.add(700, 1, ['python3', '-m', 'sglang.launch_server'], on_term=('spawn', 701))
    r = reaper(w, presets=['sglang'], term_timeout=5)
    r.run()
    result = r.result()
    assert w.signals_to(701) == ['SIGKILL']
    assert stopped(result) == [700, 701]
    assert dict((s['pid'], s['matched_by']) for s in result['stopped'])[701] == ['descendant of 700']


def test_device_holders_come_after_the_selected_processes():
    w = World()
    w.sglang(tp=1)
    w.add(800, 1, ['python3', 'notebook_kernel.py'], fds=['/dev/nvidia0', '/dev/nvidia-uvm'])
    w.add(801, 1, ['/usr/bin/nv-hostengine'], comm='nv-hostengine', exe='/usr/bin/nv-hostengine',
          fds=['/dev/nvidiactl'])
    w.add(802, 1, ['python3', 'other.py'], fds=['/dev/null'])
    r = reaper(w, presets=['sglang'], device_holders=True)
    r.run()
    result = r.result()
    assert w.sent == [(0.0, 100, 'SIGTERM'), (2.0, 800, 'SIGTERM')]
    assert stopped(result) == [100, 101, 110, 111, 800]
    holder = [s for s in result['stopped'] if s['pid'] == 800][0]
    assert holder['matched_by'] == ['device /dev/nvidia-uvm', 'device /dev/nvidia0']
    assert result['protected'] == [{'pid': 801, 'ppid': 1, 'name': 'nv-hostengine', 'cmdline': '/usr/bin/nv-hostengine',
                                    'matched_by': ['device /dev/nvidiactl'],
                                    'reason': 'protected name nv-hostengine'}]
    assert 802 in w.table


def test_check_mode_predicts_both_phases_and_signals_nothing():
    w = World()
    w.sglang(tp=1)
    w.add(800, 1, ['python3', 'kernel.py'], fds=['/dev/nvidia0'])
    r = reaper(w, presets=['sglang'], device_holders=True)
    r.plan()
    result = r.result(check_mode=True)
    assert [s['pid'] for s in result['would_stop']] == [100, 101, 110, 111, 800]
    assert result['changed'] is True and result['stopped'] == [] and w.sent == []


def test_nothing_selected_is_not_changed():
    w = World()
    r = reaper(w, presets=['sglang'], device_holders=True)
    r.run()
    result = r.result()
    assert result['changed'] is False and result['stopped'] == [] and result['diff']['before'] == ''


def test_uninterruptible_target_fails_with_its_state():
    w = World()
    w.add(900 + 9, 1, ['sglang::scheduler_TP3'], comm='sglang::schedul', state='D', on_term='ignore')
    r = reaper(w, presets=['sglang'], term_timeout=1, kill_timeout=2)
    r.run()
    with pytest.raises(ReapFailure) as e:
        r.result()
    assert str(e.value).startswith('1 process still alive 2.0 s after SIGKILL: 909 (D, sglang::scheduler_TP3). '
                                   'D = uninterruptible sleep')
    assert e.value.result['remaining'][0]['state'] == 'D'
    assert e.value.result['diff']['after'] == '909 sglang::scheduler_TP3\n'
    assert w.now == pytest.approx(3.0, abs=0.05)


def test_reused_pid_is_not_signalled():
    w = World()
    w.add(950, 1, ['python3', 'unrelated.py'], on_term='ignore')
    # what was selected earlier under PID 950, with another start time
    stale = Proc(950, 1, 'S', 'python3', 1, cmdline=['python3', '-m', 'sglang.launch_server'])
    r = reaper(w, pids=[950], term_timeout=1, kill_timeout=1)
    targets = {950: Target(stale, ['pid'])}
    r._escalate(Phase(targets))
    assert w.sent == []
    assert targets[950].gone and 950 in w.table


def test_zero_term_timeout_kills_at_once():
    w = World()
    w.add(960, 1, ['python3', 'x.py'], on_term='ignore')
    r = reaper(w, pids=[960], term_timeout=0)
    r.run()
    assert w.sent == [(0.0, 960, 'SIGTERM'), (0.0, 960, 'SIGKILL')]


def test_nvml_listing_is_resolved_once_and_never_follows_a_reused_pid():
    w = World()
    w.add(600, 1, ['python3', 'train.py'], fds=['/dev/nvidia3'], on_term=('exit', 1.0))
    listing = [{'gpu_uuid': 'GPU-a', 'gpu_index': 3, 'pid': 600, 'used_mib': 1000},
               {'gpu_uuid': 'GPU-b', 'gpu_index': 4, 'pid': 777777, 'used_mib': 3000}]
    r = reaper(w, nvml_listing=listing, nvml_processes=True, term_timeout=5)
    r.run()
    assert w.sent == [(0.0, 600, 'SIGTERM')]
    # rescans while waiting and before SIGKILL did not report the listing again
    assert [u['pid'] for u in r.result()['nvml_unmapped']] == [777777]
    # PID 600 reused by a process that also holds a GPU: not the process NVML listed
    w.add(600, 1, ['python3', 'web.py'], fds=['/dev/nvidia0'])
    assert r.select(w.snapshot()) == {}


def test_pids_name_the_processes_of_the_first_scan():
    w = World()
    w.add(610, 1, ['python3', 'train.py'])
    r = reaper(w, pids=[610, 611])
    assert sorted(r.select(w.snapshot())) == [610]
    w.add(611, 1, ['python3', 'web.py'])       # PID 611 appears only later
    del w.table[610]
    w.add(610, 1, ['python3', 'other.py'])     # and 610 is reused
    assert r.select(w.snapshot()) == {}


@pytest.mark.parametrize('path,held', [
    ('/dev/nvidia0', True), ('/dev/nvidia15', True), ('/dev/nvidiactl', True), ('/dev/nvidia-uvm', True),
    ('/dev/nvidia-uvm-tools', True), ('/dev/nvidia-modeset', True), ('/dev/nvidia-caps/nvidia-cap1', False),
    ('/dev/nvidiax', False), ('/dev/null', False), ('socket:[4242]', False), ('/tmp/dev/nvidia0', False),
])
def test_device_matcher_follows_the_default_globs(path, held):
    assert device_matcher(DEFAULT_DEVICES)(path) is held


def test_device_matcher_of_no_globs_matches_nothing():
    assert device_matcher(())('/dev/nvidia0') is False
    assert device_matcher(('/dev/dri/card*', '/dev/nvidia0'))('/dev/dri/card1') is True

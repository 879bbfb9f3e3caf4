# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import json
import os
import re
import signal

import pytest

from ansible_collections.gpuops.host.plugins.module_utils._namespaces import Place
from ansible_collections.gpuops.host.plugins.module_utils._procs import Proc
from ansible_collections.gpuops.host.plugins.module_utils._nvml import NvmlError
from ansible_collections.gpuops.host.plugins.module_utils._reap import Reaper, ReapFailure, reap
from ansible_collections.gpuops.host.plugins.module_utils._reap_options import (
    SGLANG_PATTERNS, SGLANG_TITLES, ReapError, parse_options, parse_signal,
)
from ansible_collections.gpuops.host.plugins.module_utils._reap_selection import Phase, Target, device_matcher
from ansible_collections.gpuops.host.plugins.module_utils._verify import SelectionError, Verification

HOST_NS = 'pid:[4026531836]'

SELF = 900      # the module's process in the fake world; its parent is 899 (the ansible shell)


class World:
    """A process table with a fake clock: processes exit when signals and time say so.

    Behaviour on the polite signal (``on_term``): ``('exit', seconds)``, ``('drain', seconds)``
    (exit and SIGKILL its own descendants then, as an SGLang server does), ``('spawn', pid)``
    (fork a new child at once, holding the parent's open files, then exit a second later), or ``'ignore'``. SIGKILL ends a
    process at once unless it is in state D. An exited process becomes a zombie while its
    parent lives, else it disappears. A pending ``'unmap'`` empties a command line, as an
    exiting process shows it before its exit.
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
        self.ns = {}            # pid -> PID namespace, HOST_NS unless given
        self.cgroups = {}
        self.owners = {}
        self.denied = set()     # PIDs whose environ and fds cannot be read
        self.eperm = set()      # PIDs that refuse signals with EPERM
        self.mounted_with = None
        self.init_reaps = True  # False: init leaves its zombies (loaded, or a PID 1 that never reaps)
        self.add(1, 0, ['/sbin/init'], comm='systemd', exe='/usr/lib/systemd/systemd')
        self.add(2, 0, [], comm='kthreadd', flags=0x00200000)
        self.add(899, 1, ['/bin/sh', '-c', 'python3 AnsiballZ_gpu_reap.py && sleep 0'], comm='sh', exe='/bin/sh')
        self.add(SELF, 899, ['python3', 'AnsiballZ_gpu_reap.py'], comm='python3', exe='/usr/bin/python3.11')

    def add(self, pid, ppid, cmdline, comm=None, exe='/usr/bin/python3.11', state='S', env=None, fds=(),
            on_term=('exit', 0.5), flags=0, sid=None, pgid=None, ns=HOST_NS, cgroup='0::/user.slice', owner='root'):
        comm = comm or (cmdline[0].split('/')[-1][:15] if cmdline else '?')
        self.next_start += 1
        sid = pid if sid is None else sid
        self.table[pid] = Proc(pid, ppid, state, comm, self.next_start, pgid=sid if pgid is None else pgid, sid=sid,
                               flags=flags, cmdline=cmdline, exe=exe)
        self.ns[pid] = ns
        self.cgroups[pid] = cgroup
        self.owners[pid] = owner
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
        if action == 'unmap':
            # exiting: /proc/PID/cmdline reads empty once the memory is released, before the exit
            self.table[pid].cmdline = []
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
        for zpid in [p for p, z in self.table.items() if z.zombie and z.ppid == 1 and self.init_reaps]:
            del self.table[zpid]

    # -- the ProcFS interface --

    def _copy(self, p):
        return Proc(p.pid, p.ppid, p.state, p.comm, p.start, p.pgid, p.sid, p.flags, list(p.cmdline), p.exe)

    def snapshot(self):
        return dict((pid, self._copy(p)) for pid, p in self.table.items())

    def stat(self, pid):
        return self._copy(self.table[pid]) if pid in self.table else None

    def environ(self, pid, denied=None):
        if pid in self.denied:
            denied.add(pid)
            return None
        return dict(self.env[pid]) if pid in self.table and not self.table[pid].zombie else None

    def open_files(self, pid, denied=None):
        if pid in self.denied:
            denied.add(pid)
            return []
        return list(self.fds[pid]) if pid in self.table and not self.table[pid].zombie else []

    def pid_namespace(self, pid):
        return self.ns.get(pid) if pid in self.table else None

    def cgroup(self, pid):
        return self.cgroups.get(pid, '') if pid in self.table else ''

    def owner(self, pid):
        return self.owners.get(pid) if pid in self.table else None

    def hidden(self):
        return self.mounted_with

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
        if proc.pid in self.eperm:
            raise PermissionError(1, 'Operation not permitted')
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
                # a forked child holds its parent's open files
                self.add(arg, pid, ['python3', '-c', 'compile worker'], on_term='ignore', fds=self.fds[pid])
                self.pending.append((self.now + 1.0, pid, 'exit'))
            else:
                self.pending.append((self.now + arg, pid, what))

    def signals_to(self, pid):
        return [name for dummy, p, name in self.sent if p == pid]


def params(**kw):
    """The module's parameters as the argument spec gives them: every default filled in."""
    base = dict(patterns=None, presets=None, environ=None, pids=None, descendants=True, sessions=True,
                other_namespaces=False, nvml_processes=False, device_holders=False, devices=None, max_processes=512,
                protect=None, protect_defaults=True, kill_mode='mixed', term_signal='SIGTERM', term_timeout=30.0,
                kill_timeout=10.0, protect_gateways=True, users=None)
    base.update(kw)
    return base


def reaper(world, nvml_listing=None, gpu_devices=None, euid=0, module_env=None, **kw):
    place = Place(world, SELF, environ=module_env or {})
    return Reaper(parse_options(params(**kw)), world, SELF, place, nvml_listing=nvml_listing,
                  gpu_devices=gpu_devices, euid=euid, clock=world.clock, sleep=world.sleep)


def planned(r):
    r.plan()
    return r.result()


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
    ({'pids': [5], 'term_timeout': -1.0}, 'term_timeout must be a finite number of seconds, 0 or more; got -1.0'),
    ({'pids': [5], 'kill_timeout': float('nan')}, 'kill_timeout must be a finite number of seconds'),
    ({'pids': [5], 'term_timeout': float('inf')}, 'term_timeout must be a finite number of seconds'),
    ({'pids': [5], 'kill_timeout': float('-inf')}, 'kill_timeout must be a finite number of seconds'),
    ({'patterns': ['.*']}, "patterns: '.*' matches the empty string, so it would select every process"),
    ({'patterns': ['|']}, "patterns: '|' matches the empty string"),
    ({'patterns': ['^sglang::', 'x?']}, "patterns: 'x?' matches the empty string"),
    ({'patterns': ['(?:)']}, "matches the empty string"),
    ({'environ': {'PATH': ''}}, "environ[PATH]: '' matches the empty string"),
    ({'environ': {'GPUOPS_RUN': '.*'}}, "environ[GPUOPS_RUN]: '.*' matches the empty string"),
    ({'device_holders': True, 'devices': ['/*']}, "devices: '/*' may match files other than /dev/nvidia*"),
    ({'device_holders': True, 'devices': ['/dev/*']}, "devices: '/dev/*' may match files other than"),
    ({'device_holders': True, 'devices': ['/dev/nvidia0/../null']}, "may match files other than"),
    ({'device_holders': True, 'devices': ['/dev/nvidia*']}, "'/dev/nvidia*' matches /dev/nvidiactl"),
    ({'device_holders': True, 'devices': ['/dev/nvidia-uvm']}, "matches /dev/nvidia-uvm, which every CUDA"),
    ({'pids': [5], 'max_processes': 0}, 'max_processes must be 1 or more'),
    ({'pids': [5], 'term_signal': 'SIGFOO'}, "term_signal: unknown signal 'SIGFOO'"),
    ({'pids': [5], 'term_signal': '99'}, "term_signal: unknown signal '99'"),
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
    assert parse_options(params(device_holders=True, devices=['/dev/nvidia5'])).device_holders


def test_protect_defaults_false_keeps_only_given_names():
    assert parse_options(params(pids=[5], protect=['x'], protect_defaults=False)).protect == {'x'}
    assert 'nvidia-persistenced' in parse_options(params(pids=[5])).protect


# -- the sglang preset -------------------------------------------------------------------------

@pytest.mark.parametrize('cmdline, selected', [
    ('python -m sglang.launch_server --model-path /m --tp-size 4', True),
    ('python3 -X faulthandler -m sglang.launch_server --model-path /m', True),
    ('python3 -Xfaulthandler -m sglang.launch_server --model-path /m', True),
    ('python3 -W ignore -m sglang.launch_server --model-path /m', True),
    ('python3 -W ignore::DeprecationWarning -X faulthandler -u -m sglang.launch_server --port 30000', True),
    ('python3 -u -m sglang.launch_server --model-path /m', True),
    ('python3 -O -m sglang.launch_server --model-path /m', True),
    ('python3 -OO -B -m sglang.launch_server --model-path /m', True),
    ('python3 -um sglang.launch_server --model-path /m', True),
    ('/opt/venv/bin/python3.11 -m sglang.launch_server --model-path /m', True),
    ('/opt/venv/bin/sglang serve --model-path /m', True),
    ('/usr/bin/python3 -X faulthandler /opt/venv/bin/sglang serve --model-path /m', True),
    ('sglang::scheduler_TP3', True),
    ('sglang::scheduler_DP0_PP1_TP0_EP0', True),
    ('sglang::detokenizer', True),
    ('sglang::data_parallel_controller', True),
    ('python3 -c import sglang; sglang -m sglang.launch_server', False),
    ('python3 -m sglang.launch_serverx', False),
    ('less /opt/venv/bin/sglang serve', False),
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
    ('python3 train.py -m sglang.launch_server', False),
    ('tail -f /var/log/sglang/scheduler_TP3.log', False),
    ('vim /opt/sglang/serve.py', False),
    ('bash -c python -m sglang.launch_server', False),
    # every title the releases set (srt/managers/*.py), and a co-launched server (sglang-router launch_server.py)
    ('sglang::scheduler', True),
    ('sglang::detokenizer_router', True),
    ('sglang::tokenizer_worker:4242', True),
    ('sglang::server', True),
    ('sglang::scheduler_TP3   ', True),
    # the SGLang Model Gateway (sglang-router launch_router.py) and other sglang:: titles are no server
    ('sglang::router', False),
    ('sglang::router  ', False),
    ('sglang::', False),
    ('sglang::tokenizer_worker', False),
    ('sglang::serverless', False),
    ('sglang::schedulerx', False),
    ('python3 -m sglang_router.launch_router --worker-urls http://127.0.0.1:30000', False),
    ('python3 -m sglang_router.launch_server --model-path /m --dp-size 2', False),
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
    assert planned[101].matched_by == ['pattern ' + SGLANG_PATTERNS[2]]
    assert w.sent == []


def test_bare_pattern_still_spares_the_module_and_its_ancestors():
    w = World()
    w.add(300, 1, ['python3', 'unrelated.py'])
    r = reaper(w, patterns=['python3|sh'], protect_defaults=False)
    r.plan()
    result = r.result()
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
    reasons = dict((p['pid'], p['reason']) for p in r.result()['protected'])
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
    assert result['zombies'] == [{'pid': 102, 'ppid': 100, 'pgid': 102, 'sid': 102, 'name': 'sglang::schedul',
                                  'cmdline': '[sglang::schedul]',
                                  'parent_name': 'python3',
                                  'parent_cmdline': 'python3 -m sglang.launch_server --tp-size 2'}]
    assert 102 not in stopped(result)
    assert result['remaining'] == []


@pytest.mark.parametrize('later', ['parent exiting', 'in init'])
def test_a_zombie_is_reported_with_the_parent_that_left_it(later):
    # Scans while the launcher stops see its zombie child again: first while the launcher
    # exits, its command line already unreadable (the main thread gone, other threads not yet)
    # and the child still its own; then, the launcher gone, re-parented to an init that has not
    # collected it yet, found as an orphan of the session beside a child that lingers. The
    # report names the launcher, which left it uncollected, either way.
    w = World()
    w.init_reaps = later != 'in init'
    w.add(100, 1, ['python3', '-m', 'sglang.launch_server', '--tp-size', '1'], on_term=('exit', 2.0))
    w.add(101, 100, ['sglang::detokenizer'], comm='sglang::detoke', sid=100, on_term='ignore')
    w.add(102, 100, [], comm='python3', state='Z', sid=100)
    if later == 'parent exiting':
        w.pending.append((1.0, 100, 'unmap'))
    r = reaper(w, presets=['sglang'], term_timeout=30)
    r.run()
    result = r.result()
    assert (102 in w.table) is (later == 'in init')
    assert result['zombies'] == [{'pid': 102, 'ppid': 100, 'pgid': 100, 'sid': 100, 'name': 'python3',
                                  'cmdline': '[python3]', 'parent_name': 'python3',
                                  'parent_cmdline': 'python3 -m sglang.launch_server --tp-size 1'}]
    assert stopped(result) == [100, 101] and result['remaining'] == []
    assert w.signals_to(101) == ['SIGKILL'] and w.signals_to(102) == []


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
    unmapped = dict((u['pid'], u['reason']) for u in r.selection.nvml_unmapped)
    assert unmapped == {601: 'holds no /dev/nvidia* here', 777777: 'no such process here'}


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
    w.add(803, 1, ['/usr/bin/nv-hostengine'], comm='nv-hostengine', exe='/usr/bin/nv-hostengine',
          fds=['/dev/nvidia0'])
    r = reaper(w, presets=['sglang'], device_holders=True, devices=['/dev/nvidia0'])
    r.run()
    result = r.result()
    assert w.sent == [(0.0, 100, 'SIGTERM'), (2.0, 800, 'SIGTERM')]
    assert stopped(result) == [100, 101, 110, 111, 800]
    holder = [s for s in result['stopped'] if s['pid'] == 800][0]
    assert holder['matched_by'] == ['device /dev/nvidia0']
    assert result['protected'] == [{'pid': 803, 'ppid': 1, 'pgid': 803, 'sid': 803, 'name': 'nv-hostengine',
                                    'cmdline': '/usr/bin/nv-hostengine', 'matched_by': ['device /dev/nvidia0'],
                                    'reason': 'protected name nv-hostengine'}]
    assert 801 in w.table and 802 in w.table and 803 in w.table


def test_check_mode_predicts_both_phases_and_signals_nothing():
    w = World()
    w.sglang(tp=1)
    w.add(800, 1, ['python3', 'kernel.py'], fds=['/dev/nvidia0'])
    r = reaper(w, presets=['sglang'], device_holders=True, devices=['/dev/nvidia0'])
    r.plan()
    result = r.result()
    assert [s['pid'] for s in result['would_stop']] == [100, 101, 110, 111, 800]
    assert result['changed'] is True and result['stopped'] == [] and w.sent == []


def test_nothing_selected_is_not_changed():
    w = World()
    r = reaper(w, presets=['sglang'], device_holders=True, devices=['/dev/nvidia0'])
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
    assert r.escalation.stop(Phase(targets)) == []
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
    assert r.selection.choose(w.snapshot()) == {}


def test_pids_name_the_processes_of_the_first_scan():
    w = World()
    w.add(610, 1, ['python3', 'train.py'])
    r = reaper(w, pids=[610, 611])
    assert sorted(r.selection.choose(w.snapshot())) == [610]
    w.add(611, 1, ['python3', 'web.py'])       # PID 611 appears only later
    del w.table[610]
    w.add(610, 1, ['python3', 'other.py'])     # and 610 is reused
    assert r.selection.choose(w.snapshot()) == {}


@pytest.mark.parametrize('path,held', [
    ('/dev/nvidia0', True), ('/dev/nvidia15', True), ('/dev/nvidiactl', True), ('/dev/nvidia-uvm', True),
    ('/dev/nvidia-uvm-tools', True), ('/dev/nvidia-modeset', True), ('/dev/nvidia-caps/nvidia-cap1', False),
    ('/dev/nvidiax', False), ('/dev/null', False), ('socket:[4242]', False), ('/tmp/dev/nvidia0', False),
])
def test_device_matcher_follows_the_default_globs(path, held):
    assert device_matcher(('/dev/nvidia[0-9]*', '/dev/nvidiactl', '/dev/nvidia-uvm', '/dev/nvidia-uvm-tools',
                           '/dev/nvidia-modeset'))(path) is held


def test_device_matcher_of_no_globs_matches_nothing():
    assert device_matcher(())('/dev/nvidia0') is False
    assert device_matcher(('/dev/dri/card*', '/dev/nvidia0'))('/dev/dri/card1') is True


# -- sessions and orphans -----------------------------------------------------------------------

def test_a_selected_session_leader_brings_its_session_and_the_session_keeps_its_orphans():
    w = World()
    w.add(100, 1, ['python3', '-m', 'sglang.launch_server'], on_term=('exit', 1.0))
    w.add(101, 100, ['sglang::scheduler_TP0'], sid=100)
    # a compile worker that double-forked away from the tree, still in the server's session
    w.add(102, 1, ['python3', '-c', 'compile worker'], sid=100)
    # a login shell's session: the shell is not selected, so its other jobs are not either
    w.add(200, 1, ['-bash'], sid=200, exe='/bin/bash')
    w.add(201, 200, ['python3', '-m', 'sglang.launch_server', '--port', '30001'], sid=200)
    w.add(202, 200, ['python3', 'train.py'], sid=200, fds=['/dev/nvidia5'])
    chosen = planned(reaper(w, presets=['sglang']))
    matched = dict((p['pid'], p['matched_by']) for p in chosen['would_stop'])
    assert sorted(matched) == [100, 101, 102, 201]
    assert matched[102] == ['session 100']
    assert [f['pid'] for f in chosen['foreign']] == [202]


def test_orphans_of_a_session_whose_leader_exited_are_selected_with_it():
    w = World()
    # the launcher (PID 100, session leader) is gone; its scheduler and tracker were re-parented to PID 1
    w.add(101, 1, ['sglang::scheduler_TP0'], sid=100)
    w.add(111, 1, ['python3', '-c', 'from multiprocessing.resource_tracker import main;main(5)'], sid=100)
    # another session whose leader is gone, not named by any selector
    w.add(301, 1, ['python3', 'train.py'], sid=300)
    chosen = planned(reaper(w, presets=['sglang']))
    matched = dict((p['pid'], p['matched_by']) for p in chosen['would_stop'])
    assert matched == {101: ['pattern ' + SGLANG_PATTERNS[2]], 111: ['orphan of session 100']}


def test_jobs_of_a_closed_login_shell_are_not_orphans_of_each_other():
    w = World()
    # `nohup python -m sglang.launch_server &` and `nohup python train.py &` from one login shell
    # (session 200, now gone): job control gave each job a process group of its own
    w.add(201, 1, ['python3', '-m', 'sglang.launch_server'], sid=200, pgid=201)
    w.add(202, 201, ['sglang::scheduler_TP0'], sid=200, pgid=201)
    w.add(203, 1, ['python3', '-c', 'from multiprocessing.resource_tracker import main;main(5)'], sid=200, pgid=201)
    w.add(210, 1, ['python3', 'train.py'], sid=200, pgid=210, fds=['/dev/nvidia5'])
    chosen = planned(reaper(w, presets=['sglang']))
    matched = dict((p['pid'], p['matched_by']) for p in chosen['would_stop'])
    assert matched == {201: ['pattern ' + SGLANG_PATTERNS[0]], 202: ['pattern ' + SGLANG_PATTERNS[2]],
                       203: ['orphan of session 200']}
    assert [f['pid'] for f in chosen['foreign']] == [210]


@pytest.mark.parametrize('cmdline', [
    ['sglang::router'],
    ['/opt/router/bin/python3', '-m', 'sglang_router.launch_router', '--worker-urls', 'http://127.0.0.1:30000'],
    ['/opt/router/bin/smg', 'launch', '--worker-urls', 'http://127.0.0.1:30000'],
])
def test_the_gateway_in_a_server_session_is_never_signalled(cmdline):
    w = World()
    w.sglang(tp=2)
    # started from the server's own session (one script that setsid-ed both)
    w.add(150, 100, cmdline, sid=100)
    chosen = planned(reaper(w, presets=['sglang']))
    assert 150 not in [p['pid'] for p in chosen['would_stop']]
    assert [(p['pid'], p['reason']) for p in chosen['protected']] == [(150, 'SGLang Model Gateway')]


def colaunch(w):
    """`python -m sglang_router.launch_server`: the launcher (retitled sglang::router), a worker titled
    sglang::server in a process group of its own, its scheduler and detokenizer."""
    w.add(400, 1, ['sglang::router'])
    w.add(401, 400, ['sglang::server'], sid=400, pgid=401)
    w.add(402, 401, ['sglang::scheduler_TP0'], sid=400, pgid=401, fds=['/dev/nvidia0'])
    w.add(403, 401, ['sglang::detokenizer'], sid=400, pgid=401)


def test_a_co_launch_is_left_to_its_launcher_and_named():
    w = World()
    colaunch(w)
    chosen = planned(reaper(w, presets=['sglang']))
    assert chosen['would_stop'] == []
    reasons = dict((p['pid'], p['reason']) for p in chosen['protected'])
    assert reasons == {
        401: 'started by the SGLang Model Gateway 400: stopped through it, or when named in pids',
        402: 'started by the SGLang Model Gateway 400: stopped through it, or when named in pids',
        403: 'started by the SGLang Model Gateway 400: stopped through it, or when named in pids'}


def test_a_co_launched_server_named_in_pids_is_stopped_with_its_tree_and_the_launcher_is_not():
    w = World()
    colaunch(w)
    chosen = planned(reaper(w, presets=['sglang'], pids=[401]))
    assert sorted(p['pid'] for p in chosen['would_stop']) == [401, 402, 403]
    assert [p['pid'] for p in chosen['protected']] == []


def test_protect_gateways_false_lets_the_preset_select_the_co_launched_titles():
    w = World()
    colaunch(w)
    chosen = planned(reaper(w, presets=['sglang'], protect_gateways=False))
    assert sorted(p['pid'] for p in chosen['would_stop']) == [401, 402, 403]


def test_sessions_false_keeps_to_matches_and_descendants():
    w = World()
    w.add(100, 1, ['python3', '-m', 'sglang.launch_server'])
    w.add(102, 1, ['python3', '-c', 'compile worker'], sid=100)
    assert sorted(reaper(w, presets=['sglang'], sessions=False).plan()) == [100]


# -- namespaces and containers ------------------------------------------------------------------

def test_processes_in_another_pid_namespace_or_container_are_seen_not_touched():
    w = World()
    w.sglang(tp=1)
    w.add(400, 1, ['python3', '-m', 'sglang.launch_server', '--port', '30001'], ns='pid:[4026532999]')
    w.add(401, 400, ['sglang::scheduler_TP0'], ns='pid:[4026532999]', sid=400)
    w.add(500, 1, ['sglang::scheduler_TP0'],
          cgroup='0::/system.slice/docker-%s.scope' % ('ab' * 32))
    r = reaper(w, presets=['sglang'])
    result = planned(r)
    assert sorted(p['pid'] for p in result['would_stop']) == [100, 101, 110, 111]
    where = dict((p['pid'], p['reason']) for p in result['other_namespaces'])
    assert where == {400: 'in another PID namespace (pid:[4026532999])',
                     401: 'in another PID namespace (pid:[4026532999])',
                     500: 'in container cgroup /system.slice/docker-%s.scope' % ('ab' * 32)}
    r = reaper(w, presets=['sglang'], other_namespaces=True)
    assert sorted(r.plan()) == [100, 101, 110, 111, 400, 401, 500]


def test_the_module_in_a_container_selects_in_its_own_container():
    w = World()
    container = '0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-%s.scope' % ('cd' * 32)
    for pid in (1, 899, SELF):
        w.cgroups[pid] = container
    w.add(100, 1, ['python3', '-m', 'sglang.launch_server'], cgroup=container)
    w.add(200, 1, ['python3', '-m', 'sglang.launch_server'], cgroup='0::/user.slice')
    assert sorted(reaper(w, presets=['sglang']).plan()) == [100, 200]


@pytest.mark.parametrize('cgroup, container', [
    ('0::/system.slice/docker-%s.scope' % ('a' * 64), '/system.slice/docker-%s.scope' % ('a' * 64)),
    ('12:pids:/docker/%s\n0::/' % ('b' * 64), '/docker/%s' % ('b' * 64)),
    ('0::/machine.slice/libpod-%s.scope/container' % ('c' * 64), '/machine.slice/libpod-%s.scope' % ('c' * 64)),
    ('0::/kubepods/burstable/pod7/%s' % ('d' * 64), '/kubepods/burstable/pod7/%s' % ('d' * 64)),
    ('0::/lxc.payload.web/init.scope', '/lxc.payload.web'),
    ('0::/machine.slice/machine-build.scope', '/machine.slice/machine-build.scope'),
    ('0::/user.slice/user-1000.slice/session-3.scope', None),
    ('0::/system.slice/docker.service', None),
    ('0::/system.slice/sglang.service', None),
])
def test_container_of(cgroup, container):
    from ansible_collections.gpuops.host.plugins.module_utils._namespaces import container_of
    assert container_of(cgroup) == container


def test_nvml_processes_is_refused_outside_the_host_pid_namespace():
    w = World()
    for pid in (1, 899, SELF):
        w.ns[pid] = 'pid:[4026532111]'
    with pytest.raises(ReapError) as e:
        reaper(w, nvml_processes=True, nvml_listing=[])
    assert str(e.value).startswith('nvml_processes: NVML lists processes by the PIDs of the host PID namespace '
                                   '(pid:[4026531836]), and gpu_reap runs in pid:[4026532111]')
    # a simulated node names its own namespace as the host's
    assert reaper(w, nvml_processes=True, module_env={'GPUOPS_HOST_PIDNS': 'pid:[4026532111]'})


# -- GPU holders outside the selection ----------------------------------------------------------

def test_foreign_gpu_holders_are_reported_with_user_command_and_gpu_not_signalled():
    w = World()
    w.sglang(tp=1, on_term=('drain', 0.5))
    w.add(700, 1, ['python3', 'train.py', '--epochs', '3'], fds=['/dev/nvidia5', '/dev/nvidiactl'], owner='alice')
    w.add(701, 1, ['python3', 'gpu-monitor.py'], fds=['/dev/nvidiactl'], owner='bob')
    w.add(702, 1, ['/usr/bin/nvidia-persistenced'], exe='/usr/bin/nvidia-persistenced', fds=['/dev/nvidiactl'])
    listing = [{'gpu_uuid': 'GPU-5', 'gpu_index': 5, 'pid': 700, 'used_mib': 20480}]
    r = reaper(w, presets=['sglang'], nvml_listing=listing, gpu_devices={5: {'index': 5, 'uuid': 'GPU-5'}})
    r.run()
    result = r.result()
    assert 700 in w.table and 701 in w.table and w.signals_to(700) == [] and w.signals_to(701) == []
    foreign = dict((f['pid'], f) for f in result['foreign'])
    assert sorted(foreign) == [700, 701]
    assert foreign[700]['user'] == 'alice'
    assert foreign[700]['cmdline'] == 'python3 train.py --epochs 3'
    assert foreign[700]['gpus'] == [{'device': '/dev/nvidia5', 'index': 5, 'uuid': 'GPU-5', 'used_mib': 20480}]
    assert foreign[701]['devices'] == ['/dev/nvidiactl'] and foreign[701]['gpus'] == []


def test_foreign_gpu_holders_are_read_while_the_servers_exit_and_those_gone_since_are_left_out():
    w = World()
    w.sglang(tp=1, on_term=('drain', 2.0))
    w.add(700, 1, ['python3', 'train.py'], fds=['/dev/nvidia5'], owner='alice')
    w.add(701, 1, ['python3', 'eval.py'], fds=['/dev/nvidia4'], owner='bob')
    w.pending.append((1.0, 701, 'exit'))  # bob's job ends while the server shuts down
    reads = []
    open_files = w.open_files
    w.open_files = lambda pid, denied=None: reads.append((w.now, pid)) or open_files(pid, denied)
    r = reaper(w, presets=['sglang'])
    r.run()
    result = r.result()
    # every process's files read once, right after the SIGTERM, not after the server's 2 s exit
    assert w.sent[0] == (0.0, 100, 'SIGTERM') and sorted(set(t for t, pid in reads)) == [0.0]
    assert [f['pid'] for f in result['foreign']] == [700]
    assert stopped(result) == [100, 101, 110, 111] and result['elapsed'] == pytest.approx(2.0, abs=0.05)


def test_a_gpu_holder_started_while_the_servers_exit_is_named_too():
    w = World()
    w.sglang(tp=1, on_term=('drain', 2.0))
    w.add(700, 1, ['python3', 'train.py'], fds=['/dev/nvidia5'], owner='alice')
    sleep = w.sleep

    def sleeping(seconds):
        sleep(seconds)
        if w.now >= 1.0 and 720 not in w.table:  # a monitor opens /dev/nvidiactl during the drain
            w.add(720, 1, ['python3', 'gpu_monitor.py'], fds=['/dev/nvidiactl'], owner='carol')
    w.sleep = sleeping
    r = reaper(w, presets=['sglang'])
    r.run()
    result = r.result()
    assert [(f['pid'], f['user'], f['devices']) for f in result['foreign']] == [
        (700, 'alice', ['/dev/nvidia5']), (720, 'carol', ['/dev/nvidiactl'])]


def test_a_gpu_holder_that_the_server_forks_as_it_exits_is_stopped_not_reported_as_foreign():
    w = World()
    w.add(100, 1, ['python3', '-m', 'sglang.launch_server'], fds=['/dev/nvidia0'], on_term=('spawn', 150))
    r = reaper(w, presets=['sglang'])
    r.run()
    result = r.result()
    assert stopped(result) == [100, 150] and w.signals_to(150) == ['SIGKILL']
    assert result['foreign'] == []


def test_a_forked_gpu_holder_that_cannot_be_stopped_is_reported_as_unsignalled_not_as_foreign():
    w = World()
    w.add(100, 1, ['python3', '-m', 'sglang.launch_server'], fds=['/dev/nvidia0'], on_term=('spawn', 150))
    w.eperm.add(150)
    r = reaper(w, presets=['sglang'])
    r.run()
    with pytest.raises(ReapFailure) as failure:
        r.result()
    assert [u['pid'] for u in failure.value.result['unsignalled']] == [150] and 150 in w.table
    assert failure.value.result['foreign'] == []


def test_with_device_holders_the_holders_of_the_second_phase_are_stopped_not_reported_as_foreign():
    w = World()
    w.sglang(tp=1, on_term=('drain', 1.0))
    w.add(700, 1, ['python3', 'train.py'], fds=['/dev/nvidia0'], on_term=('exit', 0.5))
    w.add(701, 1, ['python3', 'other.py'], fds=['/dev/nvidia4'])
    r = reaper(w, presets=['sglang'], device_holders=True, devices=['/dev/nvidia0'])
    r.run()
    result = r.result()
    assert stopped(result) == [100, 101, 110, 111, 700] and w.signals_to(700) == ['SIGTERM']
    assert [f['pid'] for f in result['foreign']] == [701]


def test_opt_in_stops_holders_of_the_given_gpus_only_term_first_and_term_for_late_holders():
    w = World()
    w.add(700, 1, ['python3', 'train.py'], fds=['/dev/nvidia5'], on_term='ignore')
    w.add(701, 1, ['python3', 'other.py'], fds=['/dev/nvidia4'])
    w.add(702, 1, ['python3', 'monitor.py'], fds=['/dev/nvidiactl'])
    w.add(703, 1, ['/usr/bin/nvidia-smi', '-l', '1'], exe='/usr/bin/nvidia-smi', fds=['/dev/nvidia5'])
    r = reaper(w, device_holders=True, devices=['/dev/nvidia5'], term_timeout=4, kill_timeout=2)
    # a holder that appears on GPU 5 one second into the wait
    w.pending.append((1.0, 701, 'noop'))
    original = w._act

    def act(pid, action):
        if action == 'noop':
            w.add(704, 1, ['python3', 'late.py'], fds=['/dev/nvidia5'], on_term='ignore')
        else:
            original(pid, action)
    w._act = act
    r.run()
    result = r.result()
    assert w.signals_to(700) == ['SIGTERM', 'SIGKILL']
    assert w.signals_to(704) == ['SIGTERM', 'SIGKILL']
    late_term, late_kill = [t for t, p, s in w.sent if p == 704]
    assert late_kill - late_term >= 4.0
    assert w.signals_to(701) == [] and w.signals_to(702) == [] and w.signals_to(703) == []
    assert [p['reason'] for p in result['protected']] == ['protected name nvidia-smi']


# -- refusals before any signal -----------------------------------------------------------------

def test_a_selection_over_max_processes_is_refused_in_check_mode_and_run():
    w = World()
    w.sglang(tp=4)
    for run in ('plan', 'run'):
        r = reaper(w, presets=['sglang'], max_processes=5)
        with pytest.raises(ReapError) as e:
            getattr(r, run)()
        assert str(e.value).startswith('the selection has 7 processes, more than max_processes (5), so nothing was '
                                       'signalled')
    assert w.sent == []


def test_hidepid_without_root_fails_instead_of_finding_nothing():
    w = World()
    w.mounted_with = 'hidepid=2'
    for run in ('plan', 'run'):
        with pytest.raises(ReapError) as e:
            getattr(reaper(w, presets=['sglang'], euid=1000), run)()
        assert str(e.value).startswith('/proc is mounted with hidepid=2 and gpu_reap runs as UID 1000: processes '
                                       'of other users are invisible')
    assert planned(reaper(w, presets=['sglang'], euid=0))['changed'] is False


def test_unreadable_environ_fails_the_environ_selector_before_any_signal():
    w = World()
    w.add(500, 1, ['sglang::scheduler_TP0'], env={'GPUOPS_RUN': 'x'})
    w.add(501, 1, ['python3', 'other.py'])
    w.denied = {501}
    with pytest.raises(ReapError) as e:
        reaper(w, environ={'GPUOPS_RUN': '^x$'}, euid=1000).run()
    assert 'cannot read the environment or open files of 1 processes (permission denied, UID 1000): 501' in str(e.value)
    assert w.sent == []


def test_eperm_ends_in_a_report_of_what_was_stopped_and_what_could_not_be():
    w = World()
    w.add(100, 1, ['python3', '-m', 'sglang.launch_server'], on_term=('exit', 0.5))
    w.add(200, 1, ['python3', '-m', 'sglang.launch_server', '--port', '30001'])
    w.eperm = {200}
    r = reaper(w, presets=['sglang'], term_timeout=2)
    r.run()
    with pytest.raises(ReapFailure) as e:
        r.result()
    assert str(e.value) == ('1 process could not be signalled: 200 (python3 -m sglang.launch_server --port 30001): '
                            'EPERM sending SIGTERM: Operation not permitted. stopped 1: 100')
    result = e.value.result
    assert [s['pid'] for s in result['stopped']] == [100]
    assert result['unsignalled'][0]['error'] == 'EPERM sending SIGTERM: Operation not permitted'
    assert result['remaining'] == []


def test_a_node_container_can_declare_its_own_namespace_the_hosts():
    w = World()
    for pid in (1, 899, SELF):
        w.ns[pid] = 'pid:[4026532111]'
    assert reaper(w, nvml_processes=True, module_env={'GPUOPS_HOST_PIDNS': 'own'})


# -- the wait for clean GPUs after the stop (verify) --------------------------------------------

class GpuView:
    """NVML snapshots of a World's GPUs: GPU i holds 8000 MiB of process ``holders[i]`` while it
    lives, and for ``lag`` seconds after its exit (the driver's release)."""

    def __init__(self, world, holders, lag=0.0, fail_after=None):
        self.world = world
        self.holders = holders
        self.lag = lag
        self.exited = {}
        self.reads = 0
        self.fail_after = fail_after

    def snapshot(self):
        self.reads += 1
        if self.fail_after is not None and self.reads > self.fail_after:
            raise NvmlError('NVML failed to count the GPUs: GPU is lost', code='NVML_ERROR_GPU_IS_LOST')
        gpus = []
        for index in sorted(self.holders):
            pid = self.holders[index]
            alive = pid in self.world.table and not self.world.table[pid].zombie
            if not alive:
                self.exited.setdefault(pid, self.world.now)
            held = alive or self.world.now < self.exited[pid] + self.lag
            command = ' '.join(self.world.table[pid].cmdline) if alive else None
            listed = [{'pid': pid, 'used_mib': 8000, 'exists': True, 'name': command, 'cmdline': command,
                       'user': 'root', 'where': None}] if alive else []
            gpus.append({'index': index, 'uuid': 'GPU-%d' % index, 'name': 'NVIDIA H200', 'pci_bus_id': None,
                         'total_mib': 143771, 'used_mib': 8000 if held else 0, 'reserved_mib': 700,
                         'free_mib': 0, 'v1_used_mib': 0, 'processes': listed, 'error': None})
        return {'driver_version': '570.133.20', 'count': len(gpus), 'gpus': gpus, 'memory_api': 'v2'}


def verification(**kw):
    base = dict(gpus=[], max_used_mib=32, allow_processes=False, v1_reserved_mib=None, expected_count=2,
                timeout=60.0, poll_interval=0.1)
    base.update(kw)
    return Verification(base, prefix='verify.')


def test_verify_reads_the_gpus_from_the_last_exit_until_they_are_clean():
    w = World()
    w.sglang(tp=2)          # the tree exits 2 s after SIGTERM
    gpus = GpuView(w, {0: 101, 1: 102}, lag=0.25)
    result = reap(reaper(w, presets=['sglang']), False, verification(), gpus, clock=w.clock, sleep=w.sleep)
    report = result['verify']
    assert report['clean'] is True and report['count'] == 2
    # no reading before the exit; then one every 0.1 s until the driver's release 0.25 s later
    assert report['polls'] == 4 and report['elapsed'] == pytest.approx(0.3, abs=0.01)
    assert gpus.exited == {101: pytest.approx(2.0, abs=0.03), 102: pytest.approx(2.0, abs=0.03)}
    assert result['elapsed'] == pytest.approx(2.3, abs=0.05)


def test_verify_fails_naming_the_holder_and_what_was_stopped():
    w = World()
    w.sglang(tp=2)
    w.add(700, 1, ['python3', 'train.py'])      # another tenant's job on GPU 1, not selected
    gpus = GpuView(w, {0: 101, 1: 700})
    with pytest.raises(ReapFailure) as e:
        reap(reaper(w, presets=['sglang']), False, verification(timeout=1), gpus, clock=w.clock, sleep=w.sleep)
    assert str(e.value).splitlines() == [
        '1 of 2 checked GPUs not clean after 1.0 s (timeout 1 s)',
        'GPU 1 GPU-1: 8000 MiB used by pid 700 (user root: python3 train.py)',
        'stopped 5 processes: 100, 101, 102, 110, 111']
    assert stopped(e.value.result) == [100, 101, 102, 110, 111]
    assert e.value.result['verify']['dirty'] == ['GPU-1'] and 700 in w.table


def test_verify_is_not_run_when_a_target_survives_sigkill():
    w = World()
    w.add(909, 1, ['sglang::scheduler_TP3'], comm='sglang::schedul', state='D', on_term='ignore')
    gpus = GpuView(w, {0: 909})
    with pytest.raises(ReapFailure) as e:
        reap(reaper(w, presets=['sglang'], term_timeout=1, kill_timeout=1), False, verification(), gpus,
             clock=w.clock, sleep=w.sleep)
    assert str(e.value).startswith('1 process still alive 1.0 s after SIGKILL: 909 (D, sglang::scheduler_TP3)')
    assert 'verify' not in e.value.result and gpus.reads == 0


def test_gpus_named_for_the_verification_are_looked_up_before_any_signal():
    w = World()
    w.sglang(tp=2)
    with pytest.raises(SelectionError) as e:
        reap(reaper(w, presets=['sglang']), False, verification(gpus=['5']), GpuView(w, {0: 101, 1: 102}),
             clock=w.clock, sleep=w.sleep)
    assert str(e.value) == 'GPU 5 not found: the host shows 2 GPUs (0 GPU-0, 1 GPU-1)'
    assert w.sent == []


def test_check_mode_with_verify_plans_and_does_not_wait():
    w = World()
    w.sglang(tp=2)
    gpus = GpuView(w, {0: 101, 1: 102})
    result = reap(reaper(w, presets=['sglang']), True, verification(gpus=['0']), gpus, clock=w.clock, sleep=w.sleep)
    assert sorted(p['pid'] for p in result['would_stop']) == [100, 101, 102, 110, 111]
    assert 'verify' not in result and w.sent == [] and w.now == 0.0
    assert gpus.reads == 1      # the lookup of GPU 0, as a real run makes it first


def test_an_nvml_error_after_the_stop_fails_with_what_was_stopped():
    w = World()
    w.sglang(tp=2)
    gpus = GpuView(w, {0: 101, 1: 102}, fail_after=0)
    with pytest.raises(ReapFailure) as e:
        reap(reaper(w, presets=['sglang']), False, verification(), gpus, clock=w.clock, sleep=w.sleep)
    assert str(e.value) == ('stopped 5 processes, then could not read the GPUs: NVML failed to count the GPUs: '
                            'GPU is lost')
    assert e.value.result['nvml_error'] == 'NVML_ERROR_GPU_IS_LOST' and stopped(e.value.result) == [100, 101, 102, 110, 111]


CONTRACTS = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'sim', 'standin', 'contracts')


def _samples(title):
    """Process titles that one setproctitle call of a contract can set: its literal, and its f-string filled in
    as the release fills it (scheduler.py: the parallel ranks, spaces made underscores; multi_tokenizer_mixin.py:
    the worker's PID)."""
    if not title['formatted']:
        return [title['literal']]
    if title['literal'] == 'sglang::scheduler':
        return ['sglang::scheduler', 'sglang::scheduler_TP3', 'sglang::scheduler_DP0_PP1_TP0_EP0']
    return [title['literal'] + '4242']


@pytest.mark.parametrize('release', ['0.5.23', '0.5.14'])
def test_the_preset_names_every_title_of_the_release_and_no_other(release):
    with open(os.path.join(CONTRACTS, 'sglang-%s.json' % release)) as f:
        titles = json.load(f)['titles']
    for title in titles:
        for sample in _samples(title):
            assert any(re.search(p, sample) for p in SGLANG_PATTERNS), (sample, title['file'])
    # each title of the preset is one that the release sets, or the co-launched server of sglang-router 0.3.2
    literals = set(t['literal'].split('::', 1)[1].rstrip(':') for t in titles) | {'server'}
    named = set(re.sub(r'[(:].*', '', t) for t in SGLANG_TITLES)
    assert named == literals


def test_users_spares_another_user_s_server_unless_named():
    w = World()
    w.sglang(tp=2)
    w.add(500, 1, ['python3', '-m', 'sglang.launch_server', '--port', '31000'], owner='bob')
    w.add(501, 500, ['sglang::scheduler_TP0'], sid=500, owner='bob')
    chosen = planned(reaper(w, presets=['sglang'], users=['root', 'sglang']))
    assert 500 not in [p['pid'] for p in chosen['would_stop']] and 100 in [p['pid'] for p in chosen['would_stop']]
    reasons = dict((p['pid'], p['reason']) for p in chosen['protected'])
    assert reasons[500] == reasons[501] == "another user's process (bob)"
    named = planned(reaper(w, presets=['sglang'], users=['root'], pids=[500]))
    assert 500 in [p['pid'] for p in named['would_stop']]

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_server's state stopped through main(): the whole stop (its stop option) in one call, against real
processes of this test (each selected by a pattern only it carries) and the simulated NVML. A bare process that listens
nowhere is found, sent nothing (it is listed undrained), stopped by gpu_reap's escalation, and the GPUs are verified."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from ansible_collections.gpuops.host.plugins.module_utils import _reap as reap_run
from ansible_collections.gpuops.host.plugins.module_utils._lock import HostLock
from ansible_collections.gpuops.host.plugins.modules import sglang_server


@pytest.fixture
def server(tmp_path):
    """A 'server' whose command line carries a mark only it has, and a child of it, as a launcher and a scheduler."""
    mark = 'gpuops-test-%s' % uuid.uuid4().hex
    code = ('import subprocess, sys, time; subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]);'
            ' time.sleep(60)')
    parent = subprocess.Popen([sys.executable, '-c', code, mark])
    child = None
    for dummy in range(100):
        try:
            with open('/proc/%d/task/%d/children' % (parent.pid, parent.pid)) as f:
                child = int(f.read().split()[0])
            break
        except (IndexError, ValueError):
            time.sleep(0.05)
    args = {'state': 'stopped',
            'stop': {'patterns': [mark], 'presets': [], 'record_path': str(tmp_path / 'server.json'),
                     'stop_timeout': 10, 'reap': {'kill_timeout': 5}, 'settle': 0.3}}
    yield args, parent, child
    for pid in (child, parent.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except (OSError, TypeError):
            pass
    parent.wait()


def stopping(args, **options):
    """ARGS (state stopped) with OPTIONS of the stop added to its stop."""
    return dict(args, stop=dict(args['stop'], **options))


def alive(pid):
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rpartition(')')[2].split()[0] != 'Z'
    except OSError:
        return False


def test_stop_finds_stops_and_verifies_in_one_call_then_changes_nothing(run_module, node, server):
    args, parent, child = server
    node.allocate(1, 8123, pid=parent.pid)
    node.set_release_lag(300)
    args = stopping(args, verify={'expected_count': 4, 'timeout': 30})
    outcome, result, warnings = run_module(sglang_server, args)
    assert outcome == 'exit', result
    assert result['changed'] and result['signalled']
    assert [s['pid'] for s in result['servers']] == [parent.pid]
    # nothing of it listens: sent nothing, not drained, and still stopped
    assert [u['pid'] for u in result['undrained']] == [parent.pid]
    # mixed: SIGTERM to the main process only; its child, left behind, SIGKILL
    signals = dict((p['pid'], p['signals']) for p in result['reap']['stopped'])
    assert signals == {parent.pid: ['SIGTERM'], child: ['SIGKILL']}
    assert result['reap']['verify']['clean'] is True and result['reap']['verify']['count'] == 4
    # its parent (this test) may start it again: watched for the settle time, and nothing came back
    assert result['settled']['respawned'] == [] and result['settled']['seconds'] == 0.3
    assert not alive(parent.pid) and not alive(child)
    assert '%d ' % parent.pid in result['diff']['before'] and result['diff']['after'] == ''
    # the one step taken, with what it stopped
    assert [(a['action'], a['servers']) for a in result['actions']] == [('stop', [parent.pid])]

    outcome, result, warnings = run_module(sglang_server, args)
    assert outcome == 'exit', result
    assert not result['changed'] and not result['signalled'] and result['servers'] == []
    assert [(a['action'], a['servers']) for a in result['actions']] == [('stop', [])]
    assert result['reap']['stopped'] == [] and result['reap']['verify']['clean'] is True


def test_check_mode_predicts_the_stop_and_signals_nothing(run_module, node, server):
    args, parent, child = server
    outcome, result, dummy = run_module(sglang_server, dict(stopping(args, verify={'expected_count': 4}),
                                                            _ansible_check_mode=True))
    assert outcome == 'exit' and result['changed'] and not result['signalled']
    assert sorted(p['pid'] for p in result['reap']['would_stop']) == sorted([parent.pid, child])
    assert 'verify' not in result['reap']
    assert alive(parent.pid) and alive(child)


@pytest.mark.parametrize('extra, message', [
    ({'reap': {'kill_timeout': -1}}, 'reap: kill_timeout must be a finite number of seconds, 0 or more; got -1.0; '
                                     'nothing was drained or signalled'),
    ({'stop_timeout': float('nan')}, 'reap: term_timeout must be a finite number of seconds'),
    ({'patterns': ['x(']}, "reap: patterns: invalid regular expression 'x('"),
    ({'verify': {'poll_interval': 0}}, 'verify.poll_interval must be a finite number of seconds, more than 0; got 0.0; '
                                       'nothing was drained or signalled'),
    ({'verify': {'gpus': ['7'], 'expected_count': 4}}, 'verify: GPU 7 not found: the host shows 4 GPUs'),
])
def test_bad_input_fails_before_anything_is_drained_or_signalled(run_module, node, server, extra, message):
    args, parent, child = server
    outcome, result, dummy = run_module(sglang_server, stopping(args, **extra))
    assert outcome == 'fail' and message in result['msg'], result
    assert result['signalled'] is False and 'servers' not in result
    assert alive(parent.pid) and alive(child)


def test_nvml_that_cannot_be_read_fails_before_anything_is_drained_or_signalled(run_module, node, server):
    args, parent, child = server
    node.set_init_error('DRIVER_NOT_LOADED')
    outcome, result, dummy = run_module(sglang_server, stopping(args, verify={'expected_count': 4}))
    assert outcome == 'fail' and result['nvml_error'] == 'NVML_ERROR_DRIVER_NOT_LOADED'
    assert result['msg'].endswith('nothing was drained or signalled') and result['signalled'] is False
    assert alive(parent.pid) and alive(child)


def test_verify_without_nvidia_ml_py_fails_before_anything_is_touched(run_module, monkeypatch, server):
    args, parent, child = server
    monkeypatch.setattr(reap_run, 'HAS_PYNVML', False)
    outcome, result, dummy = run_module(sglang_server, stopping(args, verify={}))
    assert outcome == 'fail' and 'nvidia-ml-py' in result['msg'] and 'for verify' in result['msg']
    assert alive(parent.pid) and alive(child)


def test_gpus_left_in_use_fail_the_stop_and_say_that_it_signalled(run_module, node, server, holder):
    args, parent, child = server
    node.allocate(2, 4096, pid=holder.pid)
    outcome, result, dummy = run_module(sglang_server, stopping(args, verify={'expected_count': 4, 'timeout': 0.3}))
    assert outcome == 'fail' and result['signalled'] is True
    assert result['msg'].startswith('stopping what is left of the SGLang servers: 1 of 4 checked GPUs not clean')
    assert 'used by pid %d' % holder.pid in result['msg']
    assert [s['pid'] for s in result['servers']] == [parent.pid]
    assert result['reap']['verify']['dirty'] == [node.gpu_uuids[2]]
    assert not alive(parent.pid) and alive(holder.pid)


def test_no_server_and_nothing_to_stop_changes_nothing(run_module, node, tmp_path):
    args = {'state': 'stopped', 'stop': {'patterns': ['gpuops-test-%s' % uuid.uuid4().hex], 'presets': [],
                                         'record_path': str(tmp_path / 'server.json'), 'verify': {'expected_count': 4}}}
    outcome, result, dummy = run_module(sglang_server, args)
    assert outcome == 'exit' and not result['changed'] and not result['signalled']
    assert result['servers'] == [] and result['reap']['verify']['clean'] is True


# -- the host lock in the same call --

def read_lock(path):
    try:
        with open(os.path.join(path, 'lock.json')) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def test_a_stop_that_takes_the_lock_holds_it_while_it_stops_and_releases_it(run_module, node, server, tmp_path):
    args, parent, child = server
    lock_dir = str(tmp_path / 'lock')
    lock = {'run': 'run-a', 'take': True, 'path': lock_dir, 'owner': {'playbook': 'Stop SGLang'}}
    outcome, result, dummy = run_module(sglang_server, stopping(args, lock=lock))
    assert outcome == 'exit' and result['signalled'], result
    assert result['lock']['owner']['run'] == 'run-a' and result['lock']['owner']['playbook'] == 'Stop SGLang'
    assert result['lock']['released'] is True and result['lock']['path'] == os.path.join(lock_dir, 'lock.json')
    assert read_lock(lock_dir) is None
    assert not alive(parent.pid) and not alive(child)


def test_a_lock_held_by_another_run_fails_the_stop_before_anything_is_touched(run_module, node, server, tmp_path):
    args, parent, child = server
    lock_dir = str(tmp_path / 'lock')
    HostLock(lock_dir).acquire({'run': 'run-b', 'playbook': 'Restart SGLang in tuning mode'}, 3600)
    for check_mode in (True, False):
        lock = {'run': 'run-a', 'take': True, 'path': lock_dir}
        outcome, result, dummy = run_module(sglang_server, dict(stopping(args, lock=lock),
                                                                _ansible_check_mode=check_mode))
        assert outcome == 'fail', result
        assert result['msg'].startswith('Another gpuops run holds the lock %s/lock.json on this host: run run-b '
                                        '(Restart SGLang in tuning mode)' % lock_dir), result['msg']
        assert result['msg'].endswith(' Nothing was drained or signalled.')
        assert result['signalled'] is False and result['lock_lost'] is True and result['holder']['run'] == 'run-b'
        assert 'servers' not in result
    assert read_lock(lock_dir)['run'] == 'run-b'
    assert alive(parent.pid) and alive(child)


def test_a_failed_stop_releases_the_lock_it_took(run_module, node, server, holder, tmp_path):
    args, parent, child = server
    node.allocate(2, 4096, pid=holder.pid)
    lock_dir = str(tmp_path / 'lock')
    outcome, result, dummy = run_module(sglang_server, stopping(args, verify={'expected_count': 4, 'timeout': 0.3},
                                                                lock={'run': 'run-a', 'take': True, 'path': lock_dir}))
    assert outcome == 'fail' and result['signalled'] is True
    assert result['lock']['released'] is True and read_lock(lock_dir) is None


def test_check_mode_neither_takes_nor_releases_the_lock(run_module, node, server, tmp_path):
    args, parent, child = server
    lock_dir = str(tmp_path / 'lock')
    lock = {'run': 'run-a', 'take': True, 'path': lock_dir}
    outcome, result, dummy = run_module(sglang_server, dict(stopping(args, lock=lock), _ansible_check_mode=True))
    assert outcome == 'exit' and result['lock']['owner']['run'] == 'run-a' and result['lock']['released'] is False
    assert not os.path.exists(lock_dir)


TAKES_OVER_ON_SIGTERM = '''
import json, os, signal, sys, time
def take_over(signum, frame):
    tmp = os.path.join(sys.argv[1], '.takeover.tmp')
    with open(tmp, 'w') as f:
        json.dump({'run': 'run-b', 'playbook': 'Restart SGLang in tuning mode', 'taken': time.time()}, f)
    os.rename(tmp, os.path.join(sys.argv[1], 'lock.json'))
    sys.exit(0)
signal.signal(signal.SIGTERM, take_over)
time.sleep(60)
'''


def test_a_lock_that_the_run_holds_is_checked_before_the_stop_and_again_after_it(run_module, node, server, tmp_path):
    args, parent, child = server
    lock_dir = str(tmp_path / 'lock')
    HostLock(lock_dir).acquire({'run': 'run-a'}, 3600)
    outcome, result, dummy = run_module(sglang_server, stopping(args, lock={'run': 'run-a', 'path': lock_dir}))
    assert outcome == 'exit' and result['signalled'] and result['lock']['released'] is False, result
    assert read_lock(lock_dir)['run'] == 'run-a', 'a lock that the stop did not take stays'

    # Another controller breaks the lock while the stop runs: here, the server being stopped does it on SIGTERM.
    mark = 'gpuops-test-%s' % uuid.uuid4().hex
    taker = subprocess.Popen([sys.executable, '-c', TAKES_OVER_ON_SIGTERM, lock_dir, mark])
    try:
        time.sleep(0.5)
        outcome, result, dummy = run_module(sglang_server, stopping(args, patterns=[mark],
                                                                    lock={'run': 'run-a', 'path': lock_dir}))
        assert outcome == 'fail', result
        assert result['msg'].startswith('This run (run-a) no longer holds the lock %s/lock.json on this host: it is '
                                        'now held by run run-b' % lock_dir), result['msg']
        assert result['msg'].endswith(' The stop itself was done when this was found.')
        assert result['lock_lost'] is True and result['signalled'] is True and result['holder']['run'] == 'run-b'
        assert [s['pid'] for s in result['servers']] == [taker.pid]
    finally:
        taker.kill()
        taker.wait()

    # A lock held by nobody, or another run, fails the next stop before it touches anything.
    outcome, result, dummy = run_module(sglang_server, stopping(args, lock={'run': 'run-a', 'path': lock_dir}))
    assert outcome == 'fail' and result['signalled'] is False and result['msg'].endswith('Nothing was drained or signalled.')


def test_the_module_loads_no_module_of_a_start_or_a_launch():
    # The node compiles every module it imports from the payload's source before the stop's SIGTERM: a stop imports
    # only what it runs (the start's recovery, run directory and configuration, the launch's plan are a start's).
    code = ('import sys; import ansible_collections.gpuops.host.plugins.modules.sglang_server; '
            'print(" ".join(sorted(m.rsplit(".", 1)[-1] for m in sys.modules if ".module_utils._" in m)))')
    # a fresh interpreter, with this one's import path (ansible-test units sets it in-process, not in the environment)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path for path in sys.path if path))
    loaded = subprocess.run([sys.executable, '-c', code], check=True, capture_output=True, text=True,
                            env=env).stdout.split()
    assert '_sglang' in loaded
    assert not set(loaded) & {'_recovery', '_run_dir', '_server_config', '_lifecycle', '_launch', '_server_info',
                              '_owner'}

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from ansible_collections.gpuops.host.plugins.module_utils._reap_options import SGLANG_PATTERNS
from ansible_collections.gpuops.host.plugins.module_utils import _reap as reap_run
from ansible_collections.gpuops.host.plugins.modules import gpu_reap


@pytest.fixture
def marked():
    """Two sleepers (a parent and its child) carrying a marker only they have."""
    mark = uuid.uuid4().hex
    env = dict(os.environ, GPUOPS_TEST_MARK=mark)
    code = 'import subprocess, sys, time; subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]); time.sleep(60)'
    parent = subprocess.Popen([sys.executable, '-c', code], env=env)
    deadline = 100
    child_pid = None
    while child_pid is None and deadline:
        try:
            with open('/proc/%d/task/%d/children' % (parent.pid, parent.pid)) as f:
                child_pid = int(f.read().split()[0])
        except (IndexError, ValueError):
            time.sleep(0.05)
            deadline -= 1
    yield mark, parent, child_pid
    for pid in (child_pid, parent.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    parent.wait()


def alive(pid):
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rpartition(')')[2].split()[0] != 'Z'
    except OSError:
        return False


@pytest.mark.parametrize('args, message', [
    ({}, 'no selector given: set at least one of patterns, presets, environ, pids, device_holders or nvml_processes'),
    ({'patterns': ['sglang(']}, "patterns: invalid regular expression 'sglang(': missing ), unterminated subpattern"),
    ({'pids': [1], 'term_timeout': -5}, 'term_timeout must be a finite number of seconds, 0 or more; got -5.0'),
    ({'pids': [1], 'term_timeout': 'nan'}, 'term_timeout must be a finite number of seconds, 0 or more; got nan'),
    ({'pids': [1], 'kill_timeout': 'inf'}, 'kill_timeout must be a finite number of seconds, 0 or more; got inf'),
    ({'patterns': ['.*']}, "patterns: '.*' matches the empty string, so it would select every process"),
    ({'environ': {'PATH': ''}}, "environ[PATH]: '' matches the empty string"),
    ({'device_holders': True}, 'device_holders is True but all of the following are missing: devices'),
    ({'device_holders': True, 'devices': ['/*']}, "devices: '/*' may match files other than /dev/nvidia*"),
    ({'pids': [1], 'kill_timeout': 'soon'}, "argument 'kill_timeout' is of type str"),
    ({'pids': [1], 'term_signal': 'SIGFOO'}, "term_signal: unknown signal 'SIGFOO'"),
    ({'pids': [1], 'kill_mode': 'process'}, 'value of kill_mode must be one of: mixed, control-group, got: process'),
])
def test_bad_input_fails_before_anything_is_read(run_module, args, message):
    outcome, result, dummy = run_module(gpu_reap, args)
    assert outcome == 'fail'
    assert message in result['msg']
    assert not result.get('changed')


def test_nvml_processes_without_nvidia_ml_py(run_module, monkeypatch):
    monkeypatch.setattr(reap_run, 'HAS_PYNVML', False)
    outcome, result, dummy = run_module(gpu_reap, {'nvml_processes': True})
    assert outcome == 'fail'
    assert 'Failed to import the required Python library (nvidia-ml-py)' in result['msg']
    assert 'for nvml_processes' in result['msg']


def test_check_mode_signals_nothing(run_module, marked):
    mark, parent, child = marked
    args = {'environ': {'GPUOPS_TEST_MARK': '^%s$' % mark}, '_ansible_check_mode': True}
    outcome, result, dummy = run_module(gpu_reap, args)
    assert outcome == 'exit' and result['changed']
    assert sorted(p['pid'] for p in result['would_stop']) == sorted([parent.pid, child])
    assert result['stopped'] == []
    assert alive(parent.pid) and alive(child)


def test_run_stops_the_tree_then_reports_no_change(run_module, marked):
    mark, parent, child = marked
    args = {'environ': {'GPUOPS_TEST_MARK': '^%s$' % mark}, 'term_timeout': 10, 'kill_timeout': 5}
    outcome, result, dummy = run_module(gpu_reap, args)
    assert outcome == 'exit' and result['changed']
    # mixed mode: SIGTERM to the root only; the child, left behind, gets SIGKILL after the settle time
    signals = dict((p['pid'], p['signals']) for p in result['stopped'])
    assert signals == {parent.pid: ['SIGTERM'], child: ['SIGKILL']}
    assert not alive(parent.pid) and not alive(child)
    assert '%d ' % parent.pid in result['diff']['before'] and result['diff']['after'] == ''
    outcome, result, dummy = run_module(gpu_reap, args)
    assert outcome == 'exit' and not result['changed'] and result['stopped'] == []


def test_verify_waits_in_the_same_call_until_the_gpus_are_clean(run_module, node, marked):
    mark, parent, child = marked
    node.allocate(1, 8123, pid=parent.pid)
    node.set_release_lag(300)
    args = {'environ': {'GPUOPS_TEST_MARK': '^%s$' % mark}, 'term_timeout': 10, 'kill_timeout': 5,
            'verify': {'expected_count': 4, 'timeout': 30}}
    outcome, result, warnings = run_module(gpu_reap, args)
    assert outcome == 'exit' and result['changed'] and warnings == []
    assert sorted(p['pid'] for p in result['stopped']) == sorted([parent.pid, child])
    report = result['verify']
    assert report['clean'] is True and report['count'] == 4 and report['memory_api'] == 'v2'
    # the driver's release took 0.3 s after the exit: noticed within one 0.1 s poll
    assert report['polls'] > 1 and 0.2 <= report['elapsed'] < 10
    assert result['elapsed'] >= report['elapsed']


def test_verify_fails_naming_the_holder_left_running(run_module, node, marked, holder):
    mark, parent, child = marked
    node.allocate(2, 4096, pid=holder.pid)
    args = {'environ': {'GPUOPS_TEST_MARK': '^%s$' % mark}, 'term_timeout': 10,
            'verify': {'expected_count': 4, 'timeout': 0.3}}
    outcome, result, dummy = run_module(gpu_reap, args)
    assert outcome == 'fail' and result['verify']['dirty'] == [node.gpu_uuids[2]]
    lines = result['msg'].splitlines()
    assert lines[0].startswith('1 of 4 checked GPUs not clean after')
    assert lines[1] == 'GPU 2 %s: 4096 MiB used by pid %d (user root: sleep 600)' % (node.gpu_uuids[2], holder.pid)
    assert lines[2].startswith('stopped 2 processes: ')
    assert not alive(parent.pid) and alive(holder.pid)


@pytest.mark.parametrize('verify, message', [
    ({'poll_interval': 0}, 'verify.poll_interval must be a finite number of seconds, more than 0; got 0.0'),
    ({'timeout': 'inf'}, 'verify.timeout must be a finite number of seconds, 0 or more; got inf'),
    ({'gpus': ['7'], 'expected_count': 4}, 'GPU 7 not found: the host shows 4 GPUs'),
])
def test_bad_verify_options_fail_before_any_signal(run_module, node, marked, verify, message):
    mark, parent, child = marked
    outcome, result, dummy = run_module(gpu_reap, {'environ': {'GPUOPS_TEST_MARK': '^%s$' % mark}, 'verify': verify})
    assert outcome == 'fail' and message in result['msg'] and not result.get('changed')
    assert alive(parent.pid) and alive(child)


def test_verify_with_nvml_unreadable_fails_before_any_signal(run_module, node, marked):
    mark, parent, child = marked
    node.set_init_error("DRIVER_NOT_LOADED")
    outcome, result, dummy = run_module(gpu_reap, {'environ': {'GPUOPS_TEST_MARK': '^%s$' % mark},
                                                   'verify': {'expected_count': 4}})
    assert outcome == 'fail' and result['nvml_error'] == 'NVML_ERROR_DRIVER_NOT_LOADED'
    assert result['msg'].startswith('verify: Cannot initialise NVML') and result['msg'].endswith('nothing was signalled')
    assert alive(parent.pid) and alive(child)


def test_verify_without_nvidia_ml_py(run_module, monkeypatch, marked):
    mark, parent, child = marked
    monkeypatch.setattr(reap_run, 'HAS_PYNVML', False)
    outcome, result, dummy = run_module(gpu_reap, {'environ': {'GPUOPS_TEST_MARK': '^%s$' % mark}, 'verify': {}})
    assert outcome == 'fail' and 'Failed to import the required Python library (nvidia-ml-py)' in result['msg']
    assert 'for verify' in result['msg'] and alive(parent.pid)


def test_check_mode_with_verify_does_not_wait(run_module, node, marked):
    mark, parent, child = marked
    node.allocate(0, 8123, pid=parent.pid)
    args = {'environ': {'GPUOPS_TEST_MARK': '^%s$' % mark}, 'verify': {'expected_count': 4, 'timeout': 30},
            '_ansible_check_mode': True}
    outcome, result, dummy = run_module(gpu_reap, args)
    assert outcome == 'exit' and result['changed'] and 'verify' not in result
    assert alive(parent.pid) and alive(child)


def test_the_module_never_selects_itself(run_module):
    outcome, result, dummy = run_module(gpu_reap, {'pids': [os.getpid(), os.getppid()], 'term_timeout': 0, 'kill_timeout': 0})
    assert outcome == 'exit' and not result['changed']
    assert dict((p['pid'], p['reason']) for p in result['protected']) == {
        os.getpid(): 'gpu_reap itself', os.getppid(): 'ancestor of gpu_reap'}


def test_examples_show_the_sglang_preset_patterns():
    for pattern in SGLANG_PATTERNS:
        assert "- '%s'" % pattern in gpu_reap.EXAMPLES


def test_command_lines_typed_by_hand_are_masked_in_every_result(run_module):
    """A server started by hand with its key on the command line: the key is not in what gpu_reap reports."""
    code = 'import time; time.sleep(60)'
    proc = subprocess.Popen([sys.executable, '-c', code, '--api-key', 'sk-typed-by-hand', '--hf-token=hf_typed1',
                             '--tp-size', '2'])
    try:
        args = {'pids': [proc.pid], '_ansible_check_mode': True}
        outcome, result, dummy = run_module(gpu_reap, args)
        assert outcome == 'exit', result
        shown = result['would_stop'][0]['cmdline']
        assert shown.endswith('--api-key ******** --hf-token=******** --tp-size 2'), shown
        assert 'sk-typed-by-hand' not in repr(result) and 'hf_typed1' not in repr(result)
    finally:
        proc.kill()
        proc.wait()

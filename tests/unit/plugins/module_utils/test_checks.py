# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The checks of a server that answers ready: GPU occupancy (_checks) and their order and failures (_sglang.post_checks),
on plain snapshots and recording stand-ins for the HTTP and /proc checks."""

from __future__ import annotations

import contextlib

import pytest

from ansible_collections.gpuops.host.plugins.module_utils import _checks as checks
from ansible_collections.gpuops.host.plugins.module_utils import _sglang
from ansible_collections.gpuops.host.plugins.module_utils._nvml import NvmlError

UUIDS = ['GPU-aaaa0000-0000-0000-0000-00000000000%d' % i for i in range(4)]


def gpu(index, used=0, processes=()):
    return {'index': index, 'uuid': UUIDS[index], 'name': 'NVIDIA H200', 'pci_bus_id': None, 'total_mib': 143771,
            'used_mib': used, 'reserved_mib': 700, 'free_mib': 0, 'v1_used_mib': used + 700,
            'processes': list(processes), 'error': None, 'error_text': None}


def snapshot(*gpus, count=None):
    return {'driver_version': '570.133.20', 'memory_api': 'v2', 'gpus': list(gpus),
            'count': len(gpus) if count is None else count}


class FakeNvml:
    def __init__(self, snap):
        self.snap = snap

    def snapshot(self):
        return self.snap


def opener(snap):
    return lambda: contextlib.nullcontext(FakeNvml(snap))


OPTIONS = {'gpus': [0, 1], 'expected_count': 4, 'v1_reserved_mib': None}
SERVING = snapshot(gpu(0, 120000), gpu(1, 120000), gpu(2), gpu(3))


def read(snap, options=None, warnings=None):
    return checks.read(options or OPTIONS, opener(snap), (warnings if warnings is not None else []).append)


def test_a_server_on_its_gpus_passes():
    warnings = []
    assert checks.occupancy_failure([0, 1], read(SERVING, warnings=warnings)) is None and warnings == []


def test_a_server_on_other_gpus_is_named_with_the_idle_ones():
    report = read(snapshot(gpu(0), gpu(1), gpu(2, 120000), gpu(3, 120000)))
    assert checks.occupancy_failure([0, 1], report) == (
        'The server should occupy GPU 0, 1, but 0, 1 show(s) less than 1024 MiB in use: it came up on the wrong GPUs.')


def test_what_holds_a_gpu_the_server_should_occupy_is_said():
    other = {'pid': 7310, 'used_mib': 600, 'exists': True, 'name': 'train', 'cmdline': 'python3 train.py',
             'user': 'alice', 'where': None}
    report = read(snapshot(gpu(0, 600, [other]), gpu(1, 120000), gpu(2), gpu(3)))
    why = checks.occupancy_failure([0, 1], report)
    assert why.startswith('The server should occupy GPU 0, 1, but 0 show(s) less than 1024 MiB in use: it came up on '
                          'the wrong GPUs. 2 of 2 checked GPUs not clean')
    assert 'GPU 0 %s: 600 MiB used by pid 7310 (user alice: python3 train.py)' % UUIDS[0] in why


def test_a_wrong_gpu_count_is_said():
    report = read(snapshot(gpu(0), gpu(1, 120000), count=2), dict(OPTIONS, expected_count=4))
    assert 'the host shows 2 GPUs, expected 4' in checks.occupancy_failure([0, 1], report)


def test_the_threshold_is_the_callers():
    report = read(SERVING)
    assert checks.idle(report, [0, 1], min_used_mib=130000) == [0, 1]
    assert checks.idle(report, [1, 0], min_used_mib=1) == []


def test_without_a_reading_every_gpu_counts_as_idle_and_the_error_is_said():
    assert checks.occupancy_failure([0, 1], None, 'Cannot initialise NVML: Driver Not Loaded') == (
        'The server should occupy GPU 0, 1, but 0, 1 show(s) less than 1024 MiB in use: it came up on the wrong GPUs. '
        'Cannot initialise NVML: Driver Not Loaded')


def test_an_nvml_that_cannot_be_read_or_lacks_a_gpu_is_unreadable():
    def broken():
        raise NvmlError('Cannot initialise NVML: Driver Not Loaded', code='DRIVER_NOT_LOADED')

    with pytest.raises(checks.Unreadable, match='Driver Not Loaded'):
        checks.read(OPTIONS, broken, lambda msg: None)
    with pytest.raises(checks.Unreadable, match='GPU 1 not found'):
        read(snapshot(gpu(0, 120000), count=1), dict(OPTIONS, expected_count=1))


def test_without_an_expected_count_the_pci_bus_is_the_reference_and_its_absence_is_warned(tmp_path):
    warnings = []
    checks.read(dict(OPTIONS, expected_count=None), opener(SERVING), warnings.append, sysfs_root=str(tmp_path))
    assert warnings and 'set expected_count' in warnings[0]


# -- their order and failures (_sglang.post_checks) --------------------------------------------------------------

class Deps:
    def __init__(self, snap=None):
        self.open_nvml = opener(snap or SERVING)
        self.warnings = []
        self.warn = self.warnings.append
        self.clock = lambda: 0.0


@pytest.fixture
def steps(monkeypatch):
    """The /proc and HTTP checks, recorded in the order called, with the parameters each got; FAIL names one that
    fails as the real one does (ActionFailed)."""
    calls = []
    fail = {}

    def step(name):
        def run(p, deps):
            calls.append((name, p))
            if fail.get(name):
                raise _sglang.ActionFailed(fail[name], {'rid': 'gpuops-probe-1'} if name == 'probe' else {})
            return {'ok': name}
        return run

    for name in ('check_environ', 'probe', 'check_info'):
        monkeypatch.setattr(_sglang, name, step(name))
    return calls, fail


READY = {'url': 'http://127.0.0.1:30000', 'timeout': 600, 'ready': True, 'seconds': 4.2}
EXTRACTION = {'dump_dir': '/data/hs/run-1', 'probe_timeout': 60, 'expected_info': {'tp_size': 2}, 'api_key': 'sk-1234',
              'gpus': [0, 1], 'min_used_mib': 1024, 'expected_count': 4, 'prompt': None}


def test_an_extraction_server_is_checked_in_order_on_its_own_key_and_pid(steps):
    calls = steps[0]
    done = _sglang.post_checks(READY, Deps(), 4200, EXTRACTION, READY)
    assert [name for name, params in calls] == ['check_environ', 'probe', 'check_info']
    environ, probe, info = (params for name, params in calls)
    assert environ['environ'] == {'SGLANG_HS_DUMP_DIR': '/data/hs/run-1'} and environ['schedulers'] == 2
    assert (probe['dump_dir'], probe['timeout'], probe['prompt'], probe['rid']) == ('/data/hs/run-1', 60,
                                                                                    _sglang.PROBE_PROMPT, None)
    assert info['expect'] == {'tp_size': 2}
    assert all(p['pid'] == 4200 and p['api_key'] == 'sk-1234' for p in (environ, probe, info))
    assert done == {'environ': {'ok': 'check_environ'}, 'probe': {'ok': 'probe'}, 'info': {'ok': 'check_info'},
                    'gpus': {'gpus': [0, 1], 'idle': [], 'error': None}}


def test_the_probe_asks_the_checks_own_prompt_where_they_name_one(steps):
    calls = steps[0]
    _sglang.post_checks(READY, Deps(), 4200, dict(EXTRACTION, prompt='Dump this.'), READY)
    assert [params['prompt'] for name, params in calls if name == 'probe'] == ['Dump this.']


def test_a_serving_server_gets_the_gpu_check_only(steps):
    calls = steps[0]
    done = _sglang.post_checks(READY, Deps(), 4200, dict(EXTRACTION, dump_dir=None, expected_info=None, api_key=None))
    assert calls == [] and list(done) == ['gpus']


def test_the_first_failing_check_ends_them_and_says_which_and_that_the_server_answered(steps):
    calls, fail = steps
    fail['probe'] = 'no hidden-state dump of the probe request gpuops-probe-1 appeared'
    with pytest.raises(_sglang.ActionFailed) as e:
        _sglang.post_checks(READY, Deps(), 4200, EXTRACTION, READY)
    assert e.value.msg == fail['probe'] and [name for name, params in calls] == ['check_environ', 'probe']
    r = e.value.result
    assert (r['ready'], r['pid'], r['check'], r['rid'], r['seconds']) == (True, 4200, 'probe', 'gpuops-probe-1', 4.2)
    assert list(r['checks']) == ['environ']


def test_a_server_on_the_wrong_gpus_fails_the_last_check(steps):
    deps = Deps(snapshot(gpu(0), gpu(1), gpu(2, 120000), gpu(3, 120000)))
    with pytest.raises(_sglang.ActionFailed) as e:
        _sglang.post_checks(READY, deps, 4200, EXTRACTION, READY)
    assert 'it came up on the wrong GPUs' in e.value.msg
    assert e.value.result['check'] == 'gpus' and list(e.value.result['checks']) == ['environ', 'probe', 'info', 'gpus']


def test_an_nvml_that_cannot_be_read_fails_the_gpu_check_with_its_reason(steps):
    deps = Deps()

    def broken():
        raise checks.Unreadable('Failed to import the required Python library (nvidia-ml-py)')

    deps.open_nvml = broken
    with pytest.raises(_sglang.ActionFailed, match=r'but 0, 1 show\(s\) .* wrong GPUs\. Failed to import'):
        _sglang.post_checks(READY, deps, 4200, dict(EXTRACTION, dump_dir=None, expected_info=None))


@pytest.mark.parametrize('options, names', [
    ({}, ['gpus']),
    ({'dump_dir': '/data/hs/run-1'}, ['environ', 'probe', 'gpus']),
    ({'dump_dir': '/data/hs/run-1', 'probe': True}, ['environ', 'probe', 'gpus']),
    ({'dump_dir': '/data/hs/run-1', 'probe': False}, ['environ', 'gpus']),
    ({'dump_dir': '/data/hs/run-1', 'schedulers': 8}, ['environ', 'probe', 'gpus']),
    ({'dump_dir': None, 'schedulers': 8}, ['schedulers', 'gpus']),
    ({'schedulers': 0}, ['gpus']),
    ({'schedulers': None, 'probe': False}, ['gpus']),
    ({'expected_info': {}}, ['info', 'gpus']),
    ({'expected_info': None}, ['gpus']),
    ({'schedulers': 4, 'expected_info': {'tp_size': 8}}, ['schedulers', 'info', 'gpus']),
    ({'dump_dir': '/d', 'probe': False, 'expected_info': {'tp_size': 2}}, ['environ', 'info', 'gpus']),
])
def test_check_names(options, names):
    assert _sglang.check_names(options) == names


WORKER = {'schedulers': 8, 'api_key': None, 'gpus': [0, 1], 'min_used_mib': 1024, 'expected_count': 4}


def test_a_node_of_rank_1_or_more_is_checked_for_its_schedulers_then_its_gpus(steps):
    calls = steps[0]
    done = _sglang.post_checks(READY, Deps(), 4200, WORKER, READY)
    assert [name for name, params in calls] == ['check_environ']
    params = calls[0][1]
    assert (params['environ'], params['schedulers'], params['pid'], params['api_key']) == ({}, 8, 4200, None)
    assert done == {'schedulers': {'ok': 'check_environ'}, 'gpus': {'gpus': [0, 1], 'idle': [], 'error': None}}


def test_the_schedulers_check_that_fails_ends_the_checks_and_says_so(steps):
    calls, fail = steps
    fail['check_environ'] = 'the environment of SGLang server 4200 is incomplete: only 4 scheduler(s) found'
    with pytest.raises(_sglang.ActionFailed) as e:
        _sglang.post_checks(READY, Deps(), 4200, dict(WORKER, expected_info={'tp_size': 16}), READY)
    assert e.value.msg == fail['check_environ'] and [name for name, params in calls] == ['check_environ']
    assert (e.value.result['check'], e.value.result['ready'], e.value.result['checks']) == ('schedulers', True, {})


def test_without_the_probe_the_dump_dir_is_still_checked_in_the_environment(steps):
    calls = steps[0]
    done = _sglang.post_checks(READY, Deps(), 4200, dict(EXTRACTION, probe=False), READY)
    assert [name for name, params in calls] == ['check_environ', 'check_info']
    environ = calls[0][1]
    assert environ['environ'] == {'SGLANG_HS_DUMP_DIR': '/data/hs/run-1'} and environ['schedulers'] == 2
    assert list(done) == ['environ', 'info', 'gpus']

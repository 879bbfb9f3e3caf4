# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import pytest

from ansible_collections.gpuops.host.plugins.modules import gpu_verify


@pytest.fixture
def node(sim_node):
    """A simulated 8-GPU H200 node: one HGX board."""
    return sim_node(8)


def test_clean_node(node, run_module):
    outcome, result, warnings = run_module(gpu_verify, {'timeout': 0, 'expected_count': 8})
    assert outcome == 'exit' and result['changed'] is False and result['clean'] is True
    assert result['memory_api'] == 'v2' and warnings == [] and result['polls'] == 1
    assert sorted(result['gpus']) == sorted(node.gpu_uuids)


def test_check_mode(node, run_module):
    outcome, result, dummy = run_module(gpu_verify, {'timeout': 0, '_ansible_check_mode': True})
    assert outcome == 'exit' and result['changed'] is False and result['clean'] is True


def test_dirty_gpu_fails_naming_the_holder(node, run_module, holder):
    node.allocate(4, 8123, pid=holder.pid)
    outcome, result, dummy = run_module(gpu_verify, {'timeout': 0.3, 'poll_interval': 0.1})
    assert outcome == 'fail' and result['dirty'] == [node.gpu_uuids[4]]
    assert result['msg'].splitlines()[1] == 'GPU 4 %s: 8123 MiB used by pid %d (sleep)' % (node.gpu_uuids[4], holder.pid)
    assert result['polls'] > 1 and result['elapsed'] >= 0.3


def test_selection(node, run_module, holder):
    node.allocate(4, 100, pid=holder.pid)
    outcome, result, dummy = run_module(gpu_verify, {'timeout': 0, 'gpus': ['0', node.gpu_uuids[5]]})
    assert outcome == 'exit' and sorted(result['gpus']) == sorted([node.gpu_uuids[0], node.gpu_uuids[5]])
    outcome, result, dummy = run_module(gpu_verify, {'timeout': 0, 'gpus': ['8']})
    assert outcome == 'fail' and result['msg'].startswith('GPU 8 not found: the host shows 8 GPUs (0 GPU-')


def test_v1_fallback_warns(node, run_module):
    node.set_no_v2()
    outcome, result, warnings = run_module(gpu_verify, {'timeout': 0, 'v1_reserved_mib': 700, 'max_used_mib': 0})
    assert outcome == 'exit' and result['memory_api'] == 'v1'
    assert len(warnings) == 1 and 'no v2 memory call' in warnings[0] and '(700 MiB)' in warnings[0]


def test_init_error(node, run_module):
    node.set_init_error('DRIVER_NOT_LOADED')
    outcome, result, dummy = run_module(gpu_verify, {})
    assert outcome == 'fail' and result['nvml_error'] == 'NVML_ERROR_DRIVER_NOT_LOADED'
    assert result['msg'].startswith('Cannot initialise NVML: NVML_ERROR_DRIVER_NOT_LOADED (Driver Not Loaded)')


def test_missing_library(run_module, monkeypatch):
    monkeypatch.setattr(gpu_verify, 'HAS_PYNVML', False)
    monkeypatch.setattr(gpu_verify, 'PYNVML_IMPORT_ERROR', 'Traceback: No module named pynvml')
    outcome, result, dummy = run_module(gpu_verify, {})
    assert outcome == 'fail' and 'nvidia-ml-py' in result['msg']
    assert result['exception'] == 'Traceback: No module named pynvml'


@pytest.mark.parametrize('args', [{'timeout': -1}, {'poll_interval': 0}])
def test_bad_timing_options(run_module, args):
    outcome, result, dummy = run_module(gpu_verify, args)
    assert outcome == 'fail' and result['msg'].startswith('timeout must be 0 or more and poll_interval more than 0')

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import pytest

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpuops.host.plugins.modules import gpu_verify

SIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..', 'sim')
if SIM not in sys.path:
    sys.path.insert(0, SIM)

from gpusim.nvml import Node, lib_dir  # noqa: E402  pylint: disable=wrong-import-position


LIB = 'libnvidia-ml.so.1'


class Exit(Exception):
    pass


class Fail(Exception):
    pass


def exit_json(self, **result):
    raise Exit(result)


def fail_json(self, **result):
    raise Fail(result)


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A simulated 8-GPU H200 node that pynvml, loaded in this process, answers from."""
    dirs = [d for d in os.environ.get('LD_LIBRARY_PATH', '').split(':') if d and os.path.exists(os.path.join(d, LIB))]
    ctypes.CDLL(os.path.join(dirs[0] if dirs else lib_dir(), LIB))  # pynvml's dlopen by soname then finds it
    created = Node.create(str(tmp_path / 'state'), gpus=8, reserved_mib=700)
    monkeypatch.setenv('GPUSIM_STATE', created.state_dir)
    return created


@pytest.fixture
def module_run(monkeypatch):
    """Run main() with the given arguments; returns (outcome, result, warnings)."""
    warnings = []
    monkeypatch.setattr(AnsibleModule, 'exit_json', exit_json)
    monkeypatch.setattr(AnsibleModule, 'fail_json', fail_json)
    monkeypatch.setattr(AnsibleModule, 'warn', lambda self, msg, **kw: warnings.append(msg))

    def run(args):
        with patch_module_args(args):
            try:
                gpu_verify.main()
            except (Exit, Fail) as e:
                return type(e).__name__.lower(), e.args[0], warnings
        raise AssertionError('main() returned without exit_json or fail_json')
    return run


@pytest.fixture
def holder():
    proc = subprocess.Popen(['sleep', '600'])
    yield proc
    proc.kill()
    proc.wait()


def test_clean_node(node, module_run):
    outcome, result, warnings = module_run({'timeout': 0, 'expected_count': 8})
    assert outcome == 'exit' and result['changed'] is False and result['clean'] is True
    assert result['memory_api'] == 'v2' and warnings == [] and result['polls'] == 1
    assert sorted(result['gpus']) == sorted(node.gpu_uuids)


def test_check_mode(node, module_run):
    outcome, result, dummy = module_run({'timeout': 0, '_ansible_check_mode': True})
    assert outcome == 'exit' and result['changed'] is False and result['clean'] is True


def test_dirty_gpu_fails_naming_the_holder(node, module_run, holder):
    node.allocate(4, 8123, pid=holder.pid)
    outcome, result, dummy = module_run({'timeout': 0.3, 'poll_interval': 0.1})
    assert outcome == 'fail' and result['dirty'] == [node.gpu_uuids[4]]
    assert result['msg'].splitlines()[1] == 'GPU 4 %s: 8123 MiB used by pid %d (sleep)' % (node.gpu_uuids[4], holder.pid)
    assert result['polls'] > 1 and result['elapsed'] >= 0.3


def test_selection(node, module_run, holder):
    node.allocate(4, 100, pid=holder.pid)
    outcome, result, dummy = module_run({'timeout': 0, 'gpus': ['0', node.gpu_uuids[5]]})
    assert outcome == 'exit' and sorted(result['gpus']) == sorted([node.gpu_uuids[0], node.gpu_uuids[5]])
    outcome, result, dummy = module_run({'timeout': 0, 'gpus': ['8']})
    assert outcome == 'fail' and result['msg'].startswith('GPU 8 not found: the host shows 8 GPUs (0 GPU-')


def test_v1_fallback_warns(node, module_run):
    node.set_no_v2()
    outcome, result, warnings = module_run({'timeout': 0, 'v1_reserved_mib': 700, 'max_used_mib': 0})
    assert outcome == 'exit' and result['memory_api'] == 'v1'
    assert len(warnings) == 1 and 'no v2 memory call' in warnings[0] and '(700 MiB)' in warnings[0]


def test_init_error(node, module_run):
    node.set_init_error('DRIVER_NOT_LOADED')
    outcome, result, dummy = module_run({})
    assert outcome == 'fail' and result['nvml_error'] == 'NVML_ERROR_DRIVER_NOT_LOADED'
    assert result['msg'].startswith('Cannot initialise NVML: NVML_ERROR_DRIVER_NOT_LOADED (Driver Not Loaded)')


def test_missing_library(module_run, monkeypatch):
    monkeypatch.setattr(gpu_verify, 'HAS_PYNVML', False)
    monkeypatch.setattr(gpu_verify, 'PYNVML_IMPORT_ERROR', 'Traceback: No module named pynvml')
    outcome, result, dummy = module_run({})
    assert outcome == 'fail' and 'nvidia-ml-py' in result['msg']
    assert result['exception'] == 'Traceback: No module named pynvml'


@pytest.mark.parametrize('args', [{'timeout': -1}, {'poll_interval': 0}])
def test_bad_timing_options(module_run, args):
    outcome, result, dummy = module_run(args)
    assert outcome == 'fail' and result['msg'].startswith('timeout must be 0 or more and poll_interval more than 0')

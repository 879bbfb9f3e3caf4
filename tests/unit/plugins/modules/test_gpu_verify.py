# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import pytest

from ansible_collections.gpuops.host.plugins.modules import gpu_verify


def pci_bus(root, gpus):
    """A sysfs tree under ROOT with GPUS NVIDIA 3D controllers, an NVSwitch and a NIC."""
    functions = [('0000:%02x:00.0' % (0x18 + i), '0x10de', '0x030200') for i in range(gpus)]
    functions += [('0000:05:00.0', '0x10de', '0x068000'), ('0000:c1:00.0', '0x15b3', '0x020700')]
    for address, vendor, klass in functions:
        d = root / 'bus' / 'pci' / 'devices' / address
        d.mkdir(parents=True)
        (d / 'vendor').write_text(vendor + '\n')
        (d / 'class').write_text(klass + '\n')
    return str(root)


@pytest.fixture
def node(sim_node, tmp_path, monkeypatch):
    """A simulated 8-GPU H200 node: one HGX board, its eight GPUs on the PCI bus."""
    monkeypatch.setattr(gpu_verify, 'SYSFS_ROOT', pci_bus(tmp_path / 'sys', 8))
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
    assert result['msg'].splitlines()[1] == 'GPU 4 %s: 8123 MiB used by pid %d (user root: sleep 600)' % (
        node.gpu_uuids[4], holder.pid)
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


@pytest.mark.parametrize('args, message', [
    ({'timeout': -1}, 'timeout must be a finite number of seconds, 0 or more; got -1.0'),
    ({'timeout': 'nan'}, 'timeout must be a finite number of seconds, 0 or more; got nan'),
    ({'timeout': 'inf'}, 'timeout must be a finite number of seconds, 0 or more; got inf'),
    ({'poll_interval': 0}, 'poll_interval must be a finite number of seconds, more than 0; got 0.0'),
    ({'poll_interval': 'nan'}, 'poll_interval must be a finite number of seconds, more than 0; got nan'),
])
def test_bad_timing_options(run_module, args, message):
    outcome, result, dummy = run_module(gpu_verify, args)
    assert outcome == 'fail' and result['msg'] == message


def test_v1_without_an_idle_value_cannot_prove_zero(node, run_module):
    node.set_no_v2()
    outcome, result, warnings = run_module(gpu_verify, {'timeout': 0})
    assert outcome == 'fail' and result['memory_api'] == 'v1' and len(result['dirty']) == 8
    assert result['gpus'][node.gpu_uuids[0]]['problem'].startswith(
        '700 MiB used as the v1 memory call reads it, driver-reserved memory included: zero cannot be proven')
    assert 'zero memory cannot be proven' in warnings[0]


def test_a_gpu_missing_from_nvml_but_on_the_pci_bus_fails_by_default(sim_node, tmp_path, monkeypatch, run_module):
    monkeypatch.setattr(gpu_verify, 'SYSFS_ROOT', pci_bus(tmp_path / 'sys', 8))
    sim_node(7)
    outcome, result, dummy = run_module(gpu_verify, {'timeout': 30})
    assert outcome == 'fail' and result['polls'] == 1 and result['expected_count'] == 8
    assert result['problems'][0].startswith('NVML shows 7 GPUs, the PCI bus 8 NVIDIA GPUs (0000:18:00.0, ')


def test_no_nvidia_gpu_in_sysfs_warns_that_the_count_was_not_checked(sim_node, tmp_path, monkeypatch, run_module):
    monkeypatch.setattr(gpu_verify, 'SYSFS_ROOT', str(tmp_path / 'empty'))
    sim_node(2)
    outcome, result, warnings = run_module(gpu_verify, {'timeout': 0})
    assert outcome == 'exit' and result['expected_count'] is None
    assert warnings == ['sysfs shows no NVIDIA GPU on the PCI bus (/sys/bus/pci/devices), so the GPU count NVML '
                        'reports was not checked; set expected_count']

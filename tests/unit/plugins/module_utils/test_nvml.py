# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import pytest

import pynvml

from ansible_collections.gpuops.host.plugins.module_utils import _nvml
from ansible_collections.gpuops.host.plugins.module_utils._namespaces import Place
from ansible_collections.gpuops.host.plugins.module_utils._procs import ProcFS

from gpusim.nvml import GHOST_PID


@pytest.mark.parametrize('code,name,text', [
    (pynvml.NVML_ERROR_GPU_IS_LOST, 'NVML_ERROR_GPU_IS_LOST', 'NVML_ERROR_GPU_IS_LOST (GPU is lost)'),
    (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, 'NVML_ERROR_DRIVER_NOT_LOADED', 'NVML_ERROR_DRIVER_NOT_LOADED (Driver Not Loaded)'),
    (pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, 'NVML_ERROR_FUNCTION_NOT_FOUND', 'NVML_ERROR_FUNCTION_NOT_FOUND (Function Not Found)'),
])
def test_error_names(code, name, text):
    exc = pynvml.NVMLError(code)
    assert _nvml.error_name(pynvml, exc) == name
    assert _nvml.describe_error(pynvml, exc) == text


def write_proc(root, pid, comm, cmdline):
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / 'stat').write_bytes(b'%d (%s) S 1 %d %d 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 4242 0 0' % (pid, comm, pid, pid))
    (d / 'comm').write_bytes(comm + b'\n')
    (d / 'cmdline').write_bytes(cmdline)


@pytest.mark.parametrize('comm,cmdline,name,line', [
    # setproctitle: comm cut to 15 bytes, the title in cmdline
    (b'sglang::schedul', b'sglang::scheduler_TP3\0\0\0\0', 'sglang::scheduler_TP3', 'sglang::scheduler_TP3'),
    (b'sglang::schedul', b'sglang::scheduler_TP3          ', 'sglang::scheduler_TP3', 'sglang::scheduler_TP3'),
    (b'python3', b'/usr/bin/python3\0-m\0sglang.launch_server\0--tp-size\0008\0', 'python3',
     '/usr/bin/python3 -m sglang.launch_server --tp-size 8'),
    (b'kworker/0:1', b'', 'kworker/0:1', ''),
    # a long comm that is not a prefix of argv[0] stays as it is
    (b'nvidia-persiste', b'/usr/bin/other\0', 'nvidia-persiste', '/usr/bin/other'),
    (b'nvidia-persiste', b'/usr/bin/nvidia-persistenced\0--verbose\0', 'nvidia-persistenced',
     '/usr/bin/nvidia-persistenced --verbose'),
])
def test_local_process(tmp_path, comm, cmdline, name, line):
    write_proc(tmp_path, 4242, comm, cmdline)
    found = _nvml.local_process(4242, ProcFS(str(tmp_path)), InTheHostNamespace())
    assert found == {'exists': True, 'name': name, 'cmdline': line, 'user': 'root', 'where': None}


class InTheHostNamespace:
    """A Place where NVML's PIDs are this namespace's and every process runs beside the module."""
    nvml_pids_are_local = True

    def elsewhere(self, pid):
        return None


def test_local_process_gone(tmp_path):
    assert _nvml.local_process(4242, ProcFS(str(tmp_path)), InTheHostNamespace()) == {
        'exists': False, 'name': None, 'cmdline': None, 'user': None, 'where': None}


def test_outside_the_host_pid_namespace_no_pid_is_looked_up(tmp_path):
    write_proc(tmp_path, 4242, b'python3', b'python3\0train.py\0')
    procs = ProcFS(str(tmp_path))
    # the fake tree has no ns/pid: the module cannot tell its namespace is the host's
    assert _nvml.local_process(4242, procs, Place(procs, 'self', {})) == {
        'exists': False, 'name': None, 'cmdline': None, 'user': None, 'where': 'outside this PID namespace'}


def test_idle_node(node):
    with _nvml.Nvml(pynvml) as nvml:
        snap = nvml.snapshot()
    assert snap['count'] == 4 and snap['memory_api'] == 'v2' and snap['driver_version'] == '570.133.20'
    assert [g['uuid'] for g in snap['gpus']] == node.gpu_uuids
    g = snap['gpus'][1]
    assert (g['used_mib'], g['reserved_mib'], g['v1_used_mib'], g['total_mib'], g['free_mib']) == (0, 700, 700, 143771, 143071)
    assert g['pci_bus_id'] == node.gpus[1]['pci_bus_id'] and g['processes'] == [] and g['error'] is None


def test_processes_and_ghosts(node, holder):
    node.allocate(2, 8123, pid=holder.pid)
    node.set_ghost(3, 512)
    with _nvml.Nvml(pynvml) as nvml:
        gpus = nvml.snapshot()['gpus']
    assert gpus[2]['used_mib'] == 8123 and gpus[2]['v1_used_mib'] == 8823
    assert gpus[2]['processes'] == [{'pid': holder.pid, 'used_mib': 8123, 'exists': True, 'name': 'sleep',
                                     'cmdline': 'sleep 600', 'user': 'root', 'where': None}]
    assert gpus[3]['processes'] == [{'pid': GHOST_PID, 'used_mib': 512, 'exists': False, 'name': None, 'cmdline': None,
                                     'user': None, 'where': None}]
    assert _nvml.gpu_process_pids(pynvml) == [
        {'gpu_uuid': node.gpu_uuids[2], 'gpu_index': 2, 'pid': holder.pid, 'used_mib': 8123},
        {'gpu_uuid': node.gpu_uuids[3], 'gpu_index': 3, 'pid': GHOST_PID, 'used_mib': 512},
    ]


def test_lost_gpu_keeps_the_uuid_seen_before(node):
    with _nvml.Nvml(pynvml) as nvml:
        assert nvml.read_gpu(1)['error'] is None
        node.set_lost(1)
        g = nvml.read_gpu(1)
        assert g['error'] == 'NVML_ERROR_GPU_IS_LOST' and g['uuid'] == node.gpu_uuids[1]
    with _nvml.Nvml(pynvml) as nvml:
        g = nvml.read_gpu(1)
        assert g['error'] == 'NVML_ERROR_GPU_IS_LOST' and g['uuid'] is None
        assert [p['gpu_index'] for p in _nvml.gpu_process_pids(pynvml)] == []


def test_v1_fallback(node):
    node.set_no_v2()
    with _nvml.Nvml(pynvml) as nvml:
        snap = nvml.snapshot()
    assert snap['memory_api'] == 'v1'
    g = snap['gpus'][0]
    assert (g['used_mib'], g['reserved_mib'], g['v1_used_mib']) == (700, None, 700)


@pytest.mark.parametrize('error,code,hint', [
    ('DRIVER_NOT_LOADED', 'NVML_ERROR_DRIVER_NOT_LOADED', 'the NVIDIA kernel driver is not loaded (see dmesg'),
    ('LIB_RM_VERSION_MISMATCH', 'NVML_ERROR_LIB_RM_VERSION_MISMATCH', 'the user-space driver and the kernel module differ'),
    ('UNKNOWN', 'NVML_ERROR_UNKNOWN', None),
])
def test_init_errors(node, error, code, hint):
    node.set_init_error(error)
    with pytest.raises(_nvml.NvmlError) as caught:
        with _nvml.Nvml(pynvml):
            pass
    assert caught.value.code == code
    assert str(caught.value).startswith('Cannot initialise NVML: %s (' % code)
    if hint:
        assert str(caught.value).split('): ', 1)[1].startswith(hint)
    with pytest.raises(_nvml.NvmlError):
        _nvml.gpu_process_pids(pynvml)

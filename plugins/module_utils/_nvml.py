# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""NVML access through nvidia-ml-py: session set-up with clear errors, per-GPU readings.

Every function takes the pynvml module as an argument, so callers (and tests) decide
which library is used; nothing here knows about AnsibleModule.
"""

from __future__ import annotations

import traceback

from ansible_collections.gpuops.host.plugins.module_utils._namespaces import Place
from ansible_collections.gpuops.host.plugins.module_utils._procs import ProcFS

try:
    import pynvml
except ImportError:
    pynvml = None
    HAS_PYNVML = False
    PYNVML_IMPORT_ERROR = traceback.format_exc()
else:
    HAS_PYNVML = True
    PYNVML_IMPORT_ERROR = None

MIB = 1024 * 1024

# What an operator should look at when nvmlInit fails with these codes.
_INIT_HINTS = {
    'NVML_ERROR_LIBRARY_NOT_FOUND': 'libnvidia-ml.so.1 was not found; is the NVIDIA driver installed on this host?',
    'NVML_ERROR_DRIVER_NOT_LOADED': 'the NVIDIA kernel driver is not loaded (see dmesg, lsmod | grep nvidia)',
    'NVML_ERROR_NO_PERMISSION': 'no permission to open /dev/nvidiactl',
    'NVML_ERROR_LIB_RM_VERSION_MISMATCH': 'the user-space driver and the kernel module differ in version; reload the module or reboot',
}

# Errors that mean "this driver does not offer the call", not "the GPU is broken".
_UNSUPPORTED = ('NVML_ERROR_FUNCTION_NOT_FOUND', 'NVML_ERROR_NOT_SUPPORTED', 'NVML_ERROR_ARGUMENT_VERSION_MISMATCH')


class NvmlError(Exception):
    """NVML could not be used at all; ``code`` is the NVML error name when there is one."""

    def __init__(self, msg, code=None):
        super().__init__(msg)
        self.code = code


def error_name(nvml, exc):
    """Name of the NVML_ERROR_* constant behind an NVMLError, e.g. NVML_ERROR_GPU_IS_LOST."""
    value = getattr(exc, 'value', None)
    for name in dir(nvml):
        if name.startswith('NVML_ERROR_') and getattr(nvml, name) == value:
            return name
    return 'NVML_ERROR_%s' % value


def describe_error(nvml, exc):
    """``NVML_ERROR_GPU_IS_LOST (GPU is lost)``."""
    return '%s (%s)' % (error_name(nvml, exc), exc)


def _text(value):
    return value.decode('utf-8', 'replace') if isinstance(value, bytes) else value


def _mib(value):
    return None if value is None else int(value // MIB)


def local_process(pid, procs, place):
    """What this host's /proc says about a PID that NVML lists: ``{exists, name, cmdline, user, where}``.

    Where this is not the PID namespace NVML's PIDs belong to, no PID is looked up (the number
    may name another process here): ``exists`` is False and ``where`` says so. Otherwise
    ``exists`` False means the process is gone, and for a live one ``where`` names another PID
    namespace or container it runs in. The name
    is the untruncated title where /proc/PID/comm is cut to 15 bytes (a process titled
    ``sglang::scheduler_TP3`` has comm ``sglang::schedul``).
    """
    if not place.nvml_pids_are_local:
        # the number may name another process here, or none: nothing here tells which process it is
        return {'exists': False, 'name': None, 'cmdline': None, 'user': None, 'where': 'outside this PID namespace'}
    proc = procs.read(pid)
    if proc is None or proc.zombie:
        return {'exists': False, 'name': None, 'cmdline': None, 'user': None, 'where': None}
    return {'exists': True, 'name': proc.name, 'cmdline': ' '.join(proc.cmdline), 'user': procs.owner(pid),
            'where': place.elsewhere(pid)}


class Nvml:
    """An open NVML session; use as a context manager.

    >>> with Nvml() as nvml:
    ...     snapshot = nvml.snapshot()

    ``nvml`` is the pynvml module to use, the one imported here by default.
    """

    def __init__(self, nvml=None, proc_root='/proc', environ=None):
        self.nvml = nvml if nvml is not None else pynvml
        self.procs = ProcFS(proc_root)
        self.place = Place(self.procs, 'self', environ)
        self.memory_api = None          # 'v2' or 'v1', decided on the first memory reading
        self._uuids = {}                # index -> UUID, kept so a GPU lost later keeps its key

    def __enter__(self):
        try:
            self.nvml.nvmlInit()
        except self.nvml.NVMLError as e:
            name = error_name(self.nvml, e)
            hint = _INIT_HINTS.get(name)
            raise NvmlError('Cannot initialise NVML: %s%s' % (describe_error(self.nvml, e), ': %s' % hint if hint else ''), code=name)
        return self

    def __exit__(self, *exc_info):
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass
        return False

    def _call(self, what, fn, *args):
        """A call made outside any one GPU: NVML errors become NvmlError."""
        try:
            return fn(*args)
        except self.nvml.NVMLError as e:
            raise NvmlError('NVML failed to %s: %s' % (what, describe_error(self.nvml, e)), code=error_name(self.nvml, e))

    def _optional(self, fn, *args):
        """A call some drivers lack: None where the driver does not offer it."""
        try:
            return fn(*args)
        except self.nvml.NVMLError as e:
            if error_name(self.nvml, e) in _UNSUPPORTED:
                return None
            raise

    def driver_version(self):
        return _text(self._call('read the driver version', self.nvml.nvmlSystemGetDriverVersion))

    def count(self):
        return self._call('count the GPUs', self.nvml.nvmlDeviceGetCount)

    def _memory(self, handle):
        """(total, used, reserved, free, v1_used) in MiB; reserved is None with the v1 call."""
        v1 = self.nvml.nvmlDeviceGetMemoryInfo(handle)
        if self.memory_api != 'v1':
            version = getattr(self.nvml, 'nvmlMemory_v2', None)
            v2 = self._optional(self.nvml.nvmlDeviceGetMemoryInfo, handle, version) if version else None
            # a v2 answer always has reserved > 0; zero means the driver filled a v1 layout
            if v2 is not None and v2.reserved > 0:
                self.memory_api = 'v2'
                return _mib(v2.total), _mib(v2.used), _mib(v2.reserved), _mib(v2.free), _mib(v1.used)
            self.memory_api = 'v1'
        return _mib(v1.total), _mib(v1.used), None, _mib(v1.free), _mib(v1.used)

    def _processes(self, handle):
        by_pid = {}
        calls = (self.nvml.nvmlDeviceGetComputeRunningProcesses,
                 getattr(self.nvml, 'nvmlDeviceGetGraphicsRunningProcesses', None))
        for call in calls:
            for p in (self._optional(call, handle) if call else None) or []:
                used = _mib(p.usedGpuMemory)
                known = by_pid.get(p.pid)
                if known is None or (used or 0) > (known or 0):
                    by_pid[p.pid] = used
        return [dict(pid=pid, used_mib=by_pid[pid], **local_process(pid, self.procs, self.place))
                for pid in sorted(by_pid)]

    def read_gpu(self, index):
        """Facts of one GPU. An NVML error on it is recorded in ``error``, never raised."""
        gpu = {
            'index': index, 'uuid': self._uuids.get(index), 'minor': None, 'name': None, 'pci_bus_id': None,
            'total_mib': None, 'used_mib': None, 'reserved_mib': None, 'free_mib': None,
            'v1_used_mib': None, 'processes': [], 'error': None,
        }
        nvml = self.nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            gpu['uuid'] = self._uuids[index] = _text(nvml.nvmlDeviceGetUUID(handle))
            gpu['name'] = _text(nvml.nvmlDeviceGetName(handle))
            gpu['minor'] = self._optional(nvml.nvmlDeviceGetMinorNumber, handle)
            pci = self._optional(nvml.nvmlDeviceGetPciInfo, handle)
            gpu['pci_bus_id'] = _text(pci.busId) if pci is not None else None
            (gpu['total_mib'], gpu['used_mib'], gpu['reserved_mib'], gpu['free_mib'],
             gpu['v1_used_mib']) = self._memory(handle)
            gpu['processes'] = self._processes(handle)
        except nvml.NVMLError as e:
            gpu['error'] = error_name(nvml, e)
            gpu['error_text'] = str(e)
        return gpu

    def snapshot(self):
        """One reading of the whole host: driver, GPU count and per-GPU facts in index order."""
        count = self.count()
        return {
            'driver_version': self.driver_version(),
            'count': count,
            'gpus': [self.read_gpu(i) for i in range(count)],
            'memory_api': self.memory_api,
        }


def gpu_process_pids(pynvml_module, proc_root='/proc'):
    """Every process NVML lists on any GPU: ``[{gpu_uuid, gpu_index, pid, used_mib}]``.

    GPUs NVML cannot read (lost) are skipped. Raises NvmlError when NVML cannot be used.
    """
    return gpu_inventory(pynvml_module, proc_root)[1]


def gpu_inventory(pynvml_module, proc_root='/proc'):
    """``(devices, listing)``: ``{minor: {index, uuid}}`` of the /dev/nvidiaN files, and every
    process NVML lists on any GPU, ``[{gpu_uuid, gpu_index, pid, used_mib}]``.

    GPUs NVML cannot read (lost) are skipped. Raises NvmlError when NVML cannot be used.
    """
    with Nvml(pynvml_module, proc_root) as nvml:
        devices, found = {}, []
        for index in range(nvml.count()):
            gpu = nvml.read_gpu(index)
            if gpu['minor'] is not None:
                devices[gpu['minor']] = {'index': index, 'uuid': gpu['uuid']}
            for p in gpu['processes']:
                found.append({'gpu_uuid': gpu['uuid'], 'gpu_index': index, 'pid': p['pid'], 'used_mib': p['used_mib']})
        return devices, found

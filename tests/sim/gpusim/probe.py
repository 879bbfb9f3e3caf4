# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Print, as JSON, everything pynvml reads from whatever libnvidia-ml.so.1 the loader finds.

Run it as a script in a process whose LD_LIBRARY_PATH and GPUSIM_STATE were set at start:
    python tests/sim/gpusim/probe.py
Errors appear as pynvml's exception class names (e.g. "NVMLError_GpuIsLost").
"""

import ctypes
import json

import pynvml

MIB = 2 ** 20


class ProcessInfoV1(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


def error_name(e):
    return type(e).__name__


def processes(fn, handle):
    try:
        return [{"pid": p.pid, "used_mib": p.usedGpuMemory // MIB,
                 "gpu_instance_id": p.gpuInstanceId, "compute_instance_id": p.computeInstanceId}
                for p in fn(handle)]
    except pynvml.NVMLError as e:
        return error_name(e)


def processes_v1(handle):
    """The unversioned C symbol, which keeps the v1 layout; pynvml itself no longer calls it."""
    fn = pynvml.nvmlLib.nvmlDeviceGetComputeRunningProcesses
    count = ctypes.c_uint(0)
    ret = fn(handle, ctypes.byref(count), None)
    if ret == pynvml.NVML_SUCCESS:
        return []
    if ret != pynvml.NVML_ERROR_INSUFFICIENT_SIZE:
        return error_name(pynvml.NVMLError(ret))
    infos = (ProcessInfoV1 * count.value)()
    ret = fn(handle, ctypes.byref(count), infos)
    if ret != pynvml.NVML_SUCCESS:
        return error_name(pynvml.NVMLError(ret))
    return [{"pid": infos[i].pid, "used_mib": infos[i].usedGpuMemory // MIB} for i in range(count.value)]


def gpu(index):
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except pynvml.NVMLError as e:
        return {"handle_error": error_name(e)}
    result = {}
    try:
        uuid = pynvml.nvmlDeviceGetUUID(handle)
        pci = pynvml.nvmlDeviceGetPciInfo(handle)
        result.update(uuid=uuid, name=pynvml.nvmlDeviceGetName(handle), index=pynvml.nvmlDeviceGetIndex(handle),
                      minor=pynvml.nvmlDeviceGetMinorNumber(handle),
                      index_by_uuid=pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByUUID(uuid)),
                      pci={"bus_id": pci.busId, "bus_id_legacy": pci.busIdLegacy,
                           "domain": pci.domain, "bus": pci.bus, "device": pci.device,
                           "pci_device_id": pci.pciDeviceId})
        v1 = pynvml.nvmlDeviceGetMemoryInfo(handle)
        result["v1"] = {"total": v1.total, "used": v1.used, "free": v1.free}
    except pynvml.NVMLError as e:
        result["error"] = error_name(e)
        return result
    try:
        v2 = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        result["v2"] = {"total": v2.total, "reserved": v2.reserved, "used": v2.used, "free": v2.free}
    except pynvml.NVMLError as e:
        result["v2"] = error_name(e)
    result["compute"] = processes(pynvml.nvmlDeviceGetComputeRunningProcesses, handle)
    result["compute_v2"] = processes(pynvml.nvmlDeviceGetComputeRunningProcesses_v2, handle)
    result["compute_v1"] = processes_v1(handle)
    result["graphics"] = processes(pynvml.nvmlDeviceGetGraphicsRunningProcesses, handle)
    return result


def main():
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        print(json.dumps({"init_error": error_name(e)}))
        return
    try:
        count = pynvml.nvmlDeviceGetCount()
        print(json.dumps({"driver_version": pynvml.nvmlSystemGetDriverVersion(),
                          "nvml_version": pynvml.nvmlSystemGetNVMLVersion(),
                          "count": count, "gpus": [gpu(i) for i in range(count)]}))
    finally:
        pynvml.nvmlShutdown()


if __name__ == "__main__":
    main()

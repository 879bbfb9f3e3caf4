# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Print, as JSON, the state of a simulated GPU node that the scenarios assert on.

    processes  every process in /proc: pid, ppid, sid, state, uid (real), exe (basename), args
               and the NVIDIA device files it holds open (devices)
    gpus       every GPU as NVML (pynvml over the node's libnvidia-ml.so.1) reports it:
               index, uuid, total_mib, used_mib (v2 call), processes [{pid, used_mib}],
               or error
    server     the record sglang_launch keeps of the server it started, or null
"""

import json
import os
import sys

import pynvml

MIB = 2 ** 20
RECORD = "/var/lib/gpuops/sglang/server.json"


def devices(pid):
    try:
        fds = os.listdir("/proc/%s/fd" % pid)
    except OSError:
        return []
    held = set()
    for fd in fds:
        try:
            target = os.readlink("/proc/%s/fd/%s" % (pid, fd))
        except OSError:
            continue
        if target.startswith("/dev/nvidia"):
            held.add(target)
    return sorted(held)


def uid(pid):
    try:
        with open("/proc/%s/status" % pid) as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def processes():
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                stat = f.read()
            with open("/proc/%s/cmdline" % name, "rb") as f:
                args = f.read().rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        try:
            exe = os.path.basename(os.readlink("/proc/%s/exe" % name))
        except OSError:
            exe = None
        fields = stat[stat.rindex(")") + 2:].split()
        out.append({"pid": int(name), "ppid": int(fields[1]), "sid": int(fields[3]), "state": fields[0],
                    "uid": uid(name), "exe": exe, "args": args, "devices": devices(name)})
    return sorted(out, key=lambda p: p["pid"])


def gpus():
    pynvml.nvmlInit()
    try:
        out = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            gpu = {"index": index}
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                gpu["uuid"] = pynvml.nvmlDeviceGetUUID(handle)
                memory = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
                gpu["total_mib"] = memory.total // MIB
                gpu["used_mib"] = memory.used // MIB
                gpu["processes"] = [{"pid": p.pid, "used_mib": p.usedGpuMemory // MIB}
                                    for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)]
            except pynvml.NVMLError as e:
                gpu["error"] = str(e)
            out.append(gpu)
        return out
    finally:
        pynvml.nvmlShutdown()


def server():
    try:
        with open(RECORD) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def main():
    json.dump({"processes": processes(), "gpus": gpus(), "server": server()}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())

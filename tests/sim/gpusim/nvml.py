# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""State of the simulated GPUs that the libnvidia-ml.so.1 test double answers from.

The double (tests/sim/nvml/nvml_double.c) reads the state directory named by GPUSIM_STATE
(default /var/lib/gpusim) on every call, so changes made here show in running NVML clients.

Layout of the state directory:
    gpus              one line per GPU: index minor uuid bus_id total_mib reserved_mib name
    config            key=value lines (driver_version, release_lag_ms, init_error, no_v2, ...)
    alloc/G-PID-START MiB allocated on GPU G by PID, whose /proc/PID/stat starttime is START;
                      PID as the node's outermost PID namespace numbers it (NVML lists host PIDs)
    gone/G-PID-START  when a reader first saw that holder gone (realtime ms)
    ghost/G           "pid mib" held on GPU G by a process that no longer exists
    lost/G            present while GPU G is lost
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

SIM_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_ROOT = os.path.dirname(os.path.dirname(SIM_DIR))
DEFAULT_STATE = "/var/lib/gpusim"
LIB_NAME = "libnvidia-ml.so.1"
GHOST_PID = 999999
# Bus numbers of the eight GPUs of an HGX H200 board.
HGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
NVML_ERRORS = {
    "UNINITIALIZED": 1, "INVALID_ARGUMENT": 2, "NOT_SUPPORTED": 3, "NO_PERMISSION": 4,
    "ALREADY_INITIALIZED": 5, "NOT_FOUND": 6, "INSUFFICIENT_SIZE": 7, "INSUFFICIENT_POWER": 8,
    "DRIVER_NOT_LOADED": 9, "TIMEOUT": 10, "IRQ_ISSUE": 11, "LIBRARY_NOT_FOUND": 12,
    "FUNCTION_NOT_FOUND": 13, "CORRUPTED_INFOROM": 14, "GPU_IS_LOST": 15, "RESET_REQUIRED": 16,
    "OPERATING_SYSTEM": 17, "LIB_RM_VERSION_MISMATCH": 18, "IN_USE": 19, "MEMORY": 20,
    "NO_DATA": 21, "UNKNOWN": 999,
}
_SUBDIRS = ("alloc", "gone", "ghost", "lost")


def build_dir() -> str:
    """Directory the Makefile builds into (GPUSIM_BUILD overrides)."""
    return os.environ.get("GPUSIM_BUILD") or os.path.join(REPO_ROOT, "build", "sim")


def build() -> str:
    """Build the double and the decoys unless they are there; return the build directory."""
    out = build_dir()
    wanted = [os.path.join(out, "lib", LIB_NAME),
              os.path.join(out, "bin", "nvidia-persistenced"),
              os.path.join(out, "bin", "nv-hostengine")]
    if not all(os.path.exists(p) for p in wanted):
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, ".build.lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            subprocess.run(["make", "-s", "-C", SIM_DIR, "BUILD=" + out], check=True,
                           stdout=subprocess.DEVNULL)
    return out


def lib_dir() -> str:
    """Directory holding libnvidia-ml.so.1 (the double); built on first use."""
    return os.path.join(build(), "lib")


def bin_dir() -> str:
    """Directory holding the decoy daemons nvidia-persistenced and nv-hostengine."""
    return os.path.join(build(), "bin")


def load_double() -> None:
    """Load libnvidia-ml.so.1 into this process, so that pynvml's dlopen by soname finds it.

    The copy in a directory of LD_LIBRARY_PATH wins, as it would for the loader; else the built double.
    """
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    found = [d for d in dirs if os.path.exists(os.path.join(d, LIB_NAME))]
    ctypes.CDLL(os.path.join(found[0] if found else lib_dir(), LIB_NAME))


def host_proc() -> str:
    """The /proc of the node's outermost PID namespace: $GPUSIM_HOST_PROC inside a simulated
    container (which mounts its own /proc over the node's), else /proc."""
    return os.environ.get("GPUSIM_HOST_PROC") or "/proc"


def outer_pid(pid: int = None) -> int:
    """PID (default: this process) as the outermost PID namespace that /proc shows numbers it.

    The first NSpid entry of /proc/PID/status (Linux 4.1+, proc(5)) is the PID in the namespace
    of the /proc mount; for this process, the node's /proc is read ($GPUSIM_HOST_PROC), so
    inside a container it is the node's PID, as the driver would report it.
    """
    path = os.path.join(host_proc(), "self", "status") if pid is None else "/proc/%d/status" % pid
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[1])
    except FileNotFoundError:
        pass    # a process that has exited keeps the number it was given
    return os.getpid() if pid is None else pid


def _proc_stat(pid: int) -> tuple:
    """State and start time in clock ticks after boot of PID (/proc/PID/stat fields 3 and 22),
    read in the node's outermost /proc."""
    with open(os.path.join(host_proc(), str(pid), "stat")) as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2:].split()
    return fields[0], int(fields[19])


def proc_start_time(pid: int) -> int:
    """Start time of PID in clock ticks after boot (/proc/PID/stat field 22)."""
    return _proc_stat(pid)[1]


def holder_alive(pid: int, start_time: int) -> bool:
    """As the double decides: PID runs in the node's outermost /proc, is no zombie and started at START_TIME."""
    try:
        state, started = _proc_stat(pid)
    except (OSError, ValueError, IndexError):
        return False
    return state not in ("Z", "X") and started == start_time


def gpu_uuid(index: int) -> str:
    digest = hashlib.sha1(("gpusim-gpu-%d" % index).encode()).hexdigest()
    return "GPU-%s-%s-%s-%s-%s" % (digest[:8], digest[8:12], digest[12:16], digest[16:20], digest[20:32])


def pci_bus_id(index: int) -> str:
    bus = HGX_BUSES[index] if index < len(HGX_BUSES) else 0xE0 + index
    return "00000000:%02X:00.0" % bus


def _write_atomic(path: str, text: str) -> None:
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class Node:
    """A simulated GPU node's NVML state, kept in STATE_DIR."""

    def __init__(self, state_dir: str):
        self.state_dir = os.path.abspath(state_dir)
        self.gpus = []
        with open(os.path.join(self.state_dir, "gpus")) as f:
            for line in f:
                index, minor, uuid, bus_id, total, reserved, name = line.rstrip("\n").split(" ", 6)
                self.gpus.append({"index": int(index), "minor": int(minor), "uuid": uuid,
                                  "pci_bus_id": bus_id, "total_mib": int(total),
                                  "reserved_mib": int(reserved), "name": name})

    @classmethod
    def create(cls, state_dir: str, gpus: int = 8, name: str = "NVIDIA H200", total_mib: int = 143771,
               reserved_mib: int = 700, driver_version: str = "570.133.20") -> "Node":
        """Write a fresh state: GPUS idle GPUs, no faults."""
        os.makedirs(state_dir, exist_ok=True)
        for sub in _SUBDIRS:
            shutil.rmtree(os.path.join(state_dir, sub), ignore_errors=True)
            os.makedirs(os.path.join(state_dir, sub))
            # Any user who may open the device files allocates GPU memory: the driver creates
            # /dev/nvidia* with mode 0666 by default (the nvidia module's NVreg_DeviceFileMode,
            # README "Configuring device file permissions"), as the sandbox's /dev does.
            os.chmod(os.path.join(state_dir, sub), 0o777)
        lines = ["%d %d %s %s %d %d %s\n" % (i, i, gpu_uuid(i), pci_bus_id(i), total_mib, reserved_mib, name)
                 for i in range(gpus)]
        _write_atomic(os.path.join(state_dir, "gpus"), "".join(lines))
        _write_atomic(os.path.join(state_dir, "config"), "driver_version=%s\n" % driver_version)
        return cls(state_dir)

    @property
    def count(self) -> int:
        return len(self.gpus)

    @property
    def gpu_uuids(self) -> list:
        return [g["uuid"] for g in self.gpus]

    def env(self) -> dict:
        """Environment that points an NVML client at this node."""
        return {"GPUSIM_STATE": self.state_dir, "LD_LIBRARY_PATH": lib_dir()}

    def _path(self, *parts) -> str:
        return os.path.join(self.state_dir, *parts)

    def _check_gpu(self, gpu_index: int) -> None:
        if not 0 <= gpu_index < self.count:
            raise IndexError("GPU %d out of range: the node has %d GPUs" % (gpu_index, self.count))

    # -- allocations --

    def allocate(self, gpu_index: int, mib: int, pid: int = None, start_time: int = None) -> str:
        """Register MIB held on GPU_INDEX by PID (default: this process); adds to what it holds.

        PID is read in this process's /proc (for a PID of a sandbox use Sandbox.allocate) and
        recorded as the outermost PID namespace of that /proc numbers it, as NVML lists it.

        START_TIME (default: PID's own) other than PID's makes an allocation of an earlier
        process that had the same PID: it never counts for the process that has it now.
        """
        self._check_gpu(gpu_index)
        pid = outer_pid(pid)
        key = "%d-%d-%d" % (gpu_index, pid, proc_start_time(pid) if start_time is None else start_time)
        path = self._path("alloc", key)
        held = 0
        if os.path.exists(path):
            with open(path) as f:
                held = int(f.read().strip() or 0)
        _write_atomic(path, "%d\n" % (held + mib))
        _remove(self._path("gone", key))
        return key

    def free(self, gpu_index: int, pid: int = None) -> None:
        """Drop what PID (default: this process) holds on GPU_INDEX."""
        self._drop_allocations("%d-%d-" % (gpu_index, outer_pid(pid)))

    def _drop_allocations(self, prefix: str) -> None:
        """Remove the allocations, live or of dead holders, whose key starts with PREFIX (GPU-PID-START)."""
        for sub in ("alloc", "gone"):
            for name in os.listdir(self._path(sub)):
                if name.startswith(prefix):
                    _remove(self._path(sub, name))

    def allocations(self) -> list:
        """Registered allocations, dead holders included: dicts gpu, pid, start_time, mib."""
        result = []
        for name in sorted(os.listdir(self._path("alloc"))):
            parts = name.split("-")
            if len(parts) != 3 or not all(p.isdigit() for p in parts):
                continue
            with open(self._path("alloc", name)) as f:
                mib = int(f.read().strip() or 0)
            result.append({"gpu": int(parts[0]), "pid": int(parts[1]), "start_time": int(parts[2]), "mib": mib})
        return result

    def ghosts(self) -> dict:
        """Ghost memory by GPU index: dicts pid, mib."""
        result = {}
        for name in os.listdir(self._path("ghost")):
            with open(self._path("ghost", name)) as f:
                pid, mib = f.read().split()
            result[int(name)] = {"pid": int(pid), "mib": int(mib)}
        return result

    def used_mib(self, gpu_index: int) -> int:
        """Memory in use on GPU_INDEX as the double counts it: the v2 "used", reserved memory apart.

        That is the allocations of live holders (see holder_alive), those of holders seen gone
        less than the release lag ago, and ghost memory. As every NVML reader does, this one
        notes when it first sees a holder gone, which starts that holder's release lag.
        """
        self._check_gpu(gpu_index)
        lag_ms = int(self._config().get("release_lag_ms", 0))
        used = sum(a["mib"] for a in self.allocations()
                   if a["gpu"] == gpu_index and self._still_counts(a, lag_ms))
        used += self.ghosts().get(gpu_index, {"mib": 0})["mib"]
        gpu = self.gpus[gpu_index]
        return min(used, gpu["total_mib"] - gpu["reserved_mib"])

    def _still_counts(self, alloc: dict, lag_ms: int) -> bool:
        gone = self._path("gone", "%d-%d-%d" % (alloc["gpu"], alloc["pid"], alloc["start_time"]))
        if holder_alive(alloc["pid"], alloc["start_time"]):
            _remove(gone)
            return True
        if lag_ms <= 0:
            return False
        now_ms = int(time.time() * 1000)
        try:
            with open(gone) as f:
                return now_ms - int(f.read().strip() or 0) < lag_ms
        except FileNotFoundError:
            _write_atomic(gone, "%d\n" % now_ms)
            return True

    # -- faults --

    def _config(self) -> dict:
        with open(self._path("config")) as f:
            return dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)

    def _set_config(self, key: str, value) -> None:
        config = self._config()
        if value is None:
            config.pop(key, None)
        else:
            config[key] = str(value)
        _write_atomic(self._path("config"), "".join("%s=%s\n" % kv for kv in sorted(config.items())))

    def set_release_lag(self, ms: int) -> None:
        """Keep an exited holder's memory (and its pid) listed for MS after its exit is noticed."""
        self._set_config("release_lag_ms", int(ms))

    def set_ghost(self, gpu_index: int, mib: int, pid: int = GHOST_PID) -> None:
        """Memory held by a pid that no longer exists; only reset_gpu frees it."""
        self._check_gpu(gpu_index)
        _write_atomic(self._path("ghost", str(gpu_index)), "%d %d\n" % (pid, mib))

    def set_lost(self, gpu_index: int, lost: bool = True) -> None:
        """NVML answers GPU_IS_LOST for this GPU, its handle lookup included."""
        self._check_gpu(gpu_index)
        if lost:
            _write_atomic(self._path("lost", str(gpu_index)), "")
        else:
            _remove(self._path("lost", str(gpu_index)))

    def set_init_error(self, error=None) -> None:
        """nvmlInit fails with ERROR: a name such as "DRIVER_NOT_LOADED", a code, or None to clear."""
        if isinstance(error, str):
            code = NVML_ERRORS[error.upper().replace("NVML_ERROR_", "")]
        else:
            code = error
        self._set_config("init_error", code)

    def set_no_v2(self, flag: bool = True) -> None:
        """Answer nvmlDeviceGetMemoryInfo_v2 as a driver without it (FUNCTION_NOT_FOUND)."""
        self._set_config("no_v2", 1 if flag else None)

    def reset_gpu(self, gpu_index: int) -> None:
        """As a GPU reset: clears ghost memory, the lost state and every allocation of the GPU."""
        self._check_gpu(gpu_index)
        self._drop_allocations("%d-" % gpu_index)
        _remove(self._path("ghost", str(gpu_index)))
        _remove(self._path("lost", str(gpu_index)))

    def describe(self) -> dict:
        """The raw state: GPUs, configuration, ghosts, lost GPUs and allocations."""
        return {"state_dir": self.state_dir, "gpus": self.gpus, "config": self._config(),
                "ghosts": self.ghosts(), "lost": sorted(int(n) for n in os.listdir(self._path("lost"))),
                "allocations": self.allocations()}


def nvml_view(node: Node) -> list:
    """What NVML reports for every GPU, read with pynvml through the double in this process."""
    import pynvml

    os.environ["GPUSIM_STATE"] = node.state_dir
    try:
        load_double()
    except (OSError, subprocess.CalledProcessError):
        pass  # an installed libnvidia-ml.so.1 on the library path answers instead
    pynvml.nvmlInit()
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            try:
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                mem = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
                procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
                gpus.append({"index": i, "uuid": pynvml.nvmlDeviceGetUUID(h),
                             "used_mib": mem.used // 2**20, "reserved_mib": mem.reserved // 2**20,
                             "processes": [{"pid": p.pid, "used_mib": p.usedGpuMemory // 2**20} for p in procs]})
            except pynvml.NVMLError as e:
                gpus.append({"index": i, "error": str(e)})
        return gpus
    finally:
        pynvml.nvmlShutdown()


def _hold(node: Node, gpu: int, mib: int, seconds: float) -> int:
    """Allocate and hold until SIGTERM/SIGINT or SECONDS pass; the memory goes when the process does."""
    node.allocate(gpu, mib)
    print("holding %d MiB on GPU %d as pid %d" % (mib, gpu, os.getpid()), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        if seconds:
            time.sleep(seconds)
        else:
            signal.pause()
    except KeyboardInterrupt:
        pass
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpusim.nvml", description=__doc__.splitlines()[0])
    parser.add_argument("--state", default=os.environ.get("GPUSIM_STATE") or DEFAULT_STATE,
                        help="state directory (default: $GPUSIM_STATE or %s)" % DEFAULT_STATE)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("create", help="write a fresh state of idle GPUs")
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--name", default="NVIDIA H200")
    p.add_argument("--total-mib", type=int, default=143771)
    p.add_argument("--reserved-mib", type=int, default=700)
    p.add_argument("--driver-version", default="570.133.20")
    p = sub.add_parser("describe", help="print the state, and what NVML reports when pynvml is importable")
    p.add_argument("--raw", action="store_true", help="state files only, without asking NVML")
    p = sub.add_parser("allocate", help="register an allocation for a running process")
    p.add_argument("gpu", type=int)
    p.add_argument("mib", type=int)
    p.add_argument("--pid", type=int, required=True)
    p = sub.add_parser("hold", help="allocate as this process and hold it until killed")
    p.add_argument("gpu", type=int)
    p.add_argument("mib", type=int)
    p.add_argument("--seconds", type=float, default=0, help="exit after this long (default: never)")
    p = sub.add_parser("fault", help="inject a fault")
    p.add_argument("kind", choices=["lost", "found", "ghost", "init-error", "no-v2", "v2", "lag"])
    p.add_argument("args", nargs="*", help="lost/found GPU; ghost GPU MIB [PID]; init-error NAME|none; lag MS")
    p = sub.add_parser("reset", help="reset GPUs (all when none given)")
    p.add_argument("gpus", type=int, nargs="*")
    args = parser.parse_args(argv)

    if args.command == "create":
        Node.create(args.state, gpus=args.gpus, name=args.name, total_mib=args.total_mib,
                    reserved_mib=args.reserved_mib, driver_version=args.driver_version)
        return 0
    node = Node(args.state)
    if args.command == "describe":
        info = node.describe()
        if not args.raw:
            try:
                info["nvml"] = nvml_view(node)
            except ImportError:
                info["nvml"] = "pynvml is not importable"
            except Exception as e:  # the report shows what NVML said, whatever it was
                info["nvml"] = "%s: %s" % (type(e).__name__, e)
        print(json.dumps(info, indent=2))
    elif args.command == "allocate":
        node.allocate(args.gpu, args.mib, pid=args.pid)
    elif args.command == "hold":
        return _hold(node, args.gpu, args.mib, args.seconds)
    elif args.command == "reset":
        for gpu in args.gpus or range(node.count):
            node.reset_gpu(gpu)
    else:
        a = args.args
        if args.kind in ("lost", "found"):
            node.set_lost(int(a[0]), args.kind == "lost")
        elif args.kind == "ghost":
            node.set_ghost(int(a[0]), int(a[1]), *(int(x) for x in a[2:3]))
        elif args.kind == "init-error":
            node.set_init_error(None if a[0].lower() == "none" else (int(a[0]) if a[0].isdigit() else a[0]))
        elif args.kind in ("no-v2", "v2"):
            node.set_no_v2(args.kind == "no-v2")
        else:
            node.set_release_lag(int(a[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

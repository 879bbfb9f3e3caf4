# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The local sandbox: a simulated GPU node in its own PID and mount namespaces."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time

from conftest import PYTHON
from gpusim import nvml
from gpusim.sandbox import Sandbox

NVIDIA_FILES = sorted(["nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidia-modeset", "nvidia-uvm",
                       "nvidia-uvm-tools", "nvidiactl"])


def host_pids_in_namespace(init_pid):
    """Host PIDs of every process in the PID namespace whose init is INIT_PID."""
    ns = os.readlink("/proc/%d/ns/pid" % init_pid)
    found = []
    for name in os.listdir("/proc"):
        try:
            if name.isdigit() and os.readlink("/proc/%s/ns/pid" % name) == ns:
                found.append(int(name))
        except OSError:
            pass
    return found


def wait_for(predicate, what, timeout=30):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_private_dev_holds_the_listed_devices(sandbox):
    listing = sandbox.run(["python3", "-c", "import os, json; print(json.dumps({n: os.lstat('/dev/' + n).st_mode "
                                            "for n in os.listdir('/dev')}))"], capture_output=True, text=True)
    modes = json.loads(listing.stdout)

    assert sorted(n for n in modes if n.startswith("nvidia")) == NVIDIA_FILES
    for name in NVIDIA_FILES:
        assert stat.S_ISREG(modes[name])
    for name in ("null", "zero", "random", "urandom", "tty", "full"):
        assert stat.S_ISCHR(modes[name])
    assert stat.S_ISDIR(modes["pts"]) and stat.S_ISDIR(modes["shm"])
    assert sandbox.run(["sh", "-c", "echo ok > /dev/null && head -c 4 /dev/urandom | wc -c"],
                       capture_output=True, text=True).stdout.strip() == "4"


def test_decoys_run_with_their_names_and_hold_nvidiactl(sandbox):
    procs = {p["pid"]: p for p in sandbox.procs()}

    assert set(sandbox.decoys) == {"nvidia-persistenced", "nv-hostengine"}
    for name, pid in sandbox.decoys.items():
        assert os.path.basename(procs[pid]["exe"]) == name
        assert procs[pid]["ppid"] == 1
        fds = sandbox.run(["sh", "-c", "readlink /proc/%d/fd/*" % pid], capture_output=True, text=True).stdout
        assert "/dev/nvidiactl" in fds.split()
    persistenced = sandbox.decoys["nvidia-persistenced"]
    assert "/dev/nvidia3" in sandbox.run(["sh", "-c", "readlink /proc/%d/fd/*" % persistenced],
                                         capture_output=True, text=True).stdout.split()


def test_host_processes_are_invisible_and_unsignallable(sandbox):
    host_pid = os.getpid()

    result = sandbox.run(["kill", "-0", str(host_pid)], capture_output=True, text=True)

    assert result.returncode != 0
    assert "No such process" in result.stderr
    inside = {p["pid"] for p in sandbox.procs()}
    assert host_pid not in inside
    assert inside == {1} | set(sandbox.decoys.values())


def test_nothing_inside_can_kill_the_namespace_init(sandbox):
    sandbox.run(["kill", "-KILL", "1"])
    sandbox.run(["kill", "-TERM", "1"])
    time.sleep(0.2)

    assert sandbox.alive
    assert sandbox.run(["true"]).returncode == 0


def test_python_wrapper_runs_inside_with_the_node(sandbox, tmp_path):
    sandbox.allocate(2, 4096, pid=sandbox.decoys["nv-hostengine"])
    script = ("import json, os, pynvml\n"
              "pynvml.nvmlInit()\n"
              "h = pynvml.nvmlDeviceGetHandleByIndex(2)\n"
              "print(json.dumps({'pid': os.getpid(), 'cwd': os.getcwd(), 'count': pynvml.nvmlDeviceGetCount(),\n"
              "  'used': pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2).used // 2**20,\n"
              "  'pids': [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]}))\n")

    result = subprocess.run([sandbox.python, "-c", script], cwd=str(tmp_path), capture_output=True, text=True,
                            env={"PATH": os.environ["PATH"]}, timeout=60, check=False)

    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["count"] == 4 and seen["cwd"] == str(tmp_path)
    assert seen["used"] == 4096 and seen["pids"] == [sandbox.decoys["nv-hostengine"]]
    assert seen["pid"] < 100  # a PID of the sandbox's namespace


def test_orphans_are_reaped_and_unreaped_children_stay_defunct(sandbox):
    sandbox.run(["sh", "-c", "sleep 0.1 & exit 0"])  # the sleep is re-parented to the sandbox's init
    parent = sandbox.popen([PYTHON, "-c", "import os, time\nif os.fork() == 0: os._exit(0)\ntime.sleep(600)"])
    try:
        def states():
            return {(p["ppid"] == 1, p["comm"], p["state"]) for p in sandbox.procs()}

        wait_for(lambda: (False, "python", "Z") in states(), "child of a live parent never showed as <defunct>")
        wait_for(lambda: not any(s == "Z" for orphan, dummy, s in states() if orphan), "orphans left as zombies")
    finally:
        parent.kill()
        parent.wait()


def test_leaving_the_sandbox_kills_everything_inside(tmp_path):
    with Sandbox(str(tmp_path / "node"), gpus=2) as sb:
        worker = sb.popen(["sleep", "600"])
        sb.run(["sh", "-c", "setsid sleep 600 > /dev/null 2>&1 < /dev/null &"])
        wait_for(lambda: len(sb.procs()) == 5, "sandbox processes did not start")
        init = sb.init_pid
        inside = host_pids_in_namespace(init)
        assert len(inside) == 5 and init in inside

    assert not sb.alive
    assert worker.wait(10) != 0
    wait_for(lambda: not any(os.path.exists("/proc/%d" % pid) for pid in inside), "processes outlived the sandbox")


def test_cli_start_exec_stop(tmp_path):
    workdir = str(tmp_path / "shared")
    env = dict(os.environ, PYTHONPATH=nvml.SIM_DIR)

    def cli(*args):
        return subprocess.run([PYTHON, "-m", "gpusim.sandbox"] + list(args), env=env, capture_output=True,
                              text=True, timeout=60, check=False)

    started = cli("start", "--workdir", workdir, "--gpus", "2")
    assert started.returncode == 0, started.stderr
    info = json.loads(started.stdout)
    try:
        assert info["python"] == os.path.join(workdir, "bin", "python")
        assert os.access(info["python"], os.X_OK)
        assert set(info["decoys"]) == {"nvidia-persistenced", "nv-hostengine"}
        listed = cli("exec", "--workdir", workdir, "--", "ls", "/dev")
        assert "nvidia1" in listed.stdout.split() and "nvidia2" not in listed.stdout.split()
    finally:
        stopped = cli("stop", "--workdir", workdir)
    assert stopped.returncode == 0, stopped.stderr
    wait_for(lambda: not os.path.exists("/proc/%d" % info["init_pid"]), "sandbox init outlived stop")


def test_sysfs_shows_the_gpus_on_the_pci_bus_and_the_namespace_is_named(sandbox):
    listing = sandbox.run(["sh", "-c", "for d in /sys/bus/pci/devices/*; do echo $(basename $d) $(cat $d/vendor) "
                                       "$(cat $d/class); done"], capture_output=True, text=True, check=True).stdout
    rows = [line.split() for line in listing.splitlines()]
    gpus = [r[0] for r in rows if r[1] == "0x10de" and r[2].startswith("0x03")]
    assert gpus == ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0"]
    assert len([r for r in rows if r[2] == "0x068000"]) == 4       # NVSwitches are bridges
    inside = sandbox.run(["sh", "-c", "echo $GPUOPS_HOST_PIDNS; readlink /proc/self/ns/pid"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert inside[0] == inside[1] == sandbox.pid_namespace


def test_a_container_is_a_nested_pid_namespace_whose_gpu_memory_nvml_lists_by_the_node_s_pid(sandbox):
    code = ("import os, time\nfrom gpusim.nvml import Node\n"
            "Node(os.environ['GPUSIM_STATE']).allocate(1, 2048)\n"
            "print(os.getpid(), os.readlink('/proc/self/ns/pid'), flush=True)\ntime.sleep(600)\n")
    boxed = sandbox.container([PYTHON, "-c", code], "c1", stdout=subprocess.PIPE, text=True)
    try:
        inner_pid, inner_ns = boxed.stdout.readline().split()
        outer = [p for p in sandbox.procs() if p["cmdline"][:2] == [PYTHON, "-c"] and "allocate(1, 2048)" in p["cmdline"][2]]
        assert len(outer) == 1
        assert int(inner_pid) != outer[0]["pid"] and inner_ns != sandbox.pid_namespace
        script = ("import json, pynvml\npynvml.nvmlInit()\nh = pynvml.nvmlDeviceGetHandleByIndex(1)\n"
                  "print(json.dumps([p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]))\n")
        seen = subprocess.run([sandbox.python, "-c", script], capture_output=True, text=True, check=True, timeout=60)
        assert json.loads(seen.stdout) == [outer[0]["pid"]]
        # the container's own NVML client sees the same, through the node's /proc
        in_box = subprocess.run([sandbox.container_python("c2"), "-c", script], capture_output=True, text=True,
                                check=True, timeout=60)
        assert json.loads(in_box.stdout) == [outer[0]["pid"]]
    finally:
        boxed.kill()
        boxed.wait()

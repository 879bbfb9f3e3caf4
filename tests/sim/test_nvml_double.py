# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The libnvidia-ml.so.1 double, read through the real pynvml in fresh processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import time

import pytest

from conftest import PYTHON, nvml_env
from gpusim import nvml

MIB = 2 ** 20
TOTAL, RESERVED = 143771, 700
NOT_AVAILABLE = 0xFFFFFFFF


def used_v2_mib(reading, gpu):
    return reading["gpus"][gpu]["v2"]["used"] // MIB


def pids(reading, gpu, call="compute"):
    return sorted(p["pid"] for p in reading["gpus"][gpu][call])


def sleeper(spawn):
    return spawn(["sleep", "600"])


def run_script(node, script: str) -> str:
    result = subprocess.run([PYTHON, "-c", textwrap.dedent(script)], env=nvml_env(node), capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_idle_node_reads_back_as_described(node, probe):
    reading = probe(node)

    assert reading["driver_version"] == "570.133.20"
    assert reading["count"] == 4
    assert [g["uuid"] for g in reading["gpus"]] == node.gpu_uuids
    assert len(set(node.gpu_uuids)) == 4
    assert nvml.Node.create(node.state_dir + "2", gpus=4).gpu_uuids == node.gpu_uuids  # deterministic
    for i, gpu in enumerate(reading["gpus"]):
        assert gpu["name"] == "NVIDIA H200"
        assert gpu["index"] == gpu["index_by_uuid"] == gpu["minor"] == i
        assert gpu["pci"]["bus_id"] == node.gpus[i]["pci_bus_id"]
        assert gpu["v1"] == {"total": TOTAL * MIB, "used": RESERVED * MIB, "free": (TOTAL - RESERVED) * MIB}
        assert gpu["v2"] == {"total": TOTAL * MIB, "reserved": RESERVED * MIB, "used": 0,
                             "free": (TOTAL - RESERVED) * MIB}
        for call in ("compute", "compute_v2", "compute_v1", "graphics"):
            assert gpu[call] == []
    assert reading["gpus"][0]["pci"] == {"bus_id": "00000000:18:00.0", "bus_id_legacy": "0000:18:00.0",
                                         "domain": 0, "bus": 0x18, "device": 0, "pci_device_id": 0x233510DE}


def test_custom_node_reads_back(tmp_path, probe):
    node = nvml.Node.create(str(tmp_path / "h100"), gpus=2, name="NVIDIA H100 80GB HBM3", total_mib=81559,
                            reserved_mib=530, driver_version="550.54.15")
    reading = probe(node)

    assert (reading["count"], reading["driver_version"]) == (2, "550.54.15")
    assert reading["gpus"][1]["name"] == "NVIDIA H100 80GB HBM3"
    assert reading["gpus"][1]["v1"]["used"] == 530 * MIB
    assert reading["gpus"][1]["v2"]["free"] == (81559 - 530) * MIB


def test_allocations_show_in_memory_and_every_process_call(node, probe, spawn):
    holders = [sleeper(spawn) for dummy in range(3)]
    for holder in holders:
        node.allocate(1, 40000, pid=holder.pid)
    node.allocate(1, 1000, pid=holders[0].pid)  # adds to what it holds
    node.allocate(2, 512, pid=holders[2].pid)

    reading = probe(node)

    gpu1 = reading["gpus"][1]
    assert gpu1["v2"]["used"] == 121000 * MIB
    assert gpu1["v1"]["used"] == (121000 + RESERVED) * MIB
    assert gpu1["v2"]["free"] == (TOTAL - RESERVED - 121000) * MIB
    expected = sorted([(holders[0].pid, 41000), (holders[1].pid, 40000), (holders[2].pid, 40000)])
    for call in ("compute", "compute_v2", "compute_v1"):
        assert sorted((p["pid"], p["used_mib"]) for p in gpu1[call]) == expected
    assert {p["gpu_instance_id"] for p in gpu1["compute"]} == {NOT_AVAILABLE}
    assert gpu1["graphics"] == []
    assert pids(reading, 2) == [holders[2].pid] and used_v2_mib(reading, 2) == 512
    assert used_v2_mib(reading, 0) == used_v2_mib(reading, 3) == 0

    node.free(1, pid=holders[1].pid)
    assert pids(probe(node), 1) == sorted([holders[0].pid, holders[2].pid])


def test_killed_holder_memory_is_released_at_once_without_lag(node, probe, spawn):
    holder = sleeper(spawn)
    node.allocate(0, 70000, pid=holder.pid)
    assert used_v2_mib(probe(node), 0) == 70000

    holder.kill()
    holder.wait()

    reading = probe(node)
    assert reading["gpus"][0]["v1"]["used"] == RESERVED * MIB
    assert reading["gpus"][0]["v2"]["used"] == 0
    assert pids(reading, 0) == []


def test_killed_holder_memory_stays_for_the_release_lag(node, probe, spawn):
    lag_ms = 1500
    node.set_release_lag(lag_ms)
    holder = spawn([PYTHON, "-m", "gpusim.nvml", "--state", node.state_dir, "hold", "3", "90000"],
                   env=nvml_env(node), stdout=subprocess.PIPE, text=True)
    assert "holding 90000 MiB on GPU 3" in holder.stdout.readline()
    assert pids(probe(node), 3) == [holder.pid]

    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    noticed = time.monotonic()
    reading = probe(node)  # the first reader to see the holder gone starts the lag
    assert used_v2_mib(reading, 3) == 90000
    assert pids(reading, 3) == [holder.pid]

    deadline = noticed + 30
    while used_v2_mib(reading, 3) and time.monotonic() < deadline:
        time.sleep(0.2)
        reading = probe(node)
    assert time.monotonic() - noticed >= lag_ms / 1000
    assert reading["gpus"][3]["v1"]["used"] == RESERVED * MIB
    assert pids(reading, 3) == []


def test_holder_that_exits_normally_is_released(node, probe):
    hold = subprocess.run([PYTHON, "-m", "gpusim.nvml", "--state", node.state_dir, "hold", "0", "1000",
                           "--seconds", "0.01"], env=nvml_env(node), capture_output=True, text=True, timeout=60,
                          check=False)
    assert hold.returncode == 0, hold.stderr
    assert len(node.allocations()) == 1
    assert used_v2_mib(probe(node), 0) == 0


def test_zombie_holder_is_not_counted(node, probe, spawn):
    parent = spawn([PYTHON, "-c", textwrap.dedent("""
        import os, sys, time
        from gpusim.nvml import Node
        child = os.fork()
        if child == 0:
            Node(sys.argv[1]).allocate(0, 8000)
            os._exit(0)
        print(child, flush=True)
        time.sleep(600)  # never waits for the child: it stays <defunct>
        """), node.state_dir], env=nvml_env(node), stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    deadline = time.monotonic() + 30
    while not node.allocations() or _state(child) != "Z":
        assert time.monotonic() < deadline, "child %d did not become a zombie" % child
        time.sleep(0.05)

    reading = probe(node)

    assert reading["gpus"][0]["v2"]["used"] == 0
    assert pids(reading, 0) == []


def _state(pid):
    with open("/proc/%d/stat" % pid) as f:
        stat = f.read()
    return stat[stat.rindex(")") + 2]


def test_reused_pid_does_not_inherit_memory(node, probe, spawn):
    newcomer = sleeper(spawn)
    start = nvml.proc_start_time(newcomer.pid)
    node.allocate(0, 6000, pid=newcomer.pid, start_time=start - 100)  # an earlier process with the same pid

    reading = probe(node)
    assert used_v2_mib(reading, 0) == 0
    assert pids(reading, 0) == []

    node.allocate(0, 100, pid=newcomer.pid)
    assert [(p["pid"], p["used_mib"]) for p in probe(node)["gpus"][0]["compute"]] == [(newcomer.pid, 100)]


def test_ghost_memory_stays_until_gpu_reset(node, probe):
    node.set_ghost(2, 3000)
    node.set_release_lag(0)

    for dummy in range(2):
        reading = probe(node)
        assert used_v2_mib(reading, 2) == 3000
        assert reading["gpus"][2]["compute"] == [{"pid": nvml.GHOST_PID, "used_mib": 3000, "gpu_instance_id":
                                                  NOT_AVAILABLE, "compute_instance_id": NOT_AVAILABLE}]
        assert not os.path.exists("/proc/%d" % nvml.GHOST_PID)

    node.reset_gpu(2)
    reading = probe(node)
    assert used_v2_mib(reading, 2) == 0
    assert pids(reading, 2) == []


def test_lost_gpu_answers_gpu_is_lost(node, probe):
    node.set_lost(3)

    reading = probe(node)
    assert reading["count"] == 4
    assert reading["gpus"][3] == {"handle_error": "NVMLError_GpuIsLost"}
    assert reading["gpus"][2]["v2"]["used"] == 0

    # A handle taken before the GPU fell off the bus fails too.
    out = run_script(node, """
        import os, pynvml
        from gpusim.nvml import Node
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(1)
        Node(os.environ["GPUSIM_STATE"]).set_lost(1)
        for call in (pynvml.nvmlDeviceGetMemoryInfo, pynvml.nvmlDeviceGetComputeRunningProcesses,
                     pynvml.nvmlDeviceGetUUID):
            try:
                call(handle)
            except pynvml.NVMLError as e:
                print(type(e).__name__)
        """)
    assert out.split() == ["NVMLError_GpuIsLost"] * 3

    node.reset_gpu(1)
    node.reset_gpu(3)
    assert [g["v2"]["used"] for g in probe(node)["gpus"]] == [0, 0, 0, 0]


def test_init_error(node, probe):
    node.set_init_error("DRIVER_NOT_LOADED")
    assert probe(node) == {"init_error": "NVMLError_DriverNotLoaded"}

    node.set_init_error("NVML_ERROR_LIB_RM_VERSION_MISMATCH")
    assert probe(node) == {"init_error": "NVMLError_LibRmVersionMismatch"}

    node.set_init_error(None)
    assert probe(node)["count"] == 4


def test_node_without_state_reads_as_driver_not_loaded(node, probe, tmp_path):
    assert probe(node, GPUSIM_STATE=str(tmp_path / "absent")) == {"init_error": "NVMLError_DriverNotLoaded"}


def test_driver_without_v2_memory_call(node, probe):
    node.set_no_v2()

    gpu = probe(node)["gpus"][0]
    assert gpu["v2"] == "NVMLError_FunctionNotFound"
    assert gpu["v1"]["used"] == RESERVED * MIB

    node.set_no_v2(False)
    assert probe(node)["gpus"][0]["v2"]["reserved"] == RESERVED * MIB


def test_v2_call_checks_the_struct_version(node):
    out = run_script(node, """
        import pynvml
        pynvml.nvmlInit()
        try:
            pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0), version=0x01000028)
        except pynvml.NVMLError as e:
            print(type(e).__name__)
        """)
    assert out == "NVMLError_ArgumentVersionMismatch"


def test_missing_library_raises_library_not_found(node, probe):
    if subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True, check=False).stdout.count("libnvidia-ml.so.1"):
        pytest.skip("this machine has a real libnvidia-ml.so.1 installed")
    assert probe(node, LD_LIBRARY_PATH=None) == {"init_error": "NVMLError_LibraryNotFound"}


def test_cli_faults_and_reset(node):
    def cli(*args):
        result = subprocess.run([PYTHON, "-m", "gpusim.nvml", "--state", node.state_dir] + list(args),
                                env=nvml_env(node, LD_LIBRARY_PATH=None), capture_output=True, text=True, timeout=60,
                                check=False)
        assert result.returncode == 0, result.stderr
        return result.stdout

    cli("fault", "ghost", "1", "2048")
    cli("fault", "lost", "2")
    nvml_view = json.loads(cli("describe"))["nvml"]
    assert nvml_view[1]["used_mib"] == 2048
    assert nvml_view[1]["processes"] == [{"pid": nvml.GHOST_PID, "used_mib": 2048}]
    assert nvml_view[2] == {"index": 2, "error": "GPU is lost"}

    cli("reset")
    cli("fault", "init-error", "DRIVER_NOT_LOADED")
    state = json.loads(cli("describe"))
    assert (state["ghosts"], state["lost"]) == ({}, [])
    assert "Driver Not Loaded" in state["nvml"]


def test_python_reading_counts_memory_as_the_double_does(node, probe, spawn):
    """Node.used_mib, which the stand-in's unbalanced-memory check uses, agrees with NVML's v2 used."""
    live, stale, dying = sleeper(spawn), sleeper(spawn), sleeper(spawn)
    node.set_release_lag(60000)
    node.allocate(0, 5000, pid=live.pid)
    node.allocate(1, 6000, pid=stale.pid, start_time=nvml.proc_start_time(stale.pid) - 100)
    node.set_ghost(2, 3000)
    node.allocate(3, 7000, pid=dying.pid)
    dying.kill()
    dying.wait()

    for dummy in range(2):  # the second pass reads after the release lag has been started by the first
        reading = probe(node)
        assert [node.used_mib(gpu) for gpu in range(4)] == [used_v2_mib(reading, gpu) for gpu in range(4)]
    # The earlier holder of a reused PID counts as exited: its memory stays for the lag like any other.
    assert [node.used_mib(gpu) for gpu in range(4)] == [5000, 6000, 3000, 7000]

    node.set_release_lag(0)
    reading = probe(node)
    assert [node.used_mib(gpu) for gpu in range(4)] == [used_v2_mib(reading, gpu) for gpu in range(4)] == [5000, 0, 3000, 0]

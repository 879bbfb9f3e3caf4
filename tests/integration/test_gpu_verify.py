# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_verify and gpu_info run by ansible-playbook against a simulated node, through real pynvml."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from gpusim.fleet import collections_path
from gpusim.nvml import GHOST_PID, Node

BIN = os.path.dirname(sys.executable)

pytestmark = pytest.mark.slow

HOLDER = r"""
import sys, time, setproctitle
setproctitle.setproctitle(sys.argv[1])
print("ready", flush=True)
time.sleep(600)
"""


@pytest.fixture(scope="module")
def collections():
    return collections_path()


@pytest.fixture
def node(tmp_path):
    return Node.create(str(tmp_path / "state"), gpus=8, reserved_mib=700)


@pytest.fixture
def holders():
    """Start processes titled like SGLang schedulers; kills those still running at the end."""
    started = []

    def start(title):
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, title], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


class Play:
    """One ansible-playbook run of one module task, registered with ignore_errors."""

    def __init__(self, collections, node, tmp_path, module, args, check=False, env=None, python=None):
        self.out = str(tmp_path / ("result-%d.json" % time.monotonic_ns()))
        playbook = tmp_path / "play.yml"
        task = {"name": "Run the module", "gpuops.host." + module: args, "register": "result", "ignore_errors": True}
        save = {"name": "Save the result", "delegate_to": "localhost",
                "ansible.builtin.copy": {"content": "{{ result | to_json }}", "dest": self.out, "mode": "0644"},
                "check_mode": False}
        playbook.write_text(json.dumps([{"hosts": "node", "gather_facts": False, "tasks": [task, save]}]))
        inventory = tmp_path / "inventory.ini"
        inventory.write_text("node ansible_connection=local ansible_python_interpreter=%s\n"
                             "localhost ansible_connection=local ansible_python_interpreter=%s\n"
                             % (python or sys.executable, sys.executable))
        self.env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections, ANSIBLE_NOCOLOR="1",
                        ANSIBLE_LOCALHOST_WARNING="0", **node.env())
        self.env.update(env or {})
        self.argv = [os.path.join(BIN, "ansible-playbook"), "-i", str(inventory), str(playbook)]
        if check:
            self.argv.append("--check")

    def start(self):
        self.proc = subprocess.Popen(self.argv, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        return self

    def wait(self):
        self.output = self.proc.communicate(timeout=180)[0]
        assert self.proc.returncode == 0, self.output
        with open(self.out) as f:
            return json.load(f)


@pytest.fixture
def run(collections, node, tmp_path):
    def run(module, args, **kw):
        return Play(collections, node, tmp_path, module, args, **kw).start().wait()
    return run


def test_idle_h200_node_is_clean(run, node):
    result = run("gpu_verify", {"expected_count": 8, "timeout": 5})
    assert result["clean"] is True and not result.get("failed")
    assert result["changed"] is False
    assert result["memory_api"] == "v2"
    assert result["driver_version"] == "570.133.20"
    assert result["dirty"] == [] and result["polls"] == 1
    assert sorted(result["gpus"]) == sorted(node.gpu_uuids)
    gpu = result["gpus"][node.gpu_uuids[3]]
    assert gpu["index"] == 3 and gpu["name"] == "NVIDIA H200" and gpu["pci_bus_id"] == node.gpus[3]["pci_bus_id"]
    assert (gpu["used_mib"], gpu["reserved_mib"], gpu["v1_used_mib"], gpu["total_mib"]) == (0, 700, 700, 143771)
    assert gpu["clean"] is True and gpu["problem"] is None and gpu["processes"] == []


def test_check_mode_reads_the_same(run, node, holders):
    node.allocate(1, 4096, pid=holders("sglang::scheduler_TP1").pid)
    result = run("gpu_verify", {"timeout": 0}, check=True)
    assert result["failed"] is True and result["changed"] is False
    assert result["dirty"] == [node.gpu_uuids[1]]


def test_holder_fails_and_is_named(run, node, holders):
    holder = holders("sglang::scheduler_TP3")
    node.allocate(3, 8123, pid=holder.pid)
    result = run("gpu_verify", {"timeout": 1, "poll_interval": 0.2})
    uuid = node.gpu_uuids[3]
    assert result["failed"] is True and result["clean"] is False
    assert result["dirty"] == [uuid]
    problem = "8123 MiB used by pid %d (user root: sglang::scheduler_TP3)" % holder.pid
    assert result["gpus"][uuid]["problem"] == problem
    assert result["msg"].splitlines() == [
        "1 of 8 checked GPUs not clean after %.1f s (timeout 1 s)" % result["elapsed"],
        "GPU 3 %s: %s" % (uuid, problem),
    ]
    assert result["polls"] > 1
    proc = result["gpus"][uuid]["processes"][0]
    assert proc == {"pid": holder.pid, "used_mib": 8123, "exists": True, "name": "sglang::scheduler_TP3",
                    "cmdline": "sglang::scheduler_TP3", "user": "root", "where": None}


def test_holder_killed_mid_wait_passes_after_release_lag(collections, node, tmp_path, holders):
    lag_ms = 1500
    node.set_release_lag(lag_ms)
    holder = holders("sglang::scheduler_TP0")
    node.allocate(0, 70000, pid=holder.pid)
    play = Play(collections, node, tmp_path, "gpu_verify", {"timeout": 60, "poll_interval": 0.25}).start()
    time.sleep(2)
    holder.kill()
    holder.wait()
    result = play.wait()
    assert result["clean"] is True, result.get("msg")
    # the module saw the GPU dirty first, and the memory stayed counted for the lag after the exit
    assert result["polls"] > 1
    assert lag_ms / 1000.0 <= result["elapsed"] < 60


def test_ghost_memory_needs_a_reset(run, node):
    node.set_ghost(5, 512)
    result = run("gpu_verify", {"timeout": 0})
    uuid = node.gpu_uuids[5]
    assert result["failed"] is True and result["dirty"] == [uuid]
    problem = "512 MiB held by pid %d which no longer exists: GPU needs a reset" % GHOST_PID
    assert result["gpus"][uuid]["problem"] == problem
    assert result["msg"].splitlines()[1] == "GPU 5 %s: %s" % (uuid, problem)
    node.reset_gpu(5)
    assert run("gpu_verify", {"timeout": 0})["clean"] is True


def test_lost_gpu_fails_without_waiting(run, node):
    node.set_lost(6)
    result = run("gpu_verify", {"timeout": 30})
    assert result["failed"] is True and result["dirty"] == ["index-6"]
    assert result["gpus"]["index-6"]["problem"] == "GPU lost (NVML_ERROR_GPU_IS_LOST)"
    assert "GPU 6 index-6: GPU lost (NVML_ERROR_GPU_IS_LOST)" in result["msg"]
    assert result["polls"] == 1 and result["elapsed"] < 30


def test_expected_count_mismatch_fails(run, tmp_path):
    Node.create(str(tmp_path / "state"), gpus=7)
    result = run("gpu_verify", {"expected_count": 8, "timeout": 30})
    assert result["failed"] is True and result["dirty"] == [] and result["count"] == 7
    assert result["msg"].splitlines()[1:] == ["the host shows 7 GPUs, expected 8"]
    assert result["problems"] == ["the host shows 7 GPUs, expected 8"]
    assert result["polls"] == 1


def test_v1_only_driver_falls_back_with_a_warning(collections, node, tmp_path, holders):
    node.set_no_v2()
    play = Play(collections, node, tmp_path, "gpu_verify", {"timeout": 0, "v1_reserved_mib": 700})
    result = play.start().wait()
    assert result["clean"] is True and result["memory_api"] == "v1"
    gpu = result["gpus"][node.gpu_uuids[0]]
    assert gpu["used_mib"] == 700 and gpu["reserved_mib"] is None
    assert "no v2 memory call" in play.output and "(732 MiB)" in play.output
    node.allocate(2, 2048, pid=holders("sglang::scheduler_TP2").pid)
    result = Play(collections, node, tmp_path, "gpu_verify", {"timeout": 0, "v1_reserved_mib": 700}).start().wait()
    assert result["failed"] is True and result["memory_api"] == "v1"
    assert result["gpus"][node.gpu_uuids[2]]["problem"].startswith("2748 MiB used by pid ")


def test_v1_only_driver_without_an_idle_value_cannot_prove_zero(collections, node, tmp_path):
    node.set_no_v2()
    play = Play(collections, node, tmp_path, "gpu_verify", {"timeout": 0})
    result = play.start().wait()
    assert result["failed"] is True and result["memory_api"] == "v1" and len(result["dirty"]) == 8
    assert result["gpus"][node.gpu_uuids[0]]["problem"].startswith(
        "700 MiB used as the v1 memory call reads it, driver-reserved memory included: zero cannot be proven")


def test_missing_library(run, tmp_path):
    empty = tmp_path / "nolib"
    empty.mkdir()
    result = run("gpu_verify", {}, env={"LD_LIBRARY_PATH": str(empty)})
    assert result["failed"] is True and result["nvml_error"] == "NVML_ERROR_LIBRARY_NOT_FOUND"
    assert result["msg"].startswith("Cannot initialise NVML: NVML_ERROR_LIBRARY_NOT_FOUND (NVML Shared Library Not Found)")
    assert "Traceback" not in result["msg"]


@pytest.mark.skipif(subprocess.run(["/usr/bin/python3", "-c", "import pynvml"], capture_output=True, check=False).returncode == 0,
                    reason="the system python has nvidia-ml-py")
def test_missing_python_library(run):
    result = run("gpu_info", {}, python="/usr/bin/python3")
    assert result["failed"] is True
    assert "Failed to import the required Python library (nvidia-ml-py)" in result["msg"]


@pytest.mark.parametrize("error,text", [
    ("DRIVER_NOT_LOADED", "Cannot initialise NVML: NVML_ERROR_DRIVER_NOT_LOADED (Driver Not Loaded): "
                          "the NVIDIA kernel driver is not loaded"),
    ("NO_PERMISSION", "Cannot initialise NVML: NVML_ERROR_NO_PERMISSION (Insufficient Permissions)"),
    ("UNKNOWN", "Cannot initialise NVML: NVML_ERROR_UNKNOWN (Unknown Error)"),
])
def test_init_errors(run, node, error, text):
    node.set_init_error(error)
    for module in ("gpu_verify", "gpu_info"):
        result = run(module, {})
        assert result["failed"] is True and result["nvml_error"] == "NVML_ERROR_" + error
        assert result["msg"].startswith(text)


def test_gpus_by_index_and_uuid(run, node, holders):
    holder = holders("sglang::scheduler_TP2")
    node.allocate(2, 1000, pid=holder.pid)
    uuids = node.gpu_uuids
    result = run("gpu_verify", {"gpus": ["0", "1", uuids[3]], "timeout": 0})
    assert result["clean"] is True and sorted(result["gpus"]) == sorted([uuids[0], uuids[1], uuids[3]])
    result = run("gpu_verify", {"gpus": [uuids[2][len("GPU-"):]], "timeout": 0})
    assert result["failed"] is True and list(result["gpus"]) == [uuids[2]] and result["dirty"] == [uuids[2]]
    result = run("gpu_verify", {"gpus": ["2"], "timeout": 0})
    assert result["dirty"] == [uuids[2]]
    result = run("gpu_verify", {"gpus": ["9"]})
    assert result["failed"] is True and result["msg"].startswith("GPU 9 not found: the host shows 8 GPUs")


def test_allow_processes_within_the_limit(run, node, holders):
    node.allocate(4, 16, pid=holders("nvml-monitor").pid)
    assert run("gpu_verify", {"timeout": 0})["failed"] is True
    assert run("gpu_verify", {"timeout": 0, "allow_processes": True})["clean"] is True


def test_gpu_info_reports_without_failing(run, node, holders):
    holder = holders("sglang::scheduler_TP1")
    node.allocate(1, 8000, pid=holder.pid)
    node.set_ghost(2, 512)
    node.set_lost(7)
    result = run("gpu_info", {})
    assert result.get("failed") is not True and result["changed"] is False
    assert result["count"] == 8 and result["memory_api"] == "v2"
    assert result["dirty"] == [node.gpu_uuids[1], node.gpu_uuids[2], "index-7"]
    gpu = result["gpus"][node.gpu_uuids[1]]
    assert (gpu["used_mib"], gpu["v1_used_mib"], gpu["reserved_mib"]) == (8000, 8700, 700)
    assert gpu["processes"][0]["pid"] == holder.pid
    assert result["gpus"]["index-7"]["problem"] == "GPU lost (NVML_ERROR_GPU_IS_LOST)"


def test_gpu_process_pids_over_the_double(node, holders, tmp_path):
    """The helper gpu_reap uses, through real pynvml in a fresh interpreter."""
    holder = holders("sglang::scheduler_TP0")
    node.allocate(0, 100, pid=holder.pid)
    node.set_ghost(4, 64)
    code = ("import json, sys; sys.path.insert(0, %r)\n"
            "from ansible_collections.gpuops.host.plugins.module_utils import _nvml\n"
            "print(json.dumps(_nvml.gpu_process_pids(_nvml.pynvml)))\n" % collections_path())
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, **node.env()), capture_output=True,
                         text=True, check=True).stdout
    assert json.loads(out) == [
        {"gpu_uuid": node.gpu_uuids[0], "gpu_index": 0, "pid": holder.pid, "used_mib": 100},
        {"gpu_uuid": node.gpu_uuids[4], "gpu_index": 4, "pid": GHOST_PID, "used_mib": 64},
    ]


# -- inside a simulated node: PIDs of other PID namespaces, the PCI bus ---------------------------

def _sandbox_play(collections, sb, tmp_path, module, args, python=None):
    play = Play(collections, sb.node, tmp_path, module, args, python=python or sb.python,
                env={"GPUOPS_HOST_PIDNS": sb.pid_namespace})
    return play.start().wait()


def test_a_process_in_a_container_is_named_as_such(collections, tmp_path):
    from gpusim.sandbox import Sandbox
    from gpusim.tenants import Tenant
    with Sandbox(str(tmp_path / "sb"), gpus=8) as sb:
        boxed = Tenant(sb, "train.py", devices=["/dev/nvidia5"], gpu=5, mib=4096, container="tenant-a")
        result = _sandbox_play(collections, sb, tmp_path, "gpu_verify", {"timeout": 0})
        uuid = sb.node.gpu_uuids[5]
        assert result["failed"] is True and result["dirty"] == [uuid]
        proc = result["gpus"][uuid]["processes"][0]
        assert proc["pid"] == boxed.pid and proc["exists"] is True
        assert proc["where"].startswith("in another PID namespace (pid:[")
        assert result["gpus"][uuid]["problem"].startswith(
            "4096 MiB used by pid %d in another PID namespace (pid:[" % boxed.pid)
        assert "needs a reset" not in result["msg"]
        boxed.close()


def test_a_check_run_inside_a_container_does_not_call_the_host_s_pids_gone(collections, tmp_path):
    from gpusim.sandbox import Sandbox
    from gpusim.tenants import Tenant
    with Sandbox(str(tmp_path / "sb"), gpus=8) as sb:
        job = Tenant(sb, "train.py", devices=["/dev/nvidia2"], gpu=2, mib=2048)
        # the module's Python in a container on the node: a PID namespace of its own
        boxed_python = sb.container_python("checker")
        result = _sandbox_play(collections, sb, tmp_path, "gpu_verify", {"timeout": 0}, python=str(boxed_python))
        uuid = sb.node.gpu_uuids[2]
        assert result["failed"] is True and result["dirty"] == [uuid]
        assert result["gpus"][uuid]["processes"][0]["where"] == "outside this PID namespace"
        assert result["gpus"][uuid]["problem"] == (
            "2048 MiB held by pid %d, which is not a process of this PID namespace: NVML lists the host's PIDs, "
            "so run the check in the host PID namespace to name it" % job.pid)
        reaped = _sandbox_play(collections, sb, tmp_path, "gpu_reap", {"nvml_processes": True},
                               python=str(boxed_python))
        assert reaped["failed"] is True and reaped["msg"].startswith(
            "nvml_processes: NVML lists processes by the PIDs of the host PID namespace (%s), and gpu_reap runs in "
            "pid:[" % sb.pid_namespace)
        assert job.alive() and job.signals() == []
        job.close()


def test_a_gpu_missing_from_nvml_but_on_the_pci_bus_fails_by_default(collections, tmp_path):
    from gpusim.sandbox import Sandbox
    with Sandbox(str(tmp_path / "sb"), gpus=7, pci_gpus=8) as sb:
        result = _sandbox_play(collections, sb, tmp_path, "gpu_verify", {"timeout": 30})
        assert result["failed"] is True and result["polls"] == 1 and result["count"] == 7
        assert result["expected_count"] == 8
        assert result["problems"][0].startswith("NVML shows 7 GPUs, the PCI bus 8 NVIDIA GPUs (0000:18:00.0, ")
    with Sandbox(str(tmp_path / "sb2"), gpus=8) as sb:
        result = _sandbox_play(collections, sb, tmp_path, "gpu_verify", {"timeout": 0})
        assert result["clean"] is True and result["expected_count"] == 8

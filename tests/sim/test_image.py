# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Smoke test of the simulated GPU node image (tests/sim/image), run once `make image` built it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid

import pytest

from gpusim.nvml import REPO_ROOT

REF = os.path.join(REPO_ROOT, "build", "sim", "image", "ref")
GPUS = 3

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("podman") is None or not os.path.exists(REF),
                       reason="needs podman and the node image (make image)"),
]


def podman(*args, timeout=60):
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, check=True).stdout


@pytest.fixture(scope="module")
def node():
    with open(REF) as f:
        image = f.read().strip()
    name = "gpuops-image-test-" + uuid.uuid4().hex[:8]
    podman("run", "-d", "--name", name, "--label", "gpuops.molecule=node", "--runtime=runc", "--init",
           "--network=none", "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=20000:20000",
           "-e", "GPUSIM_GPUS=%d" % GPUS, image)
    try:
        deadline = time.monotonic() + 30
        while "nv-hostengine" not in podman("exec", name, "ps", "-eo", "args"):
            assert time.monotonic() < deadline, podman("logs", name)
            time.sleep(0.2)
        yield name
    finally:
        subprocess.run(["podman", "rm", "-f", "-t", "0", name], capture_output=True, timeout=60, check=False)


def sh(node, script):
    return podman("exec", node, "sh", "-c", script)


def test_devices_are_created_for_each_gpu(node):
    names = sh(node, "ls /dev | grep nvidia").split()
    assert names == sorted(["nvidia%d" % i for i in range(GPUS)]
                           + ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"])


def test_gpu_daemons_run_as_daemons_holding_nvidiactl(node):
    daemons = {}
    for pid in sh(node, "pgrep -x -d ' ' 'nvidia-persiste|nv-hostengine'").split():
        exe = os.path.basename(sh(node, "readlink /proc/%s/exe" % pid).strip())
        ppid, sid = sh(node, "ps -o ppid=,sid= -p %s" % pid).split()
        daemons[exe] = {"parent": int(ppid), "own_session": sid == pid,
                        "nvidiactl": "/dev/nvidiactl" in sh(node, "readlink /proc/%s/fd/*" % pid).split()}
    assert daemons == dict.fromkeys(["nvidia-persistenced", "nv-hostengine"],
                                    {"parent": 1, "own_session": True, "nvidiactl": True})


def test_pynvml_reads_the_double_as_the_system_library(node):
    script = ("import json, pynvml; pynvml.nvmlInit(); "
              "hs = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]; "
              "print(json.dumps([[pynvml.nvmlDeviceGetName(h), "
              "pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2).used] for h in hs]))")
    assert json.loads(podman("exec", node, "python3", "-c", script)) == [["NVIDIA H200", 0]] * GPUS


def test_allocation_is_seen_by_nvml_and_goes_with_its_process(node):
    holder = "python3 -m gpusim.nvml hold 1 4096 & sleep 1; python3 -m gpusim.nvml describe; kill $!; wait"
    during = json.loads(sh(node, holder).split("\n", 1)[1])["nvml"]
    assert [g["used_mib"] for g in during] == [0, 4096, 0]
    after = json.loads(sh(node, "python3 -m gpusim.nvml describe"))["nvml"]
    assert [g["used_mib"] for g in after] == [0] * GPUS


def test_standin_is_on_path_and_titles_processes(node):
    assert sh(node, "command -v sglang").strip() == "/usr/local/bin/sglang"
    script = "import setproctitle, sglang; setproctitle.setproctitle('sglang::scheduler'); print(open('/proc/self/cmdline').read())"
    assert podman("exec", node, "python3", "-c", script).startswith("sglang::scheduler")


def test_orphans_are_reaped_by_the_init(node):
    sh(node, "setsid sh -c 'sleep 0.2 &' ; sleep 1")
    states = sh(node, "ps -eo stat=").split()
    assert not [s for s in states if s.startswith("Z")]

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The light server (gpusim.lightnode) against the stand-in it condenses: one process, the same
endpoints and keys (the played release's contract), memory on every GPU, the real shutdown."""

from __future__ import annotations

import json
import os
import time

import pytest

from gpusim import lightnode, standin
from gpusim.fleet import Request
from gpusim.sandbox import VENV_PYTHON, Sandbox
from gpusim.standin import Launch

pytestmark = pytest.mark.slow

TOTAL_MIB = 143771
ENV = {"GPUSIM_SGLANG_LOAD_SECONDS": "0.2", "GPUSIM_SGLANG_WARMUP_SECONDS": "0.2", "GPUSIM_SGLANG_TOKEN_DELAY": "0.01",
       "GPUSIM_SGLANG_WATCHDOG_INTERVAL": "0.5", "GPUSIM_SGLANG_MEMORY_RELEASE_SECONDS": "0.5"}


def nvml(sandbox) -> list:
    """Per GPU what pynvml reads through the double, asked from inside the sandbox."""
    result = sandbox.run([VENV_PYTHON, "-m", "gpusim.nvml", "--state", sandbox.state_dir, "describe"],
                         capture_output=True, text=True, check=True)
    return json.loads(result.stdout)["nvml"]


def used_mib(sandbox) -> list:
    return [gpu["used_mib"] for gpu in nvml(sandbox)]


@pytest.fixture
def sandbox(tmp_path):
    """An 8-GPU node."""
    with Sandbox(str(tmp_path / "node"), gpus=8) as sb:
        yield sb


@pytest.fixture
def light(sandbox, tmp_path):
    path = lightnode.install(str(tmp_path / "light"))
    model = standin.make_model_dir(str(tmp_path / "model"))
    started = []

    def start(*args, env=None) -> Launch:
        srv = Launch(sandbox, model, args=list(args), python=VENV_PYTHON,
                     env=dict(ENV, PYTHONPATH=path, **(env or {}))).start()
        started.append(srv)
        return srv.wait_ready(timeout=120)

    yield start
    for srv in started:
        srv.stop()


def test_one_process_holds_every_gpu_and_answers_as_the_standin(sandbox, light, tmp_path):
    dumps = tmp_path / "dumps"
    srv = light("--tp-size", "8", "--enable-metrics", env={"SGLANG_HS_DUMP_DIR": str(dumps)})
    tree = srv.tree()
    assert [p["pid"] for p in tree] == [srv.pid]
    assert tree[0]["cmdline"][1:3] == ["-m", "sglang.launch_server"]
    assert [g["processes"] for g in nvml(sandbox)] == [[{"pid": srv.pid, "used_mib": int(0.88 * TOTAL_MIB)}]] * 8
    status, info = srv.get("/server_info")
    spec = json.load(open(os.path.join(standin.STANDIN_ROOT, "contracts", "sglang-0.5.23.json")))
    assert status == 200 and sorted(info) == sorted(spec["server_info"]["keys"])
    assert info["tp_size"] == 8
    status, loads = srv.get("/v1/loads")
    assert status == 200 and sorted(loads["loads"][0]) == sorted(spec["v1_loads"]["load_keys"])
    request = Request(srv.url, 100)
    request.start()
    deadline = time.monotonic() + 30
    while srv.get("/v1/loads")[1]["loads"][0]["num_running_reqs"] != 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    status, metrics = srv.get("/metrics")
    assert status == 200 and "sglang:num_running_reqs{" in metrics
    request.join(60)
    assert request.result[0] == 200 and request.result[1]["meta_info"]["completion_tokens"] == 100
    rid = request.result[1]["meta_info"]["id"]
    assert (dumps / ("hs_%s.pt" % rid)).exists()
    assert srv.get("/health")[0] == 200


def test_sigterm_drains_releases_then_exits_0(sandbox, light):
    srv = light("--tp-size", "4")
    request = Request(srv.url, 150)
    request.start()
    time.sleep(0.3)
    srv.signal("TERM")
    deadline = time.monotonic() + 10
    while srv.get("/health")[0] != 503:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert srv.wait_exit(60) == 0
    request.join(30)
    assert request.result[0] == 200 and request.result[1]["meta_info"]["completion_tokens"] == 150
    assert used_mib(sandbox) == [0] * 8
    log = srv.log()
    for line in ("Draining requests and shutting down", "Gracefully exiting... Remaining number of requests 1",
                 "Gracefully exiting... Remaining number of requests 0"):
        assert line in log

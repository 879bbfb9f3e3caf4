# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_server and the roles against the SGLang stand-in playing each supported release.

The stand-in plays the release that GPUSIM_SGLANG_RELEASE names, with that release's parser (from
its contract), endpoints and shutdown: SIGTERM, a wake-up, an unbounded drain, then a release step
of each scheduler, capped at 15 s, before SIGKILL of stragglers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest
import yaml

from gpusim import standin
from gpusim.fleet import REPO_ROOT, Fleet, Request, SimNode, collections_path, http_get
from gpusim.nvml import SIM_DIR
from gpusim.sandbox import VENV_PYTHON

RELEASES = ("0.5.23", "0.5.14")
MODULE = os.path.join(REPO_ROOT, "plugins", "modules", "sglang_server_info.py")


def run_module(tmp_path, args: dict, env: dict = None):
    """One real run of sglang_server_info's file, as Ansible runs it: (rc, result)."""
    path = tmp_path / ("args-%d.json" % time.monotonic_ns())
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc_env = dict(os.environ, PYTHONPATH=collections_path(), **(env or {}))
    proc = subprocess.run([sys.executable, MODULE, str(path)], capture_output=True, text=True, env=proc_env,
                          check=False, timeout=120)
    return proc.returncode, json.loads(proc.stdout)


def modes():
    with open(os.path.join(REPO_ROOT, "roles", "sglang_launch", "defaults", "main.yml")) as f:
        return yaml.safe_load(f)["sglang_launch_modes"]


def check_args(tmp_path, release, server_args, secret_server_args=None, **command):
    """The plan's check of the command line (sglang_server_info's command) with the stand-in playing RELEASE:
    (rc, the result's command, or the failure); /models/q becomes a model directory it can read."""
    if server_args.get("model_path") == "/models/q":
        server_args = dict(server_args, model_path=standin.make_model_dir(str(tmp_path / "model")))
    args = {"record_path": str(tmp_path / "server.json"), "presets": [], "python": VENV_PYTHON,
            "pythonpath": [standin.standin_root(), SIM_DIR], "environment": {"GPUSIM_SGLANG_RELEASE": release},
            "command": dict(command, server_args=server_args), "secret_server_args": secret_server_args or {}}
    rc, result = run_module(tmp_path, args)
    return rc, (result["command"] if rc == 0 else result)


def argument_files(command, secret_server_args, keys):
    """What sglang_server writes into the run directory for COMMAND with the parser's KEYS: path -> content."""
    sys.path.insert(0, collections_path())
    try:
        from ansible_collections.gpuops.host.plugins.module_utils import _sglang  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.pop(0)
    full = dict(command, python="python", entry_module="sglang", secret_server_args=secret_server_args)
    return _sglang.argument_files(_sglang.merged(full), keys)


# -- the installed parser, both releases -----------------------------------------------------

@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("mode", ["serving", "extraction", "tuning"])
@pytest.mark.parametrize("config_file", [False, True])
def test_every_mode_renders_and_parses_under_both_releases(tmp_path, release, mode, config_file):
    server_args = dict(modes()[mode]["server_args"], model_path="/models/q", host="127.0.0.1", port=30000,
                       tp_size=2, enable_metrics=True)
    config = str(tmp_path / "state" / "server-args.yaml")
    rc, result = check_args(tmp_path, release, server_args, config_file=config_file, config_path=config,
                            secrets_path=str(tmp_path / "state" / "secret-args.yaml"),
                            secret_server_args={"api_key": "k-123456"})
    assert rc == 0, result.get("msg")
    assert result["release"] == release
    assert "k-123456" not in json.dumps(result) and "--api-key" not in result["argv"]
    expected = {"tp_size": 2, "enable_metrics": True, "port": 30000}
    if mode == "tuning":
        expected.update(cuda_graph_max_bs_decode=160, mem_fraction_static=0.92)
    if mode == "extraction":
        expected.update(disable_radix_cache=True)
    assert dict((k, result["expected_info"].get(k)) for k in expected) == expected
    if config_file:
        assert result["argv"][-2:] == ["--config", config]
        written = argument_files({"server_args": server_args, "config_file": True, "config_path": config},
                                 {"api_key": "k-123456"}, result["config_keys"])
        keys = [line.split(":")[0] for line in written[config].splitlines()]
        assert "model-path" in keys and "api-key" in keys and not [k for k in keys if "_" in k]
        if mode == "tuning":
            # 0.5.14's --config reader refuses a key whose destination a deprecated alias shares; the alias passes
            renamed = {"cuda-graph-max-bs-decode": "cuda-graph-max-bs"} if release == "0.5.14" else {}
            assert result["config_keys"] == renamed
            assert (renamed.get("cuda-graph-max-bs-decode", "cuda-graph-max-bs-decode")) in keys


@pytest.mark.parametrize("release", RELEASES)
def test_the_old_graph_flag_per_release(tmp_path, release):
    rc, result = check_args(tmp_path, release, {"model_path": "/models/q", "cuda_graph_max_bs": 160})
    if release == "0.5.23":
        assert rc != 0
        assert "the installed SGLang 0.5.23 refuses the server arguments" in result["msg"]
        assert "ambiguous option: --cuda-graph-max-bs could match" in result["msg"], result["msg"]
    else:
        # a deprecated alias there, stored under the decode name that /server_info reports
        assert rc == 0, result
        assert result["expected_info"]["cuda_graph_max_bs_decode"] == 160


def test_results_mask_no_short_values(tmp_path):
    """Values of under 4 characters in no_log options (HF_HUB_OFFLINE=1) must not garble the result's numbers."""
    rc, result = run_module(tmp_path, {
        "record_path": str(tmp_path / "server.json"), "presets": [], "python": VENV_PYTHON,
        "pythonpath": [standin.standin_root(), SIM_DIR], "environment": {"SPT_NOENV": "1"},
        "command": {"server_args": {"model_path": standin.make_model_dir(str(tmp_path / "model")), "tp_size": 2,
                                    "port": 31001}},
        "secret_environment": {"HF_TOKEN": "hf_abcdef", "HF_HUB_OFFLINE": "1"}})
    assert rc == 0 and result["command"]["expected_gpus"] == [0, 1], result
    assert "31001" in result["command"]["argv"], result["command"]["argv"]
    assert "hf_abcdef" not in json.dumps(result) and result["invocation"]["module_args"]["environment"]["SPT_NOENV"] == "1"


# -- the roles, against each release -------------------------------------------------------


@pytest.fixture(scope="module", params=RELEASES)
def release_node(request, tmp_path_factory):
    release = request.param
    workdir = tmp_path_factory.mktemp("sglang-" + release.replace(".", "-"))
    with SimNode(str(workdir / "node1"), gpus=4, server_env={"GPUSIM_SGLANG_RELEASE": release}) as node:
        yield release, node, Fleet(str(workdir), [node])


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")
def test_restart_tuning_then_extraction_end_to_end(release_node):
    release, node, fleet = release_node

    tuning = fleet.playbook("restart_tuning.yml", "-e", json.dumps({"sglang_launch_config_file": True}))

    assert tuning.rc == 0, tuning.output
    record = node.record()
    status, info = http_get(node.url + "/server_info")
    assert status == 200
    assert info["cuda_graph_max_bs_decode"] == 160 and info["mem_fraction_static"] == 0.92
    assert record["mode"] == "tuning" and node.main_pids() == [record["pid"]]

    extraction = fleet.playbook("restart_extraction.yml")

    assert extraction.rc == 0, extraction.output
    record = node.record()
    assert record["mode"] == "extraction"
    dumps = sorted(os.listdir(record["dump_dir"]))
    probes = [name for name in dumps if name.startswith("hs_gpuops-probe-")]
    assert probes, dumps

    serving = fleet.playbook("restart_serving.yml")

    assert serving.rc == 0, serving.output
    record = node.record()
    assert record["mode"] == "serving" and node.main_pids() == [record["pid"]]
    assert "SGLANG_HS_DUMP_DIR" not in node.environ(record["pid"])
    assert http_get(node.url + "/server_info")[1]["version"].startswith(release)


def stop_playbook(tmp_path):
    """stop_sglang's role, then its result as JSON on one line."""
    path = tmp_path / "stop_and_report.yml"
    path.write_text(yaml.safe_dump([{
        "name": "Stop SGLang and report", "hosts": "gpu_nodes", "gather_facts": False,
        "tasks": [{"name": "Stop", "ansible.builtin.include_role": {"name": "gpuops.host.sglang_stop"}},
                  {"name": "Report", "ansible.builtin.debug": {"msg": "RESULT {{ sglang_stop_result | to_json }}"}}],
    }]))
    return str(path)


def stop_result(run):
    for line in run.output.splitlines():
        if '"msg": "RESULT ' in line:
            return json.loads(json.loads("{" + line.strip() + "}")["msg"][len("RESULT "):])
    raise AssertionError("no result in:\n" + run.output)


@pytest.fixture
def node(tmp_path):
    with SimNode(str(tmp_path / "node1"), gpus=4) as n:
        yield n


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")
def test_metrics_off_and_a_30_s_request_waits_or_fails_never_cuts(node, tmp_path):
    """/v1/loads is the only count: a too short drain fails with the server running; a long one waits."""
    fleet = Fleet(str(tmp_path), [node])
    node.start_server(["--tp-size", "2"])  # no --enable-metrics: SGLang's default
    pid = node.main_pids()[0]
    request = Request(node.url, max_new_tokens=6000)  # about 30 s of decoding
    request.start()
    time.sleep(1)

    short = fleet.playbook(stop_playbook(tmp_path), "-e", "sglang_stop_drain_timeout=3")

    assert short.rc != 0
    text = " ".join(short.output.split())
    assert "1 request(s) still in flight on the SGLang server %d" % pid in text, short.output
    assert "the server is left running" in text
    assert node.main_pids() == [pid] and request.result is None

    waiting = fleet.playbook(stop_playbook(tmp_path), "-e", "sglang_stop_drain_timeout=120", timeout=400)

    assert waiting.rc == 0, waiting.output
    request.join(60)
    assert request.result[0] == 200 and request.result[1]["meta_info"]["completion_tokens"] == 6000, request.result
    result = stop_result(waiting)
    assert result["servers"] == [pid] and result["lost"] == 0 and result["in_flight"] == 0
    assert node.main_pids() == []


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")
def test_a_request_that_arrives_after_the_last_zero_reading_is_not_cut(node, tmp_path):
    """The drain read zero; a request then arrives before the server has stopped. SGLang's own drain
    (after SIGTERM) waits for it, within the stop timeout."""
    fleet = Fleet(str(tmp_path), [node], sglang_stop_term_timeout=60)
    launch = node.start_server(["--tp-size", "2"], env={"GPUSIM_SGLANG_WATCHDOG_INTERVAL": "5"})
    stop = fleet.popen(stop_playbook(tmp_path))
    deadline = time.monotonic() + 120
    while "Draining requests and shutting down" not in launch.log():
        assert stop.poll() is None and time.monotonic() < deadline, stop.stdout.read() if stop.poll() is not None else ""
        time.sleep(0.05)
    late = Request(node.url, max_new_tokens=400)  # about 2 s of decoding, within the 5 s wake-up
    late.start()
    output = stop.communicate(timeout=300)[0]

    assert stop.returncode == 0, output
    late.join(60)
    # either served in full, or refused outright: never cut halfway
    assert late.result[0] == 200 and late.result[1]["meta_info"]["completion_tokens"] == 400 or \
        late.result[0] in (503,), late.result


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")
def test_stop_through_the_release_step_with_a_scheduler_hanging_in_it(node, tmp_path):
    """SGLang's own 15 s cap ends the hanging scheduler; with the default 60 s stop timeout nothing of
    ours needs SIGKILL. A 5 s timeout cuts into the release, and the result says so."""
    fleet = Fleet(str(tmp_path), [node], sglang_stop_term_timeout=60)
    env = {"GPUSIM_SGLANG_FAULTS": "hang_in_release"}
    launch = node.start_server(["--tp-size", "2"], env=env)
    pid = node.main_pids()[0]

    run = fleet.playbook(stop_playbook(tmp_path), timeout=400)

    assert run.rc == 0, run.output
    result = stop_result(run)
    assert result["servers"] == [pid] and result["killed"] == [] and result["exited_on_their_own"], result
    assert "killing them before they released" in launch.log()
    assert node.main_pids() == []

    node.start_server(["--tp-size", "2"], env=env)
    pid = node.main_pids()[0]

    cut = fleet.playbook(stop_playbook(tmp_path), "-e", "sglang_stop_term_timeout=5", timeout=400)

    assert cut.rc == 0, cut.output
    result = stop_result(cut)
    assert pid in result["killed"] and not result["exited_on_their_own"] and result["lost"] is None, result


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")
def test_a_server_started_with_an_api_key_on_its_command_line_is_drained_with_that_key(node, tmp_path):
    fleet = Fleet(str(tmp_path), [node])
    node.start_server(["--tp-size", "2", "--api-key", "k-654321"])
    request = Request(node.url, max_new_tokens=1500, api_key="k-654321")
    request.start()
    time.sleep(1)

    run = fleet.playbook(stop_playbook(tmp_path), "-e", "sglang_stop_drain_timeout=120", timeout=400)

    assert run.rc == 0, run.output
    request.join(60)
    assert request.result[0] == 200, request.result
    assert "k-654321" not in run.output and node.main_pids() == []


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")
def test_a_server_with_an_api_key_is_drained_with_it_and_never_stopped_blind(node, tmp_path):
    """--api-key puts /v1/loads behind the bearer token (srt/utils/auth.py): without the key the count is
    unknown, which is not zero, so the stop fails at once with the server left running. The stop reads the key the
    server was started with from its command line or its --config file; this server's file is gone since its start,
    as a temporary one is."""
    fleet = Fleet(str(tmp_path), [node])
    config = os.path.join(node.workdir, "gone-args.yaml")
    with open(config, "w") as f:
        f.write('api-key: "k-123456"\n')
    os.chmod(config, 0o600)
    launch = node.start_server(["--tp-size", "2", "--config", config])
    os.unlink(config)
    pid = node.main_pids()[0]
    result = {}

    def generate():
        result["answer"] = launch.post("/generate", {"text": "x", "sampling_params": {"max_new_tokens": 1500}},
                                       timeout=300, headers={"Authorization": "Bearer k-123456"})

    request = threading.Thread(target=generate, daemon=True)
    request.start()
    time.sleep(1)

    blind = fleet.playbook(stop_playbook(tmp_path))

    assert blind.rc != 0
    text = " ".join(blind.output.split())
    assert "cannot read the requests in flight on the SGLang server %d" % pid in text, blind.output
    assert "requires an API key" in text and node.main_pids() == [pid]

    keyed = fleet.playbook(stop_playbook(tmp_path), "-e", "sglang_stop_api_key=k-123456", "-e",
                           "sglang_stop_drain_timeout=120", timeout=400)

    assert keyed.rc == 0, keyed.output
    request.join(60)
    assert result["answer"][0] == 200, result
    assert "k-123456" not in blind.output + keyed.output
    assert node.main_pids() == []

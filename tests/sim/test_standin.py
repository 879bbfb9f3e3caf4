# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The SGLang stand-in, run for real inside sandboxes: flags, process tree, GPU memory seen
through pynvml and the NVML double, HTTP endpoints, shutdown semantics and fault switches."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time

import pytest
import yaml

from gpusim import standin
from gpusim.nvml import SIM_DIR
from gpusim.sandbox import VENV_PYTHON
from gpusim.standin import Launch

pytestmark = pytest.mark.slow

PYTHON = VENV_PYTHON if os.path.exists(VENV_PYTHON) else None
TOTAL_MIB, GPUS = 143771, 4
SERVER_MIB = int(0.88 * TOTAL_MIB)
UNBALANCED = "The memory capacity is unbalanced. Some GPUs may be occupied by other processes."

_FDS_SNIPPET = r"""
import json, os, sys
out = {}
for pid in sys.argv[1:]:
    try:
        out[pid] = sorted(os.readlink("/proc/%s/fd/%s" % (pid, fd)) for fd in os.listdir("/proc/%s/fd" % pid))
    except OSError:
        out[pid] = None
print(json.dumps(out))
"""


@pytest.fixture
def model(tmp_path):
    return standin.make_model_dir(str(tmp_path / "model"))


@pytest.fixture
def launch(sandbox, model):
    """Start stand-in servers in the sandbox; whatever is left of them is killed at teardown."""
    started = []

    def start(*args, env=None, **kwargs) -> Launch:
        srv = Launch(sandbox, model, args=args, env=env, python=PYTHON, **kwargs).start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


def wait_until(predicate, timeout=30, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))
        time.sleep(0.05)


def nvml(sb) -> list:
    """Per GPU what pynvml reads through the double, asked from inside the sandbox."""
    result = sb.run([PYTHON, "-m", "gpusim.nvml", "--state", sb.state_dir, "describe"],
                    capture_output=True, text=True, check=True)
    return json.loads(result.stdout)["nvml"]


def used(sb) -> list:
    return [gpu["used_mib"] for gpu in nvml(sb)]


def open_files(sb, pids) -> dict:
    result = sb.run([PYTHON, "-c", _FDS_SNIPPET] + [str(p) for p in pids], capture_output=True, text=True,
                    check=True)
    return {int(k): v for k, v in json.loads(result.stdout).items()}


def environ_of(sb, pids) -> dict:
    code = ("import json, sys; print(json.dumps({p: open('/proc/%s/environ' % p, 'rb').read()"
            ".decode(errors='replace') for p in sys.argv[1:]}))")
    result = sb.run([PYTHON, "-c", code] + [str(p) for p in pids], capture_output=True, text=True, check=True)
    return {int(k): v for k, v in json.loads(result.stdout).items()}


def titles(procs) -> list:
    return sorted(" ".join(p["cmdline"]).strip() for p in procs if p["cmdline"])


def in_background(fn, *args):
    """Run FN in a thread; the returned dict gets "result" when it is done."""
    box = {}
    thread = threading.Thread(target=lambda: box.update(result=fn(*args)), daemon=True)
    thread.start()
    box["thread"] = thread
    return box


# -- the command line, against each release's contract --

PARSER_DUMP = r"""
import argparse, json, sys
from sglang.srt import server_args as sa
names = {f: n for n, f in sa.TYPES.items()}
kinds = {v: k for k, v in sa.ACTIONS.items() if not isinstance(v, str)}
out = []
for a in sa.build_parser()._actions:
    kind = kinds.get(type(a)) or {argparse._StoreAction: "store", argparse._StoreTrueAction: "store_true",
                                  argparse._HelpAction: "help"}.get(type(a), type(a).__name__)
    out.append({"option_strings": a.option_strings, "dest": a.dest, "action": kind, "nargs": a.nargs,
                "default": a.default, "type": names.get(a.type) if a.type else None,
                "choices": list(a.choices) if a.choices is not None else None, "required": a.required,
                "help_suppressed": a.help == argparse.SUPPRESS, "prog": sa.build_parser().prog,
                "allow_abbrev": sa.build_parser().allow_abbrev})
print(json.dumps(out))
"""

PREPARE = r"""
import json, sys
from sglang.srt.server_args import prepare_server_args
args = prepare_server_args(sys.argv[1:])
print(json.dumps({k: v for k, v in vars(args).items() if k != "hf_config"}, default=str))
"""

CONTRACT_FIELDS = ("option_strings", "dest", "action", "nargs", "default", "type", "choices", "required",
                   "help_suppressed")


def contract(release: str) -> dict:
    with open(os.path.join(standin.standin_root(), "contracts", "sglang-%s.json" % release)) as f:
        return json.load(f)


def standin_env(release: str = None) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([standin.standin_root(), SIM_DIR]))
    env.pop("GPUSIM_SGLANG_RELEASE", None)
    if release:
        env["GPUSIM_SGLANG_RELEASE"] = release
    return env


def run_cli(args, timeout=60, release=None):
    """The stand-in's command line on its own: parsing fails before any process is started."""
    return subprocess.run([PYTHON, "-m", "sglang.launch_server"] + args, env=standin_env(release),
                          capture_output=True, text=True, timeout=timeout, check=False)


def run_python(code: str, args=(), release=None):
    return subprocess.run([PYTHON, "-c", code] + list(args), env=standin_env(release), capture_output=True,
                          text=True, timeout=60, check=False)


def prepared(args, release):
    result = run_python(PREPARE, args, release)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def comparable(option: dict) -> dict:
    entry = {k: option[k] for k in CONTRACT_FIELDS}
    entry["option_strings"] = sorted(entry["option_strings"])
    return entry


@pytest.mark.parametrize("release", standin.RELEASES)
def test_parser_is_the_contract(release):
    """Every option of the release's parser, and nothing else, with its dest, nargs, type, choices, default."""
    result = run_python(PARSER_DUMP, release=release)
    assert result.returncode == 0, result.stderr
    actions = json.loads(result.stdout)
    spec = contract(release)
    facts = (spec["parser"]["prog"], spec["parser"]["allow_abbrev"])
    assert {(a["prog"], a["allow_abbrev"]) for a in actions} == {facts}
    parsed = sorted((comparable(a) for a in actions), key=lambda e: e["option_strings"])
    expected = sorted((comparable(o) for o in spec["options"]), key=lambda e: e["option_strings"])
    assert [e["option_strings"] for e in parsed] == [e["option_strings"] for e in expected], \
        "the stand-in's option strings are the contract's, no more and no fewer"
    assert parsed == expected


REPLAY = r"""
import argparse, contextlib, io, json, os, sys, tempfile
import yaml
from sglang.srt import contract, server_args as sa
spec = contract.load()
parser = sa.build_parser()
defaults = {}
for action in parser._actions:
    defaults.setdefault(action.dest, action.default)
out = {"examples": [], "config_examples": []}
for example in spec["parser"]["examples"]:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = parser.parse_args(example["argv"])
        entry = {"exit": None, "changed": {k: v for k, v in sorted(vars(ns).items()) if v != defaults[k]}}
    except SystemExit as e:
        lines = [l for l in err.getvalue().splitlines() if l.startswith(parser.prog + ": error:")]
        entry = {"exit": e.code, "error": lines[-1]}
    out["examples"].append(dict(argv=example["argv"], **entry))
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "server.yaml")
    for example in spec["parser"]["config_examples"]:
        with open(path, "w") as f:
            yaml.safe_dump(example["yaml"], f, sort_keys=False)
        entry = {"yaml": example["yaml"], "cli": example["cli"]}
        cli = [path if a == "FILE" else a for a in example["cli"]]
        try:
            entry["argv"] = sa.ConfigArgumentMerger(parser, spec["config_file"]["variant"]).merge_config_with_args(cli)
        except ValueError as e:
            entry["error"] = "ValueError: %s" % e
        out["config_examples"].append(entry)
print(json.dumps(out))
"""


@pytest.mark.parametrize("release", standin.RELEASES)
def test_parser_and_config_answer_as_the_release_did(release):
    """Command lines and --config files that the release's own code answered when the contract was made."""
    result = run_python(REPLAY, release=release)
    assert result.returncode == 0, result.stderr[-3000:]
    replayed = json.loads(result.stdout)
    spec = contract(release)["parser"]
    for mine, real in zip(replayed["examples"], spec["examples"]):
        assert mine == real
    for mine, real in zip(replayed["config_examples"], spec["config_examples"]):
        assert mine == real
    assert len(replayed["examples"]) == len(spec["examples"]) > 10
    assert len(replayed["config_examples"]) == len(spec["config_examples"]) > 5


@pytest.mark.parametrize("release", standin.RELEASES)
def test_version_is_the_release(release):
    result = run_python("import sglang; print(sglang.__version__)", release=release)
    assert result.returncode == 0 and result.stdout.strip() == release == contract(release)["release"]


def test_unknown_release_is_refused(model):
    result = run_cli(["--model-path", model], release="0.4.9")
    assert result.returncode == 2
    assert "GPUSIM_SGLANG_RELEASE=0.4.9: the SGLang stand-in has no contract for this release" in result.stderr


def test_help_lists_the_flags():
    result = run_cli(["--help"])
    assert result.returncode == 0 and result.stdout.startswith("usage: sglang serve")
    for flag in ("--model-path", "--host", "--port", "--tp-size", "--tensor-parallel-size", "--mem-fraction-static",
                 "--cuda-graph-max-bs-decode", "--cuda-graph-backend-prefill", "--cuda-graph-backend-decode",
                 "--disable-cuda-graph", "--enable-metrics", "--config", "--served-model-name", "--dp-size"):
        assert flag in result.stdout


@pytest.mark.parametrize("args, message", [
    (["--enable-cuda-graph"], "unrecognized arguments: --enable-cuda-graph"),
    (["--cuda-graph-backend-decode", "sometimes"], "invalid choice: 'sometimes'"),
    (["--cuda-graph-backend-decode", "tc_piecewise"], "tc_piecewise was removed; select breakable, full, or disabled"),
    (["--max-prefill-tokens", "1.5Ki"], "Decimals are not allowed with IEC suffixes like 'Ki'"),
])
def test_bad_flags_exit_with_argparse_message(model, args, message):
    result = run_cli(["--model-path", model] + args)
    assert result.returncode == 2
    assert result.stderr.startswith("usage: sglang serve") and message in result.stderr


def test_ambiguous_abbreviation_exits_2_on_0_5_23(model):
    result = run_cli(["--model-path", model, "--cuda-graph-max-bs", "160"], release="0.5.23")
    assert result.returncode == 2
    assert ("sglang serve: error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
            "--cuda-graph-max-bs-prefill") in result.stderr
    assert prepared(["--model-path", model, "--cuda-graph-max-bs-dec", "160"], "0.5.23")[
        "cuda_graph_max_bs_decode"] == 160, "an unambiguous prefix is accepted"


def test_deprecated_cuda_graph_max_bs_is_stored_as_decode_on_0_5_14(model):
    args = prepared(["--model-path", model, "--cuda-graph-max-bs", "160"], "0.5.14")
    assert args["cuda_graph_max_bs_decode"] == 160 and "cuda_graph_max_bs" not in args


@pytest.mark.parametrize("release", standin.RELEASES)
def test_config_keys_are_flags_verbatim(model, tmp_path, release):
    underscored = tmp_path / "underscored.yaml"
    underscored.write_text(yaml.safe_dump({"model_path": model, "tp_size": 2}))
    result = run_cli(["--config", str(underscored)], release=release)
    assert result.returncode == 2 and "sglang serve: error:" in result.stderr
    result = run_cli(["--config", str(underscored), "--model-path", model], release=release)
    assert result.returncode == 2 and "unrecognized arguments: --model_path %s --tp_size 2" % model in result.stderr

    dashed = tmp_path / "dashed.yaml"
    dashed.write_text(yaml.safe_dump({"model-path": model, "tp-size": 2, "mem-fraction-static": 0.5,
                                      "enable-metrics": True, "skip-server-warmup": False}))
    args = prepared(["--config", str(dashed), "--mem-fraction-static", "0.7"], release)
    assert (args["model_path"], args["tp_size"], args["enable_metrics"]) == (model, 2, True)
    assert args["skip_server_warmup"] is False
    assert args["mem_fraction_static"] == 0.7, "the command line wins over the file"

    result = run_cli(["--config", str(tmp_path / "server.json")], release=release)
    assert result.returncode == 1 and "ValueError: Config file must be YAML format, got: .json" in result.stderr


def test_missing_model_directory_fails_like_transformers(tmp_path):
    result = run_cli(["--model-path", str(tmp_path / "nowhere")])
    assert result.returncode == 1
    assert "OSError: Can't load the configuration of '%s'" % (tmp_path / "nowhere") in result.stderr


def test_sglang_console_script(tmp_path):
    copy = standin.install(str(tmp_path / "copy"))
    script = os.path.join(copy, "bin", "sglang")
    result = subprocess.run([PYTHON, script, "serve", "--help"], capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 0 and result.stdout.startswith("usage: sglang serve")
    result = subprocess.run([PYTHON, script, "serve", "--model-path", "m", "--cuda-graph-max-bs", "8"],
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2 and "ambiguous option: --cuda-graph-max-bs" in result.stderr
    result = subprocess.run([PYTHON, script, "launch"], capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2 and "invalid choice: 'launch'" in result.stderr


# -- a running server --

def test_tp4_process_tree_devices_and_gpu_memory(sandbox, launch):
    srv = launch("--tp-size", "4", env={"GPUOPS_MARKER": "run-42"}).wait_ready()
    tree = srv.tree()
    launcher = [p for p in tree if p["pid"] == srv.pid][0]
    assert launcher["cmdline"][1:3] == ["-m", "sglang.launch_server"]
    assert {"sglang::scheduler_TP0", "sglang::scheduler_TP1", "sglang::scheduler_TP2", "sglang::scheduler_TP3",
            "sglang::detokenizer"} <= set(titles(tree))
    schedulers = {" ".join(p["cmdline"]).strip(): p for p in tree if "scheduler" in " ".join(p["cmdline"])}
    assert {p["comm"] for p in schedulers.values()} == {"sglang::schedul"}
    assert all(p["ppid"] == srv.pid for p in schedulers.values())
    files = open_files(sandbox, [p["pid"] for p in schedulers.values()])
    for rank in range(4):
        assert "/dev/nvidia%d" % rank in files[schedulers["sglang::scheduler_TP%d" % rank]["pid"]]
    gpus = nvml(sandbox)
    assert [g["used_mib"] for g in gpus] == [SERVER_MIB] * 4
    for rank in range(4):
        holders = gpus[rank]["processes"]
        assert holders == [{"pid": schedulers["sglang::scheduler_TP%d" % rank]["pid"], "used_mib": SERVER_MIB}]

    environ = environ_of(sandbox, [srv.pid] + [p["pid"] for p in schedulers.values()])
    assert "GPUOPS_MARKER=run-42" in environ[srv.pid]
    assert not any("GPUOPS_MARKER" in environ[p["pid"]] for p in schedulers.values()), \
        "setproctitle overwrites what /proc/PID/environ shows (no SPT_NOENV=1)"

    srv.signal("KILL")  # the children die with their parent (PR_SET_PDEATHSIG)
    wait_until(lambda: not srv.tree(), what="the tree to die with its launcher")
    assert used(sandbox) == [0] * GPUS


def test_startup_health_and_endpoints(sandbox, launch, tmp_path):
    config = tmp_path / "server.yaml"
    config.write_text(yaml.safe_dump({"mem-fraction-static": 0.5, "tp-size": 2, "cuda-graph-max-bs-decode": 16,
                                      "served-model-name": "llama-sim", "enable-metrics": True}))
    srv = launch("--config", str(config), "--cuda-graph-max-bs-decode", "64", "--disable-cuda-graph",
                 env={"GPUSIM_SGLANG_LOAD_SECONDS": "1.0", "GPUSIM_SGLANG_WARMUP_SECONDS": "0.8"})
    seen = []
    wait_until(lambda: seen.append(srv.get("/health", timeout=5)[0]) or seen[-1] == 200, what="/health 200")
    assert seen[0] is None, "the port opens only after the model is loaded"
    assert 503 in seen and seen.index(503) < seen.index(200)
    log = srv.log()
    assert "'--disable-cuda-graph' is deprecated and will be removed in a future release." in log
    assert log.index("Uvicorn running on") < log.index("The server is fired up and ready to roll!")

    status, info = srv.get("/server_info")
    assert status == 200
    assert info["mem_fraction_static"] == 0.5 and info["tp_size"] == 2 and info["cuda_graph_max_bs_decode"] == 64
    assert info["cuda_graph_backend_prefill"] == info["cuda_graph_backend_decode"] == "disabled"
    assert info["port"] == srv.port and info["model_path"].endswith("model") and info["version"] == "0.5.23"
    assert srv.get("/get_server_info")[1]["mem_fraction_static"] == 0.5
    assert used(sandbox) == [int(0.5 * TOTAL_MIB)] * 2 + [0] * 2

    assert srv.get("/v1/models")[1]["data"][0]["id"] == "llama-sim"
    assert srv.get("/model_info")[1]["architectures"] == ["LlamaForCausalLM"]
    assert srv.get("/health_generate")[0] == 200 and srv.get("/ready")[0] == 200
    status, out = srv.post("/generate", {"text": "hello there", "sampling_params": {"max_new_tokens": 7}})
    assert status == 200 and out["meta_info"]["completion_tokens"] == 7 and len(out["output_ids"]) == 7
    assert srv.post("/generate", {"text": "hello there", "sampling_params": {"max_new_tokens": 7}})[1]["text"] \
        == out["text"]
    status, out = srv.post("/v1/completions", {"model": "llama-sim", "prompt": "hi", "max_tokens": 3})
    assert status == 200 and out["usage"]["completion_tokens"] == 3 and out["choices"][0]["text"]
    assert srv.get("/nothing-here") == (404, {"detail": "Not Found"})
    assert srv.get("/generate")[0] == 405


@pytest.mark.parametrize("release, flag", [("0.5.23", "--cuda-graph-max-bs-decode"),
                                           ("0.5.14", "--cuda-graph-max-bs")])
def test_server_info_has_exactly_the_contract_keys(launch, release, flag):
    srv = launch(flag, "160", env={"GPUSIM_SGLANG_RELEASE": release}).wait_ready()
    spec = contract(release)
    status, info = srv.get("/server_info")
    assert status == 200 and sorted(info) == spec["server_info"]["keys"]
    assert info["version"] == release and info["cuda_graph_max_bs_decode"] == 160
    assert "cuda_graph_max_bs" not in info
    for state in info["internal_states"]:
        assert "num_running_reqs" not in state and "num_waiting_reqs" not in state
        assert set(spec["internal_state"]["added_keys"]) <= set(state)
    routes = spec["endpoints"]["routes"]
    assert srv.get("/get_load")[0] == (200 if "/get_load" in routes else 404)
    assert srv.get("/ready")[0] == (200 if "/ready" in routes else 404)


@pytest.mark.parametrize("release", standin.RELEASES)
def test_v1_loads_counts_the_request_in_flight(launch, release):
    srv = launch(env={"GPUSIM_SGLANG_RELEASE": release}).wait_ready()
    spec = contract(release)["v1_loads"]

    def running():
        status, body = srv.get("/v1/loads")
        assert status == 200 and sorted(body) == spec["top_keys"]
        assert [sorted(load) for load in body["loads"]] == [sorted(spec["load_keys"])]
        return sum(load["num_running_reqs"] + load["num_waiting_reqs"] for load in body["loads"])

    assert running() == 0
    pending = in_background(srv.post, "/generate", {"text": "long one", "sampling_params": {"max_new_tokens": 400}})
    wait_until(lambda: running() == 1, what="/v1/loads to count the request")
    pending["thread"].join(60)
    assert pending["result"][0] == 200
    wait_until(lambda: running() == 0, what="/v1/loads to drop")
    assert srv.get("/v1/loads?include=core")[0] == 200
    status, body = srv.get("/v1/loads?include=bogus")
    assert status == 400 and "Invalid include sections" in body["detail"]


def test_metrics_gauge_counts_the_request_in_flight(launch):
    srv = launch("--enable-metrics", "--served-model-name", "m").wait_ready()
    gauge = ('sglang:num_running_reqs{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0",'
             'moe_ep_rank="0"}')
    assert gauge + " 0.0" in srv.get("/metrics")[1]
    pending = in_background(srv.post, "/generate", {"text": "long one", "sampling_params": {"max_new_tokens": 400}})
    wait_until(lambda: gauge + " 1.0" in srv.get("/metrics")[1], what="the gauge to show the request")
    pending["thread"].join(30)
    assert pending["result"][0] == 200
    wait_until(lambda: gauge + " 0.0" in srv.get("/metrics")[1], what="the gauge to drop")
    assert "sglang:num_queue_reqs{" in srv.get("/metrics")[1]


def test_metrics_need_enable_metrics(launch):
    srv = launch().wait_ready()
    assert srv.get("/metrics") == (404, {"detail": "Not Found"})


@pytest.mark.parametrize("release", standin.RELEASES)
def test_api_key_is_enforced_as_the_release_does(launch, release):
    srv = launch("--api-key", "s3cret", "--enable-metrics", env={"GPUSIM_SGLANG_RELEASE": release}).wait_ready()
    auth = contract(release)["auth"]
    for path in ("/server_info", "/v1/loads", "/model_info", "/nothing-here"):
        assert srv.get(path) == (401, {"error": "Unauthorized"}) == (auth["status"], auth["body"])
    assert srv.post("/generate", {"text": "x", "sampling_params": {"max_new_tokens": 1}})[0] == 401
    assert srv.get("/server_info", headers={"Authorization": "Bearer wrong"})[0] == 401
    assert srv.get("/v1/loads", headers={"Authorization": "bearer s3cret"})[0] == 200
    assert srv.get("/health")[0] == srv.get("/metrics")[0] == 200, "health and metrics stay open"
    assert srv.get("/ready")[0] == (200 if "/ready" in auth["open_prefixes"] else 401)


# -- shutdown: TokenizerManager.sigterm_watchdog of each release --

@pytest.mark.parametrize("release", standin.RELEASES)
def test_sigterm_drains_then_the_schedulers_release_then_exit(sandbox, launch, release):
    env = {"GPUSIM_SGLANG_RELEASE": release, "GPUSIM_SGLANG_TOKEN_DELAY": "0.01",
           "GPUSIM_SGLANG_WATCHDOG_INTERVAL": "0.5", "GPUSIM_SGLANG_MEMORY_RELEASE_SECONDS": "1.0"}
    srv = launch("--tp-size", "2", env=env).wait_ready()
    pending = in_background(srv.post, "/generate", {"text": "drain me", "sampling_params": {"max_new_tokens": 200}})
    wait_until(lambda: "#new-token: 2," in srv.log(), what="the request to reach the scheduler")
    sent = time.monotonic()
    srv.signal("TERM")
    assert wait_until(lambda: srv.get("/health", timeout=5)[0] == 503, what="/health 503 while draining")
    pending["thread"].join(60)
    status, out = pending["result"]
    assert status == 200 and out["meta_info"]["completion_tokens"] == 200, "the drain let the request finish"
    exit_status = srv.wait_exit(60)
    assert time.monotonic() - sent >= 1.0, "the schedulers took their release time"
    assert exit_status == contract(release)["shutdown"]["main_exit"] == (0 if release == "0.5.23" else -9)
    wait_until(lambda: not srv.tree(), what="the tree to be gone")
    assert used(sandbox) == [0] * GPUS
    log = srv.log()
    draining = log.index("Draining requests and shutting down")
    one = log.index("Gracefully exiting... Remaining number of requests 1.")
    zero = log.index("Gracefully exiting... Remaining number of requests 0.")
    killed = log.index("kill_process_tree called: parent_pid=")
    assert draining < one < zero < killed
    assert "Schedulers still alive" not in log, "every scheduler released and exited within the cap"
    assert "include_parent=%s" % (release != "0.5.23") in log[killed:]


def test_hang_in_release_is_killed_at_the_cap(sandbox, launch):
    env = {"GPUSIM_SGLANG_FAULTS": "hang_in_release", "GPUSIM_SGLANG_WATCHDOG_INTERVAL": "0.2",
           "GPUSIM_SGLANG_MEMORY_RELEASE_SECONDS": "0.4"}
    srv = launch("--tp-size", "2", env=env).wait_ready()
    ranks = {" ".join(p["cmdline"]).strip(): p["pid"] for p in srv.tree()}
    sent = time.monotonic()
    srv.signal("TERM")
    wait_until(lambda: ranks["sglang::scheduler_TP0"] not in [p["pid"] for p in srv.tree()],
               what="TP0 to release and exit on its own")
    assert ranks["sglang::scheduler_TP1"] in [p["pid"] for p in srv.tree()], "TP1 hangs in its release"
    assert srv.wait_exit(90) == 0
    assert time.monotonic() - sent >= contract("0.5.23")["shutdown"]["release"]["cap_s"]
    assert ("Schedulers still alive 15s after ShutdownReq, killing them before they released: [%d]"
            % ranks["sglang::scheduler_TP1"]) in srv.log()
    wait_until(lambda: not srv.tree(), what="the tree to be gone")
    assert used(sandbox) == [0] * GPUS, "the double drops a dead holder's memory"


def test_force_shutdown_skips_only_the_drain(sandbox, launch):
    srv = launch(env={"SGL_FORCE_SHUTDOWN": "1", "GPUSIM_SGLANG_TOKEN_DELAY": "0.05"}).wait_ready()
    pending = in_background(srv.post, "/generate", {"text": "cut", "sampling_params": {"max_new_tokens": 400}})
    wait_until(lambda: "#new-token: 1," in srv.log(), what="the request to reach the scheduler")
    srv.signal("TERM")
    assert srv.wait_exit(60) == 0
    pending["thread"].join(30)
    assert pending["result"] == (None, None), "the request was cut off"
    log = srv.log()
    assert "Signal SIGTERM received while force shutdown flag set. Force exiting." in log
    assert "Schedulers still alive" not in log, "the release step still ran"
    wait_until(lambda: not srv.tree(), what="the tree to be gone")
    assert used(sandbox) == [0] * GPUS


def test_sigterm_before_the_first_request_has_its_default_action(sandbox, launch):
    srv = launch("--skip-server-warmup")
    wait_until(lambda: srv.get("/model_info", timeout=5)[0] == 200, what="the port to open")
    srv.signal("TERM")
    assert srv.wait_exit(30) == -15, "no request yet, so no handler: SIGTERM kills the launcher"
    wait_until(lambda: not srv.tree(), what="the children to die with it (PR_SET_PDEATHSIG)")
    assert "Draining requests" not in srv.log()


def test_sigterm_to_the_process_group_kills_schedulers_mid_step(sandbox, launch):
    srv = launch("--tp-size", "2", env={"GPUSIM_SGLANG_TOKEN_DELAY": "0.05"}).wait_ready()
    in_background(srv.post, "/generate", {"text": "stuck", "sampling_params": {"max_new_tokens": 400}})
    wait_until(lambda: "#new-token: 1," in srv.log(), what="the request to reach the scheduler")
    srv.signal("TERM", group=True)
    wait_until(lambda: not [p for p in srv.tree() if "sglang::" in " ".join(p["cmdline"])],
               what="schedulers and detokenizer to die")
    wait_until(lambda: srv.log().count("Remaining number of requests 1.") >= 3, what="the drain to spin")
    assert srv.proc.poll() is None, "the launcher drains forever: its request will never finish"
    assert used(sandbox) == [0] * GPUS
    assert "Child process unexpectedly failed with exitcode=15" in srv.log()


def test_tp_refuses_to_start_when_a_gpu_holds_other_memory(sandbox, launch):
    holder = sandbox.popen([PYTHON, "-m", "gpusim.nvml", "--state", sandbox.state_dir, "hold", "1", "30000"],
                           stdout=subprocess.PIPE, text=True)
    line = holder.stdout.readline()
    assert line.startswith("holding 30000 MiB on GPU 1 as pid"), line
    srv = launch("--tp-size", "2")
    assert srv.wait_exit(60) != 0
    assert UNBALANCED in srv.log() and "Scheduler hit an exception" in srv.log()
    assert used(sandbox) == [0, 30000, 0, 0]
    sandbox.run(["kill", line.split()[-1]], check=True)
    holder.wait(10)
    assert used(sandbox) == [0] * GPUS


# -- hidden-state extraction --

def test_every_generation_dumps_under_its_own_rid(sandbox, launch, tmp_path):
    dumps = tmp_path / "dumps"
    srv = launch(env={"SGLANG_HS_DUMP_DIR": str(dumps)}).wait_ready()
    warmup = {p.name for p in dumps.glob("hs_*.pt")}
    assert len(warmup) >= 1, "the warmup request dumped under its own (random) rid"
    assert srv.post("/generate", {"text": "one two three", "rid": "probe-123",
                                  "sampling_params": {"max_new_tokens": 2}})[0] == 200
    meta = json.loads((dumps / "hs_probe-123.json").read_text())
    assert meta["rid"] == "probe-123" and meta["num_tokens"] == 3
    assert (dumps / "hs_probe-123.pt").stat().st_size == meta["bytes"] > 0
    before = {p.name for p in dumps.glob("hs_HEALTH_CHECK_*.pt")}
    assert srv.get("/health")[0] == 200
    after = {p.name for p in dumps.glob("hs_HEALTH_CHECK_*.pt")}
    assert len(after - before) == 1, "/health generates, so a monitor's probe dumps too"


def test_unpatched_install_dumps_nothing_silently(sandbox, launch, tmp_path):
    copy = standin.install(str(tmp_path / "stock"), patched=False)
    assert not standin.is_patched(copy) and standin.is_patched(standin.standin_root())
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    srv = launch(env={"SGLANG_HS_DUMP_DIR": str(dumps), "PYTHONPATH": copy},
                 argv=[PYTHON, os.path.join(copy, "bin", "sglang"), "serve"]).wait_ready()
    assert srv.post("/generate", {"text": "one two three", "rid": "req-1",
                                  "sampling_params": {"max_new_tokens": 2}})[0] == 200
    assert list(dumps.iterdir()) == []
    assert "Traceback" not in srv.log()


# -- fault switches --

def test_fault_ignore_sigterm(sandbox, launch):
    srv = launch("--tp-size", "2", env={"GPUSIM_SGLANG_FAULTS": "ignore_sigterm"}).wait_ready()
    ranks = {" ".join(p["cmdline"]).strip(): p["pid"] for p in srv.tree()}
    for rank in (0, 1):
        srv.signal("TERM", pid=ranks["sglang::scheduler_TP%d" % rank])
    wait_until(lambda: ranks["sglang::scheduler_TP0"] not in [p["pid"] for p in srv.tree()], what="TP0 to die")
    time.sleep(0.5)
    assert ranks["sglang::scheduler_TP1"] in [p["pid"] for p in srv.tree()], "TP1 ignores SIGTERM"
    srv.signal("KILL", pid=ranks["sglang::scheduler_TP1"])
    wait_until(lambda: ranks["sglang::scheduler_TP1"] not in [p["pid"] for p in srv.tree()], what="TP1 to die")


def test_fault_orphan(sandbox, launch):
    srv = launch("--tp-size", "2", env={"GPUSIM_SGLANG_FAULTS": "orphan"}).wait_ready()
    children = [p["pid"] for p in srv.tree() if p["pid"] != srv.pid]
    srv.signal("TERM")
    assert srv.wait_exit(30) == 0
    orphans = [p for p in sandbox.procs() if p["pid"] in children]
    assert {p["ppid"] for p in orphans} == {1}
    assert {"sglang::scheduler_TP0", "sglang::scheduler_TP1"} <= set(titles(orphans))
    assert used(sandbox) == [SERVER_MIB] * 2 + [0] * 2
    for pid in children:
        sandbox.run(["kill", "-KILL", str(pid)])


def test_fault_defunct(sandbox, launch):
    srv = launch(env={"GPUSIM_SGLANG_FAULTS": "defunct"}).wait_ready()
    zombies = wait_until(lambda: [p for p in srv.tree() if p["state"] == "Z"], what="a <defunct> child")
    assert zombies[0]["ppid"] == srv.pid and zombies[0]["cmdline"] == []
    assert srv.get("/health")[0] == 200


def test_fault_devholder(sandbox, launch):
    srv = launch(env={"GPUSIM_SGLANG_FAULTS": "devholder"}).wait_ready()
    holder = wait_until(lambda: [p for p in srv.tree() if "compile_worker" in " ".join(p["cmdline"])],
                        what="the compile worker")[0]
    assert "sglang" not in " ".join(holder["cmdline"]) and "sglang" not in holder["comm"]
    assert "/dev/nvidia0" in open_files(sandbox, [holder["pid"]])[holder["pid"]]
    srv.signal("KILL")
    wait_until(lambda: [p["pid"] for p in srv.tree()] == [], what="the launcher's tree to go")
    survivor = [p for p in sandbox.procs() if p["pid"] == holder["pid"]]
    assert survivor and survivor[0]["ppid"] == 1, "it outlives the server, holding /dev/nvidia0"
    sandbox.run(["kill", "-KILL", str(holder["pid"])])


def test_fault_crash_on_load(sandbox, launch):
    srv = launch("--tp-size", "2", env={"GPUSIM_SGLANG_FAULTS": "crash_on_load"})
    assert srv.wait_exit(60) != 0
    log = srv.log()
    assert "Scheduler hit an exception: Traceback" in log and "RuntimeError: CUDA error: out of memory" in log
    assert "Received sigquit from a child process" in log
    wait_until(lambda: used(sandbox) == [0] * GPUS, what="the memory to be released")


def test_fault_slow_exit(sandbox, launch):
    srv = launch(env={"GPUSIM_SGLANG_FAULTS": "slow_exit", "GPUSIM_SGLANG_SLOW_EXIT_SECONDS": "2"}).wait_ready()
    srv.signal("TERM")
    wait_until(lambda: "Remaining number of requests 0." in srv.log(), what="the drain to end")
    drained = time.monotonic()
    assert srv.wait_exit(30) == 0
    assert time.monotonic() - drained > 1.0, "the tree outlived the drain"
    assert used(sandbox) == [0] * GPUS


def test_unknown_fault_is_refused(launch):
    srv = launch(env={"GPUSIM_SGLANG_FAULTS": "segfault"})
    assert srv.wait_exit(30) == 1
    assert "unknown fault(s) segfault" in srv.log()

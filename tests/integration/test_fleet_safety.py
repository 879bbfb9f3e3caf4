# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fleet runs that fail safe: preflight against the node, a canary rollout, secrets that stay secret, a unit file
that cannot be injected, a host lock that holds (honest records of a failed launch: test_failed_launch.py). Real
ansible-playbook runs against simulated GPU nodes."""

from __future__ import annotations

import glob
import json
import os
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from gpusim.fleet import Fleet, SimNode, collections_path, http_get

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")]


# -- preflight against the node --

@pytest.mark.parametrize("case", ["too many GPUs", "run name with a slash"])
def test_requests_the_node_cannot_serve_are_refused_before_the_server_is_touched(node, fleet, case):
    pid = node.serving()
    extra = {"too many GPUs": {"sglang_launch_server_args": {"tp_size": 16}},
             "run name with a slash": {"sglang_launch_run_name": "../../etc"}}[case]
    message = {"too many GPUs": "but NVML sees 4 GPU(s) on this node (indices 0 to 3); refusing before the running",
               "run name with a slash": "sglang_launch_run_name must be a plain directory name"}[case]

    run = fleet.playbook("restart_extraction.yml", "-e", json.dumps(extra))

    assert run.rc != 0
    assert message in run.words(), run.output
    assert "The running server was not touched." in run.words()
    assert node.main_pids() == [pid] and node.healthy()


def test_a_port_held_by_another_program_is_refused(node, fleet):
    stop = fleet.playbook("stop_sglang.yml")
    assert stop.rc == 0, stop.output
    squatter = node.sandbox.popen(["python3", "-m", "http.server", "--bind", "127.0.0.1", str(node.port)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while subprocess.run(["ss", "-Hltn", "sport = :%d" % node.port], capture_output=True, text=True,
                             check=False).stdout.strip() == "":
            assert time.monotonic() < deadline, "the squatter never listened"
            time.sleep(0.1)

        run = fleet.playbook("restart_serving.yml")
    finally:
        for proc in node.sandbox.procs():  # the squatter itself runs inside the node's PID namespace
            if "http.server" in proc["cmdline"]:
                node.sandbox.run(["kill", "-KILL", str(proc["pid"])])
        squatter.wait(30)

    assert run.rc != 0
    words = run.words()
    assert "Port %d is held by process" % node.port in words and "which is not an SGLang server" in words, run.output
    assert "The running server was not touched." in words


# -- the canary --

def test_a_bad_config_fails_on_the_canary_and_leaves_the_other_nodes_alone(tmp_path):
    with SimNode(str(tmp_path / "node1"), gpus=2) as one, SimNode(str(tmp_path / "node2"), gpus=2) as two, \
            SimNode(str(tmp_path / "node3"), gpus=2) as three:
        nodes = [one, two, three]
        before = dict((n.name, n.serving()) for n in nodes)
        fleet = Fleet(str(tmp_path), nodes)
        crash = dict(one.server_env, GPUSIM_SGLANG_FAULTS="crash_on_load")  # passes every preflight check

        run = fleet.playbook("restart_serving.yml", "-e", json.dumps({"sglang_launch_environment": crash}))

        assert run.rc != 0
        table = run.summary()
        assert "node1  FAILED" in table and "node2  untouched" in table and "node3  untouched" in table, run.output
        assert "Rollout stopped after node1 failed; 2 host(s) never touched: node2, node3." in table
        assert "node1 now runs NO SGLang server" in table
        assert set(run.recap()) == {"node1"}, run.output
        assert one.main_pids() == []
        for n in (two, three):
            assert n.main_pids() == [before[n.name]] and n.healthy(), n.name
            assert not os.path.exists(n.state_dir)


# -- secrets --

class CmdlineSampler(threading.Thread):
    """Every command line on this machine, read every 50 ms: the controller's processes and, through the host's
    view of its PID namespace, every process of the nodes."""

    def __init__(self, needles):
        super().__init__(daemon=True)
        self.needles = [n.encode() for n in needles]
        self.hits, self.samples = [], 0
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            for path in glob.glob("/proc/[0-9]*/cmdline"):
                try:
                    with open(path, "rb") as f:
                        cmdline = f.read()
                except OSError:
                    continue
                if any(n in cmdline for n in self.needles):
                    self.hits.append(cmdline.replace(b"\0", b" ")[:300])
            self.samples += 1
            self.done.wait(0.05)


def files_under(*roots):
    for root in roots:
        for base, dummy, names in os.walk(root):
            for name in names:
                yield os.path.join(base, name)


def readable_by_others(path: str) -> bool:
    """Whether a user other than the owner (group or other) can read PATH, directories on the way included."""
    if os.stat(path).st_mode & 0o044:
        return True
    parent = os.path.dirname(path)
    while parent != "/":
        if not os.stat(parent).st_mode & 0o055:
            return False
        parent = os.path.dirname(parent)
    return False


def vars_file(path, values: dict) -> str:
    """-e @PATH for VALUES, in a file of mode 0600, as ansible-vault or a protected group_vars would hold them."""
    fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(values, f)
    return "@" + str(path)


def test_a_token_and_an_api_key_reach_no_command_line_output_or_readable_file(node, fleet, tmp_path):
    node.serving()
    token, api_key = "hf_" + secrets.token_hex(12), "sk-" + secrets.token_hex(12)
    env = dict(node.server_env, HF_TOKEN=token)
    args = {"tp_size": 2, "enable_metrics": True, "api_key": api_key}
    good = vars_file(tmp_path / "good.json", {"sglang_launch_environment": env, "sglang_launch_server_args": args})
    # a failed post-check of a new configuration: its message carries the log tail, where SGLang printed server_args
    bad = vars_file(tmp_path / "bad.json", {"sglang_launch_environment": dict(env, GPUOPS_TEST="new"),
                                            "sglang_launch_server_args": args, "sglang_launch_gpus": [2, 3]})
    sampler = CmdlineSampler([token, api_key])
    sampler.start()
    try:
        ok = fleet.playbook("restart_serving.yml", "-v", "-e", good)
        # the server read its API key from the --config file: /server_info wants it
        answers = [http_get(node.url + "/server_info")[0], http_get(node.url + "/server_info", api_key=api_key)[0]]
        failed = fleet.playbook("restart_serving.yml", "-v", "--diff", "-e", bad)
    finally:
        sampler.done.set()
        sampler.join(30)

    assert ok.rc == 0, ok.output
    assert answers == [401, 200]
    assert failed.rc != 0 and "wrong GPUs" in failed.words(), failed.output
    assert sampler.samples > 20 and sampler.hits == [], sampler.hits[:5]
    for run in (ok, failed):
        assert token not in run.output and api_key not in run.output
    assert "server_args=" in failed.output and "********" in failed.output, "the log tail is shown, masked"
    holders = [p for p in files_under(node.state_dir, node.log_dir) if token.encode() in open(p, "rb").read()
               or api_key.encode() in open(p, "rb").read()]
    assert holders, "the secrets reach the server through files"
    for path in holders:
        assert not readable_by_others(path), "%s (%o) holds a secret" % (path, os.stat(path).st_mode)
    for path in files_under(node.state_dir, node.log_dir):
        assert not os.stat(path).st_mode & 0o007, path
    for name in ("server.json", "runs.jsonl"):
        with open(os.path.join(node.state_dir, name), "rb") as f:
            content = f.read()
        assert token.encode() not in content and api_key.encode() not in content
    assert stat.S_IMODE(os.stat(node.log_dir).st_mode) == 0o750


# -- the unit file --

INJECTION = "model\nExecStartPre=/bin/sh -c 'touch /tmp/gpuops-pwned'"


def test_a_unit_injection_payload_is_refused_before_anything_is_written(node, fleet, tmp_path):
    pid = node.serving()
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()

    run = fleet.playbook("restart_serving.yml", "-e", json.dumps({
        "sglang_launch_supervisor": "systemd", "sglang_launch_unit_dir": str(unit_dir),
        "sglang_launch_server_args": {"tp_size": 2, "served_model_name": INJECTION}}))

    assert run.rc != 0
    assert "newlines and other control characters are refused" in run.words(), run.output
    assert list(unit_dir.iterdir()) == []
    assert node.main_pids() == [pid] and node.healthy()


def test_the_launch_writes_the_stop_timeout_of_sglang_stop_into_its_unit(node, fleet, tmp_path):
    node.serving()
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()

    # No systemd runs here, so the unit is written and its start fails: the launch stops there.
    run = fleet.playbook("restart_serving.yml", "-e", json.dumps({
        "sglang_launch_supervisor": "systemd", "sglang_launch_unit_dir": str(unit_dir),
        "sglang_stop_term_timeout": 7}))

    assert run.rc != 0
    unit = (unit_dir / "gpuops-sglang.service").read_text()
    assert "TimeoutStopSec=7\n" in unit, unit


def test_the_unit_escapes_every_value_and_passes_systemd_analyze_verify(tmp_path):
    # the unit as the node renders it (_launch.Request.unit_file), for a request of the role's variables
    sys.path.insert(0, collections_path())
    from ansible_collections.gpuops.host.plugins.module_utils import _launch as launches

    cases = os.path.join(os.path.dirname(__file__), "..", "unit", "plugins", "module_utils", "launch_cases.json")
    with open(cases) as f:
        request = dict(json.load(f)["systemd_tuning"]["launch"], mode="extraction", group="daemon",
                       state_dir=str(tmp_path), log_dir=str(tmp_path / "log 100%"), term_timeout=75,
                       limit_memlock="infinity", limit_nofile=1048576, restart_on_failure=True, enable=True)
    exec_argv = [shutil.which("python3"), "-m", "sglang.launch_server", "--model-path", "/models/My Model",
                 "--served-model-name", 'a "quoted" 100% $HOME \\ value', "--port", "30000"]
    unit = tmp_path / "gpuops-sglang.service"
    unit.write_text(launches.Request(request, marker="100%").unit_file({"user": "daemon"}, exec_argv))

    content = unit.read_text()
    assert "Environment=" not in content.replace("EnvironmentFile=", "")
    assert "EnvironmentFile=%s/runs/100%%%%/server.env" % tmp_path in content
    assert '"--served-model-name" "a \\"quoted\\" 100%% $$HOME \\\\ value"' in content
    assert "StandardOutput=append:%s/log 100%%%%/100%%%%.log" % tmp_path in content
    assert "KillMode=mixed" in content and "UMask=0027" in content
    assert "TimeoutStopSec=75" in content  # the stop timeout of sglang_stop, one value for both supervisors
    assert content.splitlines()[0] == launches.UNIT_HEADER
    assert "\nUser=daemon\nGroup=daemon\n" in content
    assert "\nLimitMEMLOCK=infinity\nLimitNOFILE=1048576\n" in content and "\nRestart=on-failure\n" in content
    assert content.endswith("\n[Install]\nWantedBy=multi-user.target\n")
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    (tmp_path / "runs" / "100%").mkdir(parents=True)
    (tmp_path / "runs" / "100%" / "server.env").write_text("HF_TOKEN=\"x\"\n")
    check = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False)
    assert check.returncode == 0 and "gpuops-sglang.service" not in check.stderr, check.stdout + check.stderr


# -- the host lock --

def stale_lock(node: SimNode, run: str = "20250101T000000Z-1") -> None:
    os.makedirs(node.lock_path, mode=0o700, exist_ok=True)
    os.chmod(node.lock_path, 0o700)
    with open(os.path.join(node.lock_path, "lock.json"), "w") as f:
        json.dump({"run": run, "playbook": "Restart SGLang in tuning mode", "taken": time.time() - 7 * 86400}, f)


def test_two_runs_racing_for_one_stale_lock_exactly_one_proceeds(node, fleet):
    node.serving()
    stale_lock(node)

    racers = [fleet.popen("restart_serving.yml") for dummy in range(2)]
    outputs = [p.communicate(timeout=600)[0] for p in racers]

    codes = sorted(p.returncode for p in racers)
    assert codes[0] == 0 and codes[1] != 0, outputs
    loser = outputs[[p.returncode for p in racers].index(codes[1])]
    assert "Another gpuops run holds the lock %s/lock.json on this host: run " % node.lock_path in " ".join(
        loser.split()), loser
    assert "20250101T000000Z-1" not in " ".join(loser.split()).split("holds the lock")[1][:80]
    assert not os.path.exists(os.path.join(node.lock_path, "lock.json")), "the winner released it"


@pytest.fixture
def public_dir():
    """A world-writable directory, like /run/lock, that user nobody can reach."""
    path = tempfile.mkdtemp(prefix="gpuops-public-", dir="/tmp")
    os.chmod(path, 0o1777)
    yield path
    shutil.rmtree(path)


def test_an_unprivileged_user_can_neither_take_nor_block_the_lock(node, fleet, public_dir):
    node.serving()
    lock_dir = os.path.join(public_dir, "gpuops")
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    planted = subprocess.run(nobody + ["sh", "-c", 'mkdir -m 777 "$1" && echo "{\\"run\\": \\"x\\", \\"taken\\": '
                                       '9999999999}" >"$1/lock.json" && touch -d 2099-01-01 "$1" "$1/lock.json"',
                                       "plant", lock_dir], capture_output=True, text=True, timeout=30, check=False)
    assert planted.returncode == 0, planted.stderr

    run = fleet.playbook("stop_sglang.yml", "-e", "gpuops_lock_dir=" + lock_dir)

    assert run.rc == 0, run.output
    st = os.lstat(lock_dir)
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o700
    for attempt in (["touch", lock_dir + "/lock.json"], ["mv", lock_dir, lock_dir + ".mine"],
                    ["python3", "-c", "import fcntl, os, sys; fcntl.flock(os.open(sys.argv[1], os.O_RDONLY), 2)",
                     lock_dir]):
        res = subprocess.run(nobody + attempt, capture_output=True, text=True, timeout=30, check=False)
        assert res.returncode != 0, attempt
    assert os.lstat(lock_dir).st_uid == 0

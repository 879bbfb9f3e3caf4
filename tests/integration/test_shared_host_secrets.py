# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A shared GPU node, where other local users read the system log and run their own processes: the secrets of a
restart reach no log, the API key goes to no process but the server's own, and a port taken by another user fails
the launch. Real ansible-playbook runs against a simulated node; the system log is a real receiver at the node's
/dev/log (gpusim.syslog)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time

import pytest

from gpusim import net
from gpusim.fleet import http_get
from gpusim.syslog import SyslogReceiver

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")]


def vars_file(path, values: dict) -> str:
    fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(values, f)
    return "@" + str(path)


# -- no secret in any log --

@pytest.mark.parametrize("mode", ["extraction", "tuning", "serving"])
def test_no_secret_reaches_the_system_log_or_the_output_at_vvv(node, fleet, tmp_path, mode):
    node.serving()
    token, api_key = "hf_" + secrets.token_hex(12), "sk-" + secrets.token_hex(12)
    # a variable not named like a secret (every value of sglang_launch_environment is one), and an argument made
    # secret by sglang_launch_secret_args
    private, listed = "private-" + secrets.token_hex(8), "model-" + secrets.token_hex(8)
    needles = [token, api_key, private, listed]
    extra = vars_file(tmp_path / "secrets.json", {
        "sglang_launch_environment": dict(node.server_env, HF_TOKEN=token, TEAM_SETTING=private),
        "sglang_launch_server_args": {"tp_size": 2, "enable_metrics": True, "api_key": api_key,
                                      "served_model_name": listed},
        "sglang_launch_secret_args": ["served_model_name"]})

    with SyslogReceiver(node.sandbox, tmp_path / "syslog") as syslog:
        run = fleet.playbook("restart_%s.yml" % mode, "-vvv", "-e", extra)
        logged = syslog.lines()

    assert run.rc == 0, run.output[-5000:]
    record = node.record()
    assert record["mode"] == mode
    # the record names the server by PID, start time and owner: a reused PID has another start time
    stat = node.sandbox.run(["cat", "/proc/%d/stat" % record["pid"]], capture_output=True, text=True).stdout
    assert record["start"] == int(stat.rpartition(")")[2].split()[19]) and record["owner"] == "root"
    invocations = [line for line in logged if "ansible-gpuops.host.sglang_server" in line]
    # the receiver hears the module: the converging call (sglang_server) logs its invocation
    assert len(invocations) >= 1, logged[:5]
    for needle in needles:
        assert needle not in "\n".join(logged), [line for line in logged if needle in line][:2]
        assert needle not in run.output, needle
    assert any("secret_server_args=NOT_LOGGING_PARAMETER" in line for line in invocations)
    assert any("secret_environment=NOT_LOGGING_PARAMETER" in line for line in invocations)


# -- another user's programs on the node --

FAKE_SGLANG = r'''
"""Another user's program titled like an SGLang server: it logs every request with its Authorization header, and
counts one request in flight forever."""
import http.server, json, os, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
log = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "requests.log"), "a", buffering=1)


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        log.write("%s %s %s\n" % (self.command, self.path, self.headers.get("Authorization")))
        if self.path == "/metrics":
            body, kind = b"sglang:num_running_reqs 1\nsglang:num_queue_reqs 0\n", "text/plain"
        elif self.path == "/v1/loads":
            body, kind = json.dumps({"loads": [{"dp_rank": 0, "num_running_reqs": 1, "num_waiting_reqs": 0}]}).encode(), "application/json"
        else:
            body, kind = b"{}", "application/json"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET


http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
'''

SQUATTER = r'''
"""Another user's program that takes a port as soon as it is free, answers 503 for a while and then 200, and logs
every request with its Authorization header."""
import http.server, os, socket, sys, time
port, log_path = int(sys.argv[1]), sys.argv[2]
log = open(log_path, "a", buffering=1)


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        log.write("%s %s %s\n" % (self.command, self.path, self.headers.get("Authorization")))
        status = 503 if time.monotonic() < self.server.bound + 1.0 else 200
        self.send_response(status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_POST = do_GET


while True:
    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        break
    except OSError:
        time.sleep(0.01)
server.bound = time.monotonic()
log.write("bound %d\n" % os.getpid())
server.serve_forever()
'''

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def other_users_dir():
    path = tempfile.mkdtemp(prefix="gpuops-other-user-")
    os.chmod(path, 0o777)
    return path


def kill_inside(node, marker):
    for proc in node.sandbox.procs():
        if marker in " ".join(proc["cmdline"]) and proc["cmdline"][:1] != ["setpriv"] and proc["state"] != "Z":
            node.sandbox.run(["kill", "-KILL", str(proc["pid"])])


def wait_for(predicate, what, timeout=60):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.mark.parametrize("owners", [None, []], ids=["default-owners", "every-owner"])
def test_a_fake_sglang_of_another_user_gets_no_key_and_does_not_hold_up_the_stop(node, fleet, tmp_path, owners):
    node.serving()
    home = other_users_dir()
    os.makedirs(os.path.join(home, "sglang"))
    for name, text in (("__init__.py", ""), ("launch_server.py", FAKE_SGLANG)):
        with open(os.path.join(home, "sglang", name), "w") as f:
            f.write(text)
    port = net.free_port()
    fake = node.sandbox.popen(NOBODY + ["python3", "-m", "sglang.launch_server", "--host", "127.0.0.1", "--port", str(port)],
                              cwd=home, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = os.path.join(home, "requests.log")
    api_key = "sk-" + secrets.token_hex(12)
    try:
        wait_for(lambda: http_get("http://127.0.0.1:%d/v1/loads" % port)[0] == 200, "the fake server never answered")
        open(log, "w").close()  # the fake appends to it
        pid = [p["pid"] for p in node.sandbox.procs() if "--port" in p["cmdline"] and str(port) in p["cmdline"]
               and p["cmdline"][:1] != ["setpriv"]][0]

        extra = {"sglang_stop_api_key": api_key, "sglang_stop_drain_timeout": 30}
        if owners is not None:
            extra["sglang_stop_owners"] = owners
        run = fleet.playbook("stop_sglang.yml", "-e", vars_file(tmp_path / "key.json", extra), timeout=240)

        with open(log) as f:
            received = f.read()
    finally:
        kill_inside(node, "--port %d" % port)
        fake.wait(30)
        shutil.rmtree(home, ignore_errors=True)
    assert api_key not in received, received
    assert received == "", "the fake server was sent requests: %s" % received
    words = run.words()
    if owners is None:
        # another user's server: left alone by the stop (sglang_stop_owners), and named
        assert ("Not touched: pid %d (user nobody) python3 -m sglang.launch_server" % pid) in words, run.output
    else:
        # every user's server is stopped, yet no key goes to a user not trusted with it
        assert ("the SGLang server %d (user nobody, http://127.0.0.1:%d) is not drained and is sent nothing: it runs "
                "as nobody, who is not trusted with the API key" % (pid, port)) in words, run.output
    assert "still in flight" not in words


def test_a_port_squatter_while_the_new_server_loads_fails_the_launch_and_is_named(node, fleet, tmp_path):
    node.serving()
    home = other_users_dir()
    script = os.path.join(home, "squat.py")
    with open(script, "w") as f:
        f.write(SQUATTER)
    log = os.path.join(home, "requests.log")
    api_key = "sk-" + secrets.token_hex(12)
    # waits until the old server has gone, then takes its port
    squatter = node.sandbox.popen(NOBODY + ["python3", script, str(node.port), log], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        run = fleet.playbook("restart_serving.yml", "-e", vars_file(tmp_path / "vars.json", {
            "sglang_launch_environment": dict(node.server_env, GPUSIM_SGLANG_LOAD_SECONDS="5"),
            "sglang_launch_server_args": {"tp_size": 2, "enable_metrics": True, "api_key": api_key}}), timeout=240)
        with open(log) as f:
            received = f.read()
    finally:
        kill_inside(node, script)
        squatter.wait(30)
        shutil.rmtree(home, ignore_errors=True)
    assert received.startswith("bound "), received
    pid = int(received.split()[1])
    assert api_key not in received
    assert run.rc != 0
    words = run.words()
    assert ("is not what answers at %s: port %d is held by pid %d (user nobody: python3 %s %d %s), which is not of "
            "the tree of" % (node.url, node.port, pid, script, node.port, log)) in words, run.output
    # the node's record does not call the squatter's answers a server that passed its checks
    assert not os.path.exists(os.path.join(node.state_dir, "server.json")) or node.record()["status"] != "ok"


def test_a_mode_name_that_is_not_plain_is_refused_before_the_server_is_touched(node, fleet, tmp_path):
    pid = node.serving()
    name = "serving\nExecStartPre=/bin/true"
    run = fleet.playbook("restart_serving.yml", "-e", vars_file(tmp_path / "mode.json", {
        "sglang_launch_mode": name, "sglang_launch_modes": {name: {"server_args": {}, "environment": {}}}}))
    assert run.rc != 0
    assert "each a plain name (^[a-z][a-z0-9_]*$), (got \"serving\\nExecStartPre=/bin/true\")" in run.words(), run.output
    assert node.main_pids() == [pid] and node.healthy()

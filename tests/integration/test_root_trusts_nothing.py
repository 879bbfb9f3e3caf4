# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A local user who tries to make root act for them, against real playbook runs on a simulated node.

The user is nobody (setpriv inside the node's sandbox). Their tools:

- the su masquerade: nobody execs the setuid ``/bin/su`` with a server's command line
  (``python -msglang.launch_server -- root --port P``); su waits at its password prompt for ever, ``ps`` and the
  owner of /proc/PID say root, the sglang preset matches it, and a child that nobody forked before the exec holds
  port P in its tree and logs every request it gets with its Authorization header;
- a cgroup that names a supervisor: the masquerade moved into a cgroup called ``docker-<ID>.scope`` after another
  tenant's container, below a user's own systemd manager or beside the container's own cgroup;
- a fake SGLang Model Gateway (a process titled ``sglang::router`` with a child titled ``sglang::server``);
- a listener on another loopback address of the server's port.

What root must do: send no API key to nobody's listener, open no FIFO that nobody names as the server's --config,
stop no other tenant's container, let nobody's fake gateway hold up no stop, and let nobody's listener on another
loopback address (127.0.0.2, ::1) fail no restart.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import shutil
import socket
import struct
import subprocess
import threading
import time

import pytest

from gpusim import docker, net
from gpusim.fleet import http_get

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")]

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]

MASQUERADE = r'''
"""nobody's su masquerade: a listener on 127.0.0.1:PORT held by a child forked before the exec of the setuid su,
whose argv reads like an SGLang server's; the child logs every request with its Authorization header and answers
like an idle server."""
import http.server, json, os, socket, sys
port, log_path, extra = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port))
listener.listen(16)
child = os.fork()
if child == 0:
    log = open(log_path, "a", buffering=1)

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            log.write("%s %s %s\n" % (self.command, self.path, self.headers.get("Authorization")))
            if self.path == "/metrics":
                body, kind = b"sglang:num_running_reqs 0\nsglang:num_queue_reqs 0\n", "text/plain"
            elif self.path == "/v1/loads":
                body = json.dumps({"loads": [{"dp_rank": 0, "num_running_reqs": 0, "num_waiting_reqs": 0}]}).encode()
                kind = "application/json"
            else:
                body, kind = b"{}", "application/json"
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler, bind_and_activate=False)
    server.socket.close()
    server.socket = listener
    server.serve_forever()
    os._exit(0)
sys.stdout.write("%d %d\n" % (os.getpid(), child))
sys.stdout.flush()
os.execv("/bin/su", ["python", "-msglang.launch_server", "--", "root", "--port", str(port)] + extra)
'''

LISTENER = r'''
"""nobody's listener on HOST:PORT that logs every request with its Authorization header."""
import http.server, socket, sys
host, port, log_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
log = open(log_path, "a", buffering=1)


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        log.write("%s %s %s\n" % (self.command, self.path, self.headers.get("Authorization")))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_POST = do_GET


if ":" in host:
    http.server.ThreadingHTTPServer.address_family = socket.AF_INET6
server = http.server.ThreadingHTTPServer((host, port), Handler)
log.write("bound\n")
server.serve_forever()
'''


def vars_file(path, values: dict) -> str:
    fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(values, f)
    return "@" + str(path)


def wait_for(predicate, what, timeout=60):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def read(path) -> str:
    with open(path) as f:
        return f.read()


def listening_addresses(port: int, table: str = "tcp") -> list:
    """The local addresses of the sockets that listen on TCP PORT, from /proc/net/TABLE (tcp or tcp6; the node
    shares this host's network)."""
    found = []
    with open("/proc/net/" + table) as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            address, hex_port = fields[1].split(":")
            if fields[3] != "0A" or int(hex_port, 16) != port:
                continue
            # each 32-bit word of the address in host byte order
            raw = b"".join(struct.pack("=I", int(address[i:i + 8], 16)) for i in range(0, len(address), 8))
            found.append(socket.inet_ntop(socket.AF_INET6 if len(raw) == 16 else socket.AF_INET, raw))
    return sorted(found)


def inside(node, *argv) -> str:
    return node.sandbox.run(list(argv), capture_output=True, text=True).stdout


def alive(node, pid: int, start: str) -> bool:
    """Whether PID (in the node) is still the process that started at START (its /proc/PID/stat field 22)."""
    return stat_start(node, pid) == start


def stat_start(node, pid: int):
    stat = inside(node, "cat", "/proc/%d/stat" % pid)
    fields = stat.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 and fields[0] != "Z" else None


class NobodysProcess:
    """A process that nobody runs in the node, started through the sandbox; close() kills the PIDs it recorded
    (each only while it is still the process that was recorded), then waits for the nsenter that started it."""

    def __init__(self, node, argv, cwd, stdin=subprocess.DEVNULL):
        self.node = node
        self.proc = node.sandbox.popen(NOBODY + list(argv), cwd=cwd, stdin=stdin, stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL)
        self.pids = {}      # pid in the node -> start time

    def record(self, pid: int) -> int:
        wait_for(lambda: stat_start(self.node, pid) is not None, "process %d did not start" % pid, 10)
        self.pids[pid] = stat_start(self.node, pid)
        return pid

    def host_pid(self) -> int:
        """The PID, in this (the host's) namespace, of what nsenter started inside the node."""
        with open("/proc/%d/task/%d/children" % (self.proc.pid, self.proc.pid)) as f:
            return int(f.read().split()[0])

    def alive(self, pid: int) -> bool:
        return alive(self.node, pid, self.pids[pid])

    def close(self) -> None:
        for pid in self.pids:
            if self.alive(pid):
                self.node.sandbox.run(["kill", "-KILL", str(pid)])
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        finally:
            self.proc.stdout.close()


class Masquerade(NobodysProcess):
    """The su masquerade (MASQUERADE) on PORT, its command line extended by EXTRA; .pid is su's, .child the
    listener's, .log its request log (in nobody's directory HOME)."""

    def __init__(self, node, home, port, extra=()):
        script = os.path.join(home, "masquerade.py")
        with open(script, "w") as f:
            f.write(MASQUERADE)
        self.log = os.path.join(home, "requests.log")
        self.port = port
        # su reads its password from stdin: the pipe stays open until close()
        super().__init__(node, ["python3", script, str(port), self.log] + list(extra), home, stdin=subprocess.PIPE)
        try:
            self._started()
        except BaseException:
            self.close()
            raise

    def _started(self):
        node = self.node
        line = self.proc.stdout.readline().split()
        assert len(line) == 2, "the masquerade did not start"
        self.pid, self.child = self.record(int(line[0])), self.record(int(line[1]))
        # the start time recorded before the exec is su's too
        wait_for(lambda: inside(node, "cat", "/proc/%d/cmdline" % self.pid).startswith("python\0-msglang"),
                 "su did not start")
        self.command = inside(node, "cat", "/proc/%d/cmdline" % self.pid).rstrip("\0").replace("\0", " ")
        status = inside(node, "cat", "/proc/%d/status" % self.pid)
        # what ps shows: root's; what the kernel knows: nobody's, in a setuid program's image
        assert "\nUid:\t65534\t0\t0\t0\n" in status, status

    def received(self) -> str:
        return read(self.log) if os.path.exists(self.log) else ""


@pytest.fixture
def home():
    """A directory of nobody's."""
    path = os.path.realpath(os.path.join("/tmp", "gpuops-nobody-" + secrets.token_hex(6)))
    os.mkdir(path)
    os.chown(path, 65534, 65534)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def stop_vars(tmp_path, owners, **extra) -> str:
    values = dict(sglang_stop_drain_timeout=10, **extra)
    if owners is not None:
        values["sglang_stop_owners"] = owners
    return vars_file(tmp_path / "stop.json", values)


OWNERS = pytest.mark.parametrize("owners", [None, []], ids=["default-owners", "every-owner"])


def assert_left_alone_or_sent_nothing(run, masquerade, owners):
    """The play's word on the masquerade: with the default owners another user's server, not touched; with every
    owner, a server that runs as nobody and is sent nothing."""
    words = run.words()
    if owners is None:
        assert ("Not touched: pid %d (user nobody) %s" % (masquerade.pid, masquerade.command)) in words, run.output
    else:
        assert ("the SGLang server %d (user nobody, http://127.0.0.1:%d) is not drained and is sent nothing: it runs "
                "as nobody (its effective UID is 0: a setuid program's image), who is not trusted with the API key"
                % (masquerade.pid, masquerade.port)) in words, run.output


# -- no key to a masquerade --

@OWNERS
def test_the_stop_s_api_key_never_reaches_a_listener_in_the_tree_of_nobody_s_su_masquerade(
        node, fleet, tmp_path, home, owners):
    api_key = "sk-" + secrets.token_hex(12)
    masquerade = Masquerade(node, home, net.free_port())
    try:
        run = fleet.playbook("stop_sglang.yml", "-e", stop_vars(tmp_path, owners, sglang_stop_api_key=api_key),
                             timeout=240)
        received = masquerade.received()
    finally:
        masquerade.close()
    assert api_key not in received and "Authorization" not in received, received
    assert received == "", "nobody's listener was sent requests: %s" % received
    assert run.rc == 0, run.output
    assert_left_alone_or_sent_nothing(run, masquerade, owners)


@OWNERS
def test_the_key_of_a_root_only_config_file_that_a_masquerade_names_never_reaches_its_listener(
        node, fleet, tmp_path, home, owners):
    api_key = "sk-" + secrets.token_hex(12)
    config = tmp_path / "root-only.yaml"
    fd = os.open(str(config), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("model-path: /models/x\napi-key: %s\n" % api_key)
    assert os.stat(str(config)).st_uid == 0
    masquerade = Masquerade(node, home, net.free_port(), ["--config", str(config)])
    try:
        run = fleet.playbook("stop_sglang.yml", "-e", stop_vars(tmp_path, owners), timeout=240)
        received = masquerade.received()
    finally:
        masquerade.close()
    assert api_key not in received, received
    assert received == "", "nobody's listener was sent requests: %s" % received
    assert api_key not in run.output
    assert run.rc == 0, run.output
    assert_left_alone_or_sent_nothing(run, masquerade, owners)


# -- no FIFO opened --

class BlockedWriter(threading.Thread):
    """A writer blocked in open(O_WRONLY) of a FIFO, until some process opens it for reading."""

    def __init__(self, path):
        super().__init__(daemon=True)
        self.path = path
        self.opened = threading.Event()

    def run(self):
        fd = os.open(self.path, os.O_WRONLY)
        self.opened.set()
        try:
            os.write(fd, b"api-key: sk-from-the-fifo\n")
        except OSError as e:
            if e.errno != errno.EPIPE:
                raise
        finally:
            os.close(fd)

    def release(self):
        """Open the FIFO for reading, so that the open returns, and wait for the thread."""
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            self.join(10)
        finally:
            os.close(fd)


@OWNERS
def test_a_fifo_that_a_masquerade_names_as_its_config_file_is_never_opened(node, fleet, tmp_path, home, owners):
    fifo = os.path.join(home, "config.yaml")
    os.mkfifo(fifo, 0o644)
    os.chown(fifo, 65534, 65534)
    writer = BlockedWriter(fifo)
    writer.start()
    try:
        masquerade = Masquerade(node, home, net.free_port(), ["--config", fifo])
        try:
            assert not writer.opened.wait(0.2)
            run = fleet.playbook("stop_sglang.yml", "-e", stop_vars(tmp_path, owners), timeout=240)
            opened = writer.opened.is_set()
            received = masquerade.received()
        finally:
            masquerade.close()
    finally:
        writer.release()
    assert not opened, "root opened nobody's FIFO %s, which the masquerade names as its --config: %s" % (
        fifo, run.output[-3000:])
    assert received == "", "nobody's listener was sent requests: %s" % received
    assert run.rc == 0, run.output
    assert_left_alone_or_sent_nothing(run, masquerade, owners)


# -- a cgroup named after a container is no container --

@pytest.fixture
def engine(node, monkeypatch):
    """A real Docker daemon in the node (gpusim.docker), which the modules ask too."""
    if not docker.available():
        pytest.skip("make deps installs docker.io")
    with docker.Dockerd(node.sandbox) as e:
        for key, value in e.variables().items():
            monkeypatch.setenv(key, value)
        yield e


@pytest.fixture
def tenant(node, engine):
    """Another tenant's job in a container that comes back by itself (restart unless-stopped): not an SGLang
    server, so that no stop of SGLang has any business with it (root's SGLang server in a container is one that a
    stop of root's servers rightly stops through its engine, see test_containers). Its id and its inspect."""
    argv = ["run", "-d", "--name", "tenant-job", "--network", "host", "--restart", "unless-stopped"]
    for volume in engine.standin_volumes(node, devices=False):
        argv += ["-v", volume]
    cid = engine.cli(*(argv + [docker.IMAGE, "/bin/sleep", "infinity"])).stdout.strip()
    wait_for(lambda: engine.inspect(cid)["State"]["Status"] == "running", "the tenant's container did not start")
    yield cid, engine.inspect(cid)


CGROUP_V1 = "/sys/fs/cgroup/systemd"


class PlantedCgroup:
    """A cgroup of the name=systemd hierarchy at CGROUP_V1/gpuops-test-<random>/RELATIVE, made here (as root: a
    user's own systemd manager makes such cgroups in the subtree delegated to it), where move() puts a process.
    close() removes the directories, deepest first, once the processes moved there have ended (nothing is moved
    back: the test kills them)."""

    def __init__(self, relative):
        self.path = os.path.join(CGROUP_V1, "gpuops-test-" + secrets.token_hex(6), relative)
        self.dirs = []
        current = CGROUP_V1
        for part in os.path.relpath(self.path, CGROUP_V1).split("/"):
            current = os.path.join(current, part)
            os.mkdir(current)
            self.dirs.append(current)

    @property
    def name(self) -> str:
        """The path as /proc/PID/cgroup shows it."""
        return self.path[len(CGROUP_V1):]

    def move(self, host_pid: int) -> None:
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write("%d\n" % host_pid)

    def close(self) -> None:
        wait_for(lambda: read(os.path.join(self.path, "cgroup.procs")) == "",
                 "processes are left in %s" % self.path, 10)
        for path in reversed(self.dirs):
            os.rmdir(path)


@pytest.mark.skipif(not os.access(os.path.join(CGROUP_V1, "cgroup.procs"), os.W_OK),
                    reason="needs the name=systemd cgroup v1 hierarchy, writable, at %s" % CGROUP_V1)
@OWNERS
@pytest.mark.parametrize("where", ["user@65534.service/app.slice", ""], ids=["below-a-user-manager", "beside-docker"])
def test_a_masquerade_in_a_cgroup_named_after_another_tenant_s_container_never_gets_that_container_stopped(
        node, fleet, tmp_path, home, engine, tenant, owners, where):
    cid, before = tenant
    scope = "docker-%s.scope" % cid
    relative = os.path.join("user.slice/user-65534.slice", where, scope) if where else scope
    planted = PlantedCgroup(relative)
    try:
        masquerade = Masquerade(node, home, net.free_port())
        try:
            planted.move(masquerade.host_pid())
            shown = inside(node, "cat", "/proc/%d/cgroup" % masquerade.pid)
            assert ":name=systemd:%s\n" % planted.name in shown, shown
            # the tenant's own process is in the engine's cgroup of the container (cgroupfs driver: /docker/ID)
            assert planted.name not in inside(node, "cat", "/proc/%d/cgroup" % before["State"]["Pid"])

            run = fleet.playbook("stop_sglang.yml", "-e", stop_vars(tmp_path, owners), timeout=240)
            gone = not masquerade.alive(masquerade.pid)
        finally:
            masquerade.close()
    finally:
        planted.close()
    after = engine.inspect(cid)
    assert after["State"]["Status"] == "running", "the tenant's container was stopped: %s" % run.output[-3000:]
    assert (after["State"]["Pid"], after["State"]["StartedAt"], after["RestartCount"]) == (
        before["State"]["Pid"], before["State"]["StartedAt"], before["RestartCount"]), run.output
    assert "docker stop" not in run.output and "Stopped through its supervisor" not in run.output, run.output
    assert run.rc == 0, run.output
    words = run.words()
    if owners is None:
        # another user's process: left alone
        assert gone is False, "nobody's masquerade was stopped: %s" % run.output[-3000:]
        if not where:
            assert "Not touched: pid %d (user nobody)" % masquerade.pid in words, run.output
    elif not where:
        # every user's servers are stopped, the masquerade among them: the container its cgroup names is asked, and
        # its own answer (State.Pid's cgroup) does not hold the masquerade; gpu_reap leaves a process in a container
        # cgroup alone, so it is said not to be stopped, and it is not
        assert ("the SGLang server %d is not stopped: its cgroup names docker container %s, which does not hold it "
                "(its cgroup %s is not the cgroup of the container %s, whose main process %d is in /docker/%s): not "
                "stopped, and never through that container"
                % (masquerade.pid, cid[:12], planted.name, cid[:12], before["State"]["Pid"], cid)) in words, run.output
        assert gone is False


# -- a fake gateway holds up no stop --

def test_nobody_s_fake_gateway_with_a_co_launched_server_neither_blocks_the_stop_nor_is_touched(
        node, fleet, tmp_path, home):
    pid = node.serving()
    # a "launcher" titled sglang::router, and its child, forked before the exec, titled sglang::server
    fake = NobodysProcess(node, ["bash", "-c", "(exec -a sglang::server sleep 600) & echo $$ $!; "
                                               "exec -a sglang::router sleep 600"], home)
    try:
        launcher, child = (fake.record(int(p)) for p in fake.proc.stdout.readline().split())
        wait_for(lambda: inside(node, "cat", "/proc/%d/cmdline" % launcher).startswith("sglang::router\0")
                 and inside(node, "cat", "/proc/%d/cmdline" % child).startswith("sglang::server\0"),
                 "the fake gateway did not start")

        run = fleet.playbook("stop_sglang.yml", "-e", stop_vars(tmp_path, None), timeout=240)
        left = [fake.alive(launcher), fake.alive(child)]
    finally:
        fake.close()
    assert run.rc == 0, run.output
    assert pid not in node.main_pids() and not node.healthy(), run.output
    assert left == [True, True], "nobody's fake gateway was signalled: %s" % run.output[-3000:]
    assert "not stopping servers that the SGLang Model Gateway co-launched" not in run.words()
    assert ("Left running: the SGLang Model Gateway, pid %d (user nobody) sglang::router 600" % launcher
            in run.words()), run.output


# -- a listener on another address of the port fails no launch --

@pytest.mark.parametrize("address", ["127.0.0.2", "::1"])
def test_nobody_s_listener_on_another_loopback_address_of_the_server_s_port_fails_no_restart_and_gets_no_request(
        node, fleet, tmp_path, home, address):
    node.serving()
    # the server binds SGLang's default host, 127.0.0.1 (the inventory sets none), so ADDRESS at its port is free
    assert "host" not in node.host_vars()["sglang_launch_server_args"]
    assert listening_addresses(node.port) == ["127.0.0.1"]
    api_key = "sk-" + secrets.token_hex(12)
    script = os.path.join(home, "listen.py")
    with open(script, "w") as f:
        f.write(LISTENER)
    log = os.path.join(home, "requests.log")
    squatter = NobodysProcess(node, ["python3", script, address, str(node.port), log], home)
    try:
        wait_for(lambda: os.path.exists(log) and read(log) == "bound\n", "nobody's listener did not bind")
        holder = [p["pid"] for p in node.sandbox.procs() if p["cmdline"][:2] == ["python3", script]]
        squatter.record(holder[0])

        run = fleet.playbook("restart_serving.yml", "-e", vars_file(tmp_path / "vars.json", {
            "sglang_launch_server_args": {"tp_size": 2, "enable_metrics": True, "api_key": api_key}}), timeout=240)
        received = read(log)
        still = squatter.alive(holder[0])
        addresses = listening_addresses(node.port) + listening_addresses(node.port, "tcp6")
    finally:
        squatter.close()
    assert run.rc == 0, run.output
    record = node.record()
    assert record["status"] == "ok" and node.main_pids() == [record["pid"]], record
    assert http_get(node.url + "/health", api_key=api_key)[0] == 200
    # the new server on 127.0.0.1, beside nobody's listener
    assert sorted(addresses) == sorted(["127.0.0.1", address]), addresses
    assert still, "nobody's listener on %s port %d was stopped: %s" % (address, node.port, run.output[-3000:])
    assert received == "bound\n", "nobody's listener on %s was sent requests: %s" % (address, received)

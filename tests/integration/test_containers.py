# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A team's SGLang in a container with a restart policy, and a server that the collection starts in a container,
each under Docker (Debian's docker.io, a daemon that the test starts inside the node's sandbox, see gpusim.docker)
and under Podman (Debian's, with storage and configuration of the test's own, see gpusim.podman)."""

from __future__ import annotations

import json
import os
import re
import secrets
import struct
import subprocess
import time

import pytest

from gpusim import docker, podman
from gpusim.docker import IMAGE
from gpusim.fleet import Request
from gpusim.sandbox import VENV_PYTHON
from gpusim.syslog import SyslogReceiver

pytestmark = pytest.mark.slow
ENGINES = {"docker": docker.Dockerd, "podman": podman.Podman}


@pytest.fixture(params=[
    pytest.param("docker", marks=pytest.mark.skipif(not docker.available(), reason="make deps installs docker.io")),
    pytest.param("podman", marks=pytest.mark.skipif(not podman.available(), reason="make podman-deps installs it")),
])
def engine(request, node, monkeypatch):
    with ENGINES[request.param](node.sandbox) as e:
        # the modules run in the node and ask the engine that this test started
        for key, value in e.variables().items():
            monkeypatch.setenv(key, value)
        yield e


def vars_file(path, values: dict) -> str:
    fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(values, f)
    return "@" + str(path)


def secret_launch(node, engine, tmp_path) -> tuple:
    """(the -e argument, (token, API key, secret argument)) of a launch of NODE's stand-in in a container of ENGINE with
    a token in its environment, an API key and an argument made secret by sglang_launch_secret_args."""
    token, api_key = "hf_" + secrets.token_hex(12), "sk-" + secrets.token_hex(12)
    listed = "model-" + secrets.token_hex(8)
    extra = vars_file(tmp_path / "container.json", dict(
        engine.launch_vars(node, {"HF_TOKEN": token}),
        sglang_launch_server_args={"tp_size": 2, "enable_metrics": True, "api_key": api_key,
                                   "served_model_name": listed},
        sglang_launch_secret_args=["served_model_name"]))
    return extra, (token, api_key, listed)


def wait_healthy(node, engine, name, timeout=90):
    deadline = time.monotonic() + timeout
    while not node.healthy():
        assert time.monotonic() < deadline, engine.cli("logs", name, check=False).stderr[-3000:]
        time.sleep(0.2)


# What the stop says keeps a stopped container from starting again (_supervisor.disable_hint), and the command of it
# that works on this engine: Debian 12's Podman 4.3 has no `podman update --restart` (5.1 added it; 4.3 answers
# rc 125, "unknown flag: --restart").
DISABLE = {"docker": ("docker update --restart=no team-sglang", ["update", "--restart=no", "team-sglang"]),
           "podman": ("podman update --restart=no team-sglang with Podman 5.1 and later, "
                      "podman rm team-sglang before it", ["rm", "team-sglang"])}


def test_a_team_container_is_drained_then_stopped_through_its_engine_and_stays_stopped(node, fleet, engine):
    for pid in node.main_pids():
        node.sandbox.run(["kill", "-KILL", str(pid)])
    cid = engine.run_standin(node, "team-sglang", ["--tp-size", "2", "--enable-metrics"], restart="unless-stopped")
    wait_healthy(node, engine, "team-sglang")
    before = engine.inspect(cid)
    request = Request(node.url, max_new_tokens=2400)  # about 12 s of decoding: still running when the drain begins
    request.start()
    time.sleep(0.5)

    run = fleet.playbook("stop_sglang.yml", "-v")

    request.join(120)
    assert run.rc == 0, run.output
    assert request.result[0] == 200, request.result
    # the drain read the request in flight before it read none
    assert int(re.search(r'"drains": \[\{[^]]*"readings": (\d+)', run.output).group(1)) > 1, run.output
    after = engine.inspect(cid)
    assert after["State"]["Status"] == "exited" and after["RestartCount"] == before["RestartCount"]
    # an explicit stop: the server drained and exited on its own, and the engine does not start it again
    assert after["State"]["ExitCode"] == 0, after["State"]
    time.sleep(3)
    later = engine.inspect(cid)
    assert later["State"]["Status"] == "exited" and later["RestartCount"] == before["RestartCount"]
    assert not node.healthy() and node.used_mib() == [0, 0, 0, 0]
    text = run.words()
    assert ("Stopped through its supervisor: the SGLang server %d, with %s stop --time 5 team-sglang in"
            % (before["State"]["Pid"], engine.name)) in text, run.output
    assert "it exited on its own" in text
    assert ("the container team-sglang of the SGLang server") in text and "has restart policy unless-stopped" in text
    hint, command = DISABLE[engine.name]
    assert hint in text, run.output
    engine.cli(*command)
    gone = engine.cli("inspect", "--type", "container", "team-sglang", check=False)
    assert gone.returncode != 0 or json.loads(gone.stdout)[0]["HostConfig"]["RestartPolicy"]["Name"] == "no"
    assert fleet.playbook("verify_gpus.yml").rc == 0


# -- a server that the collection starts in a container --

def test_an_extraction_server_launched_in_a_container_passes_every_check_and_shows_no_secret(
        node, fleet, engine, tmp_path):
    node.serving()
    extra, (token, api_key, listed) = secret_launch(node, engine, tmp_path)

    run = fleet.playbook("restart_extraction.yml", "-e", extra)

    assert run.rc == 0, run.output[-5000:]
    record = node.record()
    assert record["supervisor"] == engine.name and record["container"] == "gpuops-sglang-" + record["marker"]
    info = engine.inspect(record["container"])
    assert info["State"]["Pid"] == record["pid"] and info["HostConfig"]["RestartPolicy"]["Name"] == "no"
    assert info["Config"]["User"] == "0:0"
    # --ipc=host: the node's IPC namespace (Podman 4.3's inspect says IpcMode "shareable" all the same)
    namespaces = node.sandbox.run(["readlink", "/proc/1/ns/ipc", "/proc/%d/ns/ipc" % record["pid"]],
                                  capture_output=True, text=True, check=True).stdout.split()
    assert namespaces[0] == namespaces[1], namespaces
    # the post-checks ran against the container's server, in the call that started it: the probe's own dump is there
    # (its last check, GPU occupancy, passed with the call), and the call recorded the server it checked
    assert "TASK [gpuops.host.sglang_launch : Converge SGLang on this host to mode extraction]" in run.output
    assert [name for name in os.listdir(record["dump_dir"]) if name.startswith("hs_gpuops-probe-")]
    assert min(node.used_mib()[:2]) > 0
    # no secret in what the engine shows of the container, nor in any command line of the node
    shown = engine.cli("inspect", record["container"]).stdout
    cmdlines = "\n".join(" ".join(p["cmdline"]) for p in node.sandbox.procs())
    for needle in (token, api_key, listed):
        assert needle not in shown, needle
        assert needle not in cmdlines, needle
        assert needle not in run.output, needle
    again = fleet.playbook("restart_extraction.yml", "-e", extra)
    assert again.rc == 0, again.output[-5000:]
    assert node.record()["pid"] == record["pid"] and engine.inspect(record["container"])["State"]["Status"] == "running", again.summary()
    assert "unchanged" in again.summary()

    stop = fleet.playbook("stop_sglang.yml", "-e", extra)
    assert stop.rc == 0, stop.output[-5000:]
    assert ("with %s stop --time 5 %s" % (engine.name, record["container"])) in stop.words(), stop.output[-3000:]
    assert engine.inspect(record["container"])["State"]["Status"] == "exited"
    assert node.used_mib() == [0, 0, 0, 0]
    assert fleet.playbook("verify_gpus.yml").rc == 0

    # the next launch removes the collection's exited containers, in the call that starts the new server and before
    # its stop, while an old server would still serve: no remote task of its own, none in the downtime
    relaunch = fleet.playbook("restart_extraction.yml", "-v", "-e", extra)
    assert relaunch.rc == 0, relaunch.output[-5000:]
    assert record["container"] not in engine.cli("ps", "--all", "--format", "{{.Names}}").stdout.split()
    steps = re.findall(r'"action": "(\w+)"', relaunch.output)
    assert "old_containers" in steps and steps.index("old_containers") < steps.index("stop"), steps
    assert "%s container %s" % (engine.name, info["Id"][:12]) in relaunch.output or info["Id"] in relaunch.output


def test_a_rollback_in_a_container_starts_the_previous_configuration_again_and_checks_it(
        node, fleet, engine, tmp_path):
    node.serving()
    settings = engine.launch_vars(node)
    good = fleet.playbook("restart_extraction.yml", "-e", vars_file(tmp_path / "good.json", settings))
    assert good.rc == 0, good.output[-5000:]
    previous = node.record()

    # a new configuration that comes up on the wrong GPUs, with the rollback asked for
    failing = dict(settings, sglang_launch_gpus=[2, 3], sglang_launch_rollback=True,
                   sglang_launch_environment=dict(settings["sglang_launch_environment"], GPUOPS_TEST="new"))
    run = fleet.playbook("restart_extraction.yml", "-e", vars_file(tmp_path / "failing.json", failing))

    assert run.rc != 0
    assert ("The previous configuration (%s) was relaunched and passed its checks" % previous["marker"]
            in run.words()), run.output[-5000:]
    record = node.record()
    assert record["marker"] == previous["marker"] and record["container"] == previous["container"]
    info = engine.inspect(record["container"])
    assert info["State"]["Status"] == "running" and info["State"]["Pid"] == record["pid"] != previous["pid"]
    # into a fresh run directory, with the probe's own dump there: the rollback's checks ran in the container too
    assert record["dump_dir"].startswith(previous["dump_dir"] + "-rollback-")
    assert [name for name in os.listdir(record["dump_dir"]) if name.startswith("hs_gpuops-probe-")]
    assert node.environ(record["pid"])["SGLANG_HS_DUMP_DIR"] == record["dump_dir"]
    assert min(node.used_mib()[:2]) > 0 and max(node.used_mib()[2:]) == 0

    stop = fleet.playbook("stop_sglang.yml", "-e", vars_file(tmp_path / "good.json", settings))
    assert stop.rc == 0, stop.output[-5000:]
    assert node.used_mib() == [0, 0, 0, 0]

    # the removal: the collection's containers (the rollback's, and the failed launch's), its secret files, its record
    ours = ("ps", "--all", "--quiet", "--filter", "label=gpuops.host.role=sglang_launch")
    assert len(engine.cli(*ours).stdout.split()) == 2, engine.cli("ps", "--all").stdout
    removal = fleet.playbook("stop_sglang.yml", "-e", vars_file(tmp_path / "remove.json",
                                                                dict(settings, sglang_stop_remove=True)))
    assert removal.rc == 0, removal.output[-5000:]
    assert engine.cli(*ours).stdout.split() == [], engine.cli("ps", "--all").stdout
    assert sorted(os.listdir(node.state_dir)) == ["runs.jsonl"]
    assert os.listdir(record["dump_dir"]) and os.listdir(previous["dump_dir"])


def test_a_colon_in_a_path_that_a_container_server_mounts_is_refused_before_the_server_is_touched(node, fleet, tmp_path):
    """--volume SRC:DST splits at every colon: /models/kimi:v2 would mount /models/kimi at v2."""
    pid = node.serving()
    model = str(tmp_path / "kimi:v2")

    run = fleet.playbook("restart_serving.yml", "-e", json.dumps({
        "sglang_launch_supervisor": "docker", "sglang_launch_image": "localhost/sglang:test",
        "sglang_launch_model_path": model}))

    assert run.rc != 0
    assert ("%s: a container engine's --volume splits a path at its colons, so it would mount something else than this "
            "path; rename it or choose another. Refusing before the running server is touched." % model) in run.words(), \
        run.output
    assert node.main_pids() == [pid] and node.healthy()


def test_a_model_path_that_another_user_can_redirect_is_refused_before_the_server_is_touched(node, fleet, tmp_path):
    """The engine resolves a mount's source when it runs: a directory on the way that another user owns lets that user
    swap a link there for any host directory, which the container would then see, its parents' permissions aside."""
    pid = node.serving()
    os.chmod(str(tmp_path), 0o755)
    theirs = tmp_path / "team-b"
    theirs.mkdir()
    os.chown(str(theirs), 4300, 4300)
    os.symlink(node.model, str(theirs / "kimi"))

    run = fleet.playbook("restart_serving.yml", "-e", json.dumps({
        "sglang_launch_supervisor": "docker", "sglang_launch_image": "localhost/sglang:test",
        "sglang_launch_model_path": str(theirs / "kimi")}))

    assert run.rc != 0
    assert ("%s: a container server mounts it, but %s (owned by UID 4300) can be changed by a user other than root and "
            "the server's user, who could swap it for any host directory between this check and the engine's run"
            % (theirs / "kimi", theirs)) in run.words(), run.output
    assert "The running server was not touched." in run.words(), run.output
    assert node.main_pids() == [pid] and node.healthy()


@pytest.mark.skipif(not docker.available(), reason="make deps installs docker.io")
def test_the_engine_mounts_the_model_directory_as_resolved_on_the_node(node, fleet, tmp_path, monkeypatch):
    """A model path through a link that only root can change: the engine gets the directory it resolves to, mounted at
    the configured path."""
    node.serving()
    os.chmod(str(tmp_path), 0o755)
    os.symlink(node.model, str(tmp_path / "current"))
    with docker.Dockerd(node.sandbox) as engine:
        for key, value in engine.variables().items():
            monkeypatch.setenv(key, value)
        run = fleet.playbook("restart_serving.yml", "-e", vars_file(tmp_path / "vars.json", dict(
            engine.launch_vars(node), sglang_launch_model_path=str(tmp_path / "current"))))
        assert run.rc == 0, run.output[-5000:]
        record = node.record()
        mounts = dict((m["Destination"], m["Source"]) for m in engine.inspect(record["container"])["Mounts"])
        fleet.playbook("stop_sglang.yml")
    assert mounts[str(tmp_path / "current")] == os.path.realpath(node.model), mounts


# -- the journal of a node where journald runs --

# A stand-in for systemd-journald's sockets (systemd 252, units/systemd-journald{,-dev-log}.socket): the native protocol
# datagram socket /run/systemd/journal/socket, which sd_journal_send(3) writes to, the syslog datagram socket
# /run/systemd/journal/dev-log, and the stream socket /run/systemd/journal/stdout of sd_journal_stream_fd(3). It keeps
# every datagram (with what a memfd passed in SCM_RIGHTS holds: sd_journal_sendv's way for an entry too large for one
# datagram, systemd's src/libsystemd/sd-journal/journal-send.c) and every chunk of a stream, each as a header line
# "SOURCE LENGTH" followed by the bytes and a newline.
JOURNAL_LISTENER = r'''
import array, os, socket, sys, threading
directory, out, ready = sys.argv[1:4]
lock = threading.Lock()
log = open(out, "ab", buffering=0)
def keep(source, data):
    with lock:
        log.write(b"%s %d\n" % (source.encode(), len(data)) + data + b"\n")
def memfd(fd):
    chunks = []
    os.lseek(fd, 0, os.SEEK_SET)
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            os.close(fd)
            return b"".join(chunks)
        chunks.append(chunk)
def datagrams(sock, source):
    size = array.array("i").itemsize
    while True:
        data, ancdata, flags, _ = sock.recvmsg(1 << 21, socket.CMSG_SPACE(16 * size))
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                for fd in array.array("i", payload[:len(payload) - len(payload) % size]):
                    data += memfd(fd)
        keep(source + ("-truncated" if flags & socket.MSG_TRUNC else ""), data)
def stream(conn):
    while True:
        chunk = conn.recv(1 << 16)
        if not chunk:
            return
        keep("stdout", chunk)
def streams(sock):
    while True:
        conn, _ = sock.accept()
        threading.Thread(target=stream, args=(conn,), daemon=True).start()
threads = []
for name, kind in (("socket", socket.SOCK_DGRAM), ("dev-log", socket.SOCK_DGRAM), ("stdout", socket.SOCK_STREAM)):
    sock = socket.socket(socket.AF_UNIX, kind)
    sock.bind(os.path.join(directory, name))
    os.chmod(os.path.join(directory, name), 0o666)
    if kind == socket.SOCK_STREAM:
        sock.listen(16)
        threads.append(threading.Thread(target=streams, args=(sock,), daemon=True))
    else:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        threads.append(threading.Thread(target=datagrams, args=(sock, name), daemon=True))
for thread in threads:
    thread.start()
with open(ready, "w") as f:
    f.write(str(os.getpid()))
for thread in threads:
    thread.join()
'''


class JournalListener:
    """The journal's sockets in sandbox SB: a tmpfs over the node's /run/systemd (in the sandbox's mount namespace
    only; it holds journal/ and nothing else, so /run/systemd/system, sd_booted's mark, stays absent as it is here),
    with JOURNAL_LISTENER bound in /run/systemd/journal, keeping what it receives in the file PATH (outside). Every
    process of the node's mount namespace that sends to the journal reaches it: a container engine started there and
    its conmon, not a container's own processes (mount namespaces of their own)."""

    RUN_SYSTEMD = "/run/systemd"
    DIRECTORY = "/run/systemd/journal"

    def __init__(self, sb, path):
        self.sb = sb
        self.path = str(path)
        self.popen = self.pid = None
        self.mounted = False

    def __enter__(self) -> "JournalListener":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self, timeout: float = 30) -> "JournalListener":
        assert os.path.isdir(self.RUN_SYSTEMD), "no %s to mount the journal's directory on" % self.RUN_SYSTEMD
        self.sb.run(["mount", "-t", "tmpfs", "-o", "mode=755,size=16m", "gpusim-journal", self.RUN_SYSTEMD],
                    check=True)
        self.mounted = True
        self.sb.run(["mkdir", "-m", "755", self.DIRECTORY], check=True)
        ready = self.path + ".ready"
        open(self.path, "ab").close()
        self.popen = self.sb.popen([VENV_PYTHON, "-c", JOURNAL_LISTENER, self.DIRECTORY, self.path, ready],
                                   stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while not os.path.exists(ready):
            assert self.popen.poll() is None and time.monotonic() < deadline, "the journal listener did not start"
            time.sleep(0.05)
        with open(ready) as f:
            self.pid = int(f.read())
        return self

    def records(self) -> list:
        """(source, bytes) of every datagram and stream chunk received so far, in order; source is socket, dev-log,
        stdout, or socket-truncated and dev-log-truncated for a datagram longer than the listener reads."""
        with open(self.path, "rb") as f:
            data = f.read()
        records, at = [], 0
        while at < len(data):
            end = data.index(b"\n", at)
            source, length = data[at:end].decode().split()
            records.append((source, data[end + 1:end + 1 + int(length)]))
            at = end + 1 + int(length) + 1
        return records

    def close(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            if self.sb.alive:
                self.sb.run(["kill", "-KILL", str(self.pid)])
            self.popen.kill()
            self.popen.wait(10)
        if self.mounted and self.sb.alive:
            self.sb.run(["umount", self.RUN_SYSTEMD], check=True)
        self.mounted = False


def journal_fields(datagram: bytes) -> dict:
    """FIELD -> [value, ...] (bytes) of a datagram of the journal's native protocol (systemd's
    docs/JOURNAL_NATIVE_PROTOCOL.md, journald-native.c): FIELD=VALUE and a newline, or, for a value that holds a
    newline, FIELD and a newline, the value's length as a little-endian 64-bit integer, the value and a newline."""
    fields, at = {}, 0
    while at < len(datagram):
        end = datagram.index(b"\n", at)
        line = datagram[at:end]
        if b"=" in line:
            name, value = line.split(b"=", 1)
            at = end + 1
        else:
            name, (length,) = line, struct.unpack_from("<Q", datagram, end + 1)
            value = datagram[end + 9:end + 9 + length]
            at = end + 9 + length + 1
        fields.setdefault(name.decode(), []).append(value)
    return fields


@pytest.mark.skipif(not podman.available(), reason="make podman-deps installs it")
@pytest.mark.parametrize("engine", ["podman"], indirect=True)
def test_no_secret_of_a_podman_launch_reaches_the_journal_that_a_journald_container_log_reaches(
        node, fleet, engine, tmp_path):
    """Podman's default log driver is journald wherever the journal runs: containers/common (0.50 with Podman 4.3,
    pkg/config) picks journald when PID 1's comm is "systemd" and a journal is found (here a PID 1 named systemd and a
    directory under /run/log/journal were enough for `podman info` to say journald; without them it says k8s-file).
    conmon then sends each line of the container's output to the journal's native socket with sd_journal_sendv
    (conmon 2.1.6 src/ctr_logging.c write_journald: MESSAGE, CONTAINER_ID_FULL, CONTAINER_NAME, PRIORITY 6 for
    stdout and 3 for stderr, lines over 8 KiB cut into CONTAINER_PARTIAL_MESSAGE=true pieces), and Podman itself
    sends a PODMAN_EVENT=history entry at the container's start: SGLang's server_args=... line, API key included,
    and the command-line check's parsed arguments would all reach it. In the sandbox PID 1 is gpusim's nsinit, so
    Podman's default is k8s-file and only an explicit --log-driver journald reaches the listener; Podman 4.3 takes
    it without systemd or journald running (conmon needs only the socket). Podman and conmon run in the node's mount
    namespace (gpusim.podman; checked below for the server's conmon), so they send to this listener.

    The listener proves it hears: a one-off container with --log-driver journald echoes a marker, which arrives as
    MESSAGE of a native datagram from conmon. Then a real playbook run launches an extraction server in a container,
    with an API key, a secret argument and a token, and stops it; nothing of them reaches the journal's sockets, nor
    /dev/log. With the role's --log-driver for Podman set to journald, or the check's container's, this fails with
    the key in a datagram."""
    node.serving()
    extra, needles = secret_launch(node, engine, tmp_path)
    marker = "gpuops-journal-" + secrets.token_hex(8)
    volumes = [option for volume in engine.standin_volumes(node, devices=False) for option in ("--volume", volume)]

    with JournalListener(node.sandbox, tmp_path / "journal") as journal, \
            SyslogReceiver(node.sandbox, tmp_path / "syslog") as syslog:
        echoed = engine.cli("run", "--rm", "--name", "gpuops-journal-proof", "--network", "none",
                            "--log-driver", "journald", *volumes, IMAGE, "/usr/bin/echo", marker, check=False)
        run = fleet.playbook("restart_extraction.yml", "-e", extra)
        record = node.record() if run.rc == 0 else None
        conmons = [p for p in node.sandbox.procs() if p["comm"] == "conmon"]
        namespaces = node.sandbox.run(["readlink", "/proc/1/ns/mnt"] + ["/proc/%d/ns/mnt" % p["pid"] for p in conmons],
                                      capture_output=True, text=True, check=True).stdout.split()
        stop = fleet.playbook("stop_sglang.yml", "-e", extra)
        received, logged = journal.records(), syslog.lines()

    assert echoed.returncode == 0 and echoed.stdout.strip() == marker, echoed.stderr
    assert run.rc == 0, run.output[-5000:]
    assert stop.rc == 0, stop.output[-5000:]
    # the listener hears a container whose log driver is journald: its marker, as conmon sends it
    proofs = [journal_fields(data) for source, data in received
              if source == "socket" and marker.encode() in data]
    assert proofs and proofs[0]["MESSAGE"] == [marker.encode() + b"\n"], received[:5]
    assert proofs[0]["CONTAINER_NAME"] == [b"gpuops-journal-proof"] and proofs[0]["PRIORITY"] == [b"6"], proofs[0]
    # the server's conmon (one for its container at least) runs in the node's mount namespace, the listener's
    assert [p for p in conmons if record["container"] in p["cmdline"]], conmons
    assert namespaces[1:] and set(namespaces[1:]) == {namespaces[0]}, namespaces
    # no datagram truncated, and no secret in any of them, nor in a line that conmon cut into several (8 KiB each,
    # CONTAINER_PARTIAL_MESSAGE=true): the messages of each container's stream joined again
    assert not [source for source, data in received if source.endswith("-truncated")]
    streams = {}
    for source, data in received:
        if source == "socket":
            fields = journal_fields(data)
            stream = (fields.get("CONTAINER_ID_FULL", [b""])[0], fields.get("PRIORITY", [b""])[0])
            streams.setdefault(stream, []).extend(fields.get("MESSAGE", []))
    joined = [b"".join(messages) for messages in streams.values()]
    for needle in needles:
        found = [data for source, data in received if needle.encode() in data] + [m for m in joined if needle.encode() in m]
        assert not found, (needle, [m[max(m.find(needle.encode()) - 300, 0):m.find(needle.encode()) + 40]
                                    for m in found][:2])
        assert needle not in "\n".join(logged), needle
    # where the server's output went instead: the log file in the engine's own storage
    assert record["supervisor"] == "podman"
    assert engine.inspect(record["container"])["HostConfig"]["LogConfig"]["Type"] == "k8s-file"

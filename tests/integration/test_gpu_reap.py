# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_reap run by real ansible against a simulated GPU node (own PID namespace), with real
SGLang stand-in servers and bystanders; every test checks /proc inside the node afterwards."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
import uuid

import pytest

from gpusim.fleet import collections_path
from gpusim.sandbox import Sandbox, VENV_PYTHON
from gpusim.standin import ContainerLaunch, Launch, make_model_dir
from gpusim.tenants import SCRIPT, Tenant

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANSIBLE = os.path.join(os.path.dirname(sys.executable), "ansible")

pytestmark = pytest.mark.slow


def _load_reap():
    path = os.path.join(REPO, "plugins", "module_utils", "_reap_options.py")
    spec = importlib.util.spec_from_file_location("gpuops_reap_options", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The patterns the roles use: one definition, in the module's utils.
SGLANG = list(_load_reap().SGLANG_PATTERNS)

# A process with no "sglang" in its title that holds a GPU open, as a compile worker does.
HOLDER = r"""
import os, sys, time, setproctitle
fd = os.open(sys.argv[1], os.O_RDWR)
setproctitle.setproctitle(sys.argv[2])
time.sleep(600)
"""

VIM = ["vim", "/etc/sglang/serve.yaml"]
TAIL = ["tail", "-f", "/var/log/sglang/server.log"]
GREP = ["grep", "sglang"]
UNRELATED = ["/usr/bin/python3", "-c", "import time; time.sleep(600)"]


@pytest.fixture(scope="module")
def collections():
    return collections_path()


@pytest.fixture
def sb(tmp_path):
    with Sandbox(str(tmp_path / "node"), gpus=4) as sandbox:
        # a private /var/log inside the node, for `tail -f /var/log/sglang/server.log`
        sandbox.run(["sh", "-c", "mount -t tmpfs tmpfs /var/log && mkdir /var/log/sglang && "
                                 "echo started > /var/log/sglang/server.log"], check=True)
        yield sandbox


@pytest.fixture
def model(tmp_path):
    return make_model_dir(str(tmp_path / "model"))


def command(p):
    """The command line of an sb.procs() entry as one string (a title's NUL padding dropped)."""
    args = list(p["cmdline"])
    while args and not args[-1]:
        args.pop()
    return " ".join(args)


def find(sb, argv, timeout=30):
    """PID inside the node of the live process whose command line is ARGV."""
    deadline = time.monotonic() + timeout
    while True:
        for p in sb.procs():
            if command(p) == " ".join(argv) and p["state"] != "Z":
                return p["pid"]
        assert time.monotonic() < deadline, "%s did not start" % argv
        time.sleep(0.05)


class Bystanders:
    """Processes that every run must leave alone: an unrelated python3, tail -f and grep on
    SGLang's files, vim on its config, the NVIDIA daemon decoys and the node's init."""

    def __init__(self, sb):
        self.sb = sb
        self.popen = []
        for argv in (UNRELATED, TAIL, GREP, VIM):
            self.popen.append(sb.popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL))
        self.pids = dict((" ".join(argv), find(sb, argv)) for argv in (UNRELATED, TAIL, GREP, VIM))
        self.pids.update(sb.decoys)
        self.pids["init"] = 1

    def assert_alive(self, procs=None):
        live = dict((p["pid"], p) for p in (procs or self.sb.procs()) if p["state"] != "Z")
        dead = sorted(name for name, pid in self.pids.items() if pid not in live)
        assert dead == [], "bystanders gone: %s" % dead

    def close(self):
        for proc in self.popen:
            proc.kill()
            proc.wait()


@pytest.fixture
def bystanders(sb):
    b = Bystanders(sb)
    yield b
    b.close()


class Reap:
    """Runs gpuops.host.gpu_reap through the real `ansible` CLI on host `node`, whose Python
    runs inside the simulated node."""

    def __init__(self, collections, sb, tmp_path, python=None):
        self.tmp_path = tmp_path
        self.inventory = tmp_path / "inventory.ini"
        self.inventory.write_text("node ansible_connection=local ansible_python_interpreter=%s\n"
                                  % (python or sb.python))
        self.env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections, ANSIBLE_NOCOLOR="1",
                        ANSIBLE_HOST_KEY_CHECKING="0", ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-local"),
                        ANSIBLE_REMOTE_TEMP=str(tmp_path / "ansible-remote"))
        self.runs = 0

    def __call__(self, args, check=False):
        """(failed, result) of one run."""
        self.runs += 1
        tree = self.tmp_path / ("tree-%d" % self.runs)
        argv = [ANSIBLE, "node", "-i", str(self.inventory), "-m", "gpuops.host.gpu_reap", "-a", json.dumps(args),
                "-t", str(tree), "-o"] + (["--check"] if check else [])
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode in (0, 2), done.stdout + done.stderr
        with open(str(tree / "node")) as f:
            result = json.load(f)
        return done.returncode == 2, result


@pytest.fixture
def reap(collections, sb, tmp_path):
    return Reap(collections, sb, tmp_path)


def tree_pids(srv):
    return sorted(p["pid"] for p in srv.tree() if p["state"] != "Z")


def sglang_left(procs):
    return [p for p in procs if p["state"] != "Z" and any(
        a.startswith("sglang::") or "sglang.launch_server" in a or "torch._inductor" in a for a in p["cmdline"])]


def wait_titled(sb, count, timeout=60):
    """Wait until COUNT processes titled sglang:: are alive; return them."""
    deadline = time.monotonic() + timeout
    while True:
        titled = [p for p in sb.procs() if p["cmdline"][:1] and p["cmdline"][0].startswith("sglang::")
                  and p["state"] != "Z"]
        if len(titled) >= count or time.monotonic() > deadline:
            return titled
        time.sleep(0.1)


def test_tp4_server_drains_on_sigterm_alone(sb, bystanders, reap, model):
    # as the roles call it: the wait for clean GPUs in the same call
    args = {"patterns": SGLANG, "term_timeout": 60, "verify": {"expected_count": 4, "timeout": 60}}
    with Launch(sb, model, args=["--tp-size", "4"]) as srv:
        srv.wait_ready()
        launcher = srv.find_pid()
        tree = tree_pids(srv)
        assert len(tree) >= 6   # launcher, 4 schedulers, detokenizer (and multiprocessing helpers)

        failed, result = reap(args, check=True)
        assert not failed and result["changed"]
        assert sorted(p["pid"] for p in result["would_stop"]) == tree
        assert tree_pids(srv) == tree, "check mode must signal nothing"
        assert "verify" not in result, "check mode must not wait for the GPUs"

        failed, result = reap(args)
        assert not failed and result["changed"], result
        signals = dict((s["pid"], s["signals"]) for s in result["stopped"])
        assert signals.pop(launcher) == ["SIGTERM"]
        assert set(signals) == set(tree) - {launcher}
        assert all(sent == [] for sent in signals.values()), "the server's own drain stops its children"
        assert result["remaining"] == []
        protected = dict((p["pid"], p["reason"]) for p in result["protected"])
        assert launcher not in protected
        # the module returned once every GPU read clean, after the whole tree was gone
        assert result["verify"]["clean"] is True and result["verify"]["count"] == 4, result["verify"]
        srv.wait_exit(30)

        procs = sb.procs()
        assert sglang_left(procs) == []
        bystanders.assert_alive(procs)

        failed, result = reap(args, check=True)
        assert not failed and not result["changed"] and result["would_stop"] == []
        failed, result = reap(args)
        assert not failed and not result["changed"] and result["stopped"] == []
        assert result["verify"]["clean"] is True and result["verify"]["polls"] == 1
        assert "Draining requests and shutting down" in srv.log()


def test_scheduler_ignoring_sigterm_gets_sigkill_after_term_timeout(sb, bystanders, reap, model):
    env = {"GPUSIM_SGLANG_FAULTS": "orphan,ignore_sigterm"}
    with Launch(sb, model, args=["--tp-size", "2"], env=env) as srv:
        srv.wait_ready()
        srv.signal("TERM")      # the launcher leaves at once, its children stay behind
        srv.wait_exit(30)
        orphans = wait_titled(sb, 3)
        assert all(p["ppid"] == 1 for p in orphans), orphans
        stubborn = [p["pid"] for p in orphans if command(p) == "sglang::scheduler_TP1"]
        assert len(stubborn) == 1

        failed, result = reap({"patterns": SGLANG, "term_timeout": 2, "kill_timeout": 10})
        assert not failed and result["changed"], result
        stopped = dict((s["pid"], s) for s in result["stopped"])
        assert stopped[stubborn[0]]["signals"] == ["SIGTERM", "SIGKILL"]
        assert stopped[stubborn[0]]["seconds"] >= 2
        for p in orphans:
            if p["pid"] != stubborn[0]:
                assert stopped[p["pid"]]["signals"] == ["SIGTERM"]
        procs = sb.procs()
        assert sglang_left(procs) == []
        bystanders.assert_alive(procs)


def test_orphans_are_found_by_their_launch_environment(sb, bystanders, reap, model):
    marker = uuid.uuid4().hex
    env = {"GPUSIM_SGLANG_FAULTS": "orphan", "SPT_NOENV": "1", "GPUOPS_RUN": marker}
    with Launch(sb, model, args=["--tp-size", "2"], env=env) as srv:
        srv.wait_ready()
        srv.signal("TERM")
        srv.wait_exit(30)
        orphans = wait_titled(sb, 3)
        assert sorted(command(p) for p in orphans) == [
            "sglang::detokenizer", "sglang::scheduler_TP0", "sglang::scheduler_TP1"]
        assert all(p["ppid"] == 1 for p in orphans)

        failed, result = reap({"environ": {"GPUOPS_RUN": "^%s$" % marker}, "term_timeout": 20})
        assert not failed and result["changed"], result
        stopped = dict((s["pid"], s) for s in result["stopped"])
        for p in orphans:
            assert stopped[p["pid"]]["matched_by"] == ["environ GPUOPS_RUN=~^%s$" % marker]
        procs = sb.procs()
        assert sglang_left(procs) == []
        bystanders.assert_alive(procs)


def test_defunct_children_are_reported_not_failed(sb, bystanders, reap, model):
    with Launch(sb, model, args=["--tp-size", "2"], env={"GPUSIM_SGLANG_FAULTS": "defunct"}) as srv:
        srv.wait_ready()
        launcher = srv.find_pid()
        deadline = time.monotonic() + 30
        while not [p for p in srv.tree() if p["state"] == "Z"]:
            assert time.monotonic() < deadline, "no defunct child appeared"
            time.sleep(0.1)
        zombie = [p["pid"] for p in srv.tree() if p["state"] == "Z"][0]

        failed, result = reap({"patterns": SGLANG, "term_timeout": 30})
        assert not failed, result["msg"]
        zombies = dict((z["pid"], z) for z in result["zombies"])
        # as first found, although the launcher exits during the run and the zombie passes to init
        assert zombies[zombie]["ppid"] == launcher, result["zombies"]
        assert "sglang.launch_server" in zombies[zombie]["parent_cmdline"], result["zombies"]
        assert zombie not in [s["pid"] for s in result["stopped"]]
        assert result["remaining"] == []
        procs = sb.procs()
        assert sglang_left(procs) == []
        bystanders.assert_alive(procs)


def test_device_holders_are_an_opt_in_for_the_named_gpus(sb, bystanders, reap, model):
    title = "python3 -m torch._inductor.compile_worker --kind=fork --workers=4"
    other = "python3 -m torch._inductor.compile_worker --kind=fork --workers=2"
    holder_proc = sb.popen([VENV_PYTHON, "-c", HOLDER, "/dev/nvidia3", title])
    other_proc = sb.popen([VENV_PYTHON, "-c", HOLDER, "/dev/nvidia2", other])
    try:
        holder, bystander = find(sb, [title]), find(sb, [other])
        with Launch(sb, model, args=["--tp-size", "2"]) as srv:
            srv.wait_ready()
            launcher = srv.find_pid()

            failed, result = reap({"patterns": SGLANG}, check=True)
            assert holder not in [p["pid"] for p in result["would_stop"]]
            assert {holder, bystander} <= set(f["pid"] for f in result["foreign"])

            failed, result = reap({"patterns": SGLANG, "device_holders": True, "devices": ["/dev/nvidia3"],
                                   "term_timeout": 20})
            assert not failed and result["changed"], result
            stopped = dict((s["pid"], s) for s in result["stopped"])
            assert stopped[holder]["matched_by"] == ["device /dev/nvidia3"]
            assert stopped[holder]["signals"] == ["SIGTERM"]
            assert stopped[launcher]["signals"] == ["SIGTERM"]
            # the holder is handled after the server: it is listed after the server's tree
            assert list(stopped).index(holder) == len(stopped) - 1
            protected = dict((p["pid"], p) for p in result["protected"])
            persistenced = sb.decoys["nvidia-persistenced"]
            assert protected[persistenced]["reason"] == "protected name nvidia-persistenced"
            assert protected[persistenced]["matched_by"] == ["device /dev/nvidia3"]
            assert [f["pid"] for f in result["foreign"]] == [bystander]
            procs = sb.procs()
            assert holder not in [p["pid"] for p in procs]
            assert bystander in [p["pid"] for p in procs if p["state"] != "Z"]
            assert [p["pid"] for p in sglang_left(procs)] == [bystander]
            bystanders.assert_alive(procs)
    finally:
        for proc in (holder_proc, other_proc):
            proc.kill()
            proc.wait()


def test_nvml_processes_stops_what_the_gpus_list(sb, bystanders, reap, model):
    with Launch(sb, model, args=["--tp-size", "2"], env={"GPUSIM_SGLANG_FAULTS": "orphan"}) as srv:
        srv.wait_ready()
        srv.signal("TERM")
        srv.wait_exit(30)
        orphans = wait_titled(sb, 3)
        schedulers = sorted(p["pid"] for p in orphans if p["cmdline"][0].startswith("sglang::scheduler"))

        detokenizer = [p["pid"] for p in orphans if command(p) == "sglang::detokenizer"]

        # the detokenizer holds no GPU: NVML does not list it, so alone it stays
        failed, result = reap({"nvml_processes": True, "sessions": False, "term_timeout": 20}, check=True)
        assert sorted(s["pid"] for s in result["would_stop"]) == schedulers
        assert all(s["matched_by"][0].startswith("nvml GPU-") for s in result["would_stop"])

        # by default the schedulers bring the orphans of their server's session, whose leader has exited
        failed, result = reap({"nvml_processes": True, "term_timeout": 20})
        assert not failed and result["changed"], result
        matched = dict((s["pid"], s["matched_by"]) for s in result["stopped"])
        assert set(schedulers + detokenizer) <= set(matched)
        assert all(matched[pid][0].startswith("nvml GPU-") for pid in schedulers)
        assert matched[detokenizer[0]][0].startswith("orphan of session ")
        assert result["nvml_unmapped"] == []
        procs = sb.procs()
        assert sglang_left(procs) == []
        bystanders.assert_alive(procs)


def test_the_module_never_stops_itself(sb, bystanders, reap):
    # both patterns match the module's own command line (.../ansible-remote/.../AnsiballZ_gpu_reap.py)
    failed, result = reap({"patterns": ["AnsiballZ_gpu_reap", "ansible"], "term_timeout": 5})
    assert not failed and not result["changed"], result
    assert result["stopped"] == []
    reasons = set(p["reason"] for p in result["protected"])
    assert "gpu_reap itself" in reasons and reasons <= {"gpu_reap itself", "ancestor of gpu_reap"}
    bystanders.assert_alive()


@pytest.mark.parametrize("args, message", [
    ({"patterns": [], "pids": []}, "no selector given"),
    ({"patterns": ["sglang("]}, "patterns: invalid regular expression 'sglang(': missing ), unterminated subpattern"),
    ({"patterns": SGLANG, "term_timeout": -1}, "term_timeout must be a finite number of seconds, 0 or more; got -1.0"),
    ({"patterns": SGLANG, "term_timeout": "nan"}, "term_timeout must be a finite number of seconds, 0 or more; got nan"),
    ({"patterns": SGLANG, "kill_timeout": "ten"}, "argument 'kill_timeout' is of type str"),
    ({"patterns": SGLANG, "term_signal": "SIGSOFT"}, "term_signal: unknown signal 'SIGSOFT'"),
    ({"patterns": SGLANG, "nvml_processes": True}, "Failed to import the required Python library (nvidia-ml-py)"),
])
def test_bad_input_fails_and_signals_nothing(sb, bystanders, collections, tmp_path, model, args, message):
    # the node's system Python has no nvidia-ml-py: the module itself needs only the standard library
    system_python = tmp_path / "system-python"
    with open(sb.python) as f:
        system_python.write_text(f.read().replace(VENV_PYTHON, "/usr/bin/python3"))
    system_python.chmod(0o755)
    reap = Reap(collections, sb, tmp_path, python=str(system_python))
    with Launch(sb, model, args=["--tp-size", "2"]) as srv:
        srv.wait_ready()
        before = sorted(p["pid"] for p in sb.procs())
        failed, result = reap(args)
        assert failed
        assert message in result["msg"]
        assert result.get("changed") is not True
        procs = sb.procs()
        assert sorted(p["pid"] for p in procs) == before
        assert all(p["state"] != "Z" for p in procs)
        bystanders.assert_alive(procs)


# -- a shared host: other tenants, containers, reused PIDs, bad selectors, no permission ---------

@pytest.fixture
def sb8(tmp_path):
    with Sandbox(str(tmp_path / "node8"), gpus=8) as sandbox:
        yield sandbox


@pytest.fixture
def reap8(collections, sb8, tmp_path):
    return Reap(collections, sb8, tmp_path)


def test_other_tenants_survive_the_default_stop_and_are_named(sb8, reap8, model, tmp_path):
    sb = sb8
    job = Tenant(sb, "train.py", ["--epochs", "3"], devices=["/dev/nvidia5", "/dev/nvidiactl"],
                 gpu=5, mib=20480)
    with Launch(sb, model, args=["--tp-size", "2"]) as srv, \
            ContainerLaunch(sb, model, args=["--tp-size", "2", "--base-gpu-id", "2"]) as boxed:
        srv.wait_ready()
        boxed.wait_ready()
        launcher, boxed_launcher = srv.find_pid(), boxed.find_pid()
        boxed_tree = tree_pids(boxed)
        args = {"presets": ["sglang"], "term_timeout": 60}

        failed, result = reap8(args, check=True)
        assert sorted(p["pid"] for p in result["would_stop"]) == tree_pids(srv)

        # a request in flight keeps the server draining; meanwhile a monitor opens /dev/nvidiactl
        request = threading.Thread(target=srv.post, args=("/generate", {
            "text": "Explain tensor parallelism.", "sampling_params": {"max_new_tokens": 1500}}, 120))
        request.start()
        monitor = {}

        def start_monitor():
            deadline = time.monotonic() + 60
            while "Draining requests and shutting down" not in srv.log() and time.monotonic() < deadline:
                time.sleep(0.05)
            monitor["t"] = Tenant(sb, "gpu_monitor.py", ["--interval", "1"], devices=["/dev/nvidiactl"])
        starter = threading.Thread(target=start_monitor)
        starter.start()
        failed, result = reap8(args)
        starter.join(90)
        request.join(120)
        assert not failed and result["changed"], result
        assert launcher in [s["pid"] for s in result["stopped"]]
        stopped = set(s["pid"] for s in result["stopped"])
        assert not stopped & set(boxed_tree) and job.pid not in stopped

        # the container's server: seen, not touched, and why
        elsewhere = dict((p["pid"], p["reason"]) for p in result["other_namespaces"])
        assert boxed_launcher in elsewhere and elsewhere[boxed_launcher].startswith("in another PID namespace (pid:[")
        # the training job and the monitor: named with user, command line and GPU
        foreign = dict((f["pid"], f) for f in result["foreign"])
        assert foreign[job.pid]["user"] == "root" and foreign[job.pid]["cmdline"].startswith(job.command)
        assert foreign[job.pid]["gpus"] == [{"device": "/dev/nvidia5", "index": 5, "uuid": sb.node.gpu_uuids[5],
                                             "used_mib": 20480}]
        assert foreign[monitor["t"].pid]["devices"] == ["/dev/nvidiactl"]

        procs = sb.procs()
        assert job.alive(procs) and job.signals() == []
        assert monitor["t"].alive(procs) and monitor["t"].signals() == []
        assert set(boxed_tree) <= set(p["pid"] for p in procs if p["state"] != "Z")
        assert boxed.get("/health")[0] == 200
        assert srv.tree(procs) == []

        # the stopped server's GPUs read clean; the wait over every GPU names what the others hold
        failed, result = reap8(dict(args, verify={"gpus": ["0", "1"], "expected_count": 8, "timeout": 5}))
        assert not failed and not result["changed"] and result["verify"]["clean"] is True, result
        failed, result = reap8(dict(args, verify={"expected_count": 8, "timeout": 0.5}))
        assert failed and not result["changed"]
        assert result["verify"]["dirty"] == [sb.node.gpu_uuids[i] for i in (2, 3, 5)], result["verify"]
        assert result["msg"].startswith("3 of 8 checked GPUs not clean after "), result["msg"]
        assert "GPU 5 %s: 20480 MiB used by pid %d (user root: %s" % (
            sb.node.gpu_uuids[5], job.pid, job.command) in result["msg"], result["msg"]
        assert job.alive() and boxed.get("/health")[0] == 200
    job.close()
    monitor["t"].close()


def test_the_opt_in_stops_the_holders_of_the_named_gpus_sigterm_first(sb8, reap8, tmp_path):
    sb = sb8
    job = Tenant(sb, "train.py", devices=["/dev/nvidia5"], gpu=5, mib=20480, linger=4)
    neighbour = Tenant(sb, "finetune.py", devices=["/dev/nvidia4"], gpu=4, mib=1024)
    monitor = Tenant(sb, "gpu_monitor.py", devices=["/dev/nvidiactl"])
    outcome = {}
    run = threading.Thread(target=lambda: outcome.update(
        r=reap8({"device_holders": True, "devices": ["/dev/nvidia5"], "term_timeout": 30})))
    run.start()
    # while the job saves its checkpoint, another process opens GPU 5
    deadline = time.monotonic() + 60
    while job.signals() != ["SIGTERM"]:
        assert time.monotonic() < deadline, "the job got no SIGTERM"
        time.sleep(0.05)
    late = Tenant(sb, "late.py", devices=["/dev/nvidia5"])
    run.join(120)
    failed, result = outcome["r"]
    assert not failed and result["changed"], result
    signals = dict((s["pid"], s["signals"]) for s in result["stopped"])
    assert signals == {job.pid: ["SIGTERM"], late.pid: ["SIGTERM"]}
    procs = sb.procs()
    assert job.signals() == ["SIGTERM"] and not job.alive(procs)
    assert late.signals() == ["SIGTERM"] and not late.alive(procs), "the late holder got SIGKILL without SIGTERM"
    assert neighbour.alive(procs) and neighbour.signals() == []
    assert monitor.alive(procs) and monitor.signals() == []
    protected = dict((p["pid"], p["reason"]) for p in result["protected"])
    assert protected == {sb.decoys["nvidia-persistenced"]: "protected name nvidia-persistenced"}
    neighbour.close()
    monitor.close()


# A server whose SIGTERM handler makes way for a newcomer with its child's PID: it kills and
# reaps the child (selected with it, as its descendant), then asks a spawner outside the
# selection to set ns_last_pid and start a process that receives that PID, and exits only
# once the newcomer runs. The module, about to SIGKILL what is left of the tree, must not
# signal the newcomer.
REUSE = r"""
import os, signal, subprocess, sys, time
role, fifo_dir = sys.argv[1], sys.argv[2]
go, done = os.path.join(fifo_dir, "go"), os.path.join(fifo_dir, "done")
if role == "spawner":
    with open(go) as f:
        victim = int(f.read())
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(victim - 1))
    newcomer = subprocess.Popen([sys.executable, sys.argv[3], "--log", os.path.join(fifo_dir, "newcomer.log"),
                                 "--ready", os.path.join(fifo_dir, "newcomer.ready")])
    with open(os.path.join(fifo_dir, "newcomer"), "w") as f:
        f.write("%d %d" % (victim, newcomer.pid))
    with open(done, "w") as f:
        f.write("x")
    newcomer.wait()
else:
    victim = subprocess.Popen([sys.executable, "-c", "import signal, time\n"
                               "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True: time.sleep(1)"])
    with open(os.path.join(fifo_dir, "victim"), "w") as f:
        f.write(str(victim.pid))

    def on_term(signum, frame):
        victim.kill()
        victim.wait()
        with open(go, "w") as f:
            f.write(str(victim.pid))
        with open(done) as f:
            f.read()
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    while True:
        time.sleep(1)
"""


def test_a_pid_reused_between_scan_and_signal_is_not_signalled(sb, reap, tmp_path):
    fifo_dir = tmp_path / "reuse"
    fifo_dir.mkdir()
    for name in ("go", "done"):
        os.mkfifo(str(fifo_dir / name))
    script = tmp_path / "reuse_server.py"
    script.write_text(REUSE)
    newcomer_script = tmp_path / "newcomer.py"
    newcomer_script.write_text(SCRIPT)
    server = sb.popen([VENV_PYTHON, str(script), "server", str(fifo_dir)])
    spawner = sb.popen([VENV_PYTHON, str(script), "spawner", str(fifo_dir), str(newcomer_script)])
    try:
        deadline = time.monotonic() + 30
        while not (fifo_dir / "victim").exists() or not (fifo_dir / "victim").read_text():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        server_pid = find(sb, [VENV_PYTHON, str(script), "server", str(fifo_dir)])
        victim = int((fifo_dir / "victim").read_text())

        failed, result = reap({"pids": [server_pid], "kill_mode": "mixed", "term_timeout": 30})
        old_pid, new_pid = [int(x) for x in (fifo_dir / "newcomer").read_text().split()]
        assert old_pid == victim and new_pid == victim, "the newcomer did not get the victim's PID"
        assert not failed, result
        stopped = dict((s["pid"], s) for s in result["stopped"])
        assert stopped[server_pid]["signals"] == ["SIGTERM"]
        assert stopped[victim]["matched_by"] == ["descendant of %d" % server_pid]
        assert stopped[victim]["signals"] == []
        time.sleep(0.5)
        log = fifo_dir / "newcomer.log"
        assert not log.exists() or log.read_text() == ""
        assert any(p["pid"] == new_pid and str(newcomer_script) in p["cmdline"] and p["state"] != "Z"
                   for p in sb.procs())
    finally:
        for proc in (server, spawner):
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("args, message", [
    ({"patterns": [".*"]}, "patterns: '.*' matches the empty string, so it would select every process"),
    ({"patterns": ["|"]}, "patterns: '|' matches the empty string"),
    ({"patterns": ["python|"]}, "patterns: 'python|' matches the empty string"),
    ({"environ": {"PATH": ""}}, "environ[PATH]: '' matches the empty string"),
    ({"environ": {"PATH": ".*"}}, "environ[PATH]: '.*' matches the empty string"),
    ({"device_holders": True, "devices": ["/*"]}, "devices: '/*' may match files other than /dev/nvidia*"),
    ({"device_holders": True, "devices": ["/dev/nvidia*"]}, "'/dev/nvidia*' matches /dev/nvidiactl"),
    # the three tenants are all there is to select (init, the daemons and the module's own are spared)
    ({"patterns": ["."], "max_processes": 2}, "the selection has 3 processes, more than max_processes (2), so nothing"),
])
@pytest.mark.parametrize("check_mode", [False, True])
def test_match_everything_selectors_are_refused_and_nothing_is_signalled(sb, reap, tmp_path, args, message,
                                                                         check_mode):
    tenants = [Tenant(sb, "train.py", devices=["/dev/nvidia1"], gpu=1, mib=512),
               Tenant(sb, "gpu_monitor.py", devices=["/dev/nvidiactl"]),
               Tenant(sb, "serve.py", setsid=False)]
    before = sorted(p["pid"] for p in sb.procs())
    failed, result = reap(args, check=check_mode)
    assert failed and message in result["msg"], result
    assert result.get("changed") is False
    time.sleep(0.5)
    procs = sb.procs()
    for t in tenants:
        assert t.signals() == [] and t.alive(procs)
        t.close()
    assert set(before) <= set(p["pid"] for p in procs)


def _as_nobody(sb, tmp_path, collections):
    """A Reap whose module runs as user nobody inside the node (setpriv), through pipelining."""
    python = tmp_path / "nobody-python"
    with open(sb.python) as f:
        python.write_text(f.read().replace(
            "-- %s" % VENV_PYTHON, "-- setpriv --reuid=65534 --regid=65534 --clear-groups %s" % VENV_PYTHON))
    python.chmod(0o755)
    r = Reap(collections, sb, tmp_path, python=str(python))
    r.env.update(ANSIBLE_PIPELINING="1", ANSIBLE_REMOTE_TEMP="/tmp")
    return r


def test_eperm_ends_in_a_report_of_what_was_stopped_and_what_could_not_be(sb, tmp_path, collections):
    mine = Tenant(sb, "serve_nobody.py", user=65534)
    theirs = Tenant(sb, "serve_root.py")
    reap = _as_nobody(sb, tmp_path, collections)
    failed, result = reap({"patterns": [r"/serve_(nobody|root)\.py "], "term_timeout": 10})
    assert failed, result
    assert "Traceback" not in result.get("module_stderr", "") + result["msg"]
    assert result["msg"].startswith("1 process could not be signalled: %d (" % theirs.pid)
    assert result["msg"].endswith("EPERM sending SIGTERM: Operation not permitted. stopped 1: %d" % mine.pid)
    assert [s["pid"] for s in result["stopped"]] == [mine.pid]
    assert [(u["pid"], u["error"]) for u in result["unsignalled"]] == [
        (theirs.pid, "EPERM sending SIGTERM: Operation not permitted")]
    assert mine.signals() == ["SIGTERM"] and theirs.signals() == [] and theirs.alive()
    theirs.close()


def test_hidepid_fails_with_a_message_instead_of_finding_nothing(sb, tmp_path, collections, model):
    with Launch(sb, model, args=["--tp-size", "2"]) as srv:
        srv.wait_ready()
        tree = tree_pids(srv)
        sb.run(["mount", "-o", "remount,hidepid=2", "/proc"], check=True)
        reap = _as_nobody(sb, tmp_path, collections)
        for check in (True, False):
            failed, result = reap({"presets": ["sglang"]}, check=check)
            assert failed and not result.get("changed"), result
            # the kernel names hidepid=2 "invisible" in the mount options
            assert result["msg"].startswith("/proc is mounted with hidepid=invisible and gpu_reap runs as UID 65534: "
                                            "processes of other users are invisible")
        assert tree_pids(srv) == tree

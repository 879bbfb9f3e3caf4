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
import time
import uuid

import pytest

from gpusim.sandbox import Sandbox, VENV_PYTHON
from gpusim.standin import Launch, make_model_dir

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
def collections(tmp_path_factory):
    root = tmp_path_factory.mktemp("collections")
    os.makedirs(str(root / "ansible_collections" / "gpuops"))
    os.symlink(REPO, str(root / "ansible_collections" / "gpuops" / "host"))
    return str(root)


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
    args = {"patterns": SGLANG, "term_timeout": 60}
    with Launch(sb, model, args=["--tp-size", "4"]) as srv:
        srv.wait_ready()
        launcher = srv.find_pid()
        tree = tree_pids(srv)
        assert len(tree) >= 6   # launcher, 4 schedulers, detokenizer (and multiprocessing helpers)

        failed, result = reap(args, check=True)
        assert not failed and result["changed"]
        assert sorted(p["pid"] for p in result["would_stop"]) == tree
        assert tree_pids(srv) == tree, "check mode must signal nothing"

        failed, result = reap(args)
        assert not failed and result["changed"], result
        signals = dict((s["pid"], s["signals"]) for s in result["stopped"])
        assert signals.pop(launcher) == ["SIGTERM"]
        assert set(signals) == set(tree) - {launcher}
        assert all(sent == [] for sent in signals.values()), "the server's own drain stops its children"
        assert result["remaining"] == []
        protected = dict((p["pid"], p["reason"]) for p in result["protected"])
        assert launcher not in protected
        srv.wait_exit(30)

        procs = sb.procs()
        assert sglang_left(procs) == []
        bystanders.assert_alive(procs)

        failed, result = reap(args, check=True)
        assert not failed and not result["changed"] and result["would_stop"] == []
        failed, result = reap(args)
        assert not failed and not result["changed"] and result["stopped"] == []
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
        assert zombies[zombie]["ppid"] == launcher
        assert "sglang.launch_server" in zombies[zombie]["parent_cmdline"]
        assert zombie not in [s["pid"] for s in result["stopped"]]
        assert result["remaining"] == []
        procs = sb.procs()
        assert sglang_left(procs) == []
        bystanders.assert_alive(procs)


def test_device_holders_without_sglang_titles(sb, bystanders, reap, model):
    title = "python3 -m torch._inductor.compile_worker --kind=fork --workers=4"
    holder_proc = sb.popen([VENV_PYTHON, "-c", HOLDER, "/dev/nvidia3", title])
    try:
        holder = find(sb, [title])
        with Launch(sb, model, args=["--tp-size", "2"]) as srv:
            srv.wait_ready()
            launcher = srv.find_pid()

            failed, result = reap({"patterns": SGLANG}, check=True)
            assert holder not in [p["pid"] for p in result["would_stop"]]

            failed, result = reap({"patterns": SGLANG, "device_holders": True, "term_timeout": 20})
            assert not failed and result["changed"], result
            stopped = dict((s["pid"], s) for s in result["stopped"])
            assert stopped[holder]["matched_by"] == ["device /dev/nvidia3"]
            assert stopped[holder]["signals"] == ["SIGTERM"]
            assert stopped[launcher]["signals"] == ["SIGTERM"]
            # the holder is handled after the server: it is listed after the server's tree
            assert list(stopped).index(holder) == len(stopped) - 1
            protected = dict((p["pid"], p) for p in result["protected"])
            for name, pid in sb.decoys.items():
                assert protected[pid]["reason"] == "protected name %s" % name
                assert "device /dev/nvidiactl" in protected[pid]["matched_by"]
            procs = sb.procs()
            assert holder not in [p["pid"] for p in procs]
            assert sglang_left(procs) == []
            bystanders.assert_alive(procs)
    finally:
        holder_proc.kill()
        holder_proc.wait()


def test_nvml_processes_stops_what_the_gpus_list(sb, bystanders, reap, model):
    with Launch(sb, model, args=["--tp-size", "2"], env={"GPUSIM_SGLANG_FAULTS": "orphan"}) as srv:
        srv.wait_ready()
        srv.signal("TERM")
        srv.wait_exit(30)
        orphans = wait_titled(sb, 3)
        schedulers = sorted(p["pid"] for p in orphans if p["cmdline"][0].startswith("sglang::scheduler"))

        failed, result = reap({"nvml_processes": True, "term_timeout": 20})
        assert not failed and result["changed"], result
        assert sorted(s["pid"] for s in result["stopped"]) == schedulers
        assert all(s["matched_by"][0].startswith("nvml GPU-") for s in result["stopped"])
        assert result["nvml_unmapped"] == []
        procs = sb.procs()
        assert [p for p in procs if p["pid"] in schedulers and p["state"] != "Z"] == []
        # the detokenizer holds no GPU: NVML does not list it, so it stays
        assert [command(p) for p in sglang_left(procs)] == ["sglang::detokenizer"]
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
    ({"patterns": SGLANG, "term_timeout": -1}, "term_timeout must be a number of seconds, 0 or more; got -1.0"),
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

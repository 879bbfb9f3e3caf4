# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The owner of the server under the process supervisor: sglang_launch_user runs the main process and every
scheduler (setpriv), with that user's HOME and HuggingFace cache and the venv's bin first on PATH; and the checks
of the interpreter, the model (a HuggingFace hub ID in the owner's cache) and the unit file, all before the running
server is touched. Real ansible-playbook runs against a simulated GPU node.

The node's sandbox has a mount namespace of its own, so the user exists inside it only: its /etc/passwd is a copy
of the host's, with the user added, bound over /etc/passwd in that namespace alone (and /etc/group, with a training
group that reads the dumps)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile

import pytest

from gpusim.fleet import VENV_PYTHON, Fleet, SimNode

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")]

UID = 4242
TRAINING, TRAINEE, OUTSIDER = 4300, 4301, 4302


@pytest.fixture(scope="module")
def node():
    # The server's user must reach the stand-in, the model and the node's state: a directory that any user may
    # traverse (pytest's own temporary directories are root's alone).
    workdir = tempfile.mkdtemp(prefix="gpuops-owner-")
    os.chmod(workdir, 0o755)
    try:
        with SimNode(os.path.join(workdir, "node1"), gpus=4) as n:
            home = os.path.join(workdir, "home", "sglang")
            os.makedirs(home)
            os.chown(home, UID, UID)
            # the server's user; a colleague in the training group, which reads the dumps; a user outside it
            users = {"passwd": ["sglang:x:%d:%d:SGLang:%s:/usr/sbin/nologin" % (UID, UID, home),
                                "trainee:x:%d:%d::/nonexistent:/usr/sbin/nologin" % (TRAINEE, TRAINEE),
                                "outsider:x:%d:%d::/nonexistent:/usr/sbin/nologin" % (OUTSIDER, OUTSIDER)],
                     "group": ["training:x:%d:trainee" % TRAINING]}
            for name, lines in users.items():
                with open("/etc/" + name) as f:
                    content = f.read()
                copy = os.path.join(workdir, name)
                with open(copy, "w") as f:
                    f.write(content + "".join(line + "\n" for line in lines))
                os.chmod(copy, 0o644)
                n.sandbox.run(["mount", "--bind", copy, "/etc/" + name], check=True)
            n.home = home
            yield n
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def fleet(node):
    return Fleet(os.path.dirname(node.workdir), [node], sglang_launch_user="sglang")


def status(node, pid):
    """Uid and Gid lines of /proc/PID/status inside the node: (real, effective, saved, fs) each."""
    out = node.sandbox.run(["cat", "/proc/%d/status" % pid], capture_output=True, text=True, check=True).stdout
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    return [int(v) for v in fields["Uid"].split()], [int(v) for v in fields["Gid"].split()]


def test_the_server_and_its_schedulers_run_as_the_owner_with_the_owner_s_cache(node, fleet):
    node.serving()

    run = fleet.playbook("restart_extraction.yml")

    assert run.rc == 0, run.output
    pid = node.record()["pid"]
    tree = [p for p in node.sglang_procs() if p["pid"] == pid or p["cmdline"][0].startswith("sglang::")]
    schedulers = [p for p in tree if p["cmdline"][0].startswith("sglang::scheduler")]
    assert len(schedulers) == 2, tree
    for proc in tree:
        assert status(node, proc["pid"]) == ([UID] * 4, [UID] * 4), proc
    env = node.environ(pid)
    assert env["HOME"] == node.home
    assert env["HF_HOME"] == os.path.join(node.home, ".cache", "huggingface")
    assert env["PATH"].split(":")[0] == os.path.dirname(node.host_vars()["sglang_launch_python"])
    dump_dir = node.record()["dump_dir"]
    assert os.stat(dump_dir).st_uid == UID and os.listdir(dump_dir), dump_dir


def as_user(node, uid, argv):
    """ARGV run in the node as UID, with that user's groups."""
    return node.sandbox.run(["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid, "--init-groups", "--"] + argv,
                            capture_output=True, text=True)


def test_the_training_group_reads_the_dumps_and_nobody_else_does(node, fleet):
    node.serving()

    run = fleet.playbook("restart_extraction.yml", "-e", "sglang_launch_dump_group=training")

    assert run.rc == 0, run.output
    dump_dir = node.record()["dump_dir"]
    st = os.stat(dump_dir)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (UID, TRAINING, 0o2750)
    files = sorted(os.listdir(dump_dir))
    dump = os.path.join(dump_dir, next(f for f in files if f.endswith(".pt")))
    for name in files:
        st = os.stat(os.path.join(dump_dir, name))
        # the run's manifest is root's (its user cannot rewrite what the run produced), and the group's to read
        owner = 0 if name == "gpuops-manifest.json" else UID
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (owner, TRAINING, 0o640), name
    assert "gpuops-manifest.json" in files
    with open(dump, "rb") as f:
        content = f.read()
    read = as_user(node, TRAINEE, ["python3", "-c", "import sys; sys.stdout.write(open(sys.argv[1], 'rb').read().hex())",
                                   dump])
    assert read.returncode == 0 and read.stdout == content.hex(), read.stderr
    refused = as_user(node, OUTSIDER, ["cat", "--", dump])
    assert refused.returncode != 0 and "Permission denied" in refused.stderr


def test_a_link_that_the_server_s_user_plants_at_the_run_directory_is_refused_and_its_target_untouched(
        node, fleet, tmp_path):
    pid = node.serving()
    root = os.path.join(os.path.dirname(node.workdir), "dumps-of-sglang")
    os.makedirs(root, exist_ok=True)
    os.chown(root, UID, UID)               # a dump root of the server's user is allowed
    target = os.path.join(os.path.dirname(node.workdir), "root-only")
    os.makedirs(target, mode=0o700, exist_ok=True)
    planted = as_user(node, UID, ["ln", "-s", target, os.path.join(root, "planted-run")])
    assert planted.returncode == 0, planted.stderr

    run = fleet.playbook("restart_extraction.yml", "-e", json.dumps(
        {"sglang_launch_dump_root": root, "sglang_launch_run_name": "planted-run"}))

    assert run.rc != 0
    text = " ".join(run.output.split())
    assert ("%s/planted-run already exists (a symbolic link to %s, owned by UID %d)" % (root, target, UID)
            in text), run.output
    assert "Refusing before the running server is touched" in text
    st = os.stat(target)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o700) and os.listdir(target) == []
    assert node.main_pids() == [pid]


def test_an_unset_interpreter_is_refused_before_the_server_is_touched(node, fleet):
    pid = node.serving()

    run = fleet.playbook("restart_serving.yml", "-e", json.dumps({"sglang_launch_python": ""}))

    assert run.rc != 0
    assert "sglang_launch_python is not set: set it to the Python interpreter of the environment SGLang is " \
           "installed in (for example /opt/sglang/venv/bin/python); there is no system default. Refusing before " \
           "the running server is touched." in run.words(), run.output
    assert node.main_pids() == [pid] and node.healthy()


def test_an_interpreter_without_sglang_is_refused_before_the_server_is_touched(node, fleet):
    pid = node.serving()
    python = "/usr/bin/python3"  # Debian's, without SGLang

    run = fleet.playbook("restart_serving.yml", "-e", json.dumps({"sglang_launch_python": python,
                                                                  "sglang_launch_pythonpath": ["/nonexistent"]}))

    assert run.rc != 0
    words = run.words()
    assert "%s cannot import sglang (exit 1): ModuleNotFoundError: No module named 'sglang'" % python in words, \
        run.output
    assert "sglang_launch_python must be the interpreter of the environment SGLang is installed in" in words
    assert "The running server was not touched." in words
    assert node.main_pids() == [pid] and node.healthy()


def test_an_uncached_hub_model_is_refused_offline_naming_the_cache(node, fleet):
    pid = node.serving()
    offline = dict(node.server_env, HF_HUB_OFFLINE="1")
    cache = os.path.join(node.home, ".cache", "huggingface", "hub", "models--moonshotai--Kimi-K2.5")

    run = fleet.playbook("restart_serving.yml", "-e", json.dumps({
        "sglang_launch_model_path": "moonshotai/Kimi-K2.5", "sglang_launch_environment": offline}))

    assert run.rc != 0
    words = run.words()
    assert "The model moonshotai/Kimi-K2.5 is a HuggingFace hub ID that is not in the cache of the server's user " \
           "sglang (no snapshot under %s/snapshots)" % cache in words, run.output
    assert "The running server was not touched." in words
    assert node.main_pids() == [pid] and node.healthy()

    # Cached, it passes every check (check mode: the stand-in loads local directories only).
    os.makedirs(os.path.join(cache, "snapshots", "0123abcd"))
    try:
        check = fleet.playbook("restart_serving.yml", "--check", "-e", json.dumps({
            "sglang_launch_model_path": "moonshotai/Kimi-K2.5", "sglang_launch_environment": offline}))
    finally:
        shutil.rmtree(os.path.dirname(os.path.dirname(cache)))
    assert check.rc == 0, check.output
    assert node.main_pids() == [pid]


def test_a_team_s_own_unit_file_is_never_written_over(node, fleet, tmp_path):
    pid = node.serving()
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()
    team = "[Service]\nExecStart=/opt/team/serve\nUser=team\nRestart=always\n"
    (unit_dir / "sglang.service").write_text(team)

    run = fleet.playbook("restart_serving.yml", "-e", json.dumps({
        "sglang_launch_supervisor": "systemd", "sglang_launch_unit_dir": str(unit_dir), "sglang_launch_unit": "sglang"}))

    assert run.rc != 0
    assert "The unit file %s/sglang.service was not written by gpuops.host (its first line is not '# Managed by " \
           "gpuops.host (sglang_launch)'), so it is not written over: set sglang_launch_unit to another name" \
           % unit_dir in run.words(), run.output
    assert "The running server was not touched." in run.words()
    assert (unit_dir / "sglang.service").read_text() == team
    assert sorted(p.name for p in unit_dir.iterdir()) == ["sglang.service"]
    assert node.main_pids() == [pid] and node.healthy()


# -- the server's user against root: nothing of the user's is read, sourced, chowned or run by root --

def marks(work):
    """A directory where whoever runs a planted program leaves its UID: anyone may write it."""
    path = os.path.join(work, "marks")
    os.makedirs(path, exist_ok=True)
    os.chmod(path, 0o777)
    return path


RACER = r'''
"""As the server's user, for the whole restart: in every run directory it can reach, replace the environment file
with one that records who sources it, and put a link to a root-only file at the argument file's name."""
import os, sys, time
runs, canary, marker, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
evil = "GPUOPS_OWNED=$(id -u >>%s)\n" % marker
tries = wins = 0
deadline = time.monotonic() + seconds
while time.monotonic() < deadline and not os.path.exists(marker + ".stop"):
    try:
        names = os.listdir(runs)
    except OSError:
        names = []
    for name in names:
        directory = os.path.join(runs, name)
        for attempt in ("env", "link"):
            tries += 1
            tmp = os.path.join(directory, ".racer-%s" % attempt)
            try:
                if attempt == "env":
                    with open(tmp, "w") as f:
                        f.write(evil)
                    os.rename(tmp, os.path.join(directory, "server.env"))
                else:
                    os.symlink(canary, tmp)
                    os.rename(tmp, os.path.join(directory, "secret-args.yaml"))
                wins += 1
            except OSError:
                pass
    time.sleep(0.002)
print(tries, wins, flush=True)
'''


def test_a_rename_loop_of_the_server_s_user_replaces_nothing_that_root_sources_or_chowns(node, fleet, tmp_path):
    """The run directory is root's: however fast the server's user tries, it cannot swap the environment file that
    root sources (which would run its commands as root) nor plant a link where root gives it its argument files
    (which would chown a root file to it)."""
    node.serving()
    work = os.path.dirname(node.workdir)
    canary = os.path.join(work, "root-canary")
    with open(canary, "w") as f:
        f.write("root's\n")
    os.chmod(canary, 0o600)
    marker = os.path.join(marks(work), "sourced-by")
    script = os.path.join(work, "racer.py")
    with open(script, "w") as f:
        f.write(RACER)
    os.chmod(script, 0o644)
    runs = os.path.join(node.state_dir, "runs")
    racer = node.sandbox.popen(["setpriv", "--reuid=%d" % UID, "--regid=%d" % UID, "--init-groups", "--",
                                "python3", script, runs, canary, marker, "240"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        run = fleet.playbook("restart_serving.yml", "-e", json.dumps({
            "sglang_launch_server_args": {"tp_size": 2, "enable_metrics": True, "api_key": "sk-" + "r" * 16}}))
    finally:
        open(marker + ".stop", "w").close()
        out, err = racer.communicate(timeout=60)
    tries, wins = (int(n) for n in out.split())
    assert tries > 0 and err == "", err
    assert run.rc == 0, run.output
    assert wins == 0, "the server's user replaced %d entries of a run directory" % wins
    assert not os.path.exists(marker), "the planted environment file was sourced by UID %s" % open(marker).read()
    st = os.stat(canary)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o600), "a root file was given to the server's user"
    run_dir = node.record()["run_dir"]
    st = os.stat(run_dir)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, UID, 0o750)
    assert os.stat(os.path.join(run_dir, "server.env")).st_uid == 0
    assert os.stat(os.path.join(run_dir, "secret-args.yaml")).st_uid == UID
    assert node.healthy()


def test_a_rollback_refuses_a_previous_run_directory_that_the_server_s_user_can_change(node, fleet):
    """As an earlier release left it: the previous run's directory belongs to the server's user, who has had a whole
    run to rewrite its environment file. The rollback reads nothing of it."""
    node.serving()
    good = fleet.playbook("restart_serving.yml")
    assert good.rc == 0, good.output
    previous = node.record()
    work = os.path.dirname(node.workdir)
    marker = os.path.join(marks(work), "sourced-by-rollback")
    os.chown(previous["run_dir"], UID, UID)
    env_file = os.path.join(previous["run_dir"], "server.env")
    with open(env_file, "a") as f:
        f.write("GPUOPS_OWNED=$(id -u >%s)\n" % marker)

    changed = dict(node.server_env, GPUOPS_TEST="a new configuration")
    run = fleet.playbook("restart_serving.yml", "-e", json.dumps({"sglang_launch_environment": changed,
                                                                  "sglang_launch_gpus": [2, 3],
                                                                  "sglang_launch_rollback": True}))

    assert run.rc != 0
    words = run.words()
    assert ("The previous run directory %s is not root's alone (owner UID %d, mode 0750): its files could have been "
            "replaced since that run, so root does not read them." % (previous["run_dir"], UID)) in words, run.output
    assert not os.path.exists(marker)


def test_helper_programs_run_by_absolute_path_never_from_the_interpreter_s_directory(node, fleet):
    """The server's user owns the directory of its interpreter (a venv of its own), which comes first on the
    server's PATH: its setsid and setpriv there are never what root runs."""
    pid = node.serving()
    work = os.path.dirname(node.workdir)
    bindir = os.path.join(work, "sglang-venv", "bin")
    os.makedirs(bindir)
    marker = os.path.join(marks(work), "helper-ran-as")
    programs = {"python": '#!/bin/sh\nexec %s "$@"\n' % VENV_PYTHON}
    for helper in ("setsid", "setpriv"):
        programs[helper] = '#!/bin/sh\nid -u >>%s\nexec /usr/bin/%s "$@"\n' % (marker, helper)
    for name, text in programs.items():
        with open(os.path.join(bindir, name), "w") as f:
            f.write(text)
        os.chmod(os.path.join(bindir, name), 0o755)
        os.chown(os.path.join(bindir, name), UID, UID)
    os.chown(os.path.dirname(bindir), UID, UID)
    os.chown(bindir, UID, UID)

    run = fleet.playbook("restart_serving.yml", "-e", json.dumps({"sglang_launch_python": os.path.join(bindir, "python")}))

    assert run.rc == 0, run.output
    assert not os.path.exists(marker), "the user's %s ran as UID %s" % (bindir, open(marker).read().split())
    assert node.main_pids() != [pid] and node.healthy()
    # the parser check ran as the server's user: the server's interpreter, from the user's directory
    assert node.environ(node.record()["pid"])["PATH"].split(":")[0] == bindir


def test_an_interpreter_that_another_user_can_change_is_refused_before_the_server_is_touched(node, fleet):
    pid = node.serving()
    work = os.path.dirname(node.workdir)
    bindir = os.path.join(work, "outsider-venv", "bin")
    os.makedirs(bindir)
    with open(os.path.join(bindir, "python"), "w") as f:
        f.write('#!/bin/sh\nexec %s "$@"\n' % VENV_PYTHON)
    os.chmod(os.path.join(bindir, "python"), 0o755)
    os.chown(os.path.dirname(bindir), OUTSIDER, OUTSIDER)

    run = fleet.playbook("restart_serving.yml", "-e", json.dumps({"sglang_launch_python": os.path.join(bindir, "python")}))

    assert run.rc != 0
    assert ("refusing to run %s: %s is owned by UID %d, which a user other than root and UID %d can change; nothing "
            "was run" % (os.path.join(bindir, "python"), os.path.dirname(bindir), OUTSIDER, UID)) in run.words(), \
        run.output
    assert node.main_pids() == [pid] and node.healthy()

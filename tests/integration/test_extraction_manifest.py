# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every extraction run says what it produced: its manifest (gpuops-manifest.json in its run directory), written when
the server is proven ready and completed when the run ends - drained by a stop, cut by one, found crashed by the next
stop - checked field by field against what the test knows; a rollback run's own manifest; a link that the server's
user planted at the manifest's name, not followed; and playbooks/extraction_status.yml, which reads the run without
touching it. Real ansible-playbook runs against a simulated node in extraction mode, whose server runs as a user of
its own (as test_launch_owner's node: a passwd and group bound over /etc in the node's mount namespace only)."""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import threading
import time
import urllib.error
import urllib.request

import pytest

from gpusim import standin
from gpusim.fleet import PLAYBOOKS, Fleet, SimNode

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")]

UID, TRAINING = 4242, 4300
MANIFEST = "gpuops-manifest.json"


@pytest.fixture(scope="module")
def node():
    # The server's user must reach the stand-in, the model and the node's state (pytest's own temporary directories
    # are root's alone).
    workdir = tempfile.mkdtemp(prefix="gpuops-manifest-")
    os.chmod(workdir, 0o755)
    try:
        with SimNode(os.path.join(workdir, "node1"), gpus=4) as n:
            home = os.path.join(workdir, "home", "sglang")
            os.makedirs(home)
            os.chown(home, UID, UID)
            users = {"passwd": ["sglang:x:%d:%d:SGLang:%s:/usr/sbin/nologin" % (UID, UID, home)],
                     "group": ["training:x:%d:" % TRAINING]}
            for name, lines in users.items():
                with open("/etc/" + name) as f:
                    content = f.read()
                copy = os.path.join(workdir, name)
                with open(copy, "w") as f:
                    f.write(content + "".join(line + "\n" for line in lines))
                os.chmod(copy, 0o644)
                n.sandbox.run(["mount", "--bind", copy, "/etc/" + name], check=True)
            yield n
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def fleet(node):
    return Fleet(os.path.dirname(node.workdir), [node], sglang_launch_user="sglang",
                 sglang_launch_dump_group="training")


def generate(url, rid):
    body = {"rid": rid, "text": "Record %s of the training set." % rid, "sampling_params": {"max_new_tokens": 4}}
    req = urllib.request.Request(url + "/generate", json.dumps(body).encode(), {"content-type": "application/json"})
    try:
        with standin.OPENER.open(req, timeout=60) as res:
            return res.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


class Driver(threading.Thread):
    """Feeds the server one record after another, PAUSE seconds apart, until stopped, as a team's script does."""

    def __init__(self, url, pause=1.0):
        super().__init__(daemon=True)
        self.url, self.pause, self.done, self.results = url, pause, threading.Event(), []

    def run(self):
        n = 0
        while not self.done.is_set():
            rid = "driver-%d-%d" % (os.getpid(), n)
            self.results.append((rid, generate(self.url, rid)))
            n += 1
            self.done.wait(self.pause)

    def stop(self):
        self.done.set()
        self.join(120)
        return self.results


def manifest(dump_dir):
    path = os.path.join(dump_dir, MANIFEST)
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode) and (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, TRAINING, 0o640)
    with open(path) as f:
        return json.load(f)


def patch_digest(node):
    """The dump patch as the test knows it: the stand-in's one patched file, by its name and content."""
    package = os.path.join(node.sglang, "sglang")
    rel = os.path.relpath(os.path.join(node.sglang, standin.PATCH_FILE), package)
    with open(os.path.join(package, rel), "rb") as f:
        content = f.read()
    return {"files": [rel], "digest": "sha256:" + hashlib.sha256(rel.encode() + b"\0" + content + b"\0").hexdigest()}


def records(dump_dir, rids):
    """(count, bytes) of the dumps of the records RIDS (hs_<rid>.pt and hs_<rid>.json each)."""
    names = [n for rid in rids for n in ("hs_%s.pt" % rid, "hs_%s.json" % rid)]
    return len(names), sum(os.path.getsize(os.path.join(dump_dir, n)) for n in names)


def own(dump_dir, rids):
    return len([n for n in os.listdir(dump_dir) if n != MANIFEST and n[3:].rsplit(".", 1)[0] not in rids])


def iso(seconds):
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).isoformat(timespec="seconds")


def epoch(text):
    """An ISO 8601 time as seconds since the epoch; without an offset (the record's checked), UTC."""
    moment = datetime.datetime.fromisoformat(text)
    return (moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)).timestamp()


@pytest.fixture
def extracting(node, fleet):
    """The node in extraction mode, started by the collection (whatever an earlier test left fed, cut); its record."""
    node.serving()
    run = fleet.playbook("restart_extraction.yml", "-e", "sglang_stop_cut_active_run=true")
    assert run.rc == 0, run.output
    return node.record()


def test_the_manifest_is_written_when_the_server_is_ready_and_completed_by_the_stop(node, fleet, extracting):
    dump_dir = extracting["dump_dir"]
    first = manifest(dump_dir)
    assert (first["run"], first["ended"], first["end"], first["counts"]["dumps"]) == (
        extracting["marker"], "running", None, 0)
    rids = ["manifest-%d-%d" % (os.getpid(), i) for i in range(5)]
    assert [generate(node.url, rid) for rid in rids] == [200] * 5
    time.sleep(2.5)                                         # quiet for longer than the window below
    before = time.time()

    run = fleet.playbook("stop_sglang.yml", "-e", "sglang_stop_active_window=2")

    assert run.rc == 0, run.output
    m = manifest(dump_dir)
    count, size = records(dump_dir, rids)
    identity = extracting["identity"]
    assert m == dict(m, schema=1, run=extracting["marker"], mode="extraction", dump_dir=dump_dir,
                     rolled_back_from=None, sglang="0.5.23", dump_patch=patch_digest(node), argv=extracting["argv"],
                     gpus=[0, 1], pid=extracting["pid"], started=iso(extracting["started"]),
                     ready=iso(epoch(extracting["checked"])), ended="drained")
    assert m["host"] == os.uname()[1]
    assert m["model"]["path"] == node.model and m["model"]["files"] == len(identity["model"]["files"])
    assert m["model"]["fingerprint"] == first["model"]["fingerprint"] and m["model"]["fingerprint"].startswith("sha256:")
    assert m["counts"] == dict(m["counts"], dumps=count, bytes=size, own=own(dump_dir, rids), patterns=["*"])
    assert count == 10 and m["counts"]["recent"] == count   # all dumped within 10 s before the stop began
    assert before - 1 <= epoch(m["end"]) <= time.time() and epoch(m["written"]) == epoch(m["end"])
    assert ("The extraction run %s of the SGLang server %d ended drained: %s holds %d dumps"
            % (extracting["marker"], extracting["pid"], dump_dir, count)) in run.words(), run.output
    # the fleet's table says what the stop left: its dumps, gigabytes and how the run ended
    assert re.search(r'"node1 +ok +.* %d / 0\.0 GB drained"' % count, run.summary()), run.summary()


def test_a_stop_that_cuts_an_active_run_says_so_in_the_manifest(node, fleet, extracting):
    driver = Driver(node.url)
    driver.start()
    try:
        time.sleep(3)
        run = fleet.playbook("stop_sglang.yml", "-e", "sglang_stop_cut_active_run=true")
    finally:
        results = driver.stop()

    assert run.rc == 0, run.output
    m = manifest(extracting["dump_dir"])
    # A record sent as the stop cut the run may be dumped without its answer reaching the driver: the manifest counts
    # what the run left on disk, which holds every answered record's dumps.
    fed = [rid for rid, status in results if status == 200]
    sent = [os.path.join(extracting["dump_dir"], "hs_%s.%s" % (rid, ext))
            for rid, status in results for ext in ("pt", "json")]
    dumped = [path for path in sent if os.path.exists(path)]
    count, size = len(dumped), sum(os.path.getsize(p) for p in dumped)
    assert fed and count >= records(extracting["dump_dir"], fed)[0], results
    assert (m["ended"], m["counts"]["dumps"], m["counts"]["bytes"]) == ("cut", count, size)
    assert m["counts"]["recent"] >= 1                       # fed until the stop: its last records may be partial
    assert ("The extraction run %s of the SGLang server %d ended cut: %s holds %d dumps"
            % (extracting["marker"], extracting["pid"], extracting["dump_dir"], count)) in run.words(), run.output
    assert re.search(r'"node1 +ok +.* %d / 0\.0 GB cut"' % count, run.summary()), run.summary()


def test_a_server_killed_behind_the_collection_s_back_is_recorded_as_crashed_by_the_next_launch(
        node, fleet, extracting):
    rids = ["crash-%d-%d" % (os.getpid(), i) for i in range(3)]
    assert [generate(node.url, rid) for rid in rids] == [200] * 3
    node.sandbox.run(["kill", "-KILL", str(extracting["pid"])], check=True)
    deadline = time.time() + 30
    while extracting["pid"] in node.main_pids() and time.time() < deadline:
        time.sleep(0.1)
    assert manifest(extracting["dump_dir"])["ended"] == "running"

    run = fleet.playbook("restart_serving.yml")

    assert run.rc == 0, run.output
    m = manifest(extracting["dump_dir"])
    count, size = records(extracting["dump_dir"], rids)
    assert (m["ended"], m["counts"]["dumps"], m["counts"]["bytes"], m["gpus"]) == ("crashed", count, size, [0, 1])
    assert m["counts"]["recent"] == count                   # written within 10 s of the last write: maybe partial
    assert ("The extraction run %s of the SGLang server %d ended crashed" % (extracting["marker"], extracting["pid"])
            in run.words()), run.output
    # recorded once: the next stop finds the serving run, and leaves the crashed run's manifest as it is
    again = fleet.playbook("stop_sglang.yml")
    assert again.rc == 0, again.output
    assert manifest(extracting["dump_dir"]) == m


def test_a_rollback_run_dumps_into_its_own_directory_and_has_its_own_manifest(node, fleet, extracting):
    changed = dict(node.server_env, GPUOPS_TEST="a new configuration")

    run = fleet.playbook("restart_extraction.yml", "-e", json.dumps({"sglang_launch_environment": changed,
                                                                     "sglang_launch_gpus": [2, 3],
                                                                     "sglang_launch_rollback": True}))

    assert run.rc != 0
    assert "The previous configuration (%s) was relaunched and passed its checks" % extracting["marker"] in run.words()
    record = node.record()
    assert record["dump_dir"].startswith(extracting["dump_dir"] + "-rollback-")
    previous, rollback = manifest(extracting["dump_dir"]), manifest(record["dump_dir"])
    assert (previous["run"], previous["ended"]) == (extracting["marker"], "drained")
    failed = rollback["rolled_back_from"]
    assert failed and failed != extracting["marker"] and failed in run.output
    assert rollback == dict(rollback, run=extracting["marker"], dump_dir=record["dump_dir"], ended="running",
                            pid=record["pid"], gpus=[0, 1], argv=extracting["argv"], dump_patch=patch_digest(node),
                            ready=iso(epoch(record["checked"])))
    assert rollback["counts"]["dumps"] == 0 and rollback["counts"]["own"] >= 1     # its probe's


def as_user(node, argv):
    return node.sandbox.run(["setpriv", "--reuid=%d" % UID, "--regid=%d" % UID, "--init-groups", "--"] + argv,
                            capture_output=True, text=True)


def test_a_link_that_the_server_s_user_plants_at_the_manifest_s_name_is_not_followed(node, fleet, extracting):
    target = os.path.join(node.workdir, "root-only.json")
    with open(target, "w") as f:
        f.write('{"root": "only"}\n')
    os.chmod(target, 0o644)
    path = os.path.join(extracting["dump_dir"], MANIFEST)
    planted = as_user(node, ["sh", "-c", 'rm -f -- "$1" && ln -s -- "$2" "$1"', "sh", path, target])
    assert planted.returncode == 0, planted.stderr
    assert os.lstat(path).st_uid == UID and os.path.islink(path)

    run = fleet.playbook("stop_sglang.yml")

    assert run.rc == 0, run.output
    with open(target) as f:
        assert f.read() == '{"root": "only"}\n'
    st = os.stat(target)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o644)
    assert manifest(extracting["dump_dir"])["ended"] == "drained"      # a regular file of root's again


def printed(run, first):
    """The lines of the debug message (a list of strings) whose first line is FIRST."""
    lines, inside = [], False
    for line in run.output.splitlines():
        text = line.strip().rstrip(",")
        if not inside and text == json.dumps(first):
            inside = True
        if inside:
            if not text.startswith('"'):
                break
            lines.append(json.loads(text))
    return lines


STATUS_RUNBOOK = """
- name: Read the runs
  ansible.builtin.import_playbook: %s

- name: Act on them, as a runbook would
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Show the registered run
      ansible.builtin.debug:
        msg: "STATUS {{ gpuops_extraction_status | to_json }}"
"""


def test_extraction_status_prints_the_table_and_registers_the_run_without_touching_it(node, fleet, extracting):
    rids = ["status-%d-%d" % (os.getpid(), i) for i in range(4)]
    assert [generate(node.url, rid) for rid in rids] == [200] * 4
    runbook = os.path.join(fleet.workdir, "runbook.yml")
    with open(runbook, "w") as f:
        f.write(STATUS_RUNBOOK % os.path.join(PLAYBOOKS, "extraction_status.yml"))
    before = dict((n, os.stat(os.path.join(extracting["dump_dir"], n)).st_mtime_ns)
                  for n in os.listdir(extracting["dump_dir"]))

    run = fleet.playbook(runbook)

    assert run.rc == 0, run.output
    line = next(line for line in run.output.splitlines() if '"msg": "STATUS {' in line)
    status = json.loads(json.loads("{%s}" % line.strip())["msg"].split(" ", 1)[1])
    count, size = records(extracting["dump_dir"], rids)
    assert status == dict(status, state="running", mode="extraction", marker=extracting["marker"], dumping=True,
                          pid=extracting["pid"], files=count, bytes=size, recent=count, in_flight=0,
                          in_flight_source="metrics", manifest=os.path.join(extracting["dump_dir"], MANIFEST))
    assert status["uptime"] > 0 and status["free_gb"] > 0 and status["hours_to_full"] > 0 and status["age"] < 60
    assert status["rate_files_per_min"] > 0 and status["rate_seconds"] <= 600
    table = printed(run, "extraction runs of the fleet")
    assert table[1].split() == ["host", "state", "mode", "run", "marker", "uptime", "dumps", "GB", "dumps/min", "GB/h",
                                "free", "GB", "hours", "to", "full", "in", "flight", "newest", "s"], table
    row = table[2].split()
    assert row[:4] == [node.name, "running", "extraction", extracting["marker"]] and row[5] == str(count), table
    assert row[11] == "0", table                            # in flight
    # nothing touched: the same server, the same files, no lock taken
    assert node.main_pids() == [extracting["pid"]] and node.record() == extracting
    assert dict((n, os.stat(os.path.join(extracting["dump_dir"], n)).st_mtime_ns)
                for n in os.listdir(extracting["dump_dir"])) == before

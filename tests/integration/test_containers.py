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
import time

import pytest

from gpusim import docker, podman
from gpusim.fleet import Request

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
    token, api_key = "hf_" + secrets.token_hex(12), "sk-" + secrets.token_hex(12)
    listed = "model-" + secrets.token_hex(8)
    extra = vars_file(tmp_path / "container.json", dict(
        engine.launch_vars(node, {"HF_TOKEN": token}),
        sglang_launch_server_args={"tp_size": 2, "enable_metrics": True, "api_key": api_key, "served_model_name": listed},
        sglang_launch_secret_args=["served_model_name"]))

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
    # every post-check ran against the container's server: the dump directory in each scheduler's environment,
    # the probe's own dump, GPU occupancy
    for task in ("Check that the main process and every scheduler see the dump directory",
                 "Send a probe request with its own id and wait for its hidden-state dump",
                 "Check that the server occupies its GPUs"):
        assert "TASK [gpuops.host.sglang_launch : %s]" % task in run.output, task
    assert [name for name in os.listdir(record["dump_dir"]) if name.startswith("hs_gpuops-probe-")]
    assert min(node.used_mib()[:2]) > 0
    # no secret in what the engine shows of the container, nor in any command line of the node
    shown = engine.cli("inspect", record["container"]).stdout
    cmdlines = "\n".join(" ".join(p["cmdline"]) for p in node.sandbox.procs())
    for needle in (token, api_key, listed):
        assert needle not in shown, needle
        assert needle not in cmdlines, needle
        assert needle not in run.output, needle
    assert "TASK [gpuops.host.sglang_launch : Start the server in its container, as its user]" in run.output
    # the earlier runs' containers are removed while the old server still serves: no remote task of it in the downtime
    assert (run.output.index("TASK [gpuops.host.sglang_launch : Find the exited containers of the collection's earlier")
            < run.output.index("TASK [gpuops.host.sglang_stop : Find, drain, stop"))

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

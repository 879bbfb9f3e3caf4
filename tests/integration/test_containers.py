# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A team's SGLang in a Docker container with a restart policy, on a node with a real Docker daemon
(Debian's docker.io, started inside the node's sandbox by the test, see gpusim.docker)."""

from __future__ import annotations

import time

import pytest

from gpusim import docker
from gpusim.fleet import Request

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not docker.available(), reason="make deps installs docker.io")]


@pytest.fixture
def engine(node, monkeypatch):
    with docker.Dockerd(node.sandbox) as d:
        # the modules run in the node and ask the daemon that this test started
        monkeypatch.setenv("DOCKER_HOST", d.host)
        yield d


def wait_healthy(node, engine, name, timeout=90):
    deadline = time.monotonic() + timeout
    while not node.healthy():
        assert time.monotonic() < deadline, engine.docker("logs", name, check=False).stdout[-3000:]
        time.sleep(0.2)


def test_a_team_container_is_drained_then_stopped_through_docker_and_stays_stopped(node, fleet, engine):
    for pid in node.main_pids():
        node.sandbox.run(["kill", "-KILL", str(pid)])
    cid = engine.run_standin(node, "team-sglang", ["--tp-size", "2", "--enable-metrics"], restart="unless-stopped")
    wait_healthy(node, engine, "team-sglang")
    before = engine.inspect(cid)
    request = Request(node.url, max_new_tokens=800)
    request.start()
    time.sleep(0.5)

    run = fleet.playbook("stop_sglang.yml", "-v")

    request.join(120)
    assert run.rc == 0, run.output
    assert request.result[0] == 200, request.result
    after = engine.inspect(cid)
    assert after["State"]["Status"] == "exited" and after["RestartCount"] == before["RestartCount"]
    # an explicit stop: the server drained and exited on its own, and the engine does not start it again
    assert after["State"]["ExitCode"] == 0, after["State"]
    time.sleep(2)
    assert engine.inspect(cid)["State"]["Status"] == "exited" and not node.healthy()
    assert node.used_mib() == [0, 0, 0, 0]
    text = run.words()
    assert ("Stopped through its supervisor: the SGLang server %d, with docker stop --time 5 team-sglang in"
            % before["State"]["Pid"]) in text, run.output
    assert "it exited on its own" in text
    assert ("the container team-sglang of the SGLang server") in text and "has restart policy unless-stopped" in text
    assert "docker update --restart=no team-sglang" in text

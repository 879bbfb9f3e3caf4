# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The real SGLang Model Gateway (sglang-router 0.3.2) on the node whose server is restarted.

The gateway titles itself ``sglang::router``; a server's stop must leave it running and say so, and
must refuse to stop, behind its launcher's back, the servers that the gateway's co-launcher
(``python -m sglang_router.launch_server``) started itself.
"""

from __future__ import annotations

import json
import re

import pytest

from gpusim.fleet import http_get
from gpusim.gateway import Gateway, installed

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not installed(), reason="make gateway installs the SGLang Model Gateway")]


@pytest.fixture
def gateway(node):
    node.serving()
    gw = Gateway(node.sandbox, worker_urls=[node.url]).start().wait_up(healthy=1)
    yield gw
    gw.stop()


def test_a_serving_restart_leaves_the_gateway_on_the_node_running_and_names_it(node, fleet, gateway):
    old = node.main_pids()

    run = fleet.playbook("restart_serving.yml")

    assert run.rc == 0, run.output
    assert node.main_pids() != old and node.healthy()
    # the same process, never signalled: it logs a terminate signal when it gets SIGTERM or SIGINT
    assert gateway.alive(), gateway.log()[-2000:]
    assert not gateway.terminated(), gateway.log()[-2000:]
    status, body = gateway.request("GET", "/workers")
    assert status == 200 and [w["url"] for w in body["workers"]] == [node.url]
    text = run.words()
    assert ("Left running: the SGLang Model Gateway, pid %d (user root) sglang::router" % gateway.pid) in text, run.output
    listed = re.search(r"sglang::router, listening on TCP ports ([0-9, ]+)", text).group(1)
    assert sorted(int(p) for p in listed.split(",")) == sorted([gateway.port, gateway.prometheus_port])


@pytest.fixture
def colaunch(node):
    """`python -m sglang_router.launch_server` on the node: the gateway and one worker of its own, registered."""
    launcher = Gateway.colaunch(node.sandbox, node.model, server_args=["--tp-size", "1", "--base-gpu-id", "0"],
                                env=dict(node.server_env, PYTHONPATH=node.sglang))
    launcher.start()
    try:
        # the worker registers with the router only once it answers /health
        yield launcher.wait_up(timeout=120, healthy=1)
    finally:
        launcher.stop()
        # what the launcher started outlives it inside the sandbox until the sandbox ends: kill it now
        for p in node.sandbox.procs():
            if p["cmdline"][:1] and p["cmdline"][0].startswith("sglang::") and p["state"] != "Z":
                node.sandbox.run(["kill", "-KILL", str(p["pid"])])


def test_a_co_launch_is_refused_naming_its_launcher_and_nothing_is_signalled(node, fleet, colaunch):
    worker_url = colaunch.workers()[0]["url"]
    before = [(p["pid"], p["cmdline"][:1]) for p in node.sandbox.procs() if p["state"] != "Z"]

    run = fleet.playbook("stop_sglang.yml")

    assert run.rc != 0, run.output
    text = run.words()
    assert "not stopping servers that the SGLang Model Gateway co-launched:" in text, run.output
    assert ("was started by the SGLang Model Gateway launcher %d (sglang::router" % colaunch.pid) in text
    assert "nothing was drained or signalled" in text
    after = [(p["pid"], p["cmdline"][:1]) for p in node.sandbox.procs() if p["state"] != "Z"]
    assert [p for p in before if p not in after] == []
    assert colaunch.alive() and not colaunch.terminated()
    assert http_get(worker_url + "/health")[0] == 200
    assert colaunch.request("GET", "/workers")[0] == 200


def test_named_co_launched_servers_are_stopped_and_the_launcher_is_not(node, fleet, colaunch):
    worker = [p["pid"] for p in node.sandbox.procs() if p["cmdline"][:1] == ["sglang::server"]]

    run = fleet.playbook("stop_sglang.yml", "-e", json.dumps({"sglang_stop_pids": worker}))

    assert run.rc == 0, run.output
    procs = node.sandbox.procs()
    assert [p for p in procs if p["state"] != "Z" and p["cmdline"][:1] and p["cmdline"][0] in
            ("sglang::server", "sglang::scheduler", "sglang::detokenizer")] == []
    assert colaunch.alive() and not colaunch.terminated()
    assert node.used_mib() == [0, 0, 0, 0]

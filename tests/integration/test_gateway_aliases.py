# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A gateway that lists the node's server under another URL than the inventory's (issue 32): the real SGLang Model
Gateway (sglang-router 0.3.2) on the node, its retries disabled, lists the worker as http://127.0.0.1:PORT while
sglang_gateway_worker_url keeps its default, http://node1:PORT; it also routes to a second node's server, at another
port of 127.0.0.1 (another server, left alone). The restart takes the node's registration out before the server's
drain and registers it again under 127.0.0.1 once the new server passed its checks: a client sending through the
gateway meanwhile loses no request, and the summary never says "not listed"."""

from __future__ import annotations

import glob
import json
import os
import re

import pytest

from gpusim import gateway as gpusim_gateway
from gpusim.fleet import SimNode

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not gpusim_gateway.installed(), reason="make gateway installs the real gateway")]

# What the stand-in logs once SIGTERM reached it (as in test_gateway_rollout.py).
SIGTERM_LINE = "Gracefully exiting"


@pytest.fixture(scope="module")
def other(node):
    """A second node serving, not in the fleet: the gateway routes to it while the node is out."""
    with SimNode(os.path.join(os.path.dirname(node.workdir), "node2"), gpus=2) as n:
        n.start_server(["--tp-size", "2", "--enable-metrics"])
        yield n


@pytest.fixture
def gateway(node, other):
    """The gateway on the node, in front of its server and the other node's by loopback, its retries disabled: a
    request cut by the restart would answer HTTP 500."""
    node.serving()
    gw = gpusim_gateway.Gateway(node.sandbox, worker_urls=[node.url, other.url], args=["--disable-retries"])
    try:
        gw.start().wait_up(healthy=2)
        yield gw
    finally:
        gw.stop()


def sigterms(node):
    def count():
        total = 0
        for path in [os.path.join(node.workdir, "hand-started.log")] + glob.glob(os.path.join(node.log_dir, "*.log")):
            try:
                with open(path, errors="replace") as f:
                    total += f.read().count(SIGTERM_LINE)
            except OSError:
                pass
        return total
    return count


def listed(gw):
    return sorted((w["url"], w["is_healthy"]) for w in gw.workers())


def test_a_loopback_registration_is_taken_out_and_given_back_under_its_own_url(node, other, fleet, gateway):
    assert node.url.startswith("http://127.0.0.1:")
    before = dict((w["url"], w["id"]) for w in gateway.workers())
    assert sorted(before) == sorted([node.url, other.url])
    others = other.main_pids()
    old = node.main_pids()
    extra = {
        "sglang_gateway_urls": [gateway.url],
        "sglang_gateway_interval": 0.1,
        "sglang_gateway_wait_timeout": 60,
        # A value of its own, so that the server relaunches (an unchanged configuration is left running).
        "sglang_launch_server_args": {"tp_size": 2, "enable_metrics": True, "max_running_requests": 71},
    }
    watch = gpusim_gateway.Watch(gateway, {"sigterm": sigterms(node)})
    watch.start()
    load = gpusim_gateway.Load(gateway.url, clients=3).start()
    try:
        run = fleet.playbook("restart_serving.yml", "-e", json.dumps(extra), timeout=600)
    finally:
        load.stop()
        watch.stop()

    assert run.rc == 0, run.output
    assert node.main_pids() != old and node.healthy()
    # Not one request lost, the gateway's retries disabled.
    assert load.results and load.failed() == [], (len(load.failed()), load.errors[:5])
    # Taken out before the old server got SIGTERM, listed again (under 127.0.0.1) once the new one served.
    polls = watch.polls
    removed = next((i for i, p in enumerate(polls) if node.url not in p[1]), None)
    termed = next((i for i, p in enumerate(polls) if p[3]["sigterm"] > polls[0][3]["sigterm"]), None)
    assert removed is not None and termed is not None and removed < termed, (removed, termed)
    back = next((i for i in range(removed, len(polls)) if polls[i][2].get(node.url)), None)
    assert back is not None and back > termed, (removed, termed, back)
    assert listed(gateway) == sorted([(node.url, True), (other.url, True)])
    after = dict((w["url"], w["id"]) for w in gateway.workers())
    assert after[node.url] != before[node.url], "not registered again"
    # The other server at 127.0.0.1, at another port, was never taken out.
    assert after[other.url] == before[other.url] and other.main_pids() == others
    assert all(p[2].get(other.url) for p in polls)
    summary = run.summary()
    assert "not listed" not in run.output, summary
    assert re.search(r'"node1 +ok +serving .* new +back in 1 +-"', summary), summary

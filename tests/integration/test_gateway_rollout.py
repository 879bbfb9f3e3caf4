# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Serving rollouts behind the real SGLang Model Gateway (sglang-router 0.3.2, build/gateway): three stand-in nodes,
a gateway in a sandbox of its own in front of them, a client sending through it during restart_serving.yml with
one node per batch. The gateway step takes each node out before its server's drain and puts it back once the new
server passed its checks, so no request fails even with the gateway's retries disabled; the capacity guard refuses
before anything is touched; a canary whose relaunch fails stays out while the others keep serving."""

from __future__ import annotations

import glob
import json
import os
import re
import urllib.request

import pytest
import yaml

from gpusim import gateway as gpusim_gateway
from gpusim import standin
from gpusim.fleet import Fleet, SimNode
from gpusim.sandbox import Sandbox

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root"),
              pytest.mark.skipif(not gpusim_gateway.installed(), reason="make gateway installs the real gateway")]

MODEL = "sim-llama"
# What the stand-in logs once SIGTERM reached it (managers/tokenizer_manager.py sigterm_watchdog of the release).
SIGTERM_LINE = "Gracefully exiting"


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    """Three nodes serving one model by hand; node1, the canary, has 4 GPUs (its wrong-GPU launch needs them)."""
    root = tmp_path_factory.mktemp("gateway-rollout")
    with SimNode(str(root / "node1"), gpus=4) as a, SimNode(str(root / "node2"), gpus=2) as b, \
            SimNode(str(root / "node3"), gpus=2) as c:
        for n in (a, b, c):
            n.start_server(["--tp-size", "2", "--enable-metrics", "--served-model-name", MODEL])
        yield [a, b, c]


@pytest.fixture(scope="module")
def gateway_box(nodes):
    """The gateways' own sandbox: a stop on a node never sees them."""
    sb = Sandbox(os.path.join(os.path.dirname(nodes[0].workdir), "gateway"), gpus=0, decoys=False).start()
    yield sb
    sb.close()


@pytest.fixture
def gateway(request, gateway_box, nodes):
    """A fresh gateway in front of the nodes, its retries disabled unless a test passes other arguments (indirect
    parametrization); stopped after the test."""
    args = getattr(request, "param", ["--disable-retries"])
    serving = [n.url for n in nodes if n.healthy()]  # a failed canary of an earlier test serves nothing
    gw = gpusim_gateway.Gateway(gateway_box, worker_urls=serving, args=args)
    try:
        gw.start().wait_up(healthy=len(serving))
        yield gw
    finally:
        gw.stop()


def fleet_of(tmp_path, nodes, gw, **extra):
    # Each node's server as the gateway lists it: its own port on the loopback that all sandboxes share.
    return Fleet(str(tmp_path), nodes, sglang_gateway_urls=[gw.url], sglang_gateway_interval=0.1,
                 sglang_gateway_wait_timeout=60, sglang_gateway_worker_url="http://127.0.0.1:{{ sglang_launch_port }}",
                 **extra)


def server_args(run: int) -> dict:
    # A value of its own per run, so that each run relaunches (an unchanged configuration is left running).
    return {"sglang_launch_server_args": {"tp_size": 2, "enable_metrics": True, "served_model_name": MODEL,
                                          "max_running_requests": 64 + run}}


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


def passed_marker(node):
    def read():
        try:
            record = node.record()
        except (OSError, ValueError):
            return None
        return record["marker"] if record.get("status") == "ok" else None
    return read


def rollout(fleet, nodes, gw, run, *args):
    probes = {}
    for n in nodes:
        probes[n.name + ":sigterm"] = sigterms(n)
        probes[n.name + ":passed"] = passed_marker(n)
    watch = gpusim_gateway.Watch(gw, probes)
    watch.start()
    load = gpusim_gateway.Load(gw.url, clients=3).start()
    try:
        result = fleet.playbook("restart_serving.yml", "-e", "gpuops_serial=1", "-e", json.dumps(server_args(run)),
                                *args, timeout=600)
    finally:
        load.stop()
        watch.stop()
    return result, load, watch


def first(polls, since, test):
    return next((i for i in range(since, len(polls)) if test(polls[i])), None)


def check_each_node_out_before_sigterm_and_back_after_its_checks(nodes, watch):
    polls = watch.polls
    for n in nodes:
        before_term, before_marker = polls[0][3][n.name + ":sigterm"], polls[0][3][n.name + ":passed"]
        removed = first(polls, 0, lambda p: n.url not in p[1])
        termed = first(polls, 0, lambda p: p[3][n.name + ":sigterm"] > before_term)
        assert removed is not None and termed is not None, (n.name, removed, termed)
        assert removed < termed, "%s: its server logged SIGTERM (poll %d) before the gateway took it out (poll %d)" % (
            n.name, termed, removed)
        back = first(polls, removed, lambda p: n.url in p[1])
        passed = first(polls, 0, lambda p: p[3][n.name + ":passed"] not in (None, before_marker))
        assert back is not None and passed is not None, (n.name, back, passed)
        assert passed <= back, "%s: registered again (poll %d) before its new server passed its checks (poll %d)" % (
            n.name, back, passed)
    # Capacity: never more than one batch (one node) out at once.
    assert min(sum(1 for h in p[2].values() if h) for p in polls) >= len(nodes) - 1


def all_healthy(gw, nodes):
    return sorted(w["url"] for w in gw.workers() if w["is_healthy"]) == sorted(n.url for n in nodes)


def test_check_mode_predicts_out_and_back_in_and_writes_nothing(nodes, gateway, tmp_path):
    ids = sorted(w["id"] for w in gateway.workers())
    pids = [n.main_pids() for n in nodes]
    run = fleet_of(tmp_path, nodes, gateway).playbook("restart_serving.yml", "--check", "-e", "gpuops_serial=1",
                                                      "-e", json.dumps(server_args(0)))
    assert run.rc == 0, run.output
    assert len(re.findall(r'"node\d +ok +serving .* old +out and back in 1 +-"', run.summary())) == 3, run.summary()
    assert sorted(w["id"] for w in gateway.workers()) == ids and all_healthy(gateway, nodes)
    assert [n.main_pids() for n in nodes] == pids
    # The gateway's own request log (its colours taken out): /workers was read, no write endpoint called.
    log = re.sub(r"\x1b\[[0-9;]*m", "", gateway.log())
    assert "method=GET uri=/workers " in log, log[-3000:]
    assert not re.search(r"method=(POST|DELETE|PUT) uri=/workers", log), log[-3000:]


def test_the_capacity_guard_refuses_before_any_node_is_touched(nodes, gateway_box, tmp_path):
    two = nodes[:2]
    gw = gpusim_gateway.Gateway(gateway_box, worker_urls=[n.url for n in two], args=["--disable-retries"])
    try:
        gw.start().wait_up(healthy=2)
        pids = [n.main_pids() for n in two]
        fleet = fleet_of(tmp_path, two, gw, sglang_gateway_min_healthy="2")
        run = fleet.playbook("restart_serving.yml", "-e", "gpuops_serial=1", "-e", json.dumps(server_args(0)))
        assert run.rc != 0, run.output
        assert ("Refusing to take %s out of the gateway: model %s would keep 1 healthy worker(s) (%s), fewer than the "
                "minimum of 2 (min_healthy 2 of 2 listed). Nothing was changed." % (two[0].url, MODEL, two[1].url)
                in run.words()), run.output
        assert [n.main_pids() for n in two] == pids, "a server was touched"
        assert all_healthy(gw, two) and len(gw.workers()) == 2
        summary = run.summary()
        assert "Rollout stopped after node1 failed; 1 host(s) never touched: node2." in summary, summary
        # node1: its server untouched, and so is its registration in the gateway (the last column).
        assert re.search(r'"node1 +FAILED +serving .* untouched +untouched +-"', summary), summary
    finally:
        gw.stop()


def test_a_rolling_restart_behind_the_gateway_fails_no_request(nodes, gateway, tmp_path):
    fleet = fleet_of(tmp_path, nodes, gateway)
    run, load, watch = rollout(fleet, nodes, gateway, 1)
    assert run.rc == 0, run.output
    assert load.results and load.failed() == [], (len(load.failed()), load.errors[:5])
    check_each_node_out_before_sigterm_and_back_after_its_checks(nodes, watch)
    assert all_healthy(gateway, nodes)
    assert len(re.findall(r'"node\d +ok +serving .* new +back in 1 +-"', run.summary())) == 3, run.summary()


def gateway_metrics(gw):
    with standin.OPENER.open(urllib.request.Request("http://127.0.0.1:%d/metrics" % gw.prometheus_port),
                             timeout=10) as res:
        return res.read().decode()


@pytest.mark.parametrize("gateway", [[]], indirect=True, ids=["default-retries"])
def test_the_same_with_the_gateways_retries(nodes, gateway, tmp_path):
    fleet = fleet_of(tmp_path, nodes, gateway)
    run, load, watch = rollout(fleet, nodes, gateway, 2)
    assert run.rc == 0, run.output
    assert load.results and load.failed() == [], (len(load.failed()), load.errors[:5])
    check_each_node_out_before_sigterm_and_back_after_its_checks(nodes, watch)
    assert all_healthy(gateway, nodes)
    # smg_worker_retries_total: the gateway's counter of retried requests, absent until a first retry.
    retried = sum(float(line.split()[-1]) for line in gateway_metrics(gateway).splitlines()
                  if line.startswith("smg_worker_retries_total"))
    print("requests %d, retried by the gateway %d" % (len(load.results), retried))


def test_a_canary_whose_relaunch_fails_stays_out_and_the_others_keep_serving(nodes, gateway, tmp_path):
    fleet = fleet_of(tmp_path, nodes, gateway)
    with open(fleet.inventory) as f:
        inventory = yaml.safe_load(f)
    # The canary's new server comes up on GPUs 0 and 1 and fails its check: its old server is already stopped.
    inventory["all"]["children"]["gpu_nodes"]["hosts"]["node1"]["sglang_launch_gpus"] = [2, 3]
    with open(fleet.inventory, "w") as f:
        yaml.safe_dump(inventory, f)
    others = [n.main_pids() for n in nodes[1:]]
    load = gpusim_gateway.Load(gateway.url, clients=3).start()
    try:
        run = fleet.playbook("restart_serving.yml", "-e", "gpuops_serial=1", "-e", json.dumps(server_args(3)),
                             timeout=600)
    finally:
        load.stop()
    assert run.rc != 0
    assert "it came up on the wrong GPUs" in run.words(), run.output
    assert load.results and load.failed() == [], (len(load.failed()), load.errors[:5])
    assert sorted(w["url"] for w in gateway.workers()) == sorted(n.url for n in nodes[1:])
    assert all(w["is_healthy"] for w in gateway.workers())
    assert [n.main_pids() for n in nodes[1:]] == others
    summary = run.summary()
    assert "LEFT OUT of 1" in summary, summary
    assert "node1 stays out of its SGLang Model Gateways: it failed, and its old server does not serve." in summary
    assert "never touched: node2, node3." in summary


def test_a_canary_that_the_installed_parser_refuses_never_leaves_its_gateways(nodes, gateway, tmp_path):
    fleet = fleet_of(tmp_path, nodes[1:], gateway)
    with open(fleet.inventory) as f:
        inventory = yaml.safe_load(f)
    # node2 leads this rollout; an argument that the installed SGLang's parser refuses fails its plan, before the
    # gateway step: its worker is never taken out, and its server never touched.
    inventory["all"]["children"]["gpu_nodes"]["hosts"]["node2"]["sglang_launch_server_args"] = dict(
        server_args(4)["sglang_launch_server_args"], no_such_argument=1)
    with open(fleet.inventory, "w") as f:
        yaml.safe_dump(inventory, f)
    pids = nodes[1].main_pids()
    load = gpusim_gateway.Load(gateway.url, clients=3).start()
    try:
        run = fleet.playbook("restart_serving.yml", "-e", "gpuops_serial=1", timeout=600)
    finally:
        load.stop()
    assert run.rc != 0
    assert nodes[1].main_pids() == pids, "the canary's server was touched"
    assert load.results and load.failed() == [], (len(load.failed()), load.errors[:5])
    assert nodes[1].url in [w["url"] for w in gateway.workers() if w["is_healthy"]], gateway.workers()
    assert re.search(r'"node2 +FAILED +serving .* untouched +untouched +-"', run.summary()), run.summary()
    assert "no_such_argument" in run.words() or "no-such-argument" in run.words(), run.output[-3000:]

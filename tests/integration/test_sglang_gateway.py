# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpuops.host.sglang_gateway through ansible-playbook against the real SGLang Model Gateway (sglang-router 0.3.2,
build/gateway), in a sandbox of its own, in front of two stand-in servers, its control plane behind an admin key:
check mode, apply, check mode again, apply again, for the take-out and the registration; the capacity guard; the
errors."""

from __future__ import annotations

import json

import pytest
import yaml

from gpusim import gateway as gpusim_gateway
from gpusim.fleet import Fleet, SimNode

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not gpusim_gateway.installed(), reason="make gateway installs the real gateway")]

ADMIN_KEY = "sk-gateway-admin-0123456789"


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    root = tmp_path_factory.mktemp("sglang-gateway")
    with SimNode(str(root / "node1"), gpus=1) as a, SimNode(str(root / "node2"), gpus=1) as b:
        for n in (a, b):
            n.start_server(["--tp-size", "1", "--served-model-name", "sim-llama"])
        yield a, b


@pytest.fixture(scope="module")
def gw(nodes):
    """The gateway on node1, where the module runs: a key goes over plain http only to a loopback listener that the
    module sees a gateway process hold (_gateway.key_refusal)."""
    a, b = nodes
    g = gpusim_gateway.Gateway(a.sandbox, admin_key=ADMIN_KEY)
    try:
        g.start()
        g.wait_up()
    except RuntimeError:
        g.stop()
        raise
    yield g
    g.stop()


def listed(g):
    return g.workers()


def run(fleet, tmp_path, tasks, *args):
    path = str(tmp_path / "play.yml")
    with open(path, "w") as f:
        yaml.safe_dump([{"name": "Gateway", "hosts": "gpu_nodes", "gather_facts": False, "tasks": tasks}], f)
    return fleet.playbook(path, *args)


def test_take_out_and_register_again(nodes, gw, tmp_path):
    a, b = nodes
    assert gw.add(a.url, labels={"zone": "east"}, priority=7, cost=2.5)[0] == 202
    assert gw.add(b.url)[0] == 202
    fleet = Fleet(str(tmp_path), [a])
    common = {"gateway_url": gw.url, "admin_key": ADMIN_KEY, "url": a.url + "/", "interval": 0.1, "wait_timeout": 30}
    tasks = [
        {"name": "Wait until both are healthy", "gpuops.host.sglang_gateway": {"gateway_url": gw.url, "admin_key": ADMIN_KEY},
         "register": "q", "until": "q.workers | selectattr('is_healthy') | list | length == 2", "retries": 100, "delay": 0.2},
        {"name": "Predict the take-out", "gpuops.host.sglang_gateway": dict(common, state="absent", min_healthy="1"),
         "check_mode": True, "register": "c1"},
        {"name": "Take out", "gpuops.host.sglang_gateway": dict(common, state="absent", min_healthy="1"), "register": "out"},
        {"name": "Take out again", "gpuops.host.sglang_gateway": dict(common, state="absent"), "register": "out2"},
        {"name": "Read", "gpuops.host.sglang_gateway": {"gateway_url": gw.url, "admin_key": ADMIN_KEY}, "register": "after_out"},
        {"name": "Predict the registration", "gpuops.host.sglang_gateway":
            dict(common, state="present", registration="{{ out.registration }}"), "check_mode": True, "register": "c2"},
        {"name": "Read again", "gpuops.host.sglang_gateway": {"gateway_url": gw.url, "admin_key": ADMIN_KEY}, "register": "after_c2"},
        {"name": "Register", "gpuops.host.sglang_gateway": dict(common, state="present", registration="{{ out.registration }}"),
         "register": "back"},
        {"name": "Register again", "gpuops.host.sglang_gateway": dict(common, state="present", registration="{{ out.registration }}"),
         "register": "back2"},
        {"name": "Check", "ansible.builtin.assert": {"that": [
            "c1.changed and c1.removed | length == 1",
            "out.changed and out.registration == {'priority': 7, 'cost': 2.5, 'worker_type': 'regular', 'labels': {'zone': 'east'}}",
            "out.capacity[out.worker.model_id] == {'total': 2, 'healthy_after': 1, 'required': 1}",
            "not out2.changed",
            "after_out.workers | map(attribute='url') | list == ['" + b.url + "']",
            "c2.changed and after_c2.workers | length == 1",
            "back.changed and back.worker.is_healthy and back.worker.id != out.removed[0]",
            "back.worker.priority == 7 and back.worker.cost == 2.5 and back.worker.metadata.zone == 'east'",
            "not back2.changed",
        ]}},
    ]
    result = run(fleet, tmp_path, tasks, "-vvv")
    assert result.rc == 0, result.output
    assert ADMIN_KEY not in result.output
    assert sorted(w["url"] for w in listed(gw) if w["is_healthy"]) == sorted([a.url, b.url])


def test_guard_unreachable_and_no_key(nodes, gw, tmp_path):
    a, b = nodes
    fleet = Fleet(str(tmp_path), [a])
    before = listed(gw)
    tasks = [
        {"name": "Guard", "gpuops.host.sglang_gateway": {"gateway_url": gw.url, "admin_key": ADMIN_KEY, "url": a.url,
                                                         "state": "absent", "min_healthy": "100%"},
         "register": "guard", "failed_when": False},
        {"name": "Guard with the batch", "gpuops.host.sglang_gateway": {
            "gateway_url": gw.url, "admin_key": ADMIN_KEY, "url": a.url, "state": "absent", "min_healthy": "1",
            "leaving": [b.url]}, "register": "batch", "failed_when": False},
        {"name": "No key", "gpuops.host.sglang_gateway": {"gateway_url": gw.url, "url": a.url, "state": "absent"},
         "register": "nokey", "failed_when": False},
        {"name": "Unreachable", "gpuops.host.sglang_gateway": {"gateway_url": "http://127.0.0.1:9", "url": a.url,
                                                               "state": "absent"},
         "register": "gone", "failed_when": False},
        {"name": "A key to a loopback port that is no gateway", "gpuops.host.sglang_gateway": {
            "gateway_url": a.url, "admin_key": ADMIN_KEY}, "register": "stranger", "failed_when": False},
        {"name": "A key over plain http to another host", "gpuops.host.sglang_gateway": {
            "gateway_url": "http://gateway.invalid:8080", "admin_key": ADMIN_KEY}, "register": "remote",
         "failed_when": False},
        {"name": "Write the results", "ansible.builtin.copy": {
            "content": "{{ {'guard': guard, 'batch': batch, 'nokey': nokey, 'gone': gone, 'stranger': stranger,"
                       " 'remote': remote} | to_json }}",
            "dest": str(tmp_path / "results.json"), "mode": "0600"}},
    ]
    result = run(fleet, tmp_path, tasks)
    assert result.rc == 0, result.output
    with open(tmp_path / "results.json") as f:
        results = json.load(f)
    assert results["guard"]["msg"] == (
        "Refusing to take %s out of the gateway: model sim-llama would keep 1 healthy worker(s) (%s), fewer than the "
        "minimum of 2 (min_healthy 100%% of 2 listed). Nothing was changed." % (a.url, b.url))
    assert results["guard"]["capacity"] == {"sim-llama": {"total": 2, "healthy_after": 1, "required": 2}}
    assert "would keep 0 healthy worker(s), fewer than the minimum of 1" in results["batch"]["msg"]
    assert results["nokey"]["msg"].startswith("GET %s/workers answered HTTP 401 (the control plane wants an admin "
                                              "key: set admin_key): " % gw.url)
    assert results["gone"]["msg"] == ("GET http://127.0.0.1:9/workers: the gateway is unreachable: nothing listens "
                                      "at http://127.0.0.1:9")
    # the SGLang server of node1 holds that port: it would have read the admin key
    assert results["stranger"]["msg"].startswith(
        "GET %s/workers: not sent, since it carries a key: %s is held by pid " % (a.url, a.url)), results["stranger"]
    assert results["stranger"]["msg"].endswith("not an SGLang Model Gateway")
    assert "plain http to another host" in results["remote"]["msg"]
    assert sorted(w["id"] for w in listed(gw)) == sorted(w["id"] for w in before)

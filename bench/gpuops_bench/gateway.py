# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A rolling serving restart behind the real SGLang Model Gateway, with and without the gateway step.

Four nodes serve one model behind one gateway (sglang-router 0.3.2, build/gateway, its defaults: retries on,
health checks every 60 s). A steady client load goes through the gateway; restart_serving.yml runs one node per
batch, once with sglang_gateway_urls set (each node taken out before its drain, back in after its checks) and
once without. Failed requests, capacity lost and the client's p99 latency against steady state, side by side."""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.request

from .common import WORK, log, summary
from .nodes import BenchNode

from gpusim import gateway as gpusim_gateway  # noqa: E402  (tests/sim is on sys.path through .common)
from gpusim import standin  # noqa: E402
from gpusim.fleet import Fleet, http_get  # noqa: E402
from gpusim.sandbox import Sandbox  # noqa: E402

VARIANTS = ("gateway step", "no gateway step")
MODEL = "bench-llama"
DEFINITION = (
    "{nodes} nodes of 2 GPUs, the SGLang stand-in at TP=2 started by hand at SGLang 0.5.23's shutdown pace (5 s "
    "watchdog wake-up), all serving the model {model} behind one SGLang Model Gateway (sglang-router 0.3.2, "
    "round_robin, its default retries and 60 s health checks) in a sandbox of its own; {clients} clients send "
    "16-token requests through the gateway back to back. Steady state: {steady} s of that load before the rollout. "
    "Then playbooks/restart_serving.yml -e gpuops_serial=1 under the same load, with sglang_gateway_urls set "
    "(gateway step) or not. Failed requests = answers other than 200 during the rollout. Capacity lost = the most "
    "workers that could not take a request at once (not listed healthy by the gateway, or listed while their "
    "server did not answer /health), read every 50 ms. p99 = the 99th percentile of the successful requests' "
    "latency. Retried = the gateway's smg_worker_retries_total (its Prometheus counter, absent until a retry).")


def _p99(latencies):
    if not latencies:
        return None
    values = sorted(latencies)
    return values[min(len(values) - 1, int(0.99 * len(values)))]


def _retries(gw):
    try:
        with standin.OPENER.open(urllib.request.Request("http://127.0.0.1:%d/metrics" % gw.prometheus_port),
                                 timeout=10) as res:
            text = res.read().decode()
    except OSError:
        return None
    return int(sum(float(line.split()[-1]) for line in text.splitlines()
                   if line.startswith("smg_worker_retries_total")))


def _trial(variant, workdir, nodes_count, clients, steady):
    nodes = [BenchNode(os.path.join(workdir, "node%d" % (i + 1)), gpus=2) for i in range(nodes_count)]
    box = Sandbox(os.path.join(workdir, "gateway"), gpus=0, decoys=False)
    started = []
    try:
        for n in nodes:
            n.__enter__()
            started.append(n)
            n.start_server(["--tp-size", "2", "--enable-metrics", "--served-model-name", MODEL], timeout=180)
        box.start()
        gw = gpusim_gateway.Gateway(box, worker_urls=[n.url for n in nodes]).start().wait_up(healthy=nodes_count)
        extra = {"sglang_launch_server_args": {"tp_size": 2, "enable_metrics": True, "served_model_name": MODEL}}
        if variant == "gateway step":
            extra.update(sglang_gateway_urls=[gw.url], sglang_gateway_worker_url="http://127.0.0.1:{{ sglang_launch_port }}",
                         sglang_gateway_interval=0.2)
        fleet = Fleet(workdir, nodes, **extra)
        probes = dict((n.url, (lambda n=n: http_get(n.url + "/health", timeout=2)[0] == 200)) for n in nodes)
        load = gpusim_gateway.Load(gw.url, clients=clients, max_new_tokens=16).start()
        try:
            time.sleep(steady)
            rollout_from = time.monotonic()
            watch = gpusim_gateway.Watch(gw, probes)
            watch.start()
            run = fleet.playbook("restart_serving.yml", "-e", "gpuops_serial=1", "-e", json.dumps(extra), timeout=900)
            watch.stop()
            rollout_to = time.monotonic()
        finally:
            load.stop()
        if run.rc != 0:
            raise RuntimeError("restart_serving.yml failed (%s):\n%s" % (variant, run.output[-4000:]))
        steady_ok = [e - s for s, e, st in load.results if s < rollout_from and st == 200]
        during = [(s, e, st) for s, e, st in load.results if rollout_from <= s < rollout_to]
        lost = max(sum(1 for url in probes if not (p[2].get(url) and p[3][url])) for p in watch.polls)
        return {"failed": sum(1 for r in during if r[2] != 200), "requests": len(during),
                "capacity_lost": lost, "workers": nodes_count,
                "p99_steady_s": _p99(steady_ok), "p99_rollout_s": _p99([e - s for s, e, st in during if st == 200]),
                "rollout_s": round(rollout_to - rollout_from, 1), "retried": _retries(gw),
                "healthy_at_end": sum(1 for w in gw.workers() if w["is_healthy"])}
    finally:
        if "gw" in locals():
            gw.stop()
        box.close()
        for n in reversed(started):
            n.__exit__(None, None, None)


def run(rounds, nodes=4, clients=4, steady=10):
    out = {"definition": DEFINITION.format(nodes=nodes, model=MODEL, clients=clients, steady=steady),
           "nodes": nodes, "trials": {}}
    for r in range(rounds):
        for variant in VARIANTS if r % 2 == 0 else reversed(VARIANTS):
            workdir = os.path.join(WORK, "gateway", "%s-%d" % (variant.replace(" ", "-"), r))
            shutil.rmtree(workdir, ignore_errors=True)
            os.makedirs(workdir)
            log("gateway: round %d, %s" % (r + 1, variant))
            out["trials"].setdefault(variant, []).append(_trial(variant, workdir, nodes, clients, steady))
    out["variants"] = {}
    for variant, trials in out["trials"].items():
        ratios = [t["p99_rollout_s"] / t["p99_steady_s"] for t in trials if t["p99_rollout_s"] and t["p99_steady_s"]]
        out["variants"][variant] = {
            "failed": summary([t["failed"] for t in trials]), "requests": summary([t["requests"] for t in trials]),
            "capacity_lost": summary([t["capacity_lost"] for t in trials]),
            "p99_steady_s": summary([t["p99_steady_s"] for t in trials]),
            "p99_rollout_s": summary([t["p99_rollout_s"] for t in trials]),
            "p99_ratio": summary(ratios), "rollout_s": summary([t["rollout_s"] for t in trials]),
            "retried": summary([t["retried"] for t in trials if t["retried"] is not None])}
    return out


def _cell(s, fmt="%s"):
    if not s or s.get("median") is None:
        return "-"
    if s["min"] == s["max"]:
        return fmt % s["median"]
    return (fmt + " (" + fmt + "-" + fmt + ")") % (s["median"], s["min"], s["max"])


def markdown(result):
    v = result["variants"]
    out = ["## Rolling serving restart behind the SGLang Model Gateway", "", result["definition"], "",
           "| Measure | Goal | %s |" % " | ".join(VARIANTS), "|---|---|%s" % ("---|" * len(VARIANTS))]
    rows = [("Failed requests during the rollout", "0 with the gateway step", "failed", "%d"),
            ("Requests during the rollout", "", "requests", "%d"),
            ("Capacity lost (workers at once, of %d)" % result["nodes"], "<= 1 (one batch)", "capacity_lost", "%d"),
            ("Client p99, steady state (s)", "", "p99_steady_s", "%.3f"),
            ("Client p99 during the rollout (s)", "", "p99_rollout_s", "%.3f"),
            ("p99 during the rollout / steady", "<= 1.5x", "p99_ratio", "%.2f"),
            ("Requests the gateway retried", "", "retried", "%d"),
            ("Rollout (s)", "", "rollout_s", "%.1f")]
    for label, goal, key, fmt in rows:
        cells = [_cell(v.get(name, {}).get(key), fmt) for name in VARIANTS]
        out.append("| %s | %s | %s |" % (label, goal, " | ".join(cells)))
    return out

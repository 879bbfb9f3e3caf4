# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Measurement 4: restart_extraction.yml over 1, 2, 4 and 8 nodes, defaults against bench/ansible.cfg."""

from __future__ import annotations

import contextlib
import json
import os
import statistics

from .common import RECOMMENDED_CFG, REPO, WORK, Ansible, TrialNode, log, summary

PLAYBOOK = os.path.join(REPO, "playbooks", "restart_extraction.yml")
DEFINITION = (
    "N local sandboxes (PID + mount namespaces, 8 simulated GPUs each) as N Ansible hosts with connection local, "
    "each running a hand-started SGLang stand-in at TP=8; one run of playbooks/restart_extraction.yml drains, "
    "stops, cleans and verifies every node and launches the stand-in in extraction mode until /health_generate "
    "answers. Waiting on servers = per node, the seconds_to_clean (gpu_reap + gpu_verify elapsed) plus "
    "seconds_to_ready (launch to ready) that the roles record, median over the nodes, as a share of the wall "
    "time; Ansible overhead = the rest. 'defaults' = an empty ansible.cfg (forks 5, no pipelining, implicit "
    "fact gathering off in the playbook anyway); 'recommended' = bench/ansible.cfg (forks 32, pipelining).")
RESULT_PLAY = """\
- name: Restart into extraction mode
  ansible.builtin.import_playbook: {playbook}

- name: Save what every node recorded
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Write the results of the launch role
      ansible.builtin.copy:
        content: "{{{{ dict(ansible_play_hosts_all | zip(ansible_play_hosts_all | map('extract', hostvars)
                   | map(attribute='sglang_launch_result', default=none))) | to_json }}}}"
        dest: "{{{{ bench_results_file }}}}"
        mode: "0644"
      delegate_to: localhost
      run_once: true
"""


def host_vars(node):
    """Each node's own port, paths and lock (gpusim.fleet); timings are the roles' defaults but the model load."""
    return node.host_vars(fast=False, sglang_launch_server_args={"tp_size": node.gpus, "enable_metrics": True})


def _inventory(path, nodes):
    with open(path, "w") as f:
        json.dump({"gpu_nodes": {"hosts": dict((name, host_vars(node)) for name, node in nodes.items())}}, f, indent=1)
    return path


def run(rounds, sizes=(1, 2, 4, 8), compare=(8,)):
    """COMPARE: the sizes run with both configurations; the others with the recommended one only."""
    if not os.path.exists(PLAYBOOK):
        raise RuntimeError("playbooks/restart_extraction.yml not found")
    wrapper = os.path.join(WORK, "restart_extraction_results.yml")
    os.makedirs(WORK, exist_ok=True)
    with open(wrapper, "w") as f:
        f.write(RESULT_PLAY.format(playbook=PLAYBOOK))
    configs = {"defaults": Ansible(), "recommended": Ansible(RECOMMENDED_CFG)}
    plan = dict((n, list(configs) if n in compare else ["recommended"]) for n in sizes)
    samples = dict(((n, c), []) for n in sizes for c in plan[n])
    failures = []
    with contextlib.ExitStack() as stack:
        nodes = {}
        for i in range(max(sizes)):
            name = "gpu%02d" % (i + 1)
            node = TrialNode(os.path.join(WORK, "nodes", "fleet-" + name), decoys=False, watchdog=5.0, name=name)
            nodes[name] = stack.enter_context(node)
        log("fleet: %d nodes up" % len(nodes))
        n_run = 0
        for r in range(rounds):
            for n in sizes:
                order = plan[n] if (r + n_run) % 2 == 0 else list(reversed(plan[n]))
                for c in order:
                    n_run += 1
                    subset = dict(list(nodes.items())[:n])
                    for node in subset.values():    # no record: the roles find the running server by pattern
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(os.path.join(node.state_dir, "server.json"))
                    inventory = _inventory(os.path.join(WORK, "fleet-inventory-%d.json" % n), subset)
                    results_file = os.path.join(WORK, "fleet-results.json")
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(results_file)
                    wall, out = configs[c].playbook(inventory, wrapper, {"bench_results_file": results_file})
                    per_host = {}
                    if os.path.exists(results_file):
                        with open(results_file) as f:
                            per_host = json.load(f)
                    ok = out.returncode == 0 and all(per_host.get(h) for h in subset)
                    if not ok:
                        failures.append({"nodes": n, "config": c, "rc": out.returncode, "tail": out.stdout[-3000:]})
                        log("fleet: %d nodes, %s: FAILED (rc %d)\n%s" % (n, c, out.returncode, out.stdout[-3000:]))
                        continue
                    waits = [float(v["seconds_to_clean"] or 0) + float(v["seconds_to_ready"] or 0)
                             for v in per_host.values()]
                    samples[(n, c)].append({"wall": wall, "wait": statistics.median(waits),
                                            "seconds_to_clean": [float(v["seconds_to_clean"] or 0) for v in per_host.values()],
                                            "seconds_to_ready": [float(v["seconds_to_ready"] or 0) for v in per_host.values()]})
                    log("fleet: %d nodes, %-11s round %d: %.1f s wall, %.1f s waiting on servers (median node)" % (
                        n, c, r + 1, wall, statistics.median(waits)))
    rows = []
    for (n, c), ss in samples.items():
        wall = summary([s["wall"] for s in ss])
        wait = summary([s["wait"] for s in ss])
        share = wait["median"] / wall["median"] if ss else None
        rows.append({"nodes": n, "config": c, "wall_s": wall, "server_wait_s": wait,
                     "wait_share": round(share, 3) if share is not None else None,
                     "overhead_share": round(1 - share, 3) if share is not None else None,
                     "runs": ss})
    rows.sort(key=lambda row: (row["nodes"], row["config"]))
    return {"definition": DEFINITION, "rounds": rounds, "hosts": "local sandboxes (not podman containers)",
            "rows": rows, "failures": failures, "notes": []}

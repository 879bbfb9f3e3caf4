# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Measurement 5: module overhead, an ad-hoc ansible call's wall time against the module's own elapsed."""

from __future__ import annotations

import os

from .common import RECOMMENDED_CFG, WORK, Ansible, TrialNode, log, summary

CALLS = {
    "gpu_reap (finds nothing)": ("gpu_reap", {"presets": ["sglang"], "kill_mode": "mixed"}),
    "gpu_verify (clean node)": ("gpu_verify", {"expected_count": 8, "timeout": 60}),
}
DEFINITION = (
    "on an 8-GPU node with no server (decoys only): wall time of `ansible node -m MODULE -a ARGS` (connection "
    "local, the node's Python as interpreter) against the `elapsed` the module returns; overhead = wall - "
    "elapsed: Ansible's start-up, inventory, module transfer and Python start-up on the target. Both with "
    "ansible-core's defaults and with bench/ansible.cfg (pipelining).")


def run(rounds):
    configs = {"defaults": Ansible(), "recommended": Ansible(RECOMMENDED_CFG)}
    samples = dict(((c, k), {"wall": [], "elapsed": []}) for c in configs for k in CALLS)
    with TrialNode(os.path.join(WORK, "nodes", "overhead"), server=False) as node:
        inventory = node.inventory()
        for r in range(rounds):
            order = [(c, k) for c in configs for k in CALLS]
            for c, k in (order if r % 2 == 0 else list(reversed(order))):
                module, args = CALLS[k]
                wall, results = configs[c].adhoc(inventory, module, args)
                status, result = results["node"]
                if status != "SUCCESS":
                    raise RuntimeError("%s failed on a clean node: %s" % (module, result.get("msg")))
                samples[(c, k)]["wall"].append(wall)
                samples[(c, k)]["elapsed"].append(result["elapsed"])
    report = {"definition": DEFINITION, "rounds": rounds, "calls": {}}
    for (c, k), s in samples.items():
        over = [w - e for w, e in zip(s["wall"], s["elapsed"])]
        report["calls"].setdefault(k, {})[c] = {
            "wall_s": summary(s["wall"]), "module_elapsed_s": summary(s["elapsed"]), "overhead_s": summary(over)}
        log("overhead %-26s %-11s wall %.2f s, module %.3f s" % (
            k, c, summary(s["wall"])["median"], summary(s["elapsed"])["median"]))
    return report

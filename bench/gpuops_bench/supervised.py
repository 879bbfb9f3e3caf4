# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Measurement: the stop of a server that a container runs, against the supervisor's own stop alone.

A 4-GPU node with a real Docker daemon in its sandbox (gpusim.docker) and a team's container: the
stand-in at TP=2 as `python -m sglang.launch_server`, `--restart unless-stopped`, host network. Each
round stops it twice, in alternating order, starting the container again (`docker start`) and
waiting for /health in between: `docker stop --time 60 team-sglang` alone, and
`ansible-playbook playbooks/stop_sglang.yml` (bench/ansible.cfg, role defaults). Over = the
playbook's wall time less `docker stop` alone's. After each stop, with the GPUs clean, the frame that
every gpuops playbook shares is timed too: `playbooks/verify_gpus.yml` is ansible-playbook's start,
the host lock, one module call (gpu_verify), the unlock and the summary.
"""

from __future__ import annotations

import os
import time

from .common import RECOMMENDED_CFG, REPO, WORK, Ansible, log, summary

from gpusim import docker  # noqa: E402  (common puts tests/sim on the path)
from gpusim.fleet import Fleet, SimNode, http_get  # noqa: E402

NAME = "team-sglang"
GOAL_S = 0.5
DEFINITION = (
    "a team's SGLang (the stand-in at TP=2) in a Docker container with --restart unless-stopped, host network, on a "
    "4-GPU node with a real Docker daemon: wall time of `docker stop --time 60` alone, and of "
    "`ansible-playbook playbooks/stop_sglang.yml` (bench/ansible.cfg, role defaults), which drains the server, "
    "stops it through `docker stop`, and verifies the GPUs; alternating, the container started again between. "
    "After each stop, `ansible-playbook playbooks/verify_gpus.yml` on the clean node: the frame of every gpuops "
    "playbook (start, host lock, one module call, unlock, summary) around a call that returns at once.")


def _healthy(node, timeout=120):
    deadline = time.monotonic() + timeout
    while http_get(node.url + "/health", timeout=5)[0] != 200:
        if time.monotonic() > deadline:
            raise RuntimeError("the container's server did not answer /health")
        time.sleep(0.1)


def run(rounds):
    if not docker.available():
        raise RuntimeError("dockerd is not installed (make deps installs docker.io)")
    ansible = Ansible(RECOMMENDED_CFG)
    samples = {"docker stop": [], "stop_sglang.yml": []}
    frame = []
    workdir = os.path.join(WORK, "nodes", "supervised")
    with SimNode(os.path.join(workdir, "node"), gpus=4, name="node") as node:
        with docker.Dockerd(node.sandbox) as engine:
            engine.run_standin(node, NAME, ["--tp-size", "2", "--enable-metrics"], restart="unless-stopped")
            _healthy(node)
            fleet = Fleet(workdir, [node], sglang_stop_term_timeout=60)
            playbook = os.path.join(REPO, "playbooks", "stop_sglang.yml")
            verify = os.path.join(REPO, "playbooks", "verify_gpus.yml")
            for r in range(rounds):
                order = list(samples) if r % 2 == 0 else list(reversed(list(samples)))
                for method in order:
                    if method == "docker stop":
                        start = time.monotonic()
                        engine.cli("stop", "--time", "60", NAME)
                        wall = time.monotonic() - start
                    else:
                        wall, out = ansible.playbook(fleet.inventory, playbook, env=engine.variables())
                        if out.returncode != 0:
                            raise RuntimeError("stop_sglang.yml failed:\n" + out.stdout[-3000:])
                    samples[method].append(wall)
                    log("supervised %-16s %.2f s" % (method, wall))
                    wall, out = ansible.playbook(fleet.inventory, verify)
                    if out.returncode != 0:
                        raise RuntimeError("verify_gpus.yml failed:\n" + out.stdout[-3000:])
                    frame.append(wall)
                    log("supervised %-16s %.2f s" % ("verify_gpus.yml", wall))
                    engine.cli("start", NAME)
                    _healthy(node)
    a, b = summary(samples["docker stop"]), summary(samples["stop_sglang.yml"])
    over = [p - d for d, p in zip(samples["docker stop"], samples["stop_sglang.yml"])]
    return {"definition": DEFINITION, "rounds": rounds, "docker_stop_s": a, "stop_sglang_s": b,
            "over_s": summary(over), "frame_s": summary(frame), "goal_s": GOAL_S,
            "met": summary(over)["median"] is not None and summary(over)["median"] <= GOAL_S}


def goals(result):
    return [("stop_sglang.yml over `docker stop` alone, a container server", "<= %.1f s" % result["goal_s"],
             "%.2f s (playbook %.2f s, docker stop %.2f s)" % (result["over_s"]["median"],
                                                               result["stop_sglang_s"]["median"],
                                                               result["docker_stop_s"]["median"]), result["met"])]


def markdown(result):
    def cell(s):
        return "%.2f (%.2f-%.2f)" % (s["median"], s["min"], s["max"])
    rows = ["## Stop through a container engine", "", result["definition"], "",
            "| Method | Wall (s) |", "|---|---|",
            "| docker stop --time 60 alone | %s |" % cell(result["docker_stop_s"]),
            "| playbooks/stop_sglang.yml | %s |" % cell(result["stop_sglang_s"]),
            "| over docker stop alone | %s |" % cell(result["over_s"])]
    if result.get("frame_s"):
        rows.append("| playbooks/verify_gpus.yml on the clean node (the frame) | %s |" % cell(result["frame_s"]))
    return rows + [""]

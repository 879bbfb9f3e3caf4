# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Measurement: servers that a container runs, under a real Docker daemon in a 4-GPU node's sandbox (gpusim.docker).

The stop of a team's container, against the supervisor's own stop alone: the stand-in at TP=2 as
`python -m sglang.launch_server`, `--restart unless-stopped`, host network. Each round stops it twice, in
alternating order, starting the container again (`docker start`) and waiting for /health in between:
`docker stop --time 60 team-sglang` alone, and `ansible-playbook playbooks/stop_sglang.yml` (bench/ansible.cfg,
role defaults). Over = the playbook's wall time less `docker stop` alone's; and the playbook's one stop call (the
sglang_server task of the sglang_stop role, from the timeline callback) less `docker stop` alone's. After each
stop, with the GPUs clean, the frame that every gpuops playbook shares is timed too: `playbooks/verify_gpus.yml`
is ansible-playbook's start, the host lock, one module call (gpu_verify), the unlock and the summary.

Then the downtime of restart_extraction.yml when the collection itself runs the server in a container
(`sglang_launch_supervisor: docker`, as tests/integration/test_containers.py launches it) at SGLang 0.5.23's
shutdown pace: restart_serving.yml first, then restart_extraction.yml under downtime.py's steady load, split as
downtime.py splits it. The container's output goes to the engine only (the role mounts no log directory), so
the servers' lines are taken from `docker logs --follow`, timed as they arrive.
"""

from __future__ import annotations

import os
import time

from .common import RECOMMENDED_CFG, REPO, WORK, Ansible, Watch, log, summary, wait_healthy
from .downtime import restart_under_load, summarize, table
from .nodes import REAL_PACE_ENV, BenchFleet
from .timeline import ContainerLogs, Tasks, callback_env

from gpusim import docker  # noqa: E402  (common puts tests/sim on the path)
from gpusim.fleet import Fleet, SimNode  # noqa: E402

NAME = "team-sglang"
GOAL_S = 0.5
MODULE_GOAL_S = 0.5
CONTAINER_GOAL_S = 1.0
THINK = 0.3
# what sglang_launch labels its containers with (roles/sglang_launch/vars/main.yml)
CONTAINER_LABEL = "gpuops.host.role=sglang_launch"
STOP_MODULE = "gpuops.host.sglang_server"
DEFINITION = (
    "a team's SGLang (the stand-in at TP=2) in a Docker container with --restart unless-stopped, host network, on a "
    "4-GPU node with a real Docker daemon: wall time of `docker stop --time 60` alone, and of "
    "`ansible-playbook playbooks/stop_sglang.yml` (bench/ansible.cfg, role defaults), which drains the server, "
    "stops it through `docker stop`, and verifies the GPUs; alternating, the container started again between. "
    "The stop's one module call: the sglang_stop role's gpuops.host.sglang_server task inside that playbook, from "
    "its start to its result (gpuops_timeline callback), less `docker stop` alone in the same round. "
    "After each stop, `ansible-playbook playbooks/verify_gpus.yml` on the clean node: the frame of every gpuops "
    "playbook (start, host lock, one module call, unlock, summary) around a call that returns at once.")
CONTAINER_DEFINITION = (
    "the same node, the collection's own container: sglang_launch_supervisor: docker with the host variables of "
    "tests/integration/test_containers.py (an empty image that mounts the stand-in, the node's /dev/nvidia* files, "
    "host network), TP=2, SGLang 0.5.23's shutdown pace in sglang_launch_environment (5 s watchdog wake-up, ~1 s "
    "memory release per scheduler), the roles' default timings. Each round: playbooks/restart_serving.yml starts a "
    "serving server, then playbooks/restart_extraction.yml replaces it while a client sends one request at a time "
    "(16 tokens, then {think} s pause; a failed request is retried after 50 ms). Split as the downtime measurement "
    "splits it: the old server's exit = its 'SIGTERM received' line -> the in-node NVML poller sees every GPU free; "
    "the new server's load = its main process start (/proc: the daemon runs in the node's PID namespace) -> its "
    "'ready to roll' line; overhead = downtime - exit - load. The servers' lines come from `docker logs --follow`, "
    "timed on arrival: the container's output is not a file on the node.")


def run(rounds):
    if not docker.available():
        raise RuntimeError("dockerd is not installed (make deps installs docker.io)")
    ansible = Ansible(RECOMMENDED_CFG)
    samples = {"docker stop": [], "stop_sglang.yml": []}
    module, frame = [], []
    workdir = os.path.join(WORK, "nodes", "supervised")
    with SimNode(os.path.join(workdir, "node"), gpus=4, name="node") as node:
        with docker.Dockerd(node.sandbox) as engine:
            engine.run_standin(node, NAME, ["--tp-size", "2", "--enable-metrics"], restart="unless-stopped")
            wait_healthy(node.url)
            fleet = Fleet(workdir, [node], sglang_stop_term_timeout=60)
            playbook = os.path.join(REPO, "playbooks", "stop_sglang.yml")
            verify = os.path.join(REPO, "playbooks", "verify_gpus.yml")
            timeline = os.path.join(workdir, "stop-timeline.jsonl")
            for r in range(rounds):
                order = list(samples) if r % 2 == 0 else list(reversed(list(samples)))
                for method in order:
                    if method == "docker stop":
                        start = time.monotonic()
                        engine.cli("stop", "--time", "60", NAME)
                        wall = time.monotonic() - start
                    else:
                        if os.path.exists(timeline):
                            os.unlink(timeline)
                        wall, out = ansible.playbook(fleet.inventory, playbook,
                                                     env=dict(engine.variables(), **callback_env(timeline)))
                        if out.returncode != 0:
                            raise RuntimeError("stop_sglang.yml failed:\n" + out.stdout[-3000:])
                        module.append(Tasks(timeline).span(STOP_MODULE, role="sglang_stop"))
                        log("supervised %-16s %s s" % ("its stop call", module[-1] and round(module[-1], 2)))
                    samples[method].append(wall)
                    log("supervised %-16s %.2f s" % (method, wall))
                    wall, out = ansible.playbook(fleet.inventory, verify)
                    if out.returncode != 0:
                        raise RuntimeError("verify_gpus.yml failed:\n" + out.stdout[-3000:])
                    frame.append(wall)
                    log("supervised %-16s %.2f s" % ("verify_gpus.yml", wall))
                    engine.cli("start", NAME)
                    wait_healthy(node.url)
            engine.cli("rm", "--force", NAME)
            trials = _container_trials(rounds, node, engine, os.path.join(workdir, "container"))
    a, b = summary(samples["docker stop"]), summary(samples["stop_sglang.yml"])
    over = summary([p - d for d, p in zip(samples["docker stop"], samples["stop_sglang.yml"])])
    module_over = summary([None if m is None else m - d for d, m in zip(samples["docker stop"], module)])
    container = summarize(trials)
    return {"definition": DEFINITION, "rounds": rounds, "docker_stop_s": a, "stop_sglang_s": b,
            "over_s": over, "frame_s": summary(frame), "goal_s": GOAL_S,
            "met": over["median"] is not None and over["median"] <= GOAL_S,
            "samples_s": dict((k, [round(v, 3) for v in vs]) for k, vs in samples.items()),
            "module_samples_s": [None if m is None else round(m, 3) for m in module],
            "module_s": summary(module), "module_over_s": module_over, "module_goal_s": MODULE_GOAL_S,
            "module_met": module_over["median"] is not None and module_over["median"] <= MODULE_GOAL_S,
            "container": {"definition": CONTAINER_DEFINITION.format(think=THINK), "row": container,
                          "goal_s": CONTAINER_GOAL_S, "trials": trials}}


def _container_trials(rounds, node, engine, workdir):
    """ROUNDS of restart_serving.yml, then restart_extraction.yml under load, the collection's container each time."""
    # the host variables of tests/integration/test_containers.py, at SGLang 0.5.23's shutdown pace
    # The extraction run of the round before, which this measurement's own client fed, is cut by the next round's
    # restart on purpose: sglang_stop_cut_active_run.
    fleet = BenchFleet(workdir, [node], fast=False, sglang_stop_cut_active_run=True,
                       **engine.launch_vars(node, REAL_PACE_ENV))
    fleet.extra_env = engine.variables()     # the modules ask the engine that this measurement started
    trials = []
    for r in range(rounds):
        serving = fleet.run("restart_serving.yml", tag="serving")
        if serving["rc"] != 0:
            trials.append({"rc": serving["rc"], "error": "restart_serving.yml failed (rc %d)" % serving["rc"],
                           "output_tail": serving["output"][-3000:]})
            log("supervised container round %d: restart_serving.yml failed" % (r + 1))
            continue
        wait_healthy(node.url)
        old = node.record()["container"]
        watch = Watch(node.sandbox)
        try:
            tail = ContainerLogs(engine.variables(), containers=[old], label=CONTAINER_LABEL)
            t = restart_under_load(fleet, node, tail, watch, THINK, old_log=old)
        finally:
            watch.close()
        record, main = node.record(), node.main_pids()
        t.update(old_container=old, new_container=record["container"])
        if "error" not in t and main[-1:] != [record["pid"]]:     # the process whose start time was taken
            t["error"] = "the node's newest SGLang main process %s is not the container's %d" % (main, record["pid"])
        log("supervised container round %d: %s" % (r + 1, t.get("error") or
            "downtime %.2f s = exit %.2f + load %.2f + overhead %.2f s (%d remote tasks stop->ready)" % (
                t["downtime"], t["old_exit_in_window"], t["new_load"], t["overhead"], t["remote_tasks_stop_to_ready"])))
        trials.append(t)
    return trials


def _fmt(s):
    return "-" if s.get("median") is None else "%.2f s" % s["median"]


def goals(result):
    rows = [("stop_sglang.yml over `docker stop` alone, a container server", "<= %.1f s" % result["goal_s"],
             "%.2f s (playbook %.2f s, docker stop %.2f s)" % (result["over_s"]["median"],
                                                               result["stop_sglang_s"]["median"],
                                                               result["docker_stop_s"]["median"]), result["met"])]
    if result.get("module_over_s"):
        rows.append(("the stop's one module call over docker stop alone", "<= %.1f s" % result["module_goal_s"],
                     "%s (the call %s, docker stop %s)" % (_fmt(result["module_over_s"]), _fmt(result["module_s"]),
                                                           _fmt(result["docker_stop_s"])),
                     None if result["module_over_s"]["median"] is None else result["module_met"]))
    container = result.get("container")
    if container:
        row, goal = container["row"], container["goal_s"]
        over = row["overhead"]["median"]
        rows.append(("collection's overhead within the downtime of restart_extraction.yml, the server in a Docker "
                     "container", "<= %.1f s" % goal,
                     "-" if over is None else "%.2f s of %.2f s downtime (exit %.2f s, load %.2f s)" % (
                         over, row["downtime"]["median"], row["old_exit_in_window"]["median"],
                         row["new_load"]["median"]),
                     None if over is None else ("yes" if over <= goal else "**no** (+%.2f s)" % (over - goal))))
    return rows


def markdown(result):
    def cell(s):
        return "-" if s.get("median") is None else "%.2f (%.2f-%.2f)" % (s["median"], s["min"], s["max"])
    rows = ["## Stop through a container engine", "", result["definition"], "",
            "| Method | Wall (s) |", "|---|---|",
            "| docker stop --time 60 alone | %s |" % cell(result["docker_stop_s"]),
            "| playbooks/stop_sglang.yml | %s |" % cell(result["stop_sglang_s"]),
            "| over docker stop alone | %s |" % cell(result["over_s"])]
    if result.get("module_s"):
        rows += ["| its stop call (sglang_stop's gpuops.host.sglang_server task) | %s |" % cell(result["module_s"]),
                 "| the stop call over docker stop alone | %s |" % cell(result["module_over_s"])]
    if result.get("frame_s"):
        rows.append("| playbooks/verify_gpus.yml on the clean node (the frame) | %s |" % cell(result["frame_s"]))
    container = result.get("container")
    if container:
        rows += ["", "### restart_extraction.yml, the server in the collection's Docker container", "",
                 container["definition"], ""]
        rows += table({"docker": container["row"]}, first="Supervisor")
        row = container["row"]
        if row["overhead"]["median"] is not None:
            spans = tuple("%.2f-%.2f" % (row[key]["min"], row[key]["max"])
                          for key in ("old_exit_in_window", "new_load", "overhead"))
            rows += ["", "Min-max over the runs: old server's exit %s s, new server's load %s s, "
                     "overhead %s s." % spans]
        names = container["row"].get("remote_task_names")
        if names:
            rows += ["", "Remote tasks between the SIGTERM and the ready line (first run): " +
                     "; ".join("%d. %s" % (i + 1, n) for i, n in enumerate(names)) + "."]
        failed = [t for t in container["trials"] if "error" in t]
        if failed:
            rows += ["", "Failed rounds: %d. First: %s; output's end:" % (len(failed), failed[0]["error"]), "",
                     "```", failed[0].get("output_tail", "").strip()[-2000:], "```"]
    return rows + [""]

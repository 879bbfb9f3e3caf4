# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Measurement 1: time to clean an 8-GPU node running SGLang at TP=8, hand procedures against gpuops."""

from __future__ import annotations

import json
import os
import subprocess
import time

from .common import (AGENTS, RECOMMENDED_CFG, REPO, UNBUFFERED_ENV, VENV_PYTHON, WORK, Ansible, TrialNode, log, ratio,
                     summary)
from .nodes import SIGTERM_LINE
from .timeline import LogTail, Tasks, callback_env

HAND_A = ('pkill -f "sglang"; sleep 2; ps aux | grep python3 | grep -v grep | awk \'{print $2}\' | xargs -r kill -9; '
          'sleep 1; fuser -k /dev/nvidia*; sleep 2; python %s --once\n' % os.path.join(AGENTS, "nvml_watch.py"))
HAND_B = "pkill -9 -f sglang; sleep 3; pgrep -af sglang\n"

# The module path is the call the roles make (sglang_stop's call of gpu_clean): gpu_reap, which waits for the
# GPUs in the same call (verify, at gpu_verify's default poll interval), with the node's GPU count.
POLL_INTERVAL = 0.1
VERIFY_ARGS = {"expected_count": 8, "timeout": 60}
REAP_ARGS = {"presets": ["sglang"], "kill_mode": "mixed", "term_timeout": 60, "verify": VERIFY_ARGS}
STOP_PLAYBOOK = os.path.join(REPO, "playbooks", "stop_sglang.yml")
CALL_PLAYBOOK = os.path.join(REPO, "bench", "playbooks", "stop_call.yml")

METHODS = {
    "hand_a": HAND_A.strip().replace("python %s --once" % os.path.join(AGENTS, "nvml_watch.py"),
                                     "nvidia-smi") + " (nvidia-smi = a pynvml read of every GPU)",
    "hand_b": HAND_B.strip(),
    "gpuops_adhoc": "ansible node -m gpuops.host.gpu_reap -a '%s' (bench/ansible.cfg)" % json.dumps(REAP_ARGS),
    "stop_sglang": "ansible-playbook playbooks/stop_sglang.yml (bench/ansible.cfg, role defaults)",
    "stop_sglang_unbuffered": "the same with PYTHONUNBUFFERED=1 in ansible-playbook's environment, which the local "
                              "connection passes on to the node's Python",
    "stop_call": "ansible-playbook bench/playbooks/stop_call.yml: the call that stop_sglang.yml makes, alone in a "
                 "one-task play (bench/ansible.cfg)",
}
PLAYBOOK_METHODS = ("stop_sglang", "stop_sglang_unbuffered", "stop_call")
VARIANTS = {
    "prompt": (),                      # exits at the watchdog's next check after SIGTERM
    "ignore_sigterm": ("ignore_sigterm",),
    "crowded": (),                     # prompt, on a node of CROWD processes
}
# The crowded node: 2,000 more idle processes of 50 open files each (agents/crowd.py, as the scan measurement's), where
# reading every process's files (the listener's tie, the GPU holders left alone) costs about 0.5 s; the methods of
# gpuops only.
CROWD = (2000, 50)
CROWD_METHODS = ("gpuops_adhoc", "stop_sglang", "stop_call")
DEFINITION = (
    "seconds from the start of the procedure until every GPU is verified at zero. gpuops: until gpu_reap's "
    "verification (ad hoc, or inside stop_sglang.yml) has returned clean, i.e. the end of the command. Hand procedures: the "
    "later of the procedure's end and the moment an independent NVML poller inside the node (every 10 ms: no "
    "process listed and v2 used <= 32 MiB on all 8 GPUs) first saw all GPUs at baseline; none when it never did.")


# The task of the stop's one call in stop_sglang.yml (roles/sglang_stop/tasks/main.yml) and in stop_call.yml.
STOP_CALL = r"Find, drain, stop through the supervisors"


def _trial(method, variant, workdir, ansible, watchdog):
    with TrialNode(workdir, faults=VARIANTS[variant], watchdog=watchdog) as node:
        crowd = None
        if variant == "crowded":
            crowd = node.sb.popen([VENV_PYTHON, os.path.join(AGENTS, "crowd.py")] + [str(n) for n in CROWD],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/")
            if not crowd.stdout.readline().startswith("ready"):
                raise RuntimeError("the crowd of idle processes did not start")
        inventory = node.inventory()
        script = os.path.join(workdir, "procedure.sh")
        with open(script, "w") as f:
            f.write(HAND_A if method == "hand_a" else HAND_B)
        detail = {}
        tail = LogTail([node.server.log_path]).__enter__()
        start = time.monotonic()
        if method in ("hand_a", "hand_b"):
            out = node.sb.run(["bash", script], capture_output=True, text=True, cwd="/", timeout=300)
            end = time.monotonic()
            detail["output"] = (out.stdout + out.stderr)[-400:]
            verified = True
        elif method == "gpuops_adhoc":
            reap_wall, reap = ansible.adhoc(inventory, "gpu_reap", REAP_ARGS)
            end = time.monotonic()
            status, result = reap["node"]
            check = result.get("verify") or {}
            verified = status in ("SUCCESS", "CHANGED") and check.get("clean") is True
            detail["module_seconds"] = result.get("elapsed")
            detail.update(reap_status=status, reap_elapsed=result.get("elapsed"), verify_elapsed=check.get("elapsed"),
                          verify_polls=check.get("polls"), reap_wall=round(reap_wall, 3),
                          signals=sorted(set(s for t in result.get("stopped", []) for s in t["signals"])))
        else:
            timeline = os.path.join(workdir, "timeline.jsonl")
            if os.path.exists(timeline):      # a work directory of an earlier bench run
                os.unlink(timeline)
            env = dict(callback_env(timeline), **(UNBUFFERED_ENV if method == "stop_sglang_unbuffered" else {}))
            wall, out = ansible.playbook(inventory, CALL_PLAYBOOK if method == "stop_call" else STOP_PLAYBOOK, env=env)
            end = time.monotonic()
            verified = out.returncode == 0
            if not verified:
                detail["output"] = out.stdout[-1500:]
        node.watch.wait(True, 30)
        clean_at = node.watch.clean_since()
        tail.close()
        detail["gpus_clean_s"] = None if clean_at is None else round(clean_at - start, 3)
        # The server's own exit: from the SIGTERM its log reports until the poller saw every GPU free.
        sigterm, dummy = tail.first(SIGTERM_LINE)
        detail["sigterm_s"] = None if sigterm is None else round(sigterm - start, 3)
        detail["own_exit_s"] = None if None in (sigterm, clean_at) else round(clean_at - sigterm, 3)
        if method in PLAYBOOK_METHODS and None not in (sigterm, clean_at):
            tasks = Tasks(timeline)   # remote tasks before the SIGTERM and after the GPUs were free
            detail["remote_tasks_before_sigterm"] = len(tasks.remote(end=sigterm))
            detail["remote_tasks_after_free"] = len(tasks.remote(start=clean_at))
            detail["first_task_s"] = round((tasks.records[0]["t"] if tasks.records else start) - start, 3)
            # The stop's one call (sglang_server's stop) from its start to its result.
            call_start, call_end = tasks.started(STOP_CALL), tasks.first(STOP_CALL)
            if None not in (call_start, call_end):
                detail["call_start_s"] = round(call_start - start, 3)
                detail["call_end_s"] = round(call_end - start, 3)
        census = node.census()
        if crowd is not None:
            crowd.stdin.close()
            crowd.wait(60)
    if method in ("hand_a", "hand_b"):
        verified_at = max(end, clean_at) if clean_at else None
    else:
        verified_at = end if verified else None
        detail["poller_clean_before_end"] = clean_at is not None and clean_at <= end
    node_clean = clean_at is not None and not census["server_left"]
    seconds = None if verified_at is None else verified_at - start
    if method not in ("hand_a", "hand_b") and None not in (seconds, detail["own_exit_s"]):
        detail["over_own_exit_s"] = round(seconds - detail["own_exit_s"], 3)
        if detail.get("module_seconds") is not None:
            detail["module_over_own_exit_s"] = round(detail["module_seconds"] - detail["own_exit_s"], 3)
    return dict(detail, method=method, variant=variant, seconds=None if verified_at is None else round(verified_at - start, 3),
                procedure_seconds=round(end - start, 3), node_clean=node_clean, **census)


def run(rounds, watchdog=5.0, methods=None):
    methods = [m for m in METHODS if methods is None or m in methods]
    if not os.path.exists(STOP_PLAYBOOK):
        log("playbooks/stop_sglang.yml not found: measured without it")
        methods = [m for m in methods if m not in PLAYBOOK_METHODS]
    ansible = Ansible(RECOMMENDED_CFG)
    trials = []
    n = 0
    for variant in VARIANTS:
        chosen = [m for m in methods if variant != "crowded" or m in CROWD_METHODS]
        for r in range(rounds):
            order = chosen[r % len(chosen):] + chosen[:r % len(chosen)]   # rotate who goes first
            for method in order:
                n += 1
                t = _trial(method, variant, os.path.join(WORK, "nodes", "stop%02d" % n), ansible, watchdog)
                log("stop %-14s %-11s round %d: %s s, clean=%s, decoys killed=%s" % (
                    variant, method, r + 1, t["seconds"], t["node_clean"], ",".join(t["decoys_killed"]) or "none"))
                trials.append(t)
    report = {"definition": DEFINITION, "watchdog_interval_s": watchdog, "rounds": rounds,
              "poll_interval_s": POLL_INTERVAL, "crowd": list(CROWD),
              "methods": dict((m, METHODS[m]) for m in methods), "variants": {}}
    for variant in VARIANTS:
        rows = {}
        for m in methods:
            ts = [t for t in trials if t["variant"] == variant and t["method"] == m]
            if not ts:
                continue
            killed = sorted(set(d for t in ts for d in t["decoys_killed"]))
            rows[m] = {"seconds": summary([t["seconds"] for t in ts]),
                       "gpus_clean_s": summary([t["gpus_clean_s"] for t in ts]),
                       "module_seconds": summary([t.get("module_seconds") for t in ts]),
                       "procedure_seconds": summary([t["procedure_seconds"] for t in ts]),
                       "sigterm_s": summary([t.get("sigterm_s") for t in ts]),
                       "own_exit_s": summary([t.get("own_exit_s") for t in ts]),
                       "over_own_exit_s": summary([t.get("over_own_exit_s") for t in ts]),
                       "module_over_own_exit_s": summary([t.get("module_over_own_exit_s") for t in ts]),
                       "remote_tasks_before_sigterm": summary([t.get("remote_tasks_before_sigterm") for t in ts]),
                       "remote_tasks_after_free": summary([t.get("remote_tasks_after_free") for t in ts]),
                       "first_task_s": summary([t.get("first_task_s") for t in ts]),
                       "call_start_s": summary([t.get("call_start_s") for t in ts]),
                       "call_end_s": summary([t.get("call_end_s") for t in ts]),
                       "clean": "%d/%d" % (sum(t["node_clean"] for t in ts), len(ts)),
                       "all_clean": all(t["node_clean"] for t in ts),
                       "decoys_killed": killed}
        base = rows["hand_a"]["seconds"]["median"] if "hand_a" in rows else None
        for m in rows:
            rows[m]["ratio_to_hand_a"] = ratio(rows[m]["seconds"]["median"], base)
        report["variants"][variant] = rows
    report["trials"] = trials
    return report

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Measurement: the collection's own unit under systemd as PID 1, stopped and restarted.

The node is a Podman container of the simulated node image (make image) with systemd as PID 1, as
molecule/systemd runs it, but on the host's network so that the load comes from the bench itself. Ansible
reaches it as every other measurement reaches its node: connection local with pipelining, and an interpreter
that runs the container's Python in the cgroups and every namespace of the container's PID 1 (nsenter), so
that systemctl talks to the container's systemd; a host directory mounted at the same path in the container
holds Ansible's temporary files, which an action that transfers a file (template, copy) hands to its module by
path. The server is the collection's unit, gpuops-sglang.service (the stand-in at TP=4 at SGLang 0.5.23's
shutdown pace), as the user sglang.

1. Each round stops it twice, in alternating order, starting the unit again (`systemctl start`) and waiting
   for /health in between: `systemctl stop gpuops-sglang.service` alone (run in the container the same way,
   timed from the host), and `ansible-playbook playbooks/stop_sglang.yml`. Over = the playbook's wall time,
   and the stop's own module call (sglang_server in sglang_stop, from the timeline), less `systemctl stop`
   alone's.
2. restart_extraction.yml on the serving unit under a steady request load: the downtime split as the
   downtime measurement splits it (downtime.restart_under_load), the server's log read from the container's
   root file system, the NVML poller run inside the container. Between rounds restart_serving.yml takes the
   node back to serving mode, untimed.

Every time is the machine's monotonic clock, which the container shares.
"""

from __future__ import annotations

import configparser
import json
import os
import shlex
import shutil
import socket
import subprocess
import threading
import time

import yaml

from .downtime import restart_under_load, summarize
from .common import AGENTS, RECOMMENDED_CFG, REPO, WORK, Ansible, Watch, log, summary, wait_healthy
from .nodes import REAL_PACE_ENV
from .timeline import LogTail, Tasks, callback_env

NAME = "gpuops-bench-systemd"
UNIT = "gpuops-sglang.service"
GPUS = 4
IMAGE_REF = os.path.join(REPO, "build", "sim", "image", "ref")
NODE_PYTHON = "/usr/bin/python3"
NODE_AGENTS = "/opt/gpuops-bench"
# roles/sglang_launch: sglang_launch_log is sglang_launch_log_dir/<run marker>.log, a new file for every launch.
NODE_LOG_DIR = "/var/log/sglang"
# A port for the server on the host's network, below the usual ephemeral range (32768-60999).
PORTS = range(30100, 30200)
# A stop still running this long after its start: what is left in the unit's cgroup is written down.
STALL_S = 15
STOP_GOAL_S = 0.5
OVERHEAD_GOAL_S = 1.0
# The stop's one module call in stop_sglang.yml: this action in the role sglang_stop.
STOP_MODULE = "gpuops.host.sglang_server"
DEFINITION = (
    "one 4-GPU node, a Podman container of the simulated node image with systemd as PID 1 (as molecule/systemd "
    "runs it, on the host's network). Ansible reaches it as the other measurements reach their nodes: connection "
    "local with bench/ansible.cfg (pipelining), ansible_python_interpreter a wrapper that runs the container's "
    "/usr/bin/python3 in the cgroups of the container's PID 1 and, with `nsenter --all`, in its mount, PID, network, "
    "UTS and IPC namespaces, with the container's environment; remote_tmp and local_tmp in a host directory "
    "mounted at the same path in the container, where template and copy put the files their modules read. The "
    "server is the collection's unit gpuops-sglang.service "
    "(the stand-in at TP=4 as the user sglang, at SGLang 0.5.23's shutdown pace: 5 s watchdog wake-up, ~1 s memory "
    "release), written and started by playbooks/restart_serving.yml.")
STOP_DEFINITION = (
    "Each round, alternating: `systemctl stop gpuops-sglang.service` alone (run in the container through the "
    "same nsenter wrapper, timed from the host) "
    "and `ansible-playbook playbooks/stop_sglang.yml`, the unit started again with `systemctl start` and /health "
    "answering 200 between. Over = the playbook's wall time less `systemctl stop` alone's in the same round; "
    "module call = the stop's own task (gpuops.host.sglang_server in role sglang_stop) from its start to its "
    "result (gpuops_timeline callback).")
RESTART_DEFINITION = (
    "The unit serving, a client on the host sends one request at a time (16 tokens, then {think} s pause; a "
    "failed request is retried after 50 ms) while playbooks/restart_extraction.yml runs; restart_serving.yml "
    "takes the node back to serving mode between rounds, untimed. Downtime = last request completed by the old "
    "server -> first completed by the new one. Old server's exit = its log's SIGTERM line -> the NVML poller "
    "inside the container sees every GPU free. New server's load = the unit's new main process start (/proc) -> "
    "its log's 'ready to roll' line (the log read every 10 ms from the container's root file system). Overhead = "
    "downtime - exit - load. Remote tasks = module executions between the SIGTERM and the ready line.")


def _port():
    """The first port of PORTS on which nothing on the host listens on 127.0.0.1."""
    for port in PORTS:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in %d-%d on the host" % (PORTS[0], PORTS[-1]))


def _cgroup_procs(pid):
    """The cgroup.procs files of the cgroups of process PID, one per hierarchy (cgroup v1's controllers and named
    hierarchies, v2's unified one at /sys/fs/cgroup/unified or /sys/fs/cgroup)."""
    unified = "/sys/fs/cgroup/unified" if os.path.isdir("/sys/fs/cgroup/unified") else "/sys/fs/cgroup"
    paths = []
    with open("/proc/%d/cgroup" % pid) as f:
        for line in f.read().splitlines():
            dummy, controllers, path = line.split(":", 2)
            root = unified if not controllers else os.path.join("/sys/fs/cgroup", controllers.replace("name=", ""))
            procs = os.path.join(root + path, "cgroup.procs")
            if os.path.exists(procs):
                paths.append(procs)
    return paths


class Node:
    """The container NAME with systemd as PID 1, removed on exit. `run` and `popen` run a command in it as
    `podman exec` would, with nsenter into every namespace of its PID 1 and the container's environment; `python`
    is the wrapper with which Ansible runs its modules there. The host directory `shared` is mounted at the same
    path inside, where Ansible puts the files it transfers."""

    def __init__(self, workdir, image, port):
        self.workdir, self.image, self.port = workdir, image, port
        self.url = "http://127.0.0.1:%d" % port
        self.shared = os.path.join(workdir, "shared")
        self.python = os.path.join(workdir, "node-python")
        self.pid = None           # the container's systemd, as the host sees it
        self.env = {}             # the container's environment (the image's and podman run's)
        self.exec = None          # the wrapper that runs a command inside the container

    def __enter__(self):
        # A container of that name can only be one an interrupted run of this measurement left.
        subprocess.run(["podman", "rm", "-f", "-t", "0", NAME], capture_output=True, check=False)
        os.makedirs(self.shared, exist_ok=True)
        subprocess.run(["podman", "run", "-d", "--name", NAME, "--runtime=runc", "--systemd=always",
                        "--cap-add", "SYS_PTRACE", "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=20000:20000",
                        "--network", "host", "-e", "GPUSIM_GPUS=%d" % GPUS, "-e", "GPUOPS_HOST_PIDNS=own",
                        "--volume", "%s:%s" % (self.shared, self.shared), self.image, "/lib/systemd/systemd"],
                       capture_output=True, text=True, check=True)
        try:
            self._prepare()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        try:
            if self.pid:
                with open(os.path.join(self.workdir, "unit-journal.log"), "w") as f:
                    self.run(["journalctl", "--no-pager", "-o", "short-monotonic", "-u", UNIT], stdout=f,
                             stderr=subprocess.STDOUT, timeout=30)
        finally:
            subprocess.run(["podman", "rm", "-f", "-t", "0", NAME], capture_output=True, check=False)

    def _prepare(self):
        """Write the wrappers that run commands in the container; wait for systemd's boot; add the server's user, the dump volume's
        directory and the NVML poller (as molecule/systemd/prepare.yml does, less the team's unit and the
        hand-started server)."""
        inspect = json.loads(subprocess.run(["podman", "inspect", NAME], capture_output=True, text=True,
                                            check=True).stdout)[0]
        self.pid, self.env = inspect["State"]["Pid"], dict(item.split("=", 1) for item in inspect["Config"]["Env"])
        self._write_wrappers()
        deadline = time.monotonic() + 90
        state = ""
        while state not in ("running", "degraded"):
            if time.monotonic() > deadline:
                raise RuntimeError("systemctl is-system-running in the node: %r after 90 s" % state)
            time.sleep(0.5)
            state = self.run(["systemctl", "is-system-running"], capture_output=True, text=True).stdout.strip()
        self.run(["useradd", "--create-home", "--home-dir", "/home/sglang", "--shell", "/usr/sbin/nologin", "sglang"],
                 check=True)
        self.run(["mkdir", "-p", "/data/hs_dumps", NODE_AGENTS], check=True)
        subprocess.run(["podman", "cp", os.path.join(AGENTS, "nvml_watch.py"), NAME + ":" + NODE_AGENTS],
                       check=True)

    def _write_wrappers(self):
        """WORKDIR/node-exec runs its arguments as `podman exec` would: in the cgroups of the container's PID 1 (the
        modules tell the container they run in from the server's supervisor by their own cgroup), with nsenter in
        every namespace of that PID 1, and with the container's environment over the caller's (a task's
        `environment:` comes in that way). WORKDIR/node-python, Ansible's interpreter, is NODE_PYTHON through it."""
        q = shlex.quote
        lines = ["#!/bin/sh", "# Runs its arguments inside the container %s (its PID 1 is %d on this host)." % (
            NAME, self.pid)]
        lines += ["echo $$ > %s" % q(path) for path in _cgroup_procs(self.pid)]
        lines += ["export %s=%s" % (key, q(value)) for key, value in sorted(self.env.items())]
        lines.append('exec %s --target %d --all -- "$@"' % (q(shutil.which("nsenter")), self.pid))
        self.exec = os.path.join(self.workdir, "node-exec")
        for path, text in ((self.exec, "\n".join(lines) + "\n"),
                           (self.python, '#!/bin/sh\nexec %s %s "$@"\n' % (q(self.exec), NODE_PYTHON))):
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o755)

    def run(self, argv, **kwargs):
        return subprocess.run([self.exec] + list(argv), env={}, check=kwargs.pop("check", False), **kwargs)

    def popen(self, argv, **kwargs):
        return subprocess.Popen([self.exec] + list(argv), env={}, **kwargs)

    def log_glob(self):
        """The server logs as the host reads them, through the root file system of the container's PID 1."""
        return "/proc/%d/root%s/*.log" % (self.pid, NODE_LOG_DIR)

    def snapshot(self, path):
        """Write what is left in the unit's cgroup (cgroup v1's name=systemd hierarchy, else v2) and the process
        table, with each process's state and wait channel, to PATH."""
        script = ("for f in /sys/fs/cgroup/systemd/system.slice/%s/cgroup.procs /sys/fs/cgroup/system.slice/%s/"
                  "cgroup.procs; do [ -f $f ] && echo \"$f:\" && cat $f; done; "
                  "ps -eo pid,ppid,stat,wchan:24,etimes,cmd; systemctl show --no-pager %s "
                  "--property=ActiveState,SubState,MainPID,ControlGroup" % (UNIT, UNIT, UNIT))
        with open(path, "w") as f:
            self.run(["sh", "-c", script], stdout=f, stderr=subprocess.STDOUT, timeout=30)

    def unit_result(self):
        """The unit's Result (systemd.exec(5) $SERVICE_RESULT: "timeout" where TimeoutStopSec ran out)."""
        return self.run(["systemctl", "show", "--property=Result", "--value", UNIT], capture_output=True,
                        text=True).stdout.strip()

    def main_pids(self):
        """The unit's main process, as a list as SimNode.main_pids gives it (empty while there is none)."""
        out = self.run(["systemctl", "show", "--property=MainPID", "--value", UNIT], capture_output=True, text=True)
        pid = int(out.stdout.strip() or 0)
        return [pid] if pid else []

    @property
    def sandbox(self):
        """What runs commands in the node (run, popen), as a SimNode's sandbox does for Watch and process_start."""
        return self

    def inventory(self):
        """An inventory of this node alone, with molecule/systemd's host vars at SGLang's real shutdown pace."""
        path = os.path.join(self.workdir, "inventory.yml")
        values = {"ansible_connection": "local", "ansible_python_interpreter": self.python,
                  "sglang_launch_python": NODE_PYTHON, "sglang_launch_user": "sglang",
                  "sglang_launch_model_path": "/models/llama-sim", "sglang_launch_server_args": {"tp_size": GPUS},
                  "sglang_launch_port": self.port, "sglang_launch_environment": dict(REAL_PACE_ENV),
                  "sglang_launch_dump_min_free_gb": 1, "sglang_launch_ready_timeout": 120,
                  # the extraction run of the round before, which this measurement's own client fed, is cut on purpose
                  "sglang_stop_cut_active_run": True}
        with open(path, "w") as f:
            yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {NAME: values}}}}}, f)
        return path


def _config(workdir, shared):
    """bench/ansible.cfg with Ansible's temporary directories in SHARED, the directory that the container sees at
    the same path: an action that transfers a file (template, copy) writes it there on the host, then runs its
    module in the container on that path."""
    cfg = configparser.ConfigParser()
    cfg.read(RECOMMENDED_CFG)
    cfg.set("defaults", "remote_tmp", os.path.join(shared, "remote"))
    cfg.set("defaults", "local_tmp", os.path.join(shared, "local"))
    path = os.path.join(workdir, "ansible.cfg")
    with open(path, "w") as f:
        cfg.write(f)
    return path


class Playbooks:
    """Runs playbooks/NAME against the node with the timeline callback, as BenchFleet.run does for the downtime
    measurement: each run's timeline and output kept in WORKDIR as NN-TAG-timeline.jsonl and NN-TAG-output.log."""

    def __init__(self, ansible, inventory, workdir):
        self.ansible, self.inventory, self.workdir = ansible, inventory, workdir
        self.count = 0
        self.last = None

    def run(self, name, tag="run", check=False):
        """A dict with rc, start, wall, output and timeline; CHECK: a failure raises with the output's tail."""
        self.count += 1
        prefix = os.path.join(self.workdir, "%02d-%s" % (self.count, tag))
        timeline = prefix + "-timeline.jsonl"
        start = time.monotonic()
        wall, out = self.ansible.playbook(self.inventory, os.path.join(REPO, "playbooks", name),
                                          env=callback_env(timeline))
        with open(prefix + "-output.log", "w") as f:
            f.write(out.stdout + out.stderr)
        if check and out.returncode != 0:
            raise RuntimeError("%s failed under systemd (rc %d):\n%s" % (name, out.returncode, out.stdout[-4000:]))
        self.last = {"rc": out.returncode, "start": start, "wall": wall, "output": out.stdout + out.stderr,
                     "timeline": timeline}
        return self.last


def _stops(node, playbooks, rounds, workdir):
    samples = {"systemctl stop": [], "stop_sglang.yml": [], "module call": []}
    results = {"systemctl stop": [], "stop_sglang.yml": []}      # the unit's Result after each stop
    stalls = []
    for r in range(rounds):
        order = ["systemctl stop", "stop_sglang.yml"]
        for method in order if r % 2 == 0 else order[::-1]:
            stalled = os.path.join(workdir, "stall-%s-%d.txt" % (method.replace(" ", "-"), r + 1))
            timer = threading.Timer(STALL_S, node.snapshot, [stalled])
            timer.start()
            if method == "systemctl stop":
                start = time.monotonic()
                node.run(["systemctl", "stop", UNIT], check=True)
                wall = time.monotonic() - start
            else:
                run = playbooks.run("stop_sglang.yml", tag="stop", check=True)
                wall = run["wall"]
                call = Tasks(run["timeline"]).span(STOP_MODULE, role="sglang_stop")
                if call is None:
                    raise RuntimeError("no result of the stop's module call in the timeline of stop_sglang.yml")
                samples["module call"].append(call)
            timer.cancel()
            timer.join()
            samples[method].append(wall)
            results[method].append(node.unit_result())
            if os.path.exists(stalled):
                with open(stalled) as f:
                    stalls.append({"method": method, "round": r + 1, "after_s": STALL_S, "node": f.read()})
            call = " (module call %.2f s)" % samples["module call"][-1] if method == "stop_sglang.yml" else ""
            log("systemd %-16s %.2f s%s, unit Result=%s" % (method, wall, call, results[method][-1]))
            node.run(["systemctl", "start", UNIT], check=True)
            wait_healthy(node.url)
    return {"definition": STOP_DEFINITION, "samples": samples, "unit_results": results, "stalls": stalls}


def figures(stop):
    """Medians of the stops, and of the differences per round, over the rounds in which neither stop ran into the
    unit's TimeoutStopSec (a Result of timeout: 60 s of systemd's waiting, the same for both methods)."""
    samples, results = stop["samples"], stop["unit_results"]
    clean = [i for i in range(len(samples["systemctl stop"]))
             if results["systemctl stop"][i] != "timeout" and results["stop_sglang.yml"][i] != "timeout"]
    alone = [samples["systemctl stop"][i] for i in clean]
    playbook = [samples["stop_sglang.yml"][i] for i in clean]
    call = [samples["module call"][i] for i in clean]
    return {"systemctl_stop_s": summary(alone), "stop_sglang_s": summary(playbook), "module_call_s": summary(call),
            "over_s": summary([p - a for a, p in zip(alone, playbook)]),
            "module_over_s": summary([m - a for a, m in zip(alone, call)]),
            "rounds": "%d/%d" % (len(clean), len(samples["systemctl stop"]))}


def _remote_task_seconds(timeline):
    """Median time from start to result of the run's remote tasks (loops left out): what one module round trip
    into the container costs."""
    tasks = Tasks(timeline)
    remote = set(id(r) for r in tasks.remote() if not r["loop"])
    started, seconds = {}, []
    for r in tasks.records:
        if r["ev"] == "start":
            started[(r["task"], r["host"])] = r["t"]
        elif id(r) in remote:
            seconds.append(r["t"] - started[(r["task"], r["host"])])
    return summary(seconds)["median"]


def _restart(node, playbooks, think):
    watch = Watch(node.sandbox, python=NODE_PYTHON, agents=NODE_AGENTS)
    try:
        if watch.dirty_gpus != GPUS:
            raise RuntimeError("the unit serves but NVML shows %d of %d GPUs in use" % (watch.dirty_gpus, GPUS))
        t = restart_under_load(playbooks, node, LogTail([node.log_glob()]), watch, think)
    finally:
        watch.close()
    return dict(t, remote_task_s=_remote_task_seconds(playbooks.last["timeline"]))


def run(rounds, think=0.3):
    if not os.path.exists(IMAGE_REF):
        raise RuntimeError("no node image: %s is missing (make image)" % IMAGE_REF)
    with open(IMAGE_REF) as f:
        image = f.read().strip()
    workdir = os.path.join(WORK, "nodes", "systemd")
    shutil.rmtree(workdir, ignore_errors=True)      # the timeline callback appends to its file
    os.makedirs(workdir)
    trials = []
    with Node(workdir, image, _port()) as node:
        playbooks = Playbooks(Ansible(_config(workdir, node.shared)), node.inventory(), workdir)
        playbooks.run("restart_serving.yml", tag="serving", check=True)
        wait_healthy(node.url)
        stops = _stops(node, playbooks, rounds, workdir)
        for r in range(rounds):
            if r:
                playbooks.run("restart_serving.yml", tag="serving", check=True)
                wait_healthy(node.url)
            t = _restart(node, playbooks, think)
            log("systemd restart round %d: %s" % (r + 1, t.get("error") or
                "downtime %.2f s = exit %.2f + load %.2f + overhead %.2f s (%d remote tasks stop->ready)" % (
                    t["downtime"], t["old_exit_in_window"], t["new_load"], t["overhead"],
                    t["remote_tasks_stop_to_ready"])))
            trials.append(t)
    restart = dict(summarize(trials), remote_task_s=summary([t["remote_task_s"] for t in trials]))
    return {"definition": DEFINITION, "rounds": rounds, "port": node.port, "stop": stops,
            "restart": dict(restart, definition=RESTART_DEFINITION.format(think=think)), "trials": trials,
            "stop_goal_s": STOP_GOAL_S, "overhead_goal_s": OVERHEAD_GOAL_S}


def _left_in_cgroup(snapshot):
    """The process table's lines (pid ppid stat wchan etimes cmd) of the processes that a snapshot found in the
    unit's cgroup."""
    lines = snapshot.splitlines()
    pids, table, in_procs = set(), {}, False
    for line in lines:
        if line.endswith("cgroup.procs:"):
            in_procs = True
        elif in_procs and line.strip().isdigit():
            pids.add(line.strip())
        else:
            in_procs = False
            fields = line.split()
            if fields and fields[0].isdigit():
                table[fields[0]] = " ".join(fields)
    return [table.get(pid, pid + " (gone from the process table)") for pid in sorted(pids, key=int)]


def _met(value, goal):
    if value is None:
        return None
    return "yes" if value <= goal else "**no** (+%.2f s)" % (value - goal)


def goals(result):
    stop, restart, goal = figures(result["stop"]), result["restart"], result["stop_goal_s"]
    rows = []
    if stop["over_s"]["median"] is not None:
        rows += [("stop_sglang.yml over `systemctl stop` alone, a unit server (the playbook's wall time)",
                  "<= %.1f s" % goal, "%.2f s (playbook %.2f s, systemctl stop %.2f s; %s rounds)" % (
                      stop["over_s"]["median"], stop["stop_sglang_s"]["median"], stop["systemctl_stop_s"]["median"],
                      stop["rounds"]), _met(stop["over_s"]["median"], goal)),
                 ("the stop's module call (sglang_server in sglang_stop) over `systemctl stop` alone, a unit server",
                  "<= %.1f s" % goal, "%.2f s (module call %.2f s, systemctl stop %.2f s; the watchdog's phase moves "
                  "either by up to 5 s)" % (stop["module_over_s"]["median"], stop["module_call_s"]["median"],
                                            stop["systemctl_stop_s"]["median"]),
                  _met(stop["module_over_s"]["median"], goal))]
    over = restart["overhead"]["median"]
    if over is not None:
        rows.append(("collection's overhead within the downtime of one systemd node (restart_extraction.yml)",
                     "<= %.1f s" % result["overhead_goal_s"],
                     "%.2f s of %.2f s downtime (exit %.2f s, load %.2f s); %.0f remote tasks between stop and "
                     "ready" % (
                         over, restart["downtime"]["median"], restart["old_exit_in_window"]["median"],
                         restart["new_load"]["median"], restart["remote_tasks_stop_to_ready"]["median"]),
                     _met(over, result["overhead_goal_s"])))
    return rows


def markdown(result):
    def cell(s, digits=2):
        return "-" if s["median"] is None else "%.*f (%.*f-%.*f)" % (digits, s["median"], digits, s["min"], digits,
                                                                     s["max"])
    stop, restart = figures(result["stop"]), result["restart"]
    rows = ["## Stop and restart under systemd", "", result["definition"], "", "### Stop over `systemctl stop`", "",
            result["stop"]["definition"], "", "| Method | Wall (s) |", "|---|---|",
            "| systemctl stop gpuops-sglang.service alone | %s |" % cell(stop["systemctl_stop_s"]),
            "| playbooks/stop_sglang.yml | %s |" % cell(stop["stop_sglang_s"]),
            "| over systemctl stop alone | %s |" % cell(stop["over_s"]),
            "| the stop's module call (sglang_server in sglang_stop) | %s |" % cell(stop["module_call_s"]),
            "| module call over systemctl stop alone | %s |" % cell(stop["module_over_s"]), "",
            "Rounds counted: %s, those in which neither stop ended with the unit's Result `timeout`. The stand-in's "
            "watchdog wakes every 5 s from the server's start, so where in that cycle each stop's SIGTERM lands "
            "(sooner after the /health wait for `systemctl stop` alone, about a second later for the playbook's) "
            "moves either stop by up to 5 s: a difference per round can be below zero." % stop["rounds"], ""]
    timeouts = dict((m, sum(1 for r in rs if r == "timeout")) for m, rs in result["stop"]["unit_results"].items())
    if any(timeouts.values()):
        rows += ["Stops after which the unit's Result was `timeout` (the main process had exited; systemd SIGKILLed "
                 "what was left of the unit's cgroup and then waited out TimeoutStopSec, 60 s): %s; their walls: "
                 "%s." % (", ".join("%s %d of %d" % (m, n, len(result["stop"]["unit_results"][m]))
                                    for m, n in timeouts.items()),
                          ", ".join("%s %.2f s" % (m, result["stop"]["samples"][m][i])
                                    for m, rs in result["stop"]["unit_results"].items()
                                    for i, r in enumerate(rs) if r == "timeout")), ""]
    for stall in result["stop"].get("stalls", []):
        left = _left_in_cgroup(stall["node"])
        rows += ["%s, round %d, still running %d s after its start; the unit's cgroup held: %s." % (
            stall["method"], stall["round"], stall["after_s"], "; ".join("`%s`" % p for p in left) or "nothing"), ""]
    rows += ["### Downtime of restart_extraction.yml", "", restart["definition"], "",
             "| Figure (s) | Median (min-max) |", "|---|---|"]
    for key, label in (("downtime", "Downtime"), ("old_exit_in_window", "Old server's exit"),
                       ("new_load", "New server's load"), ("overhead", "Overhead"),
                       ("gap_free_to_start", "GPUs free -> new process"),
                       ("ready_to_first_request", "Ready -> first request"),
                       ("remote_tasks_stop_to_ready", "Remote tasks SIGTERM -> ready"),
                       ("remote_tasks_total", "Remote tasks in all"),
                       ("remote_task_s", "One remote task, start to result (median of the run's)"),
                       ("failed_requests", "Failed requests"),
                       ("wall", "restart_extraction.yml wall")):
        rows.append("| %s | %s |" % (label, cell(restart[key], 0 if key.startswith(("remote_tasks", "failed")) else 2)))
    rows += ["", "Runs: %s." % restart["runs"]]
    if restart.get("remote_task_names"):
        rows += ["", "Remote tasks between the SIGTERM and the ready line (first run): " +
                 "; ".join("%d. %s" % (i + 1, n) for i, n in enumerate(restart["remote_task_names"])) + "."]
    errors = [t["error"] for t in result["trials"] if "error" in t]
    if errors:
        rows += [""] + ["Round without a complete timeline: %s" % e for e in errors]
    return rows + [""]

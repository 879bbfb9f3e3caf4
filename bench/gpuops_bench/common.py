# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Shared parts of the benchmark: paths, statistics, ansible runs, and simulated nodes with
an SGLang stand-in, decoys and an independent NVML poller."""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(BENCH)
SIM = os.path.join(REPO, "tests", "sim")
AGENTS = os.path.join(BENCH, "gpuops_bench", "agents")
VENV_BIN = os.path.join(REPO, ".venv", "bin")
VENV_PYTHON = os.path.join(VENV_BIN, "python")
WORK = os.path.join(REPO, "build", "bench")
RECOMMENDED_CFG = os.path.join(BENCH, "ansible.cfg")

if SIM not in sys.path:
    sys.path.insert(0, SIM)

from gpusim.fleet import Fleet, SimNode, collections_path, http_get  # noqa: E402

SERVER_LOG = os.path.join("log", "sglang", "server.log")   # under the node's workdir
# What an operator's unrelated Python job looks like (killed by `ps aux | grep python3 | ... kill -9`).
JOB = "import time\nwhile True:\n    time.sleep(1)\n"


def summary(values):
    """Median, min and max of a list of numbers (None when empty), rounded for the report."""
    values = [v for v in values if v is not None]
    if not values:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": round(statistics.median(values), 4), "min": round(min(values), 4),
            "max": round(max(values), 4), "n": len(values)}


def ratio(a, b):
    return round(a / b, 3) if a is not None and b else None


def wait_healthy(url, timeout=120):
    """Wait until the server at URL answers /health with 200."""
    deadline = time.monotonic() + timeout
    while http_get(url + "/health", timeout=5)[0] != 200:
        if time.monotonic() > deadline:
            raise RuntimeError("the server at %s did not answer /health within %d s" % (url, timeout))
        time.sleep(0.1)


def log(msg):
    sys.stderr.write("bench: %s\n" % msg)
    sys.stderr.flush()


def default_cfg():
    """An empty ansible.cfg: every setting at ansible-core's default."""
    path = os.path.join(WORK, "defaults.cfg")
    os.makedirs(WORK, exist_ok=True)
    with open(path, "w") as f:
        f.write("[defaults]\n")
    return path


# The environment variable that makes every module run on a node pay for its payload's size (see Ansible.env).
UNBUFFERED_ENV = {"PYTHONUNBUFFERED": "1"}


class Ansible:
    """Runs ``ansible`` and ``ansible-playbook`` from this checkout against simulated nodes."""

    def __init__(self, config=None):
        self.config = config or default_cfg()
        self.env = dict(os.environ, ANSIBLE_CONFIG=self.config, ANSIBLE_COLLECTIONS_PATH=collections_path(),
                        ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_DEPRECATION_WARNINGS="0",
                        ANSIBLE_INVENTORY_UNPARSED_WARNING="0", PYTHONPATH=collections_path())
        # PYTHONUNBUFFERED as well: with it, the node's Python reads a pipelined module from stdin one byte per read()
        # (strace; 0.38 s against 0.09 s for a 770 KB script here, about 0.2 s for sglang_server's 400 KB payload).
        # ansible-playbook's local connection passes its own environment on to the node; over SSH a node's Python
        # runs in the login environment of the node's user, which does not set it. UNBUFFERED_ENV puts it back.
        for key in ("GPUSIM_STATE", "LD_LIBRARY_PATH", "PYTHONUNBUFFERED"):
            self.env.pop(key, None)

    def adhoc(self, inventory, module, args, pattern="all", check=False, timeout=300):
        """Run one module ad hoc; return (wall seconds, {host: (status, result)})."""
        argv = [os.path.join(VENV_BIN, "ansible"), pattern, "-i", inventory, "-o",
                "-m", module if "." in module else "gpuops.host." + module, "-a", json.dumps(args)]
        if check:
            argv.append("--check")
        start = time.monotonic()
        out = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout, cwd=WORK,
                             check=False)
        wall = time.monotonic() - start
        results = {}
        for line in out.stdout.splitlines():
            m = re.match(r"^(\S+) \| ([A-Z!]+)(?: \| rc=\d+)? => (\{.*\})\s*$", line)
            if m:
                results[m.group(1)] = (m.group(2).rstrip("!"), json.loads(m.group(3)))
        if not results:
            raise RuntimeError("ansible %s gave no result:\n%s\n%s" % (module, out.stdout[-2000:], out.stderr[-2000:]))
        return wall, results

    def playbook(self, inventory, playbook, extra_vars=None, timeout=600, env=None):
        """Run a playbook; return (wall seconds, CompletedProcess)."""
        argv = [os.path.join(VENV_BIN, "ansible-playbook"), "-i", inventory, playbook]
        if extra_vars:
            argv += ["-e", json.dumps(extra_vars)]
        start = time.monotonic()
        out = subprocess.run(argv, env=dict(self.env, **(env or {})), capture_output=True, text=True,
                             timeout=timeout, cwd=WORK, check=False)
        return time.monotonic() - start, out


class Watch:
    """The independent NVML poller inside a node: records when all GPUs are at baseline. SB runs it (popen) with
    PYTHON, from the directory AGENTS as the node sees it."""

    def __init__(self, sb, interval=0.01, python=VENV_PYTHON, agents=AGENTS):
        self.proc = sb.popen([python, os.path.join(agents, "nvml_watch.py"), str(interval)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/")
        first = self.proc.stdout.readline().split()
        if not first or first[0] != "ready":
            raise RuntimeError("NVML poller did not start: %r" % first)
        self.clean_gpus, self.dirty_gpus = int(first[1]), int(first[2])
        self.events = []      # (monotonic time, clean?)
        self.changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            t, state = line.split()[:2]
            with self.changed:
                self.events.append((float(t), state == "clean"))
                self.changed.notify_all()

    @property
    def clean(self):
        return self.events[-1][1] if self.events else self.dirty_gpus == 0

    def wait(self, clean, timeout):
        """Wait until the poller reports CLEAN (bool); True when it did within TIMEOUT."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while self.clean != clean:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(left)
        return True

    def clean_since(self):
        """When the GPUs last became clean (monotonic), or None while they are not."""
        return self.events[-1][0] if self.events and self.events[-1][1] else None

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(5)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()


class TrialNode(SimNode):
    """The node of a stop trial: the shared simulated node (gpusim.fleet.SimNode) with what the
    stop and overhead measurements need:
SGLang at TP=GPUS started by hand with `sglang serve`, an operator's
    unrelated jobs beside it, the independent NVML poller, and a census of what a stop left behind."""

    def __init__(self, workdir, server=True, faults=(), watchdog=5.0, load_seconds=0.2, decoys=True, gpus=8,
                 name="node"):
        env = {"GPUSIM_SGLANG_LOAD_SECONDS": str(load_seconds), "GPUSIM_SGLANG_WARMUP_SECONDS": "0.2",
               "GPUSIM_SGLANG_WATCHDOG_INTERVAL": str(watchdog)}
        if faults:
            env["GPUSIM_SGLANG_FAULTS"] = ",".join(faults)
        super().__init__(workdir, gpus=gpus, name=name, server_env=env, decoys=decoys)
        self.with_server = server
        self.with_jobs = decoys
        self.decoys = {}          # label -> ns pid
        self.server_pids = []     # the server's process tree (ns pids) once it is up
        self.watch = None
        self._jobs = []

    @property
    def sb(self):
        return self.sandbox

    def __enter__(self):
        super().__enter__()
        try:
            self.decoys.update(self.sandbox.decoys)
            if self.with_server:
                self.start_server(["--tp-size", str(self.gpus), "--host", "127.0.0.1"], serve=True)
                self.server_pids = sorted(p["pid"] for p in self.server.tree())
            if self.with_jobs:
                self._start_jobs()
            self.watch = Watch(self.sandbox)
            if self.with_server and self.watch.dirty_gpus != self.gpus:
                raise RuntimeError("server up but NVML shows %d of %d GPUs in use" % (self.watch.dirty_gpus, self.gpus))
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        if self.watch:
            self.watch.close()
        super().__exit__(*exc)
        for p in self._jobs:
            p.wait(5)

    def _start_jobs(self):
        """What runs beside the server on a shared node: a Python job and a `tail -f` of the server log."""
        jobs = os.path.join(self.workdir, "jobs")
        os.makedirs(jobs, exist_ok=True)
        with open(os.path.join(jobs, "prep_dataset.py"), "w") as f:
            f.write(JOB)
        logfile = os.path.join(self.workdir, SERVER_LOG)
        os.makedirs(os.path.dirname(logfile), exist_ok=True)
        open(logfile, "a").close()
        starts = {"python3 job": ["/usr/bin/python3", os.path.join(jobs, "prep_dataset.py")],
                  "tail -f server.log": ["tail", "-f", logfile]}
        for argv in starts.values():
            self._jobs.append(self.sandbox.popen(argv, cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                 stderr=subprocess.DEVNULL, start_new_session=True))
        deadline = time.monotonic() + 20
        while len(self.decoys) < len(self.sandbox.decoys) + len(starts):
            if time.monotonic() > deadline:
                raise RuntimeError("jobs did not start: %s" % self.decoys)
            for p in self.sandbox.procs():
                for label, argv in starts.items():
                    if p["cmdline"] == argv:
                        self.decoys[label] = p["pid"]
            time.sleep(0.05)

    def inventory(self):
        """An inventory of this node alone, with the roles' default timings."""
        return Fleet(self.workdir, [self], fast=False).inventory

    def census(self):
        """After a stop: server processes left (alive, zombies) and decoys that died."""
        table = dict((p["pid"], p) for p in self.sandbox.procs())
        left = [table[pid] for pid in self.server_pids if pid in table]
        dead = sorted(label for label, pid in self.decoys.items()
                      if pid not in table or table[pid]["state"] in ("Z", "X"))
        return {"server_left": [p["pid"] for p in left if p["state"] != "Z"],
                "zombies": [p["pid"] for p in left if p["state"] == "Z"],
                "decoys_killed": dead}

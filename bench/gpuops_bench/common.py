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
import urllib.request

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

from gpusim.net import free_port  # noqa: E402
from gpusim.sandbox import Sandbox  # noqa: E402
from gpusim.standin import make_model_dir  # noqa: E402

MODEL = os.path.join("models", "Llama-3.3-70B-Instruct")   # under the node's workdir: config.json only
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


def log(msg):
    sys.stderr.write("bench: %s\n" % msg)
    sys.stderr.flush()


def collections_path():
    """A collections root holding this checkout as gpuops.host (a symlink, never stale)."""
    root = os.path.join(WORK, "collections")
    link = os.path.join(root, "ansible_collections", "gpuops", "host")
    if not os.path.islink(link):
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(REPO, link)
    return root


def default_cfg():
    """An empty ansible.cfg: every setting at ansible-core's default."""
    path = os.path.join(WORK, "defaults.cfg")
    os.makedirs(WORK, exist_ok=True)
    with open(path, "w") as f:
        f.write("[defaults]\n")
    return path


class Ansible:
    """Runs ``ansible`` and ``ansible-playbook`` from this checkout against simulated nodes."""

    def __init__(self, config=None):
        self.config = config or default_cfg()
        self.env = dict(os.environ, ANSIBLE_CONFIG=self.config, ANSIBLE_COLLECTIONS_PATH=collections_path(),
                        ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_DEPRECATION_WARNINGS="0",
                        ANSIBLE_INVENTORY_UNPARSED_WARNING="0", PYTHONPATH=collections_path())
        for key in ("GPUSIM_STATE", "LD_LIBRARY_PATH"):
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


def write_inventory(path, nodes, hostvars=None):
    """An INI inventory: one host per node, connection local, the node's Python as interpreter."""
    lines = ["[gpu_nodes]"]
    for name, node in nodes.items():
        extra = "".join(" %s=%s" % kv for kv in sorted((hostvars or {}).get(name, {}).items()))
        lines.append("%s ansible_connection=local ansible_python_interpreter=%s%s" % (name, node.sb.python, extra))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


class Watch:
    """The independent NVML poller inside a node: records when all GPUs are at baseline."""

    def __init__(self, sb, interval=0.01):
        self.proc = sb.popen([VENV_PYTHON, os.path.join(AGENTS, "nvml_watch.py"), str(interval)],
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


class SimNode:
    """A sandboxed 8-GPU node: optional SGLang stand-in at TP=8, decoys, NVML poller."""

    def __init__(self, workdir, server=True, faults=(), watchdog=5.0, load_seconds=0.2, decoys=True, gpus=8,
                 port=None):
        self.workdir = workdir
        self.server = server
        self.faults = faults
        self.watchdog = watchdog
        self.load_seconds = load_seconds
        self.with_decoys = decoys
        self.gpus = gpus
        self.port = port or free_port()
        self.sb = Sandbox(workdir, gpus=gpus, decoys=decoys)
        self.decoys = {}          # label -> ns pid
        self.server_pids = []     # the server's process tree (ns pids) once it is up
        self.model = None
        self.watch = None
        self._procs = []

    def __enter__(self):
        os.makedirs(self.workdir, exist_ok=True)
        self.sb.start()
        try:
            if self.with_decoys:
                self.decoys.update(self.sb.decoys)
            if self.server:
                self.start_server()
            if self.with_decoys:
                self._start_decoys()
            self.watch = Watch(self.sb)
            if self.server and self.watch.dirty_gpus != self.gpus:
                raise RuntimeError("server up but NVML shows %d of %d GPUs in use" % (self.watch.dirty_gpus, self.gpus))
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self.watch:
            self.watch.close()
        self.sb.close()
        for p in self._procs:
            p.wait(5)

    def server_env(self, extra=None):
        env = {"GPUSIM_SGLANG_LOAD_SECONDS": str(self.load_seconds), "GPUSIM_SGLANG_WARMUP_SECONDS": "0.2",
               "GPUSIM_SGLANG_WATCHDOG_INTERVAL": str(self.watchdog)}
        if self.faults:
            env["GPUSIM_SGLANG_FAULTS"] = ",".join(self.faults)
        env.update(extra or {})
        return env

    def start_server(self, timeout=60):
        logfile = os.path.join(self.workdir, SERVER_LOG)
        os.makedirs(os.path.dirname(logfile), exist_ok=True)
        self.model = make_model_dir(os.path.join(self.workdir, MODEL))
        argv = ["sglang", "serve", "--model-path", self.model, "--tp-size", str(self.gpus), "--host", "127.0.0.1",
                "--port", str(self.port)]
        env = dict((k, v) for k, v in os.environ.items() if k != "PATH")   # the node's PATH finds `sglang`
        with open(logfile, "ab") as out:
            server = self.sb.popen(argv, env=dict(env, **self.server_env()), cwd="/", stdin=subprocess.DEVNULL,
                                   stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self._procs.append(server)
        wait_http("http://127.0.0.1:%d/health" % self.port, timeout, server, logfile)
        table = self.sb.procs()
        main = [p["pid"] for p in table if "serve" in p["cmdline"] and "--port" in p["cmdline"]]
        self.server_pids = sorted(descendants(table, main))

    def _start_decoys(self):
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
            self._procs.append(self.sb.popen(argv, cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                             stderr=subprocess.DEVNULL, start_new_session=True))
        deadline = time.monotonic() + 20
        while len(self.decoys) < len(self.sb.decoys) + len(starts):
            if time.monotonic() > deadline:
                raise RuntimeError("decoys did not start: %s" % self.decoys)
            for p in self.sb.procs():
                for label, argv in starts.items():
                    if p["cmdline"] == argv:
                        self.decoys[label] = p["pid"]
            time.sleep(0.05)

    def host_vars(self):
        """Where this node keeps the roles' state and host lock (the sandboxes share one file system)."""
        os.makedirs(os.path.join(self.workdir, "run"), exist_ok=True)
        return {"fleet_run_lock_path": os.path.join(self.workdir, "run", "gpuops.lock"),
                "sglang_stop_state_dir": os.path.join(self.workdir, "var", "lib", "gpuops"),
                "sglang_launch_state_dir": os.path.join(self.workdir, "var", "lib", "gpuops")}

    def inventory(self, name="node"):
        return write_inventory(os.path.join(self.workdir, "inventory.ini"), {name: self}, {name: self.host_vars()})

    def census(self):
        """After a stop: server processes left (alive, zombies) and decoys that died."""
        table = dict((p["pid"], p) for p in self.sb.procs())
        left = [table[pid] for pid in self.server_pids if pid in table]
        dead = sorted(label for label, pid in self.decoys.items()
                      if pid not in table or table[pid]["state"] in ("Z", "X"))
        return {"server_left": [p["pid"] for p in left if p["state"] != "Z"],
                "zombies": [p["pid"] for p in left if p["state"] == "Z"],
                "decoys_killed": dead}


def descendants(table, roots):
    children = {}
    for p in table:
        children.setdefault(p["ppid"], []).append(p["pid"])
    found, stack = set(), list(roots)
    while stack:
        pid = stack.pop()
        if pid not in found:
            found.add(pid)
            stack.extend(children.get(pid, []))
    return found


def wait_http(url, timeout, proc, logfile):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + timeout
    while True:
        try:
            with opener.open(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            with open(logfile, errors="replace") as f:
                tail = f.read()[-1500:]
            raise RuntimeError("%s did not answer 200 (server %s):\n%s" % (
                url, "exited" if proc.poll() is not None else "not up within %d s" % timeout, tail))
        time.sleep(0.1)

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Simulated nodes of the downtime, prefetch and fleet measurements: gpusim.fleet's SimNode with
the roles' default timings, the SGLang stand-in at its real shutdown pace (or the light server),
a model with weight files, and ansible-playbook runs with the timeline callback."""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import subprocess
import time

import yaml

from .common import RECOMMENDED_CFG, REPO, VENV_PYTHON, WORK, log
from .timeline import callback_env

from gpusim import lightnode, standin  # noqa: E402  (tests/sim is on sys.path through .common)
from gpusim.fleet import ANSIBLE_PLAYBOOK, Fleet, SimNode  # noqa: E402

PLAYBOOKS = os.path.join(REPO, "playbooks")
# The stand-in at SGLang 0.5.23's pace (its contract: 5 s watchdog wake-up, ~1 s release per
# scheduler), a short fixed part of the load (the weight files add the reads), SGLang's 1 s warmup wait.
REAL_PACE_ENV = {"GPUSIM_SGLANG_WATCHDOG_INTERVAL": "5", "GPUSIM_SGLANG_MEMORY_RELEASE_SECONDS": "1.0",
                 "GPUSIM_SGLANG_LOAD_SECONDS": "0.3", "GPUSIM_SGLANG_WARMUP_SECONDS": "1.0",
                 "GPUSIM_SGLANG_TOKEN_DELAY": "0.01"}
READY_LINE = "The server is fired up and ready to roll!"
SIGTERM_LINE = "SIGTERM received"


class BenchNode(SimNode):
    """A SimNode whose inventory carries the roles' default timings and TP=GPUS; LIGHT runs the light
    server (gpusim.lightnode) instead of the stand-in; MODEL replaces the node's own model directory."""

    def __init__(self, workdir, gpus=8, light=False, model=None, server_env=None, decoys=False):
        super().__init__(workdir, gpus=gpus, server_env=dict(REAL_PACE_ENV, **(server_env or {})), decoys=decoys)
        if light:
            lightnode.install(self.sglang)
        if model:
            self.model = model

    def host_vars(self, fast=False, **extra):
        """The roles' default timings (not gpusim's test timings), TP over every GPU; EXTRA wins."""
        values = super().host_vars(fast=fast)
        values["sglang_launch_server_args"] = {"tp_size": self.gpus, "enable_metrics": True}
        values.update(extra)
        return values

    def hand_log(self):
        return os.path.join(self.workdir, "hand-started.log")

    def log_globs(self):
        return [self.hand_log(), os.path.join(self.log_dir, "*")]

    def start(self):
        return self.start_server(["--tp-size", str(self.gpus), "--enable-metrics"], timeout=180)


class BenchFleet(Fleet):
    """A Fleet whose playbook runs use an ansible.cfg, the timeline callback, and report the controller's
    CPU time (the ansible-playbook process tree, less what the nodes' Python interpreters used)."""

    def __init__(self, workdir, nodes, config=RECOMMENDED_CFG, **host_vars):
        os.makedirs(workdir, exist_ok=True)
        self.config = config
        self.extra_env = {}         # ANSIBLE_* overrides of the configuration
        super().__init__(workdir, nodes, **host_vars)

    def write_inventory(self, **host_vars):
        """Every node's interpreter runs through a wrapper that adds its CPU time to cpu.log."""
        self.cpu_log = os.path.join(self.workdir, "node-cpu.log")
        hosts = {}
        for n in self.nodes:
            values = n.host_vars(**host_vars)
            values["ansible_python_interpreter"] = self._cpu_wrapper(n)
            hosts[n.name] = values
        with open(self.inventory, "w") as f:
            yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}, f)

    def _cpu_wrapper(self, node):
        """The node's interpreter for Ansible. Called from inside the node (an async job's wrapper runs the
        module with this interpreter there), it runs the Python directly, uncounted: neither the controller's
        process tree nor the node wrapper's `times` sees a detached job."""
        path = os.path.join(node.workdir, "python-timed")
        with open(path, "w") as f:
            f.write('#!/bin/bash\n# The node\'s Python, with its CPU time (user and system, children included)\n'
                    '# appended to %s by bash\'s times builtin.\n'
                    'if [ "$(readlink /proc/$$/ns/pid)" = "%s" ]; then exec "%s" "$@"; fi   # already inside\n'
                    '"%s" "$@"\nrc=$?\ntimes >> "%s"\nexit $rc\n'
                    % (self.cpu_log, node.sandbox.pid_namespace, VENV_PYTHON, node.sandbox.python, self.cpu_log))
        os.chmod(path, 0o755)
        return path

    def node_cpu_seconds(self):
        """CPU seconds the nodes' interpreters used since the last reset."""
        total = 0.0
        if os.path.exists(self.cpu_log):
            with open(self.cpu_log) as f:
                lines = f.read().split("\n")
            for line in lines:                  # `times`: the shell's line, then its children's
                for part in line.split():
                    m, s = part.rstrip("s").split("m")
                    total += int(m) * 60 + float(s)
        return total

    def run(self, playbook, extra_vars=None, timeout=1800, tag="run"):
        """Run PLAYBOOK (a name under playbooks/ or a path); returns a dict with rc, wall, controller_cpu,
        node_cpu, output and the timeline file."""
        timeline = os.path.join(self.workdir, "%s-timeline.jsonl" % tag)
        for path in (timeline, self.cpu_log):
            if os.path.exists(path):
                os.unlink(path)
        argv = [ANSIBLE_PLAYBOOK, "-i", self.inventory,
                playbook if os.path.isabs(playbook) else os.path.join(PLAYBOOKS, playbook)]
        if extra_vars:
            argv += ["-e", json.dumps(extra_vars)]
        env = dict(self.env(), ANSIBLE_CONFIG=self.config, **callback_env(timeline))
        env.pop("ANSIBLE_PIPELINING", None)        # the configuration decides
        env.update(self.extra_env)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.monotonic()
        output = os.path.join(self.workdir, "%s-output.log" % tag)
        with open(output, "w") as out:
            proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=self.workdir,
                                    preexec_fn=_end_with_parent)
            main_cpu = 0.0
            while proc.poll() is None and time.monotonic() - start < timeout:
                main_cpu = own_cpu(proc.pid) or main_cpu
                time.sleep(0.2)
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        wall = time.monotonic() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        node_cpu = self.node_cpu_seconds()
        with open(output) as f:
            text = f.read()
        if proc.returncode != 0:
            log("%s: rc %d\n%s" % (playbook, proc.returncode, text[-3000:]))
        return {"rc": proc.returncode, "start": start, "wall": wall, "cpu": cpu, "node_cpu": node_cpu,
                "controller_cpu": cpu - node_cpu, "main_cpu": main_cpu, "output": text, "timeline": timeline}


def _end_with_parent():
    """SIGTERM to ansible-playbook when the bench dies: the nodes' sandboxes die with the bench, and a playbook
    left running would wait on them (an async_status loop until its retries run out)."""
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)      # PR_SET_PDEATHSIG


def own_cpu(pid):
    """CPU seconds (user + system) that process PID has used itself, not counting its children; None once gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def shared_model(weights_mib, shards):
    """One model directory with WEIGHTS_MIB of safetensors shards, written once and kept in build/bench."""
    path = os.path.join(WORK, "models", "model-%dMiB-%d" % (weights_mib, shards))
    return standin.make_model_dir(path, weights_mib=weights_mib, shards=shards)


def evict(model):
    """Drop the page-cache pages of the model's own files (posix_fadvise DONTNEED), nothing else."""
    for name in sorted(os.listdir(model)):
        path = os.path.join(model, name)
        if os.path.isfile(path):
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)

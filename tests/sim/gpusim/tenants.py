# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Other tenants of a simulated GPU node: processes that no stop of an SGLang server may touch.

Each tenant is a real process inside the sandbox that logs every catchable signal it gets
to a file of its own (SIGTERM is logged, then ends it), so a test judges what was sent from
the tenant's side, not from the module's report. It can hold device files open, hold NVML
memory on a GPU, start its own session, and run as another user or in a container.

    with Sandbox(workdir, gpus=8) as sb:
        job = Tenant(sb, "train.py", ["--epochs", "3"], devices=["/dev/nvidia5"], gpu=5, mib=20480)
        ...
        assert job.alive() and job.signals() == []
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time

from gpusim.sandbox import VENV_PYTHON

SCRIPT = r'''
import argparse, os, signal, sys, time
p = argparse.ArgumentParser()
p.add_argument("--log", required=True)
p.add_argument("--device", action="append", default=[])
p.add_argument("--gpu", type=int)
p.add_argument("--mib", type=int, default=0)
p.add_argument("--setsid", action="store_true")
p.add_argument("--linger", type=float, default=0)
p.add_argument("--ready", required=True)
args, rest = p.parse_known_args()
if args.setsid:
    os.setsid()
log = open(args.log, "a", buffering=1)


def handler(signum, frame):
    log.write("%s\n" % signal.Signals(signum).name)
    if signum == signal.SIGTERM:
        time.sleep(args.linger)     # a job that saves a checkpoint before it exits
        sys.exit(0)


for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
          signal.SIGCONT, signal.SIGALRM, signal.SIGPIPE):
    signal.signal(s, handler)
fds = [os.open(d, os.O_RDWR) for d in args.device]
if args.gpu is not None:
    from gpusim.nvml import Node
    Node(os.environ["GPUSIM_STATE"]).allocate(args.gpu, args.mib)
with open(args.ready + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.replace(args.ready + ".tmp", args.ready)
while True:
    time.sleep(1)
'''


class Tenant:
    """A process of another tenant inside sandbox SB, run as ``python3 NAME ARGS``; its files live
    in a directory of its own that any user can use (a tenant may run as another user).

    ``devices`` are opened and held; ``gpu``/``mib`` registers NVML memory for it; ``setsid``
    makes it a session of its own (a job started by a scheduler or nohup); ``user`` runs it
    as another user (setpriv); ``container`` runs it in a nested PID namespace of that name;
    ``linger`` is how long it takes to exit after SIGTERM.

    ``Tenant.unclosed`` lists those not closed yet, so that a test's teardown can close what the
    test left (a tenant it expected to be stopped, or every tenant of a test that failed).
    """

    unclosed = []

    def __init__(self, sb, name, args=(), devices=(), gpu=None, mib=0, setsid=True, user=None, container=None,
                 linger=0):
        self.sb = sb
        self.name = name
        self.dir = tempfile.mkdtemp(prefix="gpusim-tenant-%s-" % os.path.splitext(name)[0])
        self.popen = None
        Tenant.unclosed.append(self)
        os.chmod(self.dir, 0o777)
        self.script = os.path.join(self.dir, name)
        with open(self.script, "w") as f:
            f.write(SCRIPT)
        os.chmod(self.script, 0o755)
        self.log_path = os.path.join(self.dir, "signals.log")
        ready = os.path.join(self.dir, "ready")
        argv = [VENV_PYTHON, self.script] + list(args) + ["--log", self.log_path, "--ready", ready]
        argv += sum((["--device", d] for d in devices), [])
        if gpu is not None:
            argv += ["--gpu", str(gpu), "--mib", str(mib)]
        if setsid:
            argv.append("--setsid")
        if linger:
            argv += ["--linger", str(linger)]
        if user is not None:
            argv = ["setpriv", "--reuid=%s" % user, "--regid=%s" % user, "--clear-groups"] + argv
        kwargs = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if container:
            self.popen = sb.container(argv, container, env=dict(os.environ), **kwargs)
        else:
            self.popen = sb.popen(argv, **kwargs)
        deadline = time.monotonic() + 60
        while not os.path.exists(ready):
            assert self.popen.poll() is None and time.monotonic() < deadline, "tenant %s did not start" % name
            time.sleep(0.05)
        # its PID inside the sandbox: what it wrote, unless a container numbers it differently
        with open(ready) as f:
            self.pid = self._find() if container else int(f.read())

    def _find(self):
        for p in self.sb.procs():
            if self.script in p["cmdline"] and p["cmdline"][:1] != ["setpriv"] and "unshare" not in p["cmdline"][:1] \
                    and p["cmdline"][:1] != ["sh"]:
                return p["pid"]
        raise AssertionError("tenant %s not found" % self.name)

    @property
    def command(self):
        return "%s %s" % (VENV_PYTHON, self.script)

    def signals(self):
        """The signals it logged, in order (SIGKILL cannot be logged: it shows as death)."""
        try:
            with open(self.log_path) as f:
                return f.read().split()
        except FileNotFoundError:
            return []

    def alive(self, procs=None):
        procs = self.sb.procs() if procs is None else procs
        return any(p["pid"] == self.pid and p["state"] != "Z" and self.script in p["cmdline"] for p in procs)

    def close(self):
        """Kill it if it still runs, and remove its directory; closing twice does nothing more."""
        if self.popen is not None and self.sb.alive and hasattr(self, "pid") and self.alive():
            self.sb.run(["kill", "-KILL", str(self.pid)])
        if self.popen is not None and self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)
        if self in Tenant.unclosed:
            Tenant.unclosed.remove(self)

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A simulated GPU node on this machine: PID and mount namespaces of its own.

Inside, /dev is private (null, zero, random, urandom, tty, full, pts, shm and fake
/dev/nvidia* files), sysfs shows the node's GPUs on the PCI bus, the decoy daemons
nvidia-persistenced and nv-hostengine hold /dev/nvidiactl open, and no host process can be
seen or signalled. The network is the host's. The sandbox's PID namespace plays the host's:
GPUOPS_HOST_PIDNS names it to the modules, and NVML's PIDs are numbered in it.

Sandbox.container() starts a process in a nested PID namespace, a container on the node.

    with Sandbox(workdir, gpus=8) as sb:
        sb.run(["pgrep", "-af", "sglang"])
        subprocess.run([sb.python, "-c", "import pynvml; ..."])

From a shell: python -m gpusim.sandbox start --workdir D --gpus 8 (prints the details and
returns, the sandbox stays up), then python -m gpusim.sandbox stop --workdir D.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shlex
import signal
import subprocess
import sys
import time

from gpusim import nvml

VENV_PYTHON = os.path.join(nvml.REPO_ROOT, ".venv", "bin", "python")
STANDIN_DIR = os.path.join(nvml.SIM_DIR, "standin")
INFO_FILE = "sandbox.json"
_PR_SET_PDEATHSIG = 1

_PROCS_SNIPPET = r"""
import json, os
procs = []
for name in os.listdir("/proc"):
    if not name.isdigit() or int(name) == os.getpid():
        continue
    try:
        with open("/proc/%s/stat" % name) as f:
            stat = f.read()
        with open("/proc/%s/cmdline" % name, "rb") as f:
            cmdline = [a.decode(errors="replace") for a in f.read().split(b"\0")[:-1]]
    except OSError:
        continue
    try:
        exe = os.readlink("/proc/%s/exe" % name)
    except OSError:
        exe = None
    fields = stat[stat.rindex(")") + 2:].split()
    procs.append({"pid": int(name), "ppid": int(fields[1]), "state": fields[0],
                  "comm": stat[stat.index("(") + 1:stat.rindex(")")], "cmdline": cmdline, "exe": exe})
print(json.dumps(procs))
"""


def _die_with_parent():
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _start_time(pid: int):
    try:
        return nvml.proc_start_time(pid)
    except (OSError, ValueError, IndexError):
        return None


class SandboxError(RuntimeError):
    pass


class Sandbox:
    """A simulated GPU node in its own PID and mount namespaces, state in WORKDIR/state."""

    def __init__(self, workdir: str, gpus: int = 8, decoys: bool = True, detach: bool = False, pci_gpus: int = None,
                 **node_kwargs):
        self.workdir = os.path.abspath(workdir)
        self.gpus = gpus
        self.pci_gpus = gpus if pci_gpus is None else pci_gpus
        self.with_decoys = decoys
        self.detach = detach
        self.node_kwargs = node_kwargs
        self.state_dir = os.path.join(self.workdir, "state")
        self.python = os.path.join(self.workdir, "bin", "python")
        self.node = None
        self.decoys = {}
        self.init_pid = None  # host PID of the namespace's init
        self.pid_namespace = None  # pid:[INODE] of the sandbox's PID namespace
        self._init_start = None
        self._unshare = None

    # -- life cycle --

    def __enter__(self) -> "Sandbox":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self, timeout: float = 30) -> "Sandbox":
        os.makedirs(os.path.join(self.workdir, "bin"), exist_ok=True)
        self.node = nvml.Node.create(self.state_dir, gpus=self.gpus, **self.node_kwargs)
        bins = nvml.bin_dir()
        nvml.lib_dir()
        decoys = {}
        if self.with_decoys:
            gpu_nodes = ["/dev/nvidia%d" % i for i in range(self.gpus)]
            decoys = {"nvidia-persistenced": [os.path.join(bins, "nvidia-persistenced"), "/dev/nvidiactl"] + gpu_nodes,
                      "nv-hostengine": [os.path.join(bins, "nv-hostengine"), "/dev/nvidiactl"]}
        ready = os.path.join(self.workdir, "ready.json")
        if os.path.exists(ready):
            os.unlink(ready)
        config = {"staging": os.path.join(self.workdir, "dev"), "gpus": self.gpus, "pci_gpus": self.pci_gpus,
                  "decoys": decoys, "ready": ready}
        argv = ["unshare", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc", "--propagation", "private",
                sys.executable, os.path.join(os.path.dirname(__file__), "nsinit.py"), json.dumps(config)]
        log = open(os.path.join(self.workdir, "sandbox.log"), "ab")
        with log:
            self._unshare = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd="/",
                start_new_session=self.detach, preexec_fn=None if self.detach else _die_with_parent)
        deadline = time.monotonic() + timeout
        while not os.path.exists(ready):
            if self._unshare.poll() is not None or time.monotonic() > deadline:
                self.close()
                with open(os.path.join(self.workdir, "sandbox.log"), errors="replace") as f:
                    raise SandboxError("sandbox in %s did not start: %s" % (self.workdir, f.read()[-2000:]))
            time.sleep(0.02)
        with open(ready) as f:
            self.decoys = json.load(f)["decoys"]
        with open("/proc/%d/task/%d/children" % (self._unshare.pid, self._unshare.pid)) as f:
            self.init_pid = int(f.read().split()[0])
        self._init_start = _start_time(self.init_pid)
        self.pid_namespace = os.readlink("/proc/%d/ns/pid" % self.init_pid)
        self._write_wrapper()
        self._write_info()
        return self

    @classmethod
    def attach(cls, workdir: str) -> "Sandbox":
        """The sandbox that `python -m gpusim.sandbox start` left running in WORKDIR."""
        with open(os.path.join(workdir, INFO_FILE)) as f:
            info = json.load(f)
        sb = cls(workdir, gpus=info["gpus"], decoys=bool(info["decoys"]), detach=True)
        sb.node = nvml.Node(sb.state_dir)
        sb.decoys = info["decoys"]
        sb.init_pid, sb._init_start = info["init_pid"], info["init_start_time"]
        sb.pid_namespace = info["pid_namespace"]
        return sb

    @property
    def alive(self) -> bool:
        return self.init_pid is not None and _start_time(self.init_pid) == self._init_start

    def close(self, timeout: float = 10) -> None:
        """Kill the namespace's init: the kernel then kills everything inside."""
        if self.alive:
            os.kill(self.init_pid, signal.SIGKILL)
        if self._unshare is not None:
            if self._unshare.poll() is None and self.init_pid is None:
                self._unshare.kill()
            self._unshare.wait(timeout)
        deadline = time.monotonic() + timeout
        while self.alive and time.monotonic() < deadline:
            time.sleep(0.02)
        self.init_pid = None
        info = os.path.join(self.workdir, INFO_FILE)
        if os.path.exists(info):
            os.unlink(info)

    # -- running things inside --

    def env(self, env: dict = None) -> dict:
        """ENV (default: this process's) with the sandbox's GPUSIM_STATE, LD_LIBRARY_PATH and PATH
        (ENV's own values win) and the stand-in and gpusim appended to PYTHONPATH."""
        base = dict(os.environ if env is None else env)
        path = os.pathsep.join([os.path.dirname(VENV_PYTHON), os.path.join(STANDIN_DIR, "bin"),
                                os.environ.get("PATH", os.defpath)])
        values = {"GPUSIM_STATE": self.state_dir, "LD_LIBRARY_PATH": nvml.lib_dir(), "PATH": path,
                  "GPUOPS_HOST_PIDNS": self.pid_namespace}
        if env is None:
            base.update(values)
        else:
            for key, value in values.items():
                base.setdefault(key, value)
        # after the caller's entries, so that another copy of the stand-in can take precedence
        base["PYTHONPATH"] = os.pathsep.join(filter(None, [base.get("PYTHONPATH"), STANDIN_DIR, nvml.SIM_DIR]))
        return base

    def command(self, argv, cwd: str = None) -> list:
        """ARGV prefixed so that it runs inside the namespaces, in CWD (default: the current one)."""
        if not self.alive:
            raise SandboxError("sandbox in %s is not running" % self.workdir)
        return ["nsenter", "-t", str(self.init_pid), "-p", "-m", "--wd=" + (cwd or os.getcwd()), "--"] + list(argv)

    def popen(self, argv, env: dict = None, **kwargs) -> subprocess.Popen:
        return subprocess.Popen(self.command(argv, kwargs.pop("cwd", None)), env=self.env(env), **kwargs)

    def run(self, argv, env: dict = None, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
        check = kwargs.pop("check", False)
        return subprocess.run(self.command(argv, kwargs.pop("cwd", None)), env=self.env(env), timeout=timeout,
                              check=check, **kwargs)

    def container_argv(self, argv, name: str) -> tuple:
        """(ARGV wrapped to run, inside the sandbox, in a container on the node: a nested PID
        namespace with its own /proc and mount namespace, a shell as its init; the directory
        where the node's /proc stays reachable, for GPUSIM_HOST_PROC). NAME names the directory."""
        outer = os.path.join(self.workdir, "containers", name, "node-proc")
        os.makedirs(outer, exist_ok=True)
        script = 'mount --bind /proc "$0" && mount -t proc proc /proc && "$@" & wait'
        return ["unshare", "--pid", "--fork", "--kill-child", "--mount", "--propagation", "private",
                "sh", "-c", script, outer] + list(argv), outer

    def container(self, argv, name: str, env: dict = None, **kwargs) -> subprocess.Popen:
        """Run ARGV in a container on the node (see container_argv); the NVML double, and only
        it, reads the node's /proc through GPUSIM_HOST_PROC there."""
        wrapped, outer = self.container_argv(argv, name)
        return self.popen(wrapped, env=dict(env or {}, GPUSIM_HOST_PROC=outer), **kwargs)

    def container_python(self, name: str) -> str:
        """A wrapper like ``python``, whose Python runs in a container on the node named NAME."""
        wrapped, outer = self.container_argv(["__PYTHON__"], name)
        wrapped[wrapped.index("sh") + 2] = wrapped[wrapped.index("sh") + 2].replace('& wait', '')
        path = os.path.join(self.workdir, "bin", "python-in-" + name)
        with open(self.python) as f:
            script = f.read()
        argv = " ".join(shlex.quote(a) for a in wrapped[:-1])
        script = script.replace("exec nsenter", "export GPUSIM_HOST_PROC=%s\nexec nsenter" % shlex.quote(outer))
        script = script.replace(" -- %s " % shlex.quote(VENV_PYTHON), " -- %s %s " % (argv, shlex.quote(VENV_PYTHON)))
        with open(path, "w") as f:
            f.write(script)
        os.chmod(path, 0o755)
        return path

    def netns_python(self, netns: str) -> str:
        """A wrapper like ``python`` whose Python also runs in network namespace NETNS (``ip netns exec``): a node
        of a multi-node server, reached by its peers at its own address."""
        path = os.path.join(self.workdir, "bin", "python-in-" + netns)
        with open(self.python) as f:
            script = f.read()
        script = script.replace("exec nsenter", "exec ip netns exec %s nsenter" % shlex.quote(netns))
        with open(path, "w") as f:
            f.write(script)
        os.chmod(path, 0o755)
        return path

    def allocate(self, gpu_index: int, mib: int, pid: int) -> None:
        """node.allocate for PID of the sandbox's namespace (its start time is read inside)."""
        self.run([VENV_PYTHON, "-m", "gpusim.nvml", "--state", self.state_dir, "allocate", str(gpu_index), str(mib),
                  "--pid", str(pid)], check=True)

    def procs(self) -> list:
        """The process table as seen inside: dicts pid, ppid, state, comm, cmdline (list), exe."""
        result = self.run([VENV_PYTHON, "-c", _PROCS_SNIPPET], capture_output=True, text=True, check=True)
        return json.loads(result.stdout)

    # -- files for other tools --

    def _write_wrapper(self) -> None:
        q = shlex.quote
        lines = [
            "#!/bin/sh",
            "# Runs the project's Python inside the simulated GPU node in %s" % self.workdir,
            "export GPUSIM_STATE=%s" % q(self.state_dir),
            'export LD_LIBRARY_PATH=%s"${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"' % q(nvml.lib_dir()),
            'export PATH=%s:%s:"$PATH"' % (q(os.path.dirname(VENV_PYTHON)), q(os.path.join(STANDIN_DIR, "bin"))),
            'export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}"%s:%s' % (q(STANDIN_DIR), q(nvml.SIM_DIR)),
            "export GPUOPS_HOST_PIDNS=%s" % q(self.pid_namespace),
            'exec nsenter -t %d -p -m --wd="$(pwd)" -- %s "$@"' % (self.init_pid, q(VENV_PYTHON)),
        ]
        script = "\n".join(lines) + "\n"
        tmp = self.python + ".tmp"
        with open(tmp, "w") as f:
            f.write(script)
        os.chmod(tmp, 0o755)
        os.replace(tmp, self.python)

    def _write_info(self) -> None:
        info = {"workdir": self.workdir, "gpus": self.gpus, "init_pid": self.init_pid,
                "pid_namespace": self.pid_namespace,
                "init_start_time": self._init_start, "python": self.python, "state_dir": self.state_dir,
                "decoys": self.decoys, "env": self.env({})}
        tmp = os.path.join(self.workdir, INFO_FILE + ".tmp")
        with open(tmp, "w") as f:
            json.dump(info, f, indent=2)
        os.replace(tmp, os.path.join(self.workdir, INFO_FILE))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpusim.sandbox", description="Local simulated GPU node.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("start", help="start a sandbox that stays up until stop; print its details as JSON")
    p.add_argument("--workdir", required=True)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--no-decoys", action="store_true")
    p = sub.add_parser("stop", help="kill the sandbox started in WORKDIR")
    p.add_argument("--workdir", required=True)
    p = sub.add_parser("exec", help="run a command inside the sandbox started in WORKDIR")
    p.add_argument("--workdir", required=True)
    p.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)

    if args.command == "start":
        sb = Sandbox(args.workdir, gpus=args.gpus, decoys=not args.no_decoys, detach=True).start()
        with open(os.path.join(sb.workdir, INFO_FILE)) as f:
            sys.stdout.write(f.read() + "\n")
        return 0
    sb = Sandbox.attach(args.workdir)
    if args.command == "stop":
        sb.close()
        return 0
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    return sb.run(argv, timeout=None).returncode


if __name__ == "__main__":
    sys.exit(main())

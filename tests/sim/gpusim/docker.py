# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A real Docker daemon (Debian's docker.io) inside a simulated node's sandbox, and the SGLang
stand-in in one of its containers; and what every engine of gpusim shares (Engine: the image, the
stand-in's mounts and environment, its container), gpusim.podman's too.

    with Dockerd(node.sandbox) as docker:
        c = docker.run_standin(node, "team-sglang", ["--tp-size", "2"], restart="unless-stopped")
        docker.inspect(c)

The daemon runs inside the node's PID namespace, so its containers' processes are the node's
processes (in PID namespaces of their own), as on a host. As FACTS.md measured on this kind of
machine: `dockerd --data-root D --exec-root E -H unix://S --pidfile P --iptables=false
--bridge=none`, the overlay2 storage driver, the cgroupfs cgroup driver on cgroup v1
(`/docker/ID` in /proc/PID/cgroup); containers use `--network host`. No registry is reachable, so
the image is an empty one (`docker import` of an empty tar) and the container binds the host's
/usr, /lib, /etc and the stand-in's directories read-only, the node's /proc at
GPUSIM_HOST_PROC (for the NVML double, as gpusim.sandbox.Sandbox.container does) and its
/dev/nvidia* files. The test stops the daemon by the PID in its own pidfile.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time

from gpusim import nvml, standin
from gpusim.nvml import REPO_ROOT, SIM_DIR
from gpusim.sandbox import VENV_PYTHON

IMAGE = "gpuops-empty:latest"
# where a container sees the node's /proc (the NVML double reads the host PIDs of its GPU processes there)
OUTER_PROC = "/gpusim-node-proc"


def available() -> bool:
    return shutil.which("dockerd") is not None and shutil.which("docker") is not None


def empty_tar(directory: str) -> str:
    """An empty tar in DIRECTORY, what `docker|podman import` makes IMAGE of."""
    path = os.path.join(directory, "empty.tar")
    with tarfile.open(path, "w"):
        pass
    return path


class Engine:
    """A container engine of the node: its client (cli), the variables that point a client at it (variables, which
    a test also gives ansible-playbook, so that the modules ask the same engine), IMAGE and the stand-in's
    container."""

    name = None     # the engine's command, and sglang_launch_supervisor's value for it

    def variables(self) -> dict:
        raise NotImplementedError

    def cli(self, *args, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        raise NotImplementedError

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @staticmethod
    def standin_environment(node) -> dict:
        """What the stand-in needs in a container of IMAGE beside the server's own environment: the node's state for
        the NVML double, the double itself, the node's /proc at GPUSIM_HOST_PROC (see standin_volumes)."""
        return dict(GPUSIM_STATE=node.sandbox.state_dir, LD_LIBRARY_PATH=nvml.lib_dir(), GPUSIM_HOST_PROC=OUTER_PROC,
                    PYTHONPATH=":".join([node.sglang, SIM_DIR]), PATH="/usr/local/bin:/usr/bin:/bin")

    @staticmethod
    def standin_devices(node) -> list:
        """Mounts (SRC:DST) of the node's /dev/nvidia* files, as --gpus would pass them (gpusim.sandbox:
        /dev/nvidia0..N-1 and the shared ones). They are plain files, which neither engine's --device takes."""
        devices = ["nvidia%d" % i for i in range(node.sandbox.gpus)] + ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools",
                                                                        "nvidia-modeset"]
        return ["/dev/%s:/dev/%s" % (dev, dev) for dev in devices]

    @classmethod
    def standin_volumes(cls, node, devices: bool = True) -> list:
        """Mounts (SRC:DST[:OPTIONS]) that make IMAGE hold the stand-in: the host's /usr, /lib, /etc and the
        stand-in's directories read-only, the node's state, its /proc, and (DEVICES) standin_devices."""
        paths = ("/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc", REPO_ROOT, os.path.dirname(node.sglang),
                 node.workdir)
        volumes = ["%s:%s:ro" % (path, path) for path in paths if os.path.exists(path)]
        volumes += ["%s:%s" % (node.sandbox.state_dir, node.sandbox.state_dir), "/proc:%s:ro" % OUTER_PROC]
        return volumes + (cls.standin_devices(node) if devices else [])

    def launch_vars(self, node, environment: dict = None) -> dict:
        """The host variables with which sglang_launch runs NODE's stand-in in a container of this engine, at TP=2
        with metrics: IMAGE holding the stand-in through standin_volumes, and the node's /dev/nvidia* files mounted in
        place of the GPU defaults, which need what the sandbox lacks (--gpus all the NVIDIA Container Toolkit, Podman's
        CDI device nvidia.com/gpu=all a CDI spec from nvidia-ctk cdi generate; the files are plain files, which neither
        engine's --device takes). ENVIRONMENT joins the node's server environment and the stand-in's."""
        server_env = dict(node.server_env, **(environment or {}))
        server_env.update(self.standin_environment(node))
        return {
            "sglang_launch_supervisor": self.name,
            "sglang_launch_image": IMAGE,
            "sglang_launch_container_volumes": self.standin_volumes(node, devices=False),
            "sglang_launch_container_gpu_options": ["--volume=" + device for device in self.standin_devices(node)],
            "sglang_launch_pythonpath": [node.sglang, SIM_DIR],
            "sglang_launch_environment": server_env,
            "sglang_launch_server_args": {"tp_size": 2, "enable_metrics": True},
        }

    def run_standin(self, node, name: str, args=(), restart: str = "no", env: dict = None) -> str:
        """The stand-in as `python -m sglang.launch_server` in a container NAME on the host network, serving on
        the node's port; the container's id."""
        environment = dict(standin.FAST_ENV, **node.server_env)
        environment.update(self.standin_environment(node))
        environment.update(env or {})
        # as teams run it: `docker run ... python3 -m sglang.launch_server ...`, the server as the container's PID 1
        argv = ["run", "-d", "--name", name, "--network", "host", "--restart", restart]
        for volume in self.standin_volumes(node):
            argv += ["-v", volume]
        for key, value in sorted(environment.items()):
            argv += ["-e", "%s=%s" % (key, value)]
        argv += [IMAGE, VENV_PYTHON, "-m", "sglang.launch_server", "--model-path", node.model,
                 "--port", str(node.port)] + list(args)
        return self.cli(*argv).stdout.strip()

    def inspect(self, container: str) -> dict:
        return json.loads(self.cli("inspect", container).stdout)[0]


class Dockerd(Engine):
    name = "docker"

    def __init__(self, sb):
        self.sb = sb
        # unix socket paths are limited to 108 bytes (containerd's under the exec root too): a short directory
        self.root = tempfile.mkdtemp(prefix="gpusim-docker-")
        self.socket = os.path.join(self.root, "docker.sock")
        self.host = "unix://" + self.socket
        self.pidfile = os.path.join(self.root, "docker.pid")
        self.proc = None

    def variables(self) -> dict:
        return {"DOCKER_HOST": self.host}

    def cli(self, *args, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(["docker"] + list(args), env=dict(os.environ, **self.variables()), capture_output=True,
                              text=True, timeout=timeout, check=check)

    def start(self, timeout: float = 60) -> "Dockerd":
        os.makedirs(self.root, exist_ok=True)
        argv = ["dockerd", "--data-root", os.path.join(self.root, "data"),
                "--exec-root", os.path.join(self.root, "exec"), "-H", self.host, "--pidfile", self.pidfile,
                "--iptables=false", "--bridge=none"]
        with open(os.path.join(self.root, "dockerd.log"), "ab") as log:
            self.proc = self.sb.popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while self.cli("info", "--format", "{{.ServerVersion}}", check=False).returncode != 0:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("dockerd did not start; log:\n" + self.log()[-3000:])
            time.sleep(0.2)
        if self.cli("image", "inspect", IMAGE, check=False).returncode != 0:
            self.cli("import", empty_tar(self.root), IMAGE)
        return self

    def log(self) -> str:
        with open(os.path.join(self.root, "dockerd.log"), errors="replace") as f:
            return f.read()

    def stop(self) -> None:
        """Remove the containers, then stop the daemon by the PID in its own pidfile."""
        if self.proc is None:
            return
        ids = self.cli("ps", "-aq", check=False).stdout.split()
        if ids:
            self.cli("rm", "-f", *ids, check=False)
        try:
            with open(self.pidfile) as f:
                pid = int(f.read().strip())
            self.sb.run(["kill", "-TERM", str(pid)])
        except (OSError, ValueError):
            pass
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None
        shutil.rmtree(self.root, ignore_errors=True)

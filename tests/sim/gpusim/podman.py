# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Debian's Podman inside a simulated node's sandbox, with storage and configuration of its own, and
the SGLang stand-in in one of its containers (the image, mounts and environment of gpusim.docker.Engine).

    with Podman(node.sandbox) as podman:
        c = podman.run_standin(node, "team-sglang", ["--tp-size", "2"], restart="unless-stopped")
        podman.inspect(c)

Podman has no daemon: each `podman` runs inside the node's PID and mount namespaces (the sandbox's
/dev/nvidia* files, its conmon and containers among the node's processes), and reads its configuration
from the files that CONTAINERS_CONF and CONTAINERS_STORAGE_CONF name (variables, which a test gives
ansible-playbook too). Those put the graph root, run root, temporary directory, volumes, networks and event
log under a temporary directory of the engine, never the host's own storage, and set what FACTS.md found
this VM needs: runc (crun rejects its hybrid cgroup layout), the cgroupfs manager (no systemd inside the
sandbox) and explicit ulimits. stop removes the containers of that storage, then the directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

from gpusim.docker import IMAGE, Engine, empty_tar


def available() -> bool:
    return shutil.which("podman") is not None and shutil.which("runc") is not None


STORAGE_CONF = """[storage]
driver = "overlay"
graphroot = "{root}/graph"
runroot = "{root}/run"
"""

CONTAINERS_CONF = """[containers]
default_ulimits = ["nofile=20000:20000", "nproc=20000:20000"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "{root}/events.log"
tmp_dir = "{root}/tmp"
volume_path = "{root}/volumes"

[network]
network_config_dir = "{root}/networks"
"""


class Podman(Engine):
    name = "podman"

    def __init__(self, sb):
        self.sb = sb
        # conmon's attach socket lives under the run root, and unix socket paths are limited to 108 bytes
        self.root = tempfile.mkdtemp(prefix="gpusim-podman-")
        self.started = False

    def variables(self) -> dict:
        return {"CONTAINERS_CONF": os.path.join(self.root, "containers.conf"),
                "CONTAINERS_STORAGE_CONF": os.path.join(self.root, "storage.conf")}

    def cli(self, *args, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        return self.sb.run(["podman"] + list(args), env=dict(os.environ, **self.variables()), capture_output=True,
                           text=True, timeout=timeout, check=check)

    def start(self) -> "Podman":
        for name, text in (("storage.conf", STORAGE_CONF), ("containers.conf", CONTAINERS_CONF)):
            with open(os.path.join(self.root, name), "w") as f:
                f.write(text.format(root=self.root))
        self.started = True
        self.cli("import", empty_tar(self.root), IMAGE)
        return self

    def stop(self) -> None:
        """Remove the containers of this engine's storage (all of them the test's), then the storage."""
        if not self.started:
            return
        ids = self.cli("ps", "-aq", check=False).stdout.split()
        if ids:
            self.cli("rm", "-f", "--time", "0", *ids, check=False)
        self.started = False
        shutil.rmtree(self.root, ignore_errors=True)

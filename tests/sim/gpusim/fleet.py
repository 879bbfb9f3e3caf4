# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Simulated GPU nodes as Ansible hosts, and real ansible-playbook runs against them.

Each node is a local sandbox (PID and mount namespaces, simulated NVML); its inventory
host uses the local connection with the sandbox's Python wrapper as interpreter, so every
module runs inside the node while ansible-playbook runs outside. Each node has its own
port, state, log and dump directories and host lock.

    with SimNode(tmp / "node1", gpus=4) as node:
        server = node.start_server(["--tp-size", "2"])      # started by hand, in its own session
        fleet = Fleet(tmp, [node])
        run = fleet.playbook("restart_extraction.yml")
        assert run.rc == 0, run.output
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import yaml

from gpusim import net, standin
from gpusim.nvml import REPO_ROOT
from gpusim.sandbox import VENV_PYTHON, Sandbox

PLAYBOOKS = os.path.join(REPO_ROOT, "playbooks")
ROLES = os.path.join(REPO_ROOT, "roles")
ANSIBLE = os.path.join(os.path.dirname(VENV_PYTHON), "ansible")
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(VENV_PYTHON), "ansible-playbook")

COLLECTIONS = os.path.join(REPO_ROOT, "build", "collections")


def http_get(url: str, timeout: float = 10, api_key: str = None):
    """(status, body) of a GET of URL, with API_KEY as the bearer token; a JSON body decoded;
    (None, None) when nothing answers."""
    request = urllib.request.Request(url, headers={"Authorization": "Bearer " + api_key} if api_key else {})
    try:
        with standin.OPENER.open(request, timeout=timeout) as res:
            body = res.read().decode(errors="replace")
            return res.status, (json.loads(body) if body[:1] in ("{", "[") else body)
    except urllib.error.HTTPError as e:
        return e.code, None
    except OSError:
        return None, None


def collections_path() -> str:
    """The collections root where gpuops.host is this working tree.

    The same link as make's COLLECTION_LINK rule (build/collections/ansible_collections/gpuops/host),
    made here as well so that a test run without make finds it."""
    link = os.path.join(COLLECTIONS, "ansible_collections", "gpuops", "host")
    if not os.path.islink(link):
        os.makedirs(os.path.dirname(link), exist_ok=True)
        try:
            os.symlink(REPO_ROOT, link)
        except FileExistsError:     # made meanwhile by a test running beside this one
            pass
    return COLLECTIONS


class SimNode:
    """A sandbox with a GPUS-GPU simulated node, a model, a dump root and the stand-in.

    DECOYS: the node runs nvidia-persistenced and nv-hostengine stand-ins. DETACH: the sandbox
    outlives this process (make playground); SimNode.attach(workdir) finds it again."""

    def __init__(self, workdir: str, gpus: int = 4, name: str = None, patched: bool = True,
                 server_env: dict = None, decoys: bool = True, detach: bool = False, pci_gpus: int = None):
        self.workdir = os.path.abspath(workdir)
        self.name = name or os.path.basename(self.workdir)
        self.gpus = gpus
        self.sandbox = Sandbox(os.path.join(self.workdir, "sandbox"), gpus=gpus, decoys=decoys, detach=detach,
                               pci_gpus=pci_gpus)
        self.sglang = standin.install(os.path.join(self.workdir, "sglang"), patched=patched)
        self.model = standin.make_model_dir(os.path.join(self.workdir, "model"))
        self.state_dir = os.path.join(self.workdir, "state")
        self.log_dir = os.path.join(self.workdir, "log")
        self.dump_root = os.path.join(self.workdir, "dumps")
        self.lock_path = os.path.join(self.workdir, "gpuops-lock")  # the lock directory (0700)
        self.port = net.free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.server_env = dict(standin.FAST_ENV, **(server_env or {}))
        self.server = None          # the standin.Launch of start_server
        os.makedirs(self.dump_root, exist_ok=True)

    def __enter__(self) -> "SimNode":
        self.sandbox.start()
        return self

    def __exit__(self, *exc) -> None:
        self.sandbox.close()

    # Short waits for tests. Without them (fast=False: bench, playground) the roles' defaults apply.
    FAST_TIMINGS = {
        "sglang_launch_ready_timeout": 60,
        "sglang_launch_ready_interval": 0.1,
        "sglang_stop_drain_interval": 1,
        "sglang_stop_term_timeout": 5,
        "gpu_clean_kill_timeout": 5,
        "gpu_clean_verify_timeout": 10,
        "gpu_clean_poll_interval": 0.1,
    }

    def host_vars(self, fast: bool = True, **extra) -> dict:
        """Inventory variables of this node (its own port, paths and lock); EXTRA wins."""
        values = {
            "ansible_connection": "local",
            "ansible_python_interpreter": self.sandbox.python,
            "sglang_launch_python": VENV_PYTHON,
            "sglang_launch_pythonpath": [self.sglang],
            "sglang_launch_model_path": self.model,
            "sglang_launch_port": self.port,
            "sglang_launch_supervisor": "process",
            "sglang_launch_state_dir": self.state_dir,
            "sglang_launch_log_dir": self.log_dir,
            "sglang_launch_dump_root": self.dump_root,
            "sglang_launch_dump_min_free_gb": 0.01,
            "sglang_launch_environment": self.server_env,
            "sglang_launch_server_args": {"tp_size": 2, "enable_metrics": True},
            "gpuops_lock_dir": self.lock_path,
        }
        if fast:
            values.update(self.FAST_TIMINGS)
        values.update(extra)
        return values

    # -- the server, seen from outside --

    def start_server(self, args=(), env: dict = None, serve: bool = False, timeout: float = 60) -> standin.Launch:
        """A server started by hand (not by the roles), in its own session, ready.

        `python -m sglang.launch_server`, or with SERVE the console script as pip installs it
        (its command line reads `python .../bin/sglang serve ...`)."""
        argv = [VENV_PYTHON, os.path.join(self.sglang, "bin", "sglang"), "serve"] if serve else None
        launch = standin.Launch(self.sandbox, self.model, args=list(args), port=self.port,
                                env=dict(self.server_env, PYTHONPATH=self.sglang, **(env or {})),
                                python=VENV_PYTHON, argv=argv,
                                log_path=os.path.join(self.workdir, "hand-started.log"))
        self.server = launch.start().wait_ready(timeout)
        return self.server

    def healthy(self) -> bool:
        return http_get(self.url + "/health")[0] == 200

    def serving(self) -> int:
        """The PID of the node's server, starting one by hand (TP 2, metrics on) when none is ready."""
        pids = self.main_pids()
        if len(pids) != 1 or not self.healthy():
            self.start_server(["--tp-size", "2", "--enable-metrics"])
            pids = self.main_pids()
        assert len(pids) == 1, self.sglang_procs()
        return pids[0]

    def record(self) -> dict:
        """server.json, the record sglang_launch keeps."""
        with open(os.path.join(self.state_dir, "server.json")) as f:
            return json.load(f)

    def main_pids(self) -> list:
        """PIDs (inside the sandbox) of the SGLang main processes running now."""
        return sorted(p["pid"] for p in self.sandbox.procs()
                      if p["state"] != "Z" and p["cmdline"][:1] != ["setsid"]
                      and ("sglang.launch_server" in p["cmdline"] or "serve" in p["cmdline"][1:3]))

    def sglang_procs(self) -> list:
        return [p for p in self.sandbox.procs()
                if p["state"] != "Z" and (any("sglang" in a for a in p["cmdline"][:3]))]

    def environ(self, pid: int) -> dict:
        out = self.sandbox.run(["cat", "/proc/%d/environ" % pid], capture_output=True, check=True).stdout
        return dict(item.decode(errors="replace").split("=", 1) for item in out.split(b"\0") if b"=" in item)

    def used_mib(self) -> list:
        """v2 used MiB of every GPU, read through the real pynvml inside the node."""
        code = ("import json, pynvml\npynvml.nvmlInit()\nout = []\n"
                "for i in range(pynvml.nvmlDeviceGetCount()):\n"
                "    h = pynvml.nvmlDeviceGetHandleByIndex(i)\n"
                "    out.append(pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2).used // 2**20)\n"
                "print(json.dumps(out))\n")
        res = subprocess.run([self.sandbox.python, "-c", code], capture_output=True, text=True, check=True)
        return json.loads(res.stdout)


class Request(threading.Thread):
    """A generation request sent from another thread; .result is (status, body) once done."""

    def __init__(self, url: str, max_new_tokens: int, text: str = "Explain tensor parallelism.", api_key: str = None):
        super().__init__(daemon=True)
        self.url, self.body = url, {"text": text, "sampling_params": {"max_new_tokens": max_new_tokens}}
        self.headers = dict({"content-type": "application/json"},
                            **({"Authorization": "Bearer " + api_key} if api_key else {}))
        self.result = None

    def run(self):
        req = urllib.request.Request(self.url + "/generate", json.dumps(self.body).encode(), self.headers)
        try:
            with standin.OPENER.open(req, timeout=300) as res:
                self.result = (res.status, json.loads(res.read()))
        except urllib.error.HTTPError as e:
            self.result = (e.code, e.read().decode(errors="replace"))
        except OSError as e:
            self.result = (None, str(e))


class Run:
    def __init__(self, proc: subprocess.CompletedProcess):
        self.rc = proc.returncode
        self.output = proc.stdout

    def words(self) -> str:
        """The output with every run of white space made one space: messages wrap."""
        return " ".join(self.output.split())

    def summary(self) -> str:
        """The output from the last summary table of the run on."""
        return self.output[self.output.rindex("summary of the run"):]

    def recap(self) -> dict:
        """host -> {ok, changed, failed, ...} from the PLAY RECAP."""
        result, seen = {}, False
        for line in self.output.splitlines():
            if line.startswith("PLAY RECAP"):
                seen = True
            elif seen and ":" in line and "=" in line:
                host, counts = line.split(":", 1)
                result[host.strip()] = dict((k, int(v)) for k, v in (kv.split("=") for kv in counts.split()))
        return result


class Fleet:
    """An inventory of SimNodes in the gpu_nodes group, and ansible-playbook runs against it."""

    def __init__(self, workdir: str, nodes: list, groups: dict = None, **host_vars):
        self.workdir = os.path.abspath(workdir)
        self.nodes = nodes
        self.groups = groups or {}  # more inventory groups: name -> the names of their nodes
        self.inventory = os.path.join(self.workdir, "inventory.yml")
        self.collections = collections_path()
        self.write_inventory(**host_vars)

    def write_inventory(self, **host_vars):
        hosts = dict((n.name, n.host_vars(**host_vars)) for n in self.nodes)
        children = {"gpu_nodes": {"hosts": hosts}}
        children.update((name, {"hosts": dict((h, {}) for h in members)}) for name, members in self.groups.items())
        with open(self.inventory, "w") as f:
            yaml.safe_dump({"all": {"children": children}}, f)

    def env(self) -> dict:
        # Made here, root only: a module that has to create its remote_tmp itself warns about it.
        os.makedirs(os.path.join(self.workdir, "ansible-remote"), mode=0o700, exist_ok=True)
        env = dict(os.environ)
        env.update({
            "ANSIBLE_COLLECTIONS_PATH": self.collections,
            "ANSIBLE_PIPELINING": "true",
            "ANSIBLE_FORCE_COLOR": "false",
            "ANSIBLE_NOCOLOR": "true",
            "ANSIBLE_RETRY_FILES_ENABLED": "false",
            "ANSIBLE_LOCAL_TEMP": os.path.join(self.workdir, "ansible-local"),
            "ANSIBLE_REMOTE_TEMP": os.path.join(self.workdir, "ansible-remote"),
            "ANSIBLE_HOME": os.path.join(self.workdir, "ansible-home"),
        })
        env.pop("PYTHONPATH", None)
        return env

    def playbook(self, name: str, *args, timeout: float = 300) -> Run:
        argv = [ANSIBLE_PLAYBOOK, "-i", self.inventory, os.path.join(PLAYBOOKS, name)] + list(args)
        proc = subprocess.run(argv, env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=timeout, cwd=self.workdir, check=False)
        return Run(proc)

    def popen(self, name: str, *args) -> subprocess.Popen:
        argv = [ANSIBLE_PLAYBOOK, "-i", self.inventory, os.path.join(PLAYBOOKS, name)] + list(args)
        return subprocess.Popen(argv, env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                cwd=self.workdir)


if __name__ == "__main__":
    sys.exit("import this module: from gpusim.fleet import Fleet, SimNode")

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The SGLang stand-in (tests/sim/standin): where it lives, copies of it, fake models, a launcher.

    path = install(dest, patched=False)      # a copy without the hidden-state dump patch
    model = make_model_dir(tmp / "model")
    with Launch(sb, model, env={"PYTHONPATH": path}, args=["--tp-size", "2"]) as srv:
        srv.wait_ready()
        status, body = srv.get("/server_info")
        srv.signal("TERM")
    with ContainerLaunch(sb, model, args=["--tp-size", "2", "--base-gpu-id", "2"]) as boxed:
        boxed.wait_ready()                   # the same, in a container on the node
    with NetnsLaunch(sb, "ns0", "10.254.0.1", model, args=["--nnodes", "2", ...]) as head:
        head.wait_ready()                    # in network namespace ns0 (ip netns), asked at 10.254.0.1
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

from gpusim import net
from gpusim.nvml import SIM_DIR

STANDIN_ROOT = os.path.join(SIM_DIR, "standin")
PATCH_FILE = os.path.join("sglang", "srt", "models", "hs_dump.py")
PATCH_MARKER = "SGLANG_HS_DUMP_DIR"
# Short timings for tests; the stand-in's own defaults are the real server's.
FAST_ENV = {"GPUSIM_SGLANG_LOAD_SECONDS": "0.3", "GPUSIM_SGLANG_WARMUP_SECONDS": "0.2",
            "GPUSIM_SGLANG_TOKEN_DELAY": "0.005", "GPUSIM_SGLANG_WATCHDOG_INTERVAL": "0.2",
            "GPUSIM_SGLANG_HEALTH_POLL_SECONDS": "0.1"}
RELEASES = ("0.5.23", "0.5.14")  # the contracts in standin/contracts
# The simulated nodes answer on loopback: an http_proxy in the environment must not take their requests.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def standin_root() -> str:
    """Directory to put on PYTHONPATH (with tests/sim for gpusim) for the in-tree stand-in."""
    return STANDIN_ROOT


def bin_dir() -> str:
    """Directory holding the `sglang` console script."""
    return os.path.join(STANDIN_ROOT, "bin")


def install(dest: str, patched: bool = True) -> str:
    """Copy the stand-in (package, `bin/sglang`, contracts) and gpusim to DEST; return DEST for PYTHONPATH.

    Without PATCHED the copy lacks the hidden-state dump patch, as a stock SGLang install does."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    os.makedirs(dest, exist_ok=True)
    for name in ("sglang", "bin", "contracts"):
        target = os.path.join(dest, name)
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(os.path.join(STANDIN_ROOT, name), target, ignore=ignore)
    target = os.path.join(dest, "gpusim")
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(os.path.join(SIM_DIR, "gpusim"), target, ignore=ignore)
    if not patched:
        os.unlink(os.path.join(dest, PATCH_FILE))
    return dest


def is_patched(path: str) -> bool:
    """Whether the stand-in copy at PATH (as install returns) carries the dump patch."""
    try:
        with open(os.path.join(path, PATCH_FILE)) as f:
            return PATCH_MARKER in f.read()
    except FileNotFoundError:
        return False


def make_model_dir(path: str, architecture: str = "LlamaForCausalLM", layers: int = 32, hidden_size: int = 4096,
                   context_length: int = 8192, weights_mib: int = 0, shards: int = 4) -> str:
    """A model directory the stand-in accepts: config.json and tokenizer_config.json, and WEIGHTS_MIB of
    safetensors shards (none by default), which the stand-in's schedulers read from disk at load."""
    os.makedirs(path, exist_ok=True)
    if weights_mib:
        write_weights(path, weights_mib, shards)
    config = {"architectures": [architecture], "model_type": "llama", "hidden_size": hidden_size,
              "num_hidden_layers": layers, "num_attention_heads": 32, "num_key_value_heads": 8,
              "max_position_embeddings": context_length, "torch_dtype": "bfloat16", "vocab_size": 32000}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump({"model_max_length": context_length, "tokenizer_class": "PreTrainedTokenizerFast"}, f)
    return path


def write_weights(path: str, weights_mib: int, shards: int) -> None:
    """SHARDS files model-0000i-of-0000N.safetensors, WEIGHTS_MIB in all: a safetensors header with one U8
    tensor, then its bytes (random, so that no file system stores them sparse). Kept when the sizes match."""
    block = os.urandom(1 << 20)
    for i in range(shards):
        size = (weights_mib << 20) // shards
        header = json.dumps({"model.layers.%d.weight" % i: {"dtype": "U8", "shape": [size],
                                                            "data_offsets": [0, size]}}).encode()
        header += b" " * (-len(header) % 8)
        name = os.path.join(path, "model-%05d-of-%05d.safetensors" % (i + 1, shards))
        if os.path.exists(name) and os.path.getsize(name) == 8 + len(header) + size:
            continue
        with open(name + ".tmp", "wb") as f:
            f.write(len(header).to_bytes(8, "little") + header)
            for dummy in range(size >> 20):
                f.write(block)
            f.write(block[:size & ((1 << 20) - 1)])
        os.replace(name + ".tmp", name)


def fetch(req: urllib.request.Request, timeout: float):
    """(status, parsed JSON or text) of REQ sent through OPENER; (None, None) when nothing listens or the
    connection broke."""
    try:
        with OPENER.open(req, timeout=timeout) as res:
            status, raw = res.status, res.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    except (OSError, ConnectionError):
        return None, None
    text = raw.decode(errors="replace")
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


class Launch:
    """The stand-in started inside sandbox SB, in a session of its own (as under systemd)."""

    def __init__(self, sb, model_path: str, args=(), env: dict = None, port: int = None, log_path: str = None,
                 argv: list = None, python: str = None):
        self.sb = sb
        self.port = port or net.free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.log_path = log_path or os.path.join(sb.workdir, "sglang-%d.log" % self.port)
        prefix = argv or [python or sys.executable, "-m", "sglang.launch_server"]
        self.argv = prefix + ["--model-path", model_path, "--port", str(self.port)] + list(args)
        self.env = dict(os.environ, **FAST_ENV)
        self.env.update(env or {})
        self.proc = None
        self.pid = None  # the launcher's PID inside the sandbox

    def __enter__(self) -> "Launch":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> "Launch":
        with open(self.log_path, "ab") as log:
            self.proc = self.sb.popen(["setsid"] + self.argv, env=self.env, stdin=subprocess.DEVNULL,
                                      stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def stop(self) -> None:
        """SIGKILL whatever is left of the tree (the sandbox keeps orphans inside)."""
        for proc in self.tree():
            self.sb.run(["kill", "-KILL", str(proc["pid"])])
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    # -- state --

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def find_pid(self, timeout: float = 30) -> int:
        """The launcher's PID inside the sandbox."""
        marker = "--port"
        deadline = time.monotonic() + timeout
        while self.pid is None:
            for p in self.sb.procs():
                cmd = p["cmdline"]
                if marker in cmd and str(self.port) in cmd and cmd[:1] != ["setsid"] and p["state"] != "Z":
                    self.pid = p["pid"]
            if self.pid is None:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("launcher not found; log:\n" + self.log()[-3000:])
                time.sleep(0.05)
        return self.pid

    def tree(self, procs: list = None) -> list:
        """The launcher and its descendants, as sb.procs() dicts (empty once all are gone)."""
        if self.pid is None:
            return []
        procs = self.sb.procs() if procs is None else procs
        by_parent = {}
        for p in procs:
            by_parent.setdefault(p["ppid"], []).append(p)
        result = [p for p in procs if p["pid"] == self.pid]
        todo = [self.pid]
        while todo:
            for child in by_parent.get(todo.pop(), []):
                result.append(child)
                todo.append(child["pid"])
        return result

    def signal(self, name: str, pid: int = None, group: bool = False) -> None:
        """kill -NAME the launcher (or PID), or its whole process group, from inside the sandbox."""
        target = pid or self.find_pid()
        self.sb.run(["kill", "-" + name, "--", ("-%d" % target) if group else str(target)], check=True)

    def wait_exit(self, timeout: float = 30) -> int:
        return self.proc.wait(timeout)

    # -- HTTP --

    def request(self, path: str, body: dict = None, timeout: float = 30, headers: dict = None):
        """(status, parsed JSON or text); status None when nothing listens or the connection broke."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data, dict({"content-type": "application/json"},
                                                                 **(headers or {})))
        return fetch(req, timeout)

    def get(self, path: str, timeout: float = 30, headers: dict = None):
        return self.request(path, timeout=timeout, headers=headers)

    def post(self, path: str, body: dict, timeout: float = 60, headers: dict = None):
        return self.request(path, body, timeout, headers)

    def wait_ready(self, timeout: float = 60) -> "Launch":
        """Wait for /health 200; fail with the log when the server exits or the time runs out."""
        deadline = time.monotonic() + timeout
        while self.get("/health", timeout=5)[0] != 200:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("server not ready (exit %s); log:\n%s" % (self.proc.poll(), self.log()[-4000:]))
            time.sleep(0.05)
        self.find_pid()
        return self


_FETCH_SNIPPET = r"""
import json, sys, urllib.error, urllib.request
url, body, timeout, headers = sys.argv[1], sys.argv[2], float(sys.argv[3]), json.loads(sys.argv[4])
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
try:
    with opener.open(urllib.request.Request(url, body.encode() if body else None, headers), timeout=timeout) as res:
        status, raw = res.status, res.read()
except urllib.error.HTTPError as e:
    status, raw = e.code, e.read()
except (OSError, ConnectionError):
    status, raw = None, b""
print(json.dumps([status, raw.decode(errors="replace")]))
"""


class NetnsLaunch(Launch):
    """The stand-in started inside sandbox SB and in network namespace NETNS (made with `ip netns add`),
    where it is asked at HOST; the test's own requests run in that namespace too (`ip netns exec`)."""

    def __init__(self, sb, netns: str, host: str, model_path: str, **kwargs):
        super().__init__(sb, model_path, **kwargs)
        self.netns = netns
        self.url = "http://%s:%d" % (host, self.port)

    def start(self) -> "NetnsLaunch":
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(["ip", "netns", "exec", self.netns] + self.sb.command(["setsid"] + self.argv),
                                         env=self.sb.env(self.env), stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def request(self, path: str, body: dict = None, timeout: float = 30, headers: dict = None):
        headers = dict({"content-type": "application/json"}, **(headers or {}))
        result = subprocess.run(["ip", "netns", "exec", self.netns, sys.executable, "-c", _FETCH_SNIPPET,
                                 self.url + path, "" if body is None else json.dumps(body), str(timeout),
                                 json.dumps(headers)], capture_output=True, text=True, timeout=timeout + 30,
                                check=True)
        status, text = json.loads(result.stdout)
        if status is None:
            return None, None
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text


class ContainerLaunch(Launch):
    """The stand-in started in a container on the node (a nested PID namespace of its own, see
    Sandbox.container), in a session of its own inside it."""

    def start(self) -> "ContainerLaunch":
        with open(self.log_path, "ab") as log:
            self.proc = self.sb.container(["setsid"] + self.argv, "sglang-%d" % self.port, env=self.env,
                                          stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        return self

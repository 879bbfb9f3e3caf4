# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The real SGLang Model Gateway (PyPI sglang-router, in build/gateway) on a simulated node.

    gw = Gateway(node.sandbox, worker_urls=[node.url]).start().wait_up()
    gw.workers()                     # GET /workers: [{"id", "url", "is_healthy", ...}]
    gw.add(url); gw.remove(worker_id)
    gw.terminated()                  # whether its log says it received a terminate signal
    Gateway(sb, admin_key="sk-...")  # its control plane behind an admin key, which gw's own calls send

It is started in a session of its own, as a team runs it beside its servers (nohup, a unit),
listening on 127.0.0.1 with its Prometheus server on 127.0.0.1 too (it listens on
0.0.0.0:29000 unless told). ``python -m sglang_router.launch_router`` retitles itself
``sglang::router`` (sglang_router/launch_router.py, launch_router(), in the 0.3.2 wheel), so
its /proc/PID/cmdline reads ``sglang::router`` once it runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request

from gpusim import net, standin
from gpusim.nvml import REPO_ROOT

GATEWAY_PYTHON = os.path.join(REPO_ROOT, "build", "gateway", "bin", "python")
# The Rust router's log line on SIGTERM or SIGINT (sglang-router 0.3.2, src/server.rs, seen in its log).
TERMINATE_LINE = "Received terminate signal"


def installed() -> bool:
    return os.access(GATEWAY_PYTHON, os.X_OK)


class Gateway:
    """The gateway inside sandbox SB (or on this host when SB is None), in front of WORKER_URLS."""

    def __init__(self, sb, worker_urls=(), port: int = None, policy: str = "round_robin", args=(),
                 log_path: str = None, module: str = "sglang_router.launch_router", admin_key: str = None):
        self.sb = sb
        # With an ADMIN_KEY the gateway's control plane wants it as a bearer token (--control-plane-api-keys
        # ID:NAME:admin:KEY, sglang_router/router_args.py, _parse_control_plane_api_keys; the 401 measured).
        self.admin_key = admin_key
        self.port = port or net.free_port()
        self.prometheus_port = net.free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        workdir = sb.workdir if sb is not None else os.getcwd()
        self.log_path = log_path or os.path.join(workdir, "gateway-%d.log" % self.port)
        self.argv = [GATEWAY_PYTHON, "-m", module, "--host", "127.0.0.1", "--port", str(self.port),
                     "--prometheus-host", "127.0.0.1", "--prometheus-port", str(self.prometheus_port),
                     "--policy", policy] + (["--worker-urls"] + list(worker_urls) if worker_urls else []) + list(args)
        self.env = {}
        if admin_key:
            self.argv += ["--control-plane-api-keys", "gpusim:gpusim:admin:" + admin_key]
        self.proc = None
        self.pid = None         # the gateway's PID (inside the sandbox)
        self.start_time = None  # /proc/PID/stat field 22 of that PID

    running = []

    @classmethod
    def colaunch(cls, sb, model_path: str, server_args=(), env: dict = None, log_path: str = None) -> "Gateway":
        """``python -m sglang_router.launch_server``: the gateway with workers of its own (one per
        data-parallel rank, from the first free port at or above a base port), running SGLang from
        ENV's PYTHONPATH (the stand-in). The router takes the server's --host and --port, and its own
        options prefixed --router- (sglang_router/launch_server.py main(), RouterArgs with
        use_router_prefix=True, exclude_host_port=True)."""
        gw = cls(sb, log_path=log_path, module="sglang_router.launch_server")
        gw.worker_base_port = net.free_port()
        gw.argv = [GATEWAY_PYTHON, "-m", "sglang_router.launch_server", "--model-path", model_path,
                   "--host", "127.0.0.1", "--port", str(gw.port),
                   "--router-dp-worker-base-port", str(gw.worker_base_port),
                   "--router-prometheus-host", "127.0.0.1", "--router-prometheus-port", str(gw.prometheus_port)
                   ] + list(server_args)
        gw.env = dict(env or {})
        return gw

    def start(self) -> "Gateway":
        Gateway.running.append(self)
        env = dict(os.environ, NO_COLOR="1", **self.env)
        if "PYTHONPATH" not in self.env:
            env.pop("PYTHONPATH", None)
        with open(self.log_path, "ab") as log:
            kwargs = dict(stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            if self.sb is not None:
                self.proc = self.sb.popen(["setsid"] + self.argv, env=env, **kwargs)
            else:
                self.proc = subprocess.Popen(self.argv, env=env, **kwargs)
        return self

    def stop(self) -> None:
        if self.pid is not None and self.alive():
            self._kill("KILL")
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self in Gateway.running:
            Gateway.running.remove(self)

    def _kill(self, name: str) -> None:
        argv = ["kill", "-" + name, str(self.pid)]
        if self.sb is not None:
            self.sb.run(argv)
        else:
            subprocess.run(argv, check=False)

    def _procs(self) -> list:
        if self.sb is not None:
            return self.sb.procs()
        raise NotImplementedError("a gateway on the host is found by its Popen only")

    def find_pid(self, timeout: float = 30) -> int:
        """The gateway's PID: the process titled sglang::router that no other Gateway of the same
        sandbox has (the setsid wrapper execs into Python, which retitles itself)."""
        taken = set(g.pid for g in Gateway.running if g is not self and g.sb is self.sb)
        deadline = time.monotonic() + timeout
        while self.pid is None:
            for p in self._procs():
                if p["cmdline"][:1] == ["sglang::router"] and p["state"] != "Z" and p["pid"] not in taken:
                    self.pid = p["pid"]
            if self.pid is None:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("gateway not found; log:\n" + self.log()[-3000:])
                time.sleep(0.05)
        self.start_time = self.stat_start()
        return self.pid

    def stat_start(self):
        """Field 22 of /proc/PID/stat (the start time in clock ticks) of the gateway's PID."""
        argv = ["cat", "/proc/%d/stat" % self.pid]
        out = (self.sb.run(argv, capture_output=True, text=True) if self.sb is not None
               else subprocess.run(argv, capture_output=True, text=True, check=False)).stdout
        if not out:
            return None
        return int(out[out.rindex(")") + 2:].split()[19])

    def alive(self) -> bool:
        return self.pid is not None and self.stat_start() == self.start_time

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def terminated(self) -> bool:
        return TERMINATE_LINE in self.log()

    # -- HTTP --

    def request(self, method: str, path: str, body: dict = None, timeout: float = 10):
        """(status, parsed JSON or text); (None, None) when nothing answers."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"content-type": "application/json"}
        if self.admin_key:
            headers["Authorization"] = "Bearer " + self.admin_key
        return standin.fetch(urllib.request.Request(self.url + path, data, headers, method=method), timeout)

    def workers(self) -> list:
        status, body = self.request("GET", "/workers")
        if status != 200:
            raise RuntimeError("GET /workers answered %s: %r" % (status, body))
        return body["workers"]

    def add(self, url: str, **fields) -> dict:
        return self.request("POST", "/workers", dict(fields, url=url))

    def remove(self, worker_id: str) -> dict:
        return self.request("DELETE", "/workers/" + worker_id)

    def wait_up(self, timeout: float = 60, healthy: int = 0) -> "Gateway":
        """Wait until GET /workers answers and lists HEALTHY healthy workers; fail with the log."""
        deadline = time.monotonic() + timeout
        while True:
            status, body = self.request("GET", "/workers", timeout=5)
            if status == 200 and sum(1 for w in body["workers"] if w.get("is_healthy")) >= healthy:
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("gateway not up (exit %s, /workers %s); log:\n%s"
                                   % (self.proc.poll(), status, self.log()[-4000:]))
            time.sleep(0.1)
        if self.sb is not None:
            self.find_pid()
        return self


class Load:
    """CLIENTS threads that send /generate through the gateway at URL, one request after another, until stop().

    Each request is (start, end, status) in .results, by time.monotonic(); status is the HTTP status, or None when
    the connection failed. MAX_NEW_TOKENS keeps each request short (the stand-in's token delay times it)."""

    def __init__(self, url: str, clients: int = 3, max_new_tokens: int = 8, pause: float = 0.0):
        self.url = url
        self.body = json.dumps({"text": "Explain tensor parallelism.",
                                "sampling_params": {"max_new_tokens": max_new_tokens}}).encode()
        self.pause = pause
        self.results = []
        self.errors = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for dummy in range(clients)]

    def start(self) -> "Load":
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> "Load":
        self._stop.set()
        for t in self._threads:
            t.join(60)
        return self

    def _run(self):
        while not self._stop.is_set():
            start = time.monotonic()
            req = urllib.request.Request(self.url + "/generate", self.body, {"content-type": "application/json"})
            try:
                with standin.OPENER.open(req, timeout=60) as res:
                    res.read()
                    status = res.status
            except urllib.error.HTTPError as e:
                status = e.code
                self.errors.append(e.read().decode(errors="replace")[:300])
            except OSError as e:
                status = None
                self.errors.append(str(e))
            self.results.append((start, time.monotonic(), status))
            if self.pause:
                self._stop.wait(self.pause)

    def failed(self) -> list:
        return [r for r in self.results if r[2] != 200]


class Watch(threading.Thread):
    """Polls, every INTERVAL seconds until stop(), the gateway's workers and, per node, what PROBES read.

    PROBES: {name: callable returning a value}; .polls is a list of (time, urls listed, {url: healthy},
    {name: value}), the probes read BEFORE the gateway in each poll, so a probe value seen in a poll held
    before that poll's listing was read."""

    def __init__(self, gateway: "Gateway", probes: dict, interval: float = 0.05):
        super().__init__(daemon=True)
        self.gateway, self.probes, self.interval = gateway, probes, interval
        self.polls = []
        self._done = threading.Event()

    def run(self):
        while not self._done.is_set():
            values = dict((name, probe()) for name, probe in self.probes.items())
            status, body = self.gateway.request("GET", "/workers", timeout=5)
            workers = body["workers"] if status == 200 else []
            self.polls.append((time.monotonic(), [w["url"] for w in workers],
                               dict((w["url"], w.get("is_healthy")) for w in workers), values))
            self._done.wait(self.interval)

    def stop(self) -> "Watch":
        self._done.set()
        self.join(30)
        return self

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Events on one clock: server log lines as they are written, requests of a steady load, process
start times, and Ansible's tasks (through the gpuops_timeline callback). Every time is the
machine's monotonic clock, which the controller, the nodes' sandboxes and the servers share."""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request

from .common import BENCH

from gpusim import standin  # noqa: E402  (on sys.path once .common is imported)

CALLBACK_DIR = os.path.join(BENCH, "callback_plugins")
# Actions that run on the controller only: no module is sent to the node.
CONTROLLER_ACTIONS = {
    "set_fact", "assert", "debug", "fail", "meta", "include_tasks", "import_tasks", "include_role", "import_role",
    "include_vars", "add_host", "group_by", "set_stats", "pause", "validate_argument_spec", "end_play", "end_host",
}


def callback_env(path):
    """Environment that makes ansible-playbook write its task timeline to PATH."""
    return {"ANSIBLE_CALLBACK_PLUGINS": CALLBACK_DIR, "ANSIBLE_CALLBACKS_ENABLED": "gpuops_timeline",
            "GPUOPS_TIMELINE_FILE": path}


def short_action(action):
    return (action or "").rsplit(".", 1)[-1]


class Tasks:
    """The gpuops_timeline records of one ansible-playbook run."""

    def __init__(self, path):
        self.records = []
        if os.path.exists(path):
            with open(path) as f:
                self.records = [json.loads(line) for line in f if line.strip()]

    def results(self, host=None):
        """Module executions that ran (items of loops one by one; skipped ones left out)."""
        out = []
        for r in self.records:
            if r["ev"] in ("start", "skipped") or (host and r["host"] != host):
                continue
            if r["loop"] and not r.get("item"):
                continue          # the loop's summary result; its items are counted
            out.append(r)
        return out

    def remote(self, host=None, start=None, end=None):
        """Module executions on a node (not controller-only actions, not delegated to localhost) that
        finished between START and END."""
        return [r for r in self.results(host)
                if short_action(r["action"]) not in CONTROLLER_ACTIONS and r.get("delegate_to") != "localhost"
                and (start is None or r["t"] >= start) and (end is None or r["t"] <= end)]

    def first(self, name_pattern, host=None, event="ok"):
        """Time of the first result (EVENT) of a task whose name matches NAME_PATTERN."""
        rx = re.compile(name_pattern)
        for r in self.records:
            if r["ev"] == event and rx.search(r["task"]) and (host is None or r["host"] == host):
                return r["t"]
        return None

    def started(self, name_pattern, host=None):
        return self.first(name_pattern, host, event="start")

    def span(self, action, role=None, host=None):
        """Seconds from the start record to the ok record of the first task of ACTION (in ROLE), or None."""
        start = None
        for r in self.records:
            if r["action"] != action or (host and r["host"] != host):
                continue
            if role and r["task"].split(" : ", 1)[0].rsplit(".", 1)[-1] != role:     # "gpuops.host.ROLE : name"
                continue
            if r["ev"] == "start" and start is None:
                start = r["t"]
            elif r["ev"] == "ok" and start is not None:
                return r["t"] - start
        return None


class Lines:
    """Lines of server output, each with the monotonic time at which it was seen and where it came from."""

    def __init__(self):
        self.lines = []           # (monotonic, source, line)
        self._lock = threading.Lock()

    def first(self, pattern, after=None, path=None):
        """(time, source) of the first line matching PATTERN, at or after AFTER, from PATH (any source)."""
        rx = re.compile(pattern)
        with self._lock:
            for t, p, line in self.lines:
                if (after is None or t >= after) and (path is None or p == path) and rx.search(line):
                    return t, p
        return None, None


class LogTail(Lines):
    """Reads every file matching GLOBS every 10 ms and notes when each new line appeared."""

    def __init__(self, globs, interval=0.01):
        super().__init__()
        self.globs = list(globs)
        self.interval = interval
        self._pos = {}
        self._partial = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._scan(initial=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        self._scan()

    def _scan(self, initial=False):
        now = time.monotonic()
        for pattern in self.globs:
            for path in glob.glob(pattern):
                try:
                    size = os.path.getsize(path)
                except OSError:
                    continue
                pos = self._pos.get(path)
                if pos is None:
                    pos = size if initial else 0       # lines already there before the start are not events
                if size <= pos:
                    self._pos[path] = min(pos, size)
                    continue
                with open(path, "rb") as f:
                    f.seek(pos)
                    data = self._partial.pop(path, b"") + f.read(size - pos)
                self._pos[path] = size
                *complete, rest = data.split(b"\n")
                if rest:
                    self._partial[path] = rest
                with self._lock:
                    self.lines += [(now, path, line.decode(errors="replace")) for line in complete]

    def _run(self):
        while not self._stop.wait(self.interval):
            self._scan()


class ContainerLogs(Lines):
    """The output of containers as `docker logs --follow` delivers it, each line timed as it arrives: CONTAINERS
    from now on, and every container that starts later with the label LABEL from its first line (`docker events`
    names them). The source of a line is its container's name. ENV points the client at the engine."""

    def __init__(self, env, containers=(), label=None, client="docker"):
        super().__init__()
        self.env = dict(os.environ, **env)
        self.client = client
        self.containers = list(containers)
        self.label = label
        self._procs = []
        self._threads = []

    def __enter__(self):
        for name in self.containers:
            self._follow(name, ["--tail", "0"])
        if self.label:
            events = self._popen(["events", "--filter", "type=container", "--filter", "event=start",
                                  "--filter", "label=" + self.label, "--format", "{{.Actor.Attributes.name}}"],
                                 stderr=subprocess.DEVNULL)
            self._reader(events, lambda name: self._follow(name.strip(), []))
        return self

    def __exit__(self, *exc):
        self.close()

    def _popen(self, args, stderr=subprocess.STDOUT):
        proc = subprocess.Popen([self.client] + args, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=stderr)
        self._procs.append(proc)
        return proc

    def _reader(self, proc, on_line):
        def read():
            for raw in proc.stdout:
                on_line(raw.decode(errors="replace").rstrip("\n"))
        thread = threading.Thread(target=read, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _follow(self, name, options):
        def add(line):
            now = time.monotonic()
            with self._lock:
                self.lines.append((now, name, line))
        self._reader(self._popen(["logs", "--follow"] + options + [name]), add)

    def close(self):
        for proc in list(self._procs):
            if proc.poll() is None:
                proc.terminate()
            proc.wait(10)
        for thread in list(self._threads):
            thread.join(5)


class LoadGen:
    """A steady request load on one URL: one request in flight at a time, NEW_TOKENS tokens each, then a
    pause of THINK seconds; a request that fails is retried after RETRY seconds. Records every outcome."""

    def __init__(self, url, new_tokens=16, think=0.3, retry=0.05, timeout=120):
        self.url = url
        self.body = json.dumps({"text": "Summarise the last batch of hidden states.",
                                "sampling_params": {"max_new_tokens": new_tokens}}).encode()
        self.think, self.retry, self.timeout = think, retry, timeout
        self.done = []            # (sent, finished, ok)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(self.timeout + 5)

    def _run(self):
        while not self._stop.is_set():
            sent = time.monotonic()
            req = urllib.request.Request(self.url + "/generate", self.body, {"content-type": "application/json"})
            try:
                with standin.OPENER.open(req, timeout=self.timeout) as res:
                    res.read()
                    ok = res.status == 200
            except (urllib.error.URLError, OSError, ValueError):
                ok = False
            self.done.append((sent, time.monotonic(), ok))
            self._stop.wait(self.think if ok else self.retry)

    def last_ok_before(self, t):
        ends = [end for dummy, end, ok in self.done if ok and end <= t]
        return max(ends) if ends else None

    def first_ok_after(self, t):
        ends = [end for dummy, end, ok in self.done if ok and end > t]
        return min(ends) if ends else None

    def failures_between(self, start, end):
        return sum(1 for dummy, finished, ok in self.done if not ok and start <= finished <= end)


def boot_offset():
    """CLOCK_BOOTTIME minus CLOCK_MONOTONIC: converts /proc start times to the monotonic clock."""
    return time.clock_gettime(time.CLOCK_BOOTTIME) - time.monotonic()


def process_start(sb, pid):
    """Monotonic time at which process PID of sandbox SB started (/proc/PID/stat field 22)."""
    out = sb.run(["cat", "/proc/%d/stat" % pid], capture_output=True, text=True, check=True).stdout
    fields = out.rsplit(")", 1)[1].split()
    return int(fields[19]) / os.sysconf("SC_CLK_TCK") - boot_offset()

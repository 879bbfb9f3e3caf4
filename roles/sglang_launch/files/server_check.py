# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Checks of a freshly started SGLang server, run on its node by the server's own Python.

    ready PID URL TIMEOUT INTERVAL LOG LINES
        Wait until URL answers 200; stop at once when PID has died. On failure the
        result carries the last LINES lines of LOG.
    environ PID NAME VALUE
        Whether NAME=VALUE is in /proc/PID/environ of the main process PID and of every
        scheduler of its session (setproctitle hides it there unless SPT_NOENV=1).

Prints one JSON object; exits 0 when the check passed, 1 when not.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request


def state(pid):
    """The process state letter of PID, or None when it does not exist."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()[0]


def tail(path, lines):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 256 * lines))
            text = f.read().decode("utf-8", "replace")
    except OSError as e:
        return ["(cannot read %s: %s)" % (path, e.strerror)]
    return text.splitlines()[-lines:]


def ready(pid, url, timeout, interval, log, lines):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    start = time.monotonic()
    last = "no answer yet"
    while True:
        if state(pid) in (None, "Z", "X"):
            return {"ready": False, "died": True, "seconds": round(time.monotonic() - start, 2),
                    "last": last, "log_tail": tail(log, lines)}
        try:
            with opener.open(url, timeout=max(interval, 30)) as answer:
                if answer.status == 200:
                    return {"ready": True, "seconds": round(time.monotonic() - start, 2)}
                last = "HTTP %d" % answer.status
        except urllib.error.HTTPError as e:
            last = "HTTP %d" % e.code
        except (urllib.error.URLError, OSError) as e:
            last = str(getattr(e, "reason", e))
        if time.monotonic() - start >= timeout:
            return {"ready": False, "died": False, "seconds": round(time.monotonic() - start, 2),
                    "last": last, "log_tail": tail(log, lines)}
        time.sleep(interval)


def session_processes(sid):
    """(pid, full command line, environ bytes or None) of every live process of session SID."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[3]) != sid or fields[0] in ("Z", "X"):
                continue
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
            with open("/proc/%d/environ" % pid, "rb") as f:
                environ = f.read()
        except (OSError, IndexError, ValueError):
            continue
        found.append((pid, cmdline, environ))
    return found


def environ(pid, name, value):
    with open("/proc/%d/stat" % pid) as f:
        sid = int(f.read().rsplit(")", 1)[1].split()[3])
    wanted = ("%s=%s" % (name, value)).encode()
    checked = []
    for proc, cmdline, env in session_processes(sid):
        if proc == pid or cmdline.startswith("sglang::scheduler"):
            checked.append({"pid": proc, "cmdline": cmdline, "found": wanted in env.split(b"\0")})
    schedulers = [c for c in checked if c["pid"] != pid]
    return {"ok": bool(schedulers) and all(c["found"] for c in checked), "checked": checked,
            "missing": [c for c in checked if not c["found"]], "schedulers": len(schedulers)}


def main(argv):
    if argv[:1] == ["ready"] and len(argv) == 7:
        result = ready(int(argv[1]), argv[2], float(argv[3]), float(argv[4]), argv[5], int(argv[6]))
        ok = result["ready"]
    elif argv[:1] == ["environ"] and len(argv) == 4:
        result = environ(int(argv[1]), argv[2], argv[3])
        ok = result["ok"]
    else:
        sys.stderr.write(__doc__)
        return 2
    print(json.dumps(result))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

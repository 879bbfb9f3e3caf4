# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The system log of a simulated GPU node: a receiver bound at /dev/log inside its sandbox.

What a module logs goes there: AnsibleModule.log() (ansible-core 2.19, module_utils/basic.py) calls
_log_to_syslog where python-systemd's journal is absent or no systemd runs, which is Python's
syslog.openlog()/syslog.syslog(), the C library's syslog(3). glibc's syslog (misc/syslog.c,
openlog_internal) sends each message as one datagram to the Unix socket _PATH_LOG, "/dev/log"
(SOCK_DGRAM first, SOCK_STREAM only when the datagram connect fails with EPROTOTYPE). A sandbox
has a /dev of its own, so a receiver bound there gets what the node's modules log, and nothing
else of the machine. It keeps every datagram as one line of a file, as a syslog daemon would.

    with SyslogReceiver(node.sandbox, tmp_path / "syslog") as log:
        ...ansible-playbook against the node...
        assert secret not in log.text()
"""

from __future__ import annotations

import os
import subprocess
import time

from gpusim.sandbox import VENV_PYTHON

SCRIPT = r'''
import os, socket, sys
out, ready = sys.argv[1], sys.argv[2]
if os.path.exists("/dev/log"):
    os.unlink("/dev/log")
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.bind("/dev/log")
os.chmod("/dev/log", 0o666)
with open(ready, "w") as f:
    f.write(str(os.getpid()))
with open(out, "ab", buffering=0) as f:
    while True:
        data = sock.recv(1 << 17)
        f.write(data.replace(b"\n", b"\\n") + b"\n")
'''


class SyslogReceiver:
    """A process inside sandbox SB that receives every datagram sent to its /dev/log and appends it, one line
    each, to the file PATH (outside, readable by the test)."""

    def __init__(self, sb, path):
        self.sb = sb
        self.path = str(path)
        self.popen = None

    def __enter__(self) -> "SyslogReceiver":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self, timeout: float = 30) -> "SyslogReceiver":
        ready = self.path + ".ready"
        open(self.path, "ab").close()
        self.popen = self.sb.popen([VENV_PYTHON, "-c", SCRIPT, self.path, ready], stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while not os.path.exists(ready):
            assert self.popen.poll() is None and time.monotonic() < deadline, "the syslog receiver did not start"
            time.sleep(0.05)
        with open(ready) as f:
            self.pid = int(f.read())
        return self

    def lines(self) -> list:
        with open(self.path, "rb") as f:
            return f.read().decode(errors="replace").splitlines()

    def text(self) -> str:
        return "\n".join(self.lines())

    def close(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            if self.sb.alive:
                self.sb.run(["kill", "-KILL", str(self.pid)])
            self.popen.kill()
            self.popen.wait(10)

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Network helpers: the sandboxes share the host network, so servers need free ports.

A node keeps its port while its server stops and starts again, so a port that is merely free
now is not enough: tests run side by side (pytest-xdist workers, several pytest runs) and
would be handed the same one. free_port() therefore reserves the port for the life of this
process, with a lock on a file named after it in a directory every process shares; the
kernel drops the lock when the process ends. Ports come from below the kernel's ephemeral
range, where no outgoing connection takes them while a server is down.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import random
import socket
import subprocess
import tempfile
import uuid

LOCK_DIR = os.path.join(tempfile.gettempdir(), "gpusim-ports")
LOWEST = 15000
_reserved = {}  # port -> the open lock file that holds it
_random = random.SystemRandom()


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _reserve(port: int) -> bool:
    os.makedirs(LOCK_DIR, mode=0o1777, exist_ok=True)
    fd = os.open(os.path.join(LOCK_DIR, "%d.lock" % port), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
    _reserved[port] = fd
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that nothing listens on now, reserved to this process until it ends."""
    high = _ephemeral_low()
    for dummy in range(1000):
        port = _random.randrange(LOWEST, high) if high - LOWEST >= 1000 else None
        if port is None:    # no room below the ephemeral range: the kernel picks
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((host, 0))
                port = s.getsockname()[1]
        if port not in _reserved and _reserve(port):
            if _bindable(host, port):
                return port
            os.close(_reserved.pop(port))
    raise OSError(errno.EADDRNOTAVAIL, "no free TCP port on %s" % host)


# Two nodes of a multi-node server: the ends of a veth pair, each only inside its node's network namespace.
HEAD, WORKER = "10.254.0.1", "10.254.0.2"


def _ip(*args) -> None:
    subprocess.run(["ip"] + list(args), check=True, capture_output=True, timeout=30)


@contextlib.contextmanager
def netns_pair():
    """Two network namespaces joined by a veth pair (HEAD in the first, WORKER in the second), each with its
    loopback up; the host's namespace is not touched. Yields their names; deleted on exit."""
    tag = uuid.uuid4().hex[:8]
    names = ["gpusim-%s-n0" % tag, "gpusim-%s-n1" % tag]
    made = []
    try:
        for name in names:
            _ip("netns", "add", name)
            made.append(name)
            _ip("-n", name, "link", "set", "lo", "up")
        _ip("-n", names[0], "link", "add", "gv%sa" % tag, "type", "veth", "peer", "name", "gv%sb" % tag,
            "netns", names[1])
        for name, end, addr in ((names[0], "gv%sa" % tag, HEAD), (names[1], "gv%sb" % tag, WORKER)):
            _ip("-n", name, "addr", "add", addr + "/30", "dev", end)
            _ip("-n", name, "link", "set", end, "up")
        yield names
    finally:
        for name in made:
            subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True, timeout=30)

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Process helpers shared by the server and its children, plus the simulation switches."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import sys
import threading

FAULTS = ("ignore_sigterm", "orphan", "defunct", "devholder", "crash_on_load", "slow_exit", "hang_in_release")
PR_SET_PDEATHSIG = 1


def faults() -> set:
    """The fault switches named in GPUSIM_SGLANG_FAULTS (comma list); unknown names are an error."""
    names = {f.strip() for f in os.environ.get("GPUSIM_SGLANG_FAULTS", "").split(",") if f.strip()}
    unknown = names - set(FAULTS)
    if unknown:
        raise ValueError("GPUSIM_SGLANG_FAULTS: unknown fault(s) %s; known: %s"
                         % (", ".join(sorted(unknown)), ", ".join(FAULTS)))
    return names


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name, "").strip()
    return float(value) if value else default


def _addrinfos_for_bind(port: int) -> list:
    """0.5.23 sglang/srt/utils/network.py _get_addrinfos_for_bind(None, port): one passive address
    per configured family, IPv4 first; AF_INET 0.0.0.0 when getaddrinfo fails."""
    try:
        infos = socket.getaddrinfo(None, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0,
                                   socket.AI_ADDRCONFIG | socket.AI_PASSIVE)
    except socket.gaierror:
        return [(socket.AF_INET, socket.SOCK_STREAM, 0, "", ("0.0.0.0", port))]
    deduped, seen = [], set()
    for info in infos:
        if info[0] not in seen:
            seen.add(info[0])
            deduped.append(info)
    deduped.sort(key=lambda info: info[0] != socket.AF_INET)
    return deduped


def is_port_available(port: int) -> bool:
    """0.5.23 sglang/srt/utils/network.py is_port_available (re-exported by sglang/srt/utils/__init__.py):
    whether PORT binds on every address family, with SO_REUSEADDR (and IPV6_V6ONLY). The SGLang Model
    Gateway's co-launcher (sglang_router/launch_server.py find_available_ports) picks its workers' ports with it."""
    try:
        for family, socktype, proto, dummy, sockaddr in _addrinfos_for_bind(port):
            sock = socket.socket(family, socktype, proto)
            try:
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(sockaddr)
            finally:
                sock.close()
        return True
    except (OSError, OverflowError):
        return False


def is_scheduler_process(pid: int) -> bool:
    """A live (not zombie) process titled sglang::scheduler*."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return False
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().startswith(b"sglang::scheduler")
    except (OSError, IndexError):
        return False


def get_bool_env_var(name: str, default: str = "false") -> bool:
    return os.environ.get(name, default).strip().lower() in ("1", "true", "yes", "on")


def configure_logger(log_level: str, prefix: str = "") -> None:
    """SGLang's log format: "[2026-01-01 12:00:00 TP0] message" on stderr."""
    logging.basicConfig(level=getattr(logging, log_level.upper(), logging.INFO),
                        format="[%%(asctime)s%s] %%(message)s" % prefix,
                        datefmt="%Y-%m-%d %H:%M:%S", force=True)


def kill_itself_when_parent_died() -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (as SGLang's children do)."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _children_map() -> dict:
    children = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(name))
    return children


def descendants(pid: int) -> list:
    """Every descendant of PID, parents before their children."""
    children, result, todo = _children_map(), [], [pid]
    while todo:
        for child in children.get(todo.pop(0), []):
            result.append(child)
            todo.append(child)
    return result


def kill_process_tree(parent_pid: int = None, include_parent: bool = True) -> None:
    """SIGKILL every descendant of PARENT_PID, then PARENT_PID itself when INCLUDE_PARENT.

    As sglang/srt/utils/common.py kill_process_tree: with INCLUDE_PARENT and PARENT_PID this
    process, the process SIGKILLs itself."""
    logging.getLogger(__name__).info("kill_process_tree called: parent_pid=%s, include_parent=%s, pid=%d",
                                     parent_pid, include_parent, os.getpid())
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    if parent_pid is None:
        parent_pid, include_parent = os.getpid(), False
    for child in descendants(parent_pid):
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if include_parent:
        try:
            os.kill(parent_pid, signal.SIGKILL)
            if parent_pid == os.getpid():
                sys.exit(0)
            os.kill(parent_pid, signal.SIGQUIT)
        except ProcessLookupError:
            pass

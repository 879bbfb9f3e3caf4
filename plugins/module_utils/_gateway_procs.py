# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The SGLang Model Gateway (PyPI ``sglang-router``) in the process table.

The gateway routes requests to SGLang servers; it is never one of them, and a server's stop
must leave it running. It is found by its command line, as it runs in the sglang-router 0.3.2
wheel:

- ``sglang_router/launch_router.py`` ``launch_router()`` retitles the process
  ``sglang::router`` with setproctitle, so ``python -m sglang_router.launch_router ...`` reads
  ``sglang::router`` once the gateway runs;
- ``sglang_router/launch_server.py`` (``python -m sglang_router.launch_server ...``) co-launches
  a gateway with its own workers: it starts one child per data-parallel rank, each in a process
  group of its own (``os.setpgrp()``) and titled ``sglang::server`` (``run_server()``), which
  runs SGLang's HTTP server and its schedulers; then it calls ``launch_router()`` itself, so the
  launcher too ends up titled ``sglang::router``;
- the wheel's console scripts (``entry_points.txt``: ``smg``, ``amg`` and ``sglang-router``, all
  ``sglang_router.cli:main``) take the subcommands ``launch`` (the gateway) and ``server`` (the
  co-launch).

Every process below a gateway's process belongs to the gateway: a co-launched ``sglang::server``
and its schedulers are stopped through their launcher, never behind its back.
"""

from __future__ import annotations

import re

# As _reap_options._PYTHON: an interpreter path and its options before -m.
_PYTHON = r'\S*python[0-9.]*(?:\s+(?:-[XW]\s*\S+|-[A-Za-z]+))*?'

GATEWAY_TITLE = 'sglang::router'
COLAUNCHED_TITLE = 'sglang::server'

GATEWAY_PATTERNS = (
    r'^sglang::router(?:\s|$)',
    r'^' + _PYTHON + r'\s+-[A-Za-z]*m\s*sglang_router\.launch_(?:router|server)(?:\s|$)',
    r'^(?:' + _PYTHON + r'\s+)?(?:\S*/)?(?:smg|amg|sglang-router)\s+(?:launch|server)(?:\s|$)',
)
_GATEWAY = [re.compile(p) for p in GATEWAY_PATTERNS]


def is_gateway(proc):
    """Whether PROC is an SGLang Model Gateway (or the launcher of a co-launch)."""
    if proc.zombie or not proc.cmdline:
        return False
    text = proc.command
    return any(rx.search(text) for rx in _GATEWAY)


def is_colaunched_title(proc):
    return bool(proc.cmdline) and proc.cmdline[0].split(' ')[0] == COLAUNCHED_TITLE


def members(table, exempt=()):
    """``{pid: gateway pid}`` of every gateway in TABLE and every process below one, mapped to the
    outermost gateway above it (a gateway maps to itself, or to the launcher it runs under). The
    walk stops at the PIDs in EXEMPT (processes named explicitly): neither they nor what is below
    them belong to a gateway."""
    gateways = set(pid for pid, proc in table.items() if pid not in exempt and is_gateway(proc))
    children = {}
    for proc in table.values():
        children.setdefault(proc.ppid, []).append(proc.pid)
    found = {}
    for pid in sorted(gateways):
        if _has_ancestor_in(table, pid, gateways):
            continue
        todo = [pid]
        while todo:
            current = todo.pop()
            if current in found or current in exempt:
                continue
            found[current] = pid
            todo.extend(children.get(current, ()))
    return found


def _has_ancestor_in(table, pid, pids):
    seen = set()
    proc = table.get(pid)
    while proc is not None and proc.ppid not in seen and proc.ppid > 0:
        seen.add(proc.ppid)
        if proc.ppid in pids:
            return True
        proc = table.get(proc.ppid)
    return False

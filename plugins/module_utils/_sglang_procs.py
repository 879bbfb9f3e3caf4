# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""SGLang servers in the process table: finding their main processes, the tree of each, and the
environment that every titled scheduler of a tree really has.

The main process (``python -m sglang.launch_server`` or ``sglang serve``) keeps its command line;
its children rename themselves ``sglang::scheduler...``, ``sglang::detokenizer`` and so on with
setproctitle, which also overwrites the memory that ``/proc/PID/environ`` shows unless the launch set
``SPT_NOENV=1``. No child calls setsid, so a server started in a session of its own keeps its whole
tree in that session, orphans re-parented to PID 1 included.
"""

from __future__ import annotations

import json
import os
import re
import socket

from ansible_collections.gpuops.host.plugins.module_utils import _gateway_procs as gateway

MARKER = 'GPUOPS_RUN'
SCHEDULER_TITLE = 'sglang::scheduler'
_PORT = re.compile(r'^--port(?:=(\d+))?$')
_HOST = re.compile(r'^--host(?:=(\S+))?$')
_API_KEY = re.compile(r'^--api-key(?:=(.+))?$')
_CONFIG = re.compile(r'^--config(?:=(.+))?$')
_NODE_RANK = re.compile(r'^--node-rank(?:=(\d+))?$')
_DIST_INIT_ADDR = re.compile(r'^--dist-init-addr(?:=(\S+))?$')
# A key of SGLang's --config YAML file (utils/server_args_config_parser.py turns each key into --KEY): api-key, or
# api_key as some write it; the value plain, or quoted as YAML and JSON quote it.
_CONFIG_API_KEY = re.compile(r'''^api[-_]key:\s*(?:"((?:[^"\\]|\\.)*)"|'((?:[^']|'')*)'|([^\s#"'][^#]*?))\s*(?:#.*)?$''')


class ProcsError(Exception):
    """The check of a server's processes failed; the message says how."""


def _option(argv, pattern):
    """The last value of a flag matched by PATTERN in ARGV (``--port 30000`` or ``--port=30000``)."""
    value = None
    for i, arg in enumerate(argv):
        m = pattern.match(arg)
        if m:
            value = m.group(1) if m.group(1) else (argv[i + 1] if i + 1 < len(argv) else None)
    return value


def node_rank_of(argv):
    """The --node-rank of a server with command line ARGV: 0 where it names none (one node, or the head of a
    multi-node server). A node of rank 1 or more runs only schedulers and a health server that answers 200
    whatever they do: it has no requests to drain (SGLang 0.5.23 engine.py _launch_subprocesses)."""
    value = _option(argv, _NODE_RANK)
    return int(value) if value and value.isdigit() else 0


def dist_port_of(argv):
    """The port of the --dist-init-addr HOST:PORT of a server with command line ARGV, where rank 0 keeps the store of
    the multi-node server's process group; None where it names none."""
    value = _option(argv, _DIST_INIT_ADDR)
    host, sep, port = (value or '').rpartition(':')
    return int(port) if sep and host and port.isdigit() else None


def head_connected(procfs, pids, port):
    """Whether one of PIDS (a worker's tree) holds an established TCP connection to remote PORT: its rank 0's store.
    Every rank of a torch process group is a client of the store that rank 0 hosts at --dist-init-addr, and keeps
    that connection for the process group's life (torch 2.14.1 c10d TCPStore.hpp, TCPStore::client_, held by
    ProcessGroupNCCL::store_); it is no longer established once rank 0's process is gone."""
    sockets = set('socket:[%d]' % inode for inode in procfs.tcp_connected_to(port))
    return bool(sockets) and any(sockets.intersection(procfs.open_files(pid)) for pid in pids)


def url_of(argv, default_url):
    """The URL a server with command line ARGV answers on; DEFAULT_URL when its command line names no port."""
    port = _option(argv, _PORT)
    if not port:
        return default_url.rstrip('/')
    host = _option(argv, _HOST) or '127.0.0.1'
    if host in ('0.0.0.0', '::', '[::]'):
        host = '127.0.0.1'
    elif ':' in host and not host.startswith('['):
        host = '[%s]' % host
    return 'http://%s:%s' % (host, port)


def api_key_of(procfs, proc, uid):
    """The API key that the server PROC (running as the real UID UID) was started with: ``--api-key`` on its command
    line, which SGLang lets win, else the ``api-key`` of its ``--config`` file, read as it names it. The file is read
    only when it is a regular file that belongs to UID (root's for a server that root runs), looked at before it is
    opened (ProcFS.file_of), so that no server's command line can name another user's file, or a device, and have
    it opened or its key sent. None when neither says."""
    key = _option(proc.cmdline, _API_KEY)
    if key:
        return key
    path = _option(proc.cmdline, _CONFIG)
    found = procfs.file_of(proc.pid, path, uid) if path and uid is not None else None
    if found is None:
        return None
    for line in reversed(found[1].splitlines()):
        m = _CONFIG_API_KEY.match(line.strip())
        if not m:
            continue
        if m.group(1) is not None:
            try:
                return json.loads('"%s"' % m.group(1)) or None
            except ValueError:
                return None
        return (m.group(2).replace("''", "'") if m.group(2) is not None else m.group(3)) or None
    return None


def compile_patterns(patterns):
    return [re.compile(p) for p in patterns]


def is_title(proc):
    return bool(proc.cmdline) and proc.cmdline[0].startswith('sglang::')


def tree(table, root):
    """ROOT's tree: its descendants, and, when ROOT leads its own session, every live process of that
    session (orphans of the server re-parented to PID 1 stay in it). Sorted by PID, ROOT first."""
    children = {}
    for proc in table.values():
        children.setdefault(proc.ppid, []).append(proc.pid)
    found, todo = set(), [root.pid]
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.add(pid)
        todo.extend(children.get(pid, ()))
    if root.sid == root.pid:
        found.update(p.pid for p in table.values() if p.sid == root.sid)
    rest = sorted(pid for pid in found if pid != root.pid and pid in table and not table[pid].zombie)
    return [root] + [table[pid] for pid in rest]


def describe(proc, redact):
    return {'pid': proc.pid, 'ppid': proc.ppid, 'name': proc.name, 'state': proc.state,
            'cmdline': redact(proc.command)}


def covering(host):
    """The local addresses whose listening sockets take a connection to HOST (an IP address): HOST itself, the
    wildcard of its family, and for IPv4 the IPv6 wildcard (a dual-stack socket) and HOST mapped into IPv6. None
    when HOST is no IP address (a name) or is a wildcard (0.0.0.0, ::): then every address counts."""
    host = (host or '').strip('[]')
    try:
        family = socket.AF_INET6 if ':' in host else socket.AF_INET
        packed = socket.inet_pton(family, host)
    except (OSError, ValueError):
        return None
    if packed == b'\0' * len(packed):
        return None  # a wildcard: every address of the port counts
    if family == socket.AF_INET6:
        return frozenset((socket.inet_ntop(family, packed), '::'))
    return frozenset((host, '0.0.0.0', '::', '::ffff:' + host))


def listening_at(procfs, port, host=None):
    """{inode: local address} of the sockets listening on PORT that take a connection to HOST (all of them without
    HOST, or where covering says every address counts)."""
    relevant = covering(host) if host else None
    return dict((inode, address) for inode, address in procfs.tcp_listen_addresses(port).items()
                if relevant is None or address in relevant)


def port_holders(procfs, table, port, redact, host=None):
    """Who listens on TCP PORT: ``listening`` (a socket listens, in this network namespace), ``addresses`` (the local
    addresses those sockets are bound to), ``holders``, the processes of TABLE with such a socket open, each with its
    ``user`` (none when only processes this PID namespace cannot see hold it), and ``unheld``, whether some listening
    socket is held by none of them. With HOST (an address, see covering), only the sockets that take a connection to
    HOST count: a listener of another user on another address of the port neither blocks nor misleads."""
    addresses = listening_at(procfs, port, host)
    sockets = set('socket:[%d]' % inode for inode in addresses)
    holders, held = [], set()
    for pid, proc in sorted(table.items()):
        if not sockets or proc.zombie or proc.kernel_thread:
            continue
        mine = sockets.intersection(procfs.open_files(pid))
        if mine:
            held |= mine
            holders.append(dict(describe(proc, redact), user=procfs.owner(pid)))
    return {'port': port, 'listening': bool(sockets), 'holders': holders,
            'addresses': sorted(set(addresses.values())), 'unheld': bool(sockets - held)}


def _url_host(address):
    """The host to connect to for a socket bound to ADDRESS: loopback for a wildcard address."""
    if address == '0.0.0.0':
        return '127.0.0.1'
    if address in ('::', '::1'):
        return '[::1]'
    return '[%s]' % address if ':' in address else address


def own_listener(procfs, table, pid, port, redact, host=None):
    """Whether the TCP listener on PORT belongs to the tree of the main process PID (see tree): ``tied`` when some
    process of the tree listens there and no other process does (nor one this PID namespace cannot see); then
    ``url``, the server's own address (loopback for a wildcard) rather than one its command line names. Also
    ``holders`` and ``strangers`` (the holders outside the tree, by PID, user and command line) and ``reason``,
    why it is not tied. With HOST, only the sockets that take a connection to HOST count (port_holders).
    ``members`` are the (pid, start) of the tree, for Guard."""
    held = port_holders(procfs, table, port, redact, host)
    root = table.get(pid)
    tree_of = tree(table, root) if root is not None and not root.zombie else []
    members = set(p.pid for p in tree_of)
    strangers = [h for h in held['holders'] if h['pid'] not in members]
    out = {'port': port, 'tied': False, 'url': None, 'holders': held['holders'], 'strangers': strangers,
           'reason': None, 'members': sorted((p.pid, p.start) for p in tree_of), 'host': host}
    if strangers:
        out['reason'] = 'port %d is held by %s, which is not of the tree of %d' % (
            port, ', '.join('pid %d (user %s: %s)' % (h['pid'], h['user'], h['cmdline']) for h in strangers), pid)
    elif not members:
        out['reason'] = 'the server %d is not running' % pid
    elif held['unheld']:
        out['reason'] = 'a socket on port %d is held by a process this PID namespace cannot see' % port
    elif not held['holders']:
        out['reason'] = 'nothing of the tree of %d listens on port %d' % (pid, port)
    else:
        hosts = sorted(set(_url_host(a) for a in held['addresses']), key=lambda h: (h != '127.0.0.1', h != '[::1]', h))
        # the URL's own host where the server listens there (an IP address that no wildcard stands for)
        wanted = _url_host(host.strip('[]')) if covering(host) else None
        out.update(tied=True, url='http://%s:%d' % (wanted if wanted in hosts else hosts[0], port))
    return out


class Guard:
    """Checked before each request that carries an API key: the listening sockets of the port that take a
    connection to the tie's host are all held by the processes of the server's tree (by PID and start time) that
    own_listener found. Cheap (/proc/net/tcp and the tree's own descriptors), so it runs before every request of a
    drain that polls for minutes. Calling it raises Moved with the reason, or returns None."""

    def __init__(self, procfs, tie):
        self.procfs = procfs
        self.port = tie['port']
        self.host = tie.get('host')
        self.members = list(tie.get('members') or [])

    def __call__(self):
        sockets = set('socket:[%d]' % inode for inode in listening_at(self.procfs, self.port, self.host))
        if not sockets:
            return None
        held = set()
        for pid, start in self.members:
            now = self.procfs.stat(pid)
            if now is not None and now.start == start and not now.zombie:
                held.update(sockets.intersection(self.procfs.open_files(pid)))
        if sockets - held:
            raise Moved('a socket listening on port %d is no longer held by the server\'s own processes (%s)'
                        % (self.port, ', '.join(str(pid) for pid, dummy in self.members)))
        return None


class Moved(Exception):
    """The port's listener is no longer the server's own: nothing more is sent there."""


def find_servers(procfs, table, patterns, record, default_url, redact, self_pids=(), elsewhere=None, named=()):
    """The SGLang servers running now, as dicts: pid, start, url, cmdline, marker, recorded, session,
    schedulers, tree; and, apart, those that run in another PID namespace or container (ELSEWHERE(pid)
    gives the reason, or None for a process beside this one), with the reason.

    A process is a server's main process when its command line matches one of PATTERNS, or its
    environment carries RECORD's run marker, and it is no titled child and its parent is no main
    process itself. The server that RECORD (``server.json`` of sglang_launch) describes gets the URL
    recorded there; any other answers on the ``--host``/``--port`` of its command line, or DEFAULT_URL.

    Nothing of an SGLang Model Gateway's tree is a server here (see gateways()), except the
    processes that NAMED lists: a co-launched server (``sglang::server``) named so is one."""
    compiled = compile_patterns(patterns)
    marker = (record or {}).get('marker')
    named = set(named)
    gated = gateway.members(table, exempt=named)
    mains = {}
    for proc in table.values():
        if proc.zombie or proc.kernel_thread or proc.pid in self_pids or not proc.cmdline or proc.pid in gated:
            continue
        if is_title(proc) and not (proc.pid in named and gateway.is_colaunched_title(proc)):
            continue
        matched = [p.pattern for p in compiled if p.search(proc.command)]
        env_marker = None
        if marker or matched:
            env = procfs.environ(proc.pid) or {}
            env_marker = env.get(MARKER)
        recorded = bool(marker) and env_marker == marker
        if matched or recorded or proc.pid in named:
            mains[proc.pid] = (proc, env_marker, recorded)
    servers, apart = [], []
    for pid in sorted(mains):
        proc, env_marker, recorded = mains[pid]
        if proc.ppid in mains:
            continue
        reason = elsewhere(pid) if elsewhere else None
        if reason:
            apart.append(dict(describe(proc, redact), reason=reason))
            continue
        members = tree(table, proc)
        url = record.get('url') if recorded and record.get('url') else url_of(proc.cmdline, default_url)
        if gateway.is_colaunched_title(proc):
            ports = procfs.listening_ports([proc.pid])
            url = 'http://127.0.0.1:%d' % ports[0] if ports else url
        servers.append({
            'pid': proc.pid, 'start': proc.start, 'url': url.rstrip('/'), 'cmdline': redact(proc.command),
            'marker': env_marker, 'recorded': recorded, 'session': proc.sid if proc.sid == proc.pid else None,
            'node_rank': node_rank_of(proc.cmdline), 'dist_port': dist_port_of(proc.cmdline),
            'schedulers': sum(1 for p in members if p.cmdline[:1] and p.cmdline[0].startswith(SCHEDULER_TITLE)),
            'tree': [describe(p, redact) for p in members],
        })
    return servers, apart


def gateways(procfs, table, redact, named=()):
    """The SGLang Model Gateways of TABLE, as dicts: pid, start, user, cmdline, ports (where it
    listens), and colaunched: the servers it started itself (``sglang::server``: pid, cmdline, ports,
    schedulers), unless NAMED lists them. Nothing here is ever drained or stopped by a server's stop."""
    gated = gateway.members(table, exempt=set(named))
    listening = procfs.tcp_listening()
    found = []
    for pid in sorted(p for p, root in gated.items() if p == root):
        proc = table[pid]
        colaunched = []
        for child in sorted(p for p, root in gated.items() if root == pid and p != pid):
            member = table[child]
            if member.zombie or not gateway.is_colaunched_title(member):
                continue
            members = tree(table, member)
            colaunched.append({
                'pid': child, 'cmdline': redact(member.command),
                'ports': procfs.listening_ports([child], listening),
                'schedulers': sum(1 for p in members if p.cmdline[:1] and p.cmdline[0].startswith(SCHEDULER_TITLE)),
            })
        found.append({'pid': pid, 'start': proc.start, 'user': procfs.owner(pid), 'cmdline': redact(proc.command),
                      'ports': procfs.listening_ports([pid], listening), 'colaunched': colaunched})
    return found


def check_environ(procfs, table, pid, wanted, min_schedulers, redact):
    """Whether every NAME=VALUE of WANTED is in the environment of server PID's main process and of every
    titled scheduler of its tree. Returns a dict: ok, checked, missing, schedulers."""
    root = table.get(pid)
    if root is None or root.zombie:
        raise ProcsError('the SGLang server %d is not running' % pid)
    checked = []
    for proc in tree(table, root):
        if proc.pid != pid and not (proc.cmdline[:1] and proc.cmdline[0].startswith(SCHEDULER_TITLE)):
            continue
        env = procfs.environ(proc.pid)
        lacking = sorted(name for name, value in wanted.items() if env is None or env.get(name) != value)
        checked.append(dict(describe(proc, redact), lacking=lacking, readable=env is not None))
    schedulers = len(checked) - 1
    missing = [c for c in checked if c['lacking']]
    ok = not missing and schedulers >= max(min_schedulers, 1)
    return {'ok': ok, 'checked': checked, 'missing': missing, 'schedulers': schedulers}


def alive(procfs, pid, start=None):
    """Whether PID still runs (and, given START, is still the same process)."""
    proc = procfs.stat(pid)
    return proc is not None and not proc.zombie and (start is None or proc.start == start)


def log_tail(path, lines, redact):
    """The last LINES lines of the log at PATH, secrets masked."""
    if not path or lines <= 0:
        return []
    try:
        with open(path, 'rb') as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 512 * lines))
            text = f.read().decode('utf-8', 'replace')
    except (IOError, OSError) as e:
        return ['(cannot read %s: %s)' % (path, e.strerror)]
    return [redact(line) for line in text.splitlines()[-lines:]]


def find_dump(root, rid):
    """Paths of files under ROOT whose name contains the request id RID."""
    found = []
    for dirpath, dummy, files in os.walk(root):
        found.extend(os.path.join(dirpath, name) for name in files if rid in name)
    return sorted(found)

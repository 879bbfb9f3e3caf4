# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The schedulers' rendezvous across nodes, and how they sit when a peer dies (only with --nnodes > 1).

Where it comes from (SGLang 0.5.23 wheel, sglang/srt/...; torch 2.14.1, the release's pin in its
METADATA, wheel paths under torch/):
- distributed/bootstrap.py _resolve_dist_init_method: tcp://DIST_INIT_ADDR (utils/network.py
  NetworkAddress.parse), or tcp://HOST:NCCL_PORT (HOST 127.0.0.1 when unset) without --dist-init-addr.
- distributed/bootstrap.py _init_parallel_groups: world_size = tp_size x pp_size,
  rank = tp_size x pp_rank + tp_rank, timeout = --dist-timeout.
- distributed/parallel_state.py init_distributed_environment: a timeout that is set must be an int
  ("timeout must be a number") and positive ("timeout must be positive"); then
  torch.distributed.init_process_group(init_method, world_size, rank, timeout).
- torch distributed_c10d.py init_process_group / _get_default_timeout: no timeout means
  default_pg_nccl_timeout, the C++ kProcessGroupNCCLDefaultTimeout of 10 minutes
  (include/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp).
- torch distributed/rendezvous.py _tcp_rendezvous_handler and _create_c10d_store: rank 0 hosts the
  TCPStore (is_master) on the init address's port, every other rank is a client of it. The server
  listens on every local address (c10d/socket.h Socket::listen(port) has no host); the master waits
  until world_size clients joined (TCPStore.hpp TCPStoreOptions.waitWorkers = true); a client
  retries its connect every second (TCPStore::kConnectRetryDelay) until the timeout.
- The error texts are format strings of the torch wheel's torch/lib/libtorch_cpu.so and
  libtorch_cuda.so (ProcessGroupNCCL's watchdog), filled in here.

A dead peer (sglang issues 3099 and 3932, PR 20287; FACTS.md "Multi-node servers"): the survivors
sit in their collectives, holding their GPUs, until the collective timeout (the process group's
timeout: --dist-timeout or the 10 minutes above) and then the NCCL watchdog takes the process down
("To avoid data inconsistency, we are taking the entire process down."; SGLang's
utils/watchdog.py SubprocessWatchdog: "NCCL timeout causing C++ std::terminate()").

Simplified: the store is one line-based TCP protocol (JOIN, READY, BYE, GONE, SHUTDOWN), not
torch's; the ranks notice a dead peer through their store connection, not inside a collective;
every rank then waits the same collective timeout. A rank that connects after the group formed is
never answered and times out waiting.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import resource
import socket
import threading
import time

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 600  # kProcessGroupNCCLDefaultTimeout (10 minutes), torch's default_pg_nccl_timeout
CONNECT_RETRY_DELAY_S = 1.0  # torch TCPStore::kConnectRetryDelay
PEER_TIMEOUT_ENV = "GPUSIM_SGLANG_PEER_TIMEOUT_SECONDS"
RECV_CLOSED = ("Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or "
               "crash?")


class DistError(RuntimeError):
    """torch.distributed.DistError."""


class DistNetworkError(DistError):
    """torch.distributed.DistNetworkError."""


class DistStoreError(DistError):
    """torch.distributed.DistStoreError."""


for _cls in (DistError, DistNetworkError, DistStoreError):
    _cls.__module__ = "torch.distributed"  # tracebacks name them as torch does


def _is_ipv6(host: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address)
    except ValueError:
        return False


def _parse_port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise ValueError("Invalid port number: %r" % text)
    if not 0 <= port <= 65535:
        raise ValueError("Port out of range (0-65535): %d" % port)
    return port


class NetworkAddress:
    """utils/network.py NetworkAddress: host and port; parse() takes host:port, hostname:port or [v6]:port."""

    def __init__(self, host: str, port: int):
        self.host = host
        self.port = port

    @staticmethod
    def parse(addr: str) -> "NetworkAddress":
        if not addr:
            raise ValueError("Empty address string")
        if addr.startswith("["):
            close = addr.find("]")
            if close == -1:
                raise ValueError("Missing closing bracket in IPv6 address: %r" % addr)
            host = addr[1:close]
            if not _is_ipv6(host):
                raise ValueError("Invalid IPv6 address inside brackets: %r" % host)
            rest = addr[close + 1:]
            if not rest.startswith(":") or len(rest) < 2:
                raise ValueError("Expected ':port' after closing bracket, got: %r" % rest)
            return NetworkAddress(host, _parse_port(rest[1:]))
        if ":" not in addr:
            raise ValueError("Missing port in address (expected host:port): %r" % addr)
        host, port_str = addr.rsplit(":", 1)
        if not host:
            raise ValueError("Empty host in address: %r" % addr)
        if ":" in host and _is_ipv6(host):
            raise ValueError("Bare IPv6 address without brackets is ambiguous: %r. Use [%s]:%s instead."
                             % (addr, host, port_str))
        return NetworkAddress(host, _parse_port(port_str))

    def to_host_port_str(self) -> str:
        return ("[%s]:%d" if ":" in self.host else "%s:%d") % (self.host, self.port)


def dist_init_address(server_args, dist_port: int) -> NetworkAddress:
    """bootstrap.py _resolve_dist_init_method: --dist-init-addr, else HOST (127.0.0.1 when unset):DIST_PORT."""
    if server_args.dist_init_addr:
        return NetworkAddress.parse(server_args.dist_init_addr)
    return NetworkAddress(server_args.host or "127.0.0.1", dist_port)


def dist_timeout(server_args) -> int:
    """The process group's timeout in seconds: --dist-timeout, checked as init_distributed_environment
    checks it, or torch's NCCL default."""
    timeout = server_args.dist_timeout
    if timeout is None:
        return DEFAULT_TIMEOUT_S
    assert isinstance(timeout, int), "timeout must be a number"
    assert timeout > 0, "timeout must be positive"
    return timeout


def world_rank(server_args, tp_rank: int, pp_rank: int = 0) -> int:
    """bootstrap.py _init_parallel_groups: rank = tp_size x pp_rank + tp_rank."""
    return server_args.tp_size * pp_rank + tp_rank


def _send(conn, line: str) -> None:
    try:
        conn.sendall(line.encode() + b"\n")
    except OSError:
        pass


def _lines(conn):
    """The lines CONN sends, until it closes (then nothing more)."""
    buf = b""
    while True:
        try:
            data = conn.recv(4096)
        except OSError:
            return
        if not data:
            return
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield line.decode(errors="replace")


class ProcessGroup:
    """WORLD of one scheduler: the rendezvous at the init address, then the watch on the peers.

    ON_PEER_GONE(rank) is called once a peer is gone (not after a graceful end); ON_SHUTDOWN() when
    rank 0 broadcasts its ShutdownReq."""

    def __init__(self, address: NetworkAddress, world_size: int, rank: int, timeout_s: int,
                 on_peer_gone, on_shutdown):
        self.address = address
        self.world_size = world_size
        self.rank = rank
        self.timeout_s = timeout_s
        self.on_peer_gone = on_peer_gone
        self.on_shutdown = on_shutdown
        self.closing = False
        self.members = {}  # rank 0 only: rank -> connection
        self.left = set()  # rank 0 only: ranks that ended gracefully
        self.conn = None  # other ranks: the connection to the store
        self.listener = None
        self.lock = threading.Lock()

    def rendezvous(self) -> "ProcessGroup":
        """init_process_group's tcp:// rendezvous: return once all WORLD_SIZE ranks joined, or raise."""
        if self.rank == 0:
            self._serve()
        else:
            self._join()
        return self

    # -- rank 0: the store --

    def _listen(self) -> socket.socket:
        """Listen on every local address at the init port, dual-stack where IPv6 is there."""
        port = self.address.port
        for family, addr in ((socket.AF_INET6, ("::", port)), (socket.AF_INET, ("0.0.0.0", port))):
            try:
                sock = socket.socket(family, socket.SOCK_STREAM)
            except OSError:
                continue
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                sock.bind(addr)
                sock.listen(128)
                return sock
            except OSError as e:
                sock.close()
                if family == socket.AF_INET6 and e.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                    continue
                ipv6 = int(family == socket.AF_INET6)
                raise DistNetworkError(
                    "The server socket has failed to listen on any local network address. port: %d, useIpv6: %d, "
                    "code: %d, name: %s, message: %s"
                    % (port, ipv6, e.errno, errno.errorcode.get(e.errno, "?"), e.strerror)) from None
        raise DistNetworkError("The server socket has failed to listen on any local network address.")

    def _serve(self) -> None:
        self.listener = self._listen()
        self.listener.settimeout(0.2)
        deadline = time.monotonic() + self.timeout_s
        self.members = {}
        while len(self.members) + 1 < self.world_size:  # rank 0 counts itself
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DistStoreError("Timed out after %d seconds waiting for clients. %d/%d clients joined."
                                     % (self.timeout_s, len(self.members) + 1, self.world_size))
            try:
                conn, dummy = self.listener.accept()
            except socket.timeout:
                continue
            conn.settimeout(remaining)
            line = next(_lines(conn), "")
            if not line.startswith("JOIN "):
                conn.close()
                continue
            conn.settimeout(None)
            self.members[int(line.split()[1])] = conn
        for member, conn in self.members.items():
            _send(conn, "READY")
            threading.Thread(target=self._watch_member, args=(member, conn), daemon=True,
                             name="store-rank-%d" % member).start()
        # The listener stays open and unanswered: a rank that comes later waits until its timeout.

    def _watch_member(self, member: int, conn) -> None:
        for line in _lines(conn):
            if line == "BYE":
                with self.lock:
                    self.left.add(member)
        with self.lock:
            if self.closing or member in self.left:
                return
            self.left.add(member)
            others = [c for r, c in self.members.items() if r not in self.left]
        for other in others:
            _send(other, "GONE %d" % member)
        self.on_peer_gone(member)

    # -- other ranks: clients of the store --

    def _join(self) -> None:
        host, port = self.address.host, self.address.port
        deadline = time.monotonic() + self.timeout_s
        tries = 0
        while True:
            tries += 1
            try:
                attempt = max(0.1, min(5.0, deadline - time.monotonic()))
                self.conn = socket.create_connection((host, port), timeout=attempt)
                break
            except OSError:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    ms = self.timeout_s * 1000
                    raise DistNetworkError(
                        "TCP client failed to connect/validate to host %s:%d - timed out (try=%d, timeout=%dms): "
                        "The client socket has timed out after %dms while trying to connect to (%s, %d)."
                        % (host, port, tries, ms, ms, host, port)) from None
                time.sleep(min(CONNECT_RETRY_DELAY_S, remaining))
        self.conn.settimeout(max(0.1, deadline - time.monotonic()))
        _send(self.conn, "JOIN %d" % self.rank)
        try:
            data = self.conn.recv(64)
        except socket.timeout:
            raise DistNetworkError("Socket Timeout") from None
        if not data:
            raise DistNetworkError(RECV_CLOSED)
        self.conn.settimeout(None)
        threading.Thread(target=self._watch_store, daemon=True, name="store-client").start()

    def _watch_store(self) -> None:
        for line in _lines(self.conn):
            if line == "SHUTDOWN":
                self.closing = True
                self.on_shutdown()
            elif line.startswith("GONE "):
                self.on_peer_gone(int(line.split()[1]))
        if not self.closing:  # the store's host, rank 0, is gone
            self.on_peer_gone(0)

    # -- the graceful end --

    def leave(self) -> None:
        """After the ShutdownReq: rank 0 broadcasts it to every rank, the others say goodbye."""
        with self.lock:
            self.closing = True
            members = list(self.members.values())
        for conn in members:
            _send(conn, "SHUTDOWN")
        if self.conn is not None:
            _send(self.conn, "BYE")


class CollectiveTimeout:
    """A rank whose peer is gone: it sits (its caller stops working, keeping its GPU memory) until the
    collective timeout, then the NCCL watchdog takes the process down (SIGABRT)."""

    def __init__(self, rank: int, timeout_s: float):
        self.rank = rank
        self.timeout_s = timeout_s
        self.stuck = threading.Event()
        self.lock = threading.Lock()

    def peer_gone(self, peer: int) -> None:
        with self.lock:
            if self.stuck.is_set():
                return
            self.stuck.set()
        threading.Thread(target=self._fire, daemon=True, name="nccl-watchdog").start()

    def _fire(self) -> None:
        time.sleep(self.timeout_s)
        logger.error("[Rank %d] Watchdog caught collective operation timeout: WorkNCCL(OpType=BROADCAST) ran for %d "
                     "milliseconds before timing out.", self.rank, int(self.timeout_s * 1000))
        logger.error("To avoid data inconsistency, we are taking the entire process down.")
        logging.shutdown()
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # an abort, without a core file
        os.abort()

    @staticmethod
    def sit() -> None:
        """Block for good, as in a collective whose peer never comes."""
        while True:
            time.sleep(3600)


def peer_timeout(server_args) -> float:
    """Seconds a rank sits after a peer is gone: GPUSIM_SGLANG_PEER_TIMEOUT_SECONDS, else the process
    group's timeout (--dist-timeout, or torch's 10 minutes)."""
    value = os.environ.get(PEER_TIMEOUT_ENV, "").strip()
    return float(value) if value else float(dist_timeout(server_args))

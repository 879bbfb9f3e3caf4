# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Reading processes from /proc, with the standard library only.

A process is identified by its PID *and* its start time (``/proc/PID/stat`` field 22),
so a PID reused by a new process is never taken for the old one.
"""

from __future__ import annotations

import errno
import os
import pwd
import signal
import socket
import stat
import sys

PF_KTHREAD = 0x00200000  # /proc/PID/stat flags bit of kernel threads
AT_SECURE = 23  # getauxval(3): the program was exec'd with more privilege than its caller (setuid, setgid, file caps)

_GONE = (errno.ENOENT, errno.ESRCH)
_DENIED = (errno.EACCES, errno.EPERM)


class Proc:
    """One process as /proc showed it when read. ``cmdline`` is a list of arguments."""

    __slots__ = ('pid', 'ppid', 'state', 'comm', 'pgid', 'sid', 'flags', 'start', 'cmdline', 'exe')

    def __init__(self, pid, ppid, state, comm, start, pgid=0, sid=0, flags=0, cmdline=None, exe=''):
        self.pid = pid
        self.ppid = ppid
        self.state = state
        self.comm = comm
        self.start = start
        self.pgid = pgid
        self.sid = sid
        self.flags = flags
        self.cmdline = list(cmdline or [])
        self.exe = exe

    def __repr__(self):
        return 'Proc(%d, %r, %s)' % (self.pid, self.command, self.state)

    @property
    def session_leader(self):
        """True for the process that started its session (setsid): its PID is the session ID."""
        return self.sid == self.pid

    @property
    def group_leader(self):
        return self.pgid == self.pid

    @property
    def kernel_thread(self):
        # by flag, not by PID: in a PID namespace, PID 2 is an ordinary process
        return bool(self.flags & PF_KTHREAD)

    @property
    def zombie(self):
        return self.state in ('Z', 'X', 'x')

    @property
    def command(self):
        """The full command line, or ``[comm]`` when there is none (kernel threads, zombies)."""
        return ' '.join(self.cmdline) if self.cmdline else '[%s]' % self.comm

    @property
    def name(self):
        """comm, or the untruncated title where comm is cut to 15 bytes (``sglang::scheduler_TP3``)."""
        if len(self.comm) >= 15 and self.cmdline:
            first = os.path.basename(self.cmdline[0].split(' ')[0])
            if first.startswith(self.comm):
                return first
        return self.comm

    def names(self):
        """Every name a protect list may use for this process."""
        found = {self.comm}
        if self.exe:
            found.add(os.path.basename(self.exe))
            found.add(self.exe)
        if self.cmdline:
            argv0 = self.cmdline[0]
            found.update((argv0, os.path.basename(argv0), os.path.basename(argv0.split(' ')[0])))
        found.discard('')
        return found


def _text(raw):
    return raw.decode('utf-8', 'replace')


def _read(path):
    with open(path, 'rb') as f:
        return f.read()


def parse_stat(raw):
    """Fields of /proc/PID/stat as a dict; comm may contain spaces and parentheses."""
    text = _text(raw)
    head, dummy, tail = text.rpartition(')')
    pid, dummy, comm = head.partition(' (')
    fields = tail.split()
    return {
        'pid': int(pid), 'comm': comm, 'state': fields[0], 'ppid': int(fields[1]),
        'pgid': int(fields[2]), 'sid': int(fields[3]), 'flags': int(fields[6]), 'start': int(fields[19]),
    }


def parse_cmdline(raw):
    """Arguments of /proc/PID/cmdline; a setproctitle title comes back as one argument."""
    args = [_text(a) for a in raw.split(b'\0')]
    while args and not args[-1]:
        args.pop()
    if len(args) == 1:
        args = [args[0].rstrip()]
    return args


def parse_environ(raw):
    """/proc/PID/environ as a dict; entries without ``=`` (overwritten by a title) are skipped."""
    env = {}
    for entry in raw.split(b'\0'):
        name, sep, value = _text(entry).partition('=')
        if sep and name:
            env.setdefault(name, value)
    return env


def parse_status_uids(raw):
    """The real, effective, saved and filesystem UIDs of the ``Uid:`` line of /proc/PID/status; None without one."""
    for line in _text(raw).splitlines():
        if line.startswith('Uid:'):
            uids = tuple(int(f) for f in line.split()[1:5])
            return uids if len(uids) == 4 else None
    return None


def parse_auxv_secure(raw):
    """Whether the auxiliary vector RAW (/proc/PID/auxv: pairs of native unsigned longs) carries AT_SECURE=1."""
    width = 8 if sys.maxsize > 2 ** 32 else 4
    for i in range(0, len(raw) - 2 * width + 1, 2 * width):
        key = int.from_bytes(raw[i:i + width], sys.byteorder)
        if key == 0:
            break
        if key == AT_SECURE:
            return int.from_bytes(raw[i + width:i + 2 * width], sys.byteorder) != 0
    return False


TCP_LISTEN = '0A'  # the st column of /proc/net/tcp and tcp6 for a listening socket


def _tcp_address(hex_address):
    """The text form of an address of /proc/net/tcp or tcp6: the kernel prints each 32-bit word of the address in
    the host's byte order (``0100007F`` is 127.0.0.1 on a little-endian host)."""
    words = [int(hex_address[i:i + 8], 16).to_bytes(4, sys.byteorder) for i in range(0, len(hex_address), 8)]
    raw = b''.join(words)
    return socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw)


TCP_ESTABLISHED = '01'  # the st column for a connection both ends hold open


def _tcp_sockets(raw, state):
    """``(inode, local address, remote address)`` of each socket that /proc/net/tcp or tcp6 (RAW) lists in STATE, its
    addresses as the kernel prints them (``HEX:PORT``); a socket that no inode names, or a malformed line, is left
    out."""
    for line in _text(raw).splitlines()[1:]:
        fields = line.split()
        # sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...
        if len(fields) < 10 or fields[3] != state or fields[9] == '0' or not fields[9].isdigit():
            continue
        yield int(fields[9]), fields[1], fields[2]


def _tcp_port(hex_address):
    """The port of an address as /proc/net/tcp prints it (``0100007F:7918``); None where it is malformed."""
    try:
        return int(hex_address.rsplit(':', 1)[1], 16)
    except (IndexError, ValueError):
        return None


def parse_tcp_listening(raw):
    """``{inode: (local address, port)}`` of the sockets that /proc/net/tcp or tcp6 (RAW) lists as listening."""
    found = {}
    for inode, local, dummy in _tcp_sockets(raw, TCP_LISTEN):
        port = _tcp_port(local)
        try:
            if port is not None:
                found[inode] = (_tcp_address(local.rsplit(':', 1)[0]), port)
        except ValueError:
            continue
    return found


def parse_tcp_connected_to(raw, port):
    """Inodes of the sockets that /proc/net/tcp or tcp6 (RAW) lists as established connections to remote PORT."""
    return set(inode for inode, dummy, remote in _tcp_sockets(raw, TCP_ESTABLISHED) if _tcp_port(remote) == port)


def parse_tcp_listen_addresses(raw, port):
    """{inode: local address} of the sockets that /proc/net/tcp or tcp6 (RAW) lists as listening on PORT."""
    return dict((inode, address) for inode, (address, listening) in parse_tcp_listening(raw).items()
                if listening == port)


def parse_tcp_listeners(raw, port):
    """Inodes of the sockets that /proc/net/tcp or tcp6 (RAW) lists as listening on PORT."""
    return set(parse_tcp_listen_addresses(raw, port))


def read_regular(path, owner=None, limit=1 << 20):
    """(fstat result, at most LIMIT bytes) of the regular file PATH (links followed), where it belongs to the UID
    OWNER (any owner when None); None otherwise, or when it cannot be read.

    What PATH names is looked at before it is opened for reading: an ``O_PATH`` descriptor and its fstat, so a FIFO,
    a device (a watchdog that arms on open, a tape that rewinds, a serial line that raises DTR) or another user's file
    is never opened. The file is then opened through that descriptor (``/proc/self/fd/N``, with
    ``O_NOCTTY | O_NONBLOCK``), and read only when it is still the same inode."""
    try:
        handle = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except (IOError, OSError):
        return None
    try:
        seen = os.fstat(handle)
        if not stat.S_ISREG(seen.st_mode) or (owner is not None and seen.st_uid != owner):
            return None
        fd = os.open('/proc/self/fd/%d' % handle, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (IOError, OSError):
        return None
    finally:
        os.close(handle)
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (seen.st_dev, seen.st_ino) or not stat.S_ISREG(st.st_mode):
            return None
        return st, os.read(fd, limit)
    except (IOError, OSError):
        return None
    finally:
        os.close(fd)


class ProcFS:
    """The process table of one /proc mount (``root`` lets tests use a fake tree)."""

    def __init__(self, root='/proc'):
        self.root = root

    def _path(self, pid, *parts):
        return os.path.join(self.root, str(pid), *parts)

    def age(self, start):
        """Seconds since a process started, from its START (clock ticks since boot, Proc.start); None where the uptime
        cannot be read."""
        try:
            uptime = float(_read(os.path.join(self.root, 'uptime')).split()[0])
        except (IOError, OSError, ValueError, IndexError):
            return None
        return max(uptime - start / float(os.sysconf('SC_CLK_TCK')), 0.0)

    def stat(self, pid):
        """A Proc with stat fields only, or None when the PID does not exist."""
        try:
            s = parse_stat(_read(self._path(pid, 'stat')))
        except (IOError, OSError, ValueError, IndexError):
            return None
        return Proc(s['pid'], s['ppid'], s['state'], s['comm'], s['start'], s['pgid'], s['sid'], s['flags'])

    def read(self, pid):
        """A full Proc (stat, command line, executable), or None when the PID does not exist."""
        proc = self.stat(pid)
        if proc is None:
            return None
        try:
            proc.cmdline = parse_cmdline(_read(self._path(pid, 'cmdline')))
        except (IOError, OSError):
            pass
        try:
            proc.exe = os.readlink(self._path(pid, 'exe'))
        except (IOError, OSError):
            pass
        if proc.exe.endswith(' (deleted)'):
            proc.exe = proc.exe[:-len(' (deleted)')]
        return proc

    def pids(self):
        try:
            return sorted(int(d) for d in os.listdir(self.root) if d.isdigit())
        except OSError:
            return []

    def snapshot(self):
        """Every process now: ``{pid: Proc}``. Processes that exit while being read are left out."""
        table = {}
        for pid in self.pids():
            proc = self.read(pid)
            if proc is not None:
                table[pid] = proc
        return table

    def environ(self, pid, denied=None):
        """The environment of a process, or None when it cannot be read.

        ``denied`` (a set), when given, collects the PID if reading was not permitted.
        """
        try:
            return parse_environ(_read(self._path(pid, 'environ')))
        except (IOError, OSError) as e:
            if denied is not None and e.errno in _DENIED:
                denied.add(pid)
            return None

    def open_files(self, pid, denied=None):
        """Targets of the open file descriptors of a process (empty when they cannot be read).

        ``denied`` (a set), when given, collects the PID if reading was not permitted.
        """
        fd_dir = self._path(pid, 'fd')
        try:
            fds = os.listdir(fd_dir)
        except (IOError, OSError) as e:
            if denied is not None and e.errno in _DENIED:
                denied.add(pid)
            return []
        targets = []
        fd_dir += os.sep
        for fd in fds:
            try:
                targets.append(os.readlink(fd_dir + fd))
            except (IOError, OSError):
                pass
        return targets

    def _tcp_tables(self):
        """The text of /proc/net/tcp and tcp6 of this process's network namespace, each that can be read."""
        for name in ('tcp', 'tcp6'):
            try:
                yield _read(os.path.join(self.root, 'net', name))
            except (IOError, OSError):
                pass  # no IPv6 in this kernel

    def tcp_listening(self):
        """``{inode: (local address, port)}`` of the TCP sockets (IPv4 and IPv6) listening in this process's network
        namespace."""
        found = {}
        for raw in self._tcp_tables():
            found.update(parse_tcp_listening(raw))
        return found

    def tcp_connected_to(self, port):
        """Inodes of the established TCP connections (IPv4 and IPv6) to remote PORT in this process's network
        namespace."""
        found = set()
        for raw in self._tcp_tables():
            found |= parse_tcp_connected_to(raw, port)
        return found

    def tcp_listeners(self, port):
        """Inodes of the TCP sockets (IPv4 and IPv6) listening on PORT in this process's network namespace."""
        return set(self.tcp_listen_addresses(port))

    def tcp_listen_addresses(self, port):
        """{inode: local address} of the TCP sockets (IPv4 and IPv6) listening on PORT in this process's network
        namespace."""
        return dict((inode, address) for inode, (address, listening) in self.tcp_listening().items()
                    if listening == port)

    def listening_ports(self, pids, listening=None):
        """The TCP ports on which a socket that one of PIDS holds listens, sorted; LISTENING is what
        tcp_listening() returned, read once for several calls."""
        listening = self.tcp_listening() if listening is None else listening
        ports = set()
        for pid in pids:
            for target in self.open_files(pid):
                if target.startswith('socket:['):
                    entry = listening.get(int(target[8:-1]))
                    if entry is not None:
                        ports.add(entry[1])
        return sorted(ports)

    def file_of(self, pid, path, owner, limit=1 << 20):
        """(owner UID, text) of the regular file PATH as process PID names it (through /proc/PID/root, or its working
        directory for a relative path), at most LIMIT bytes, where the file belongs to the UID OWNER; None otherwise,
        or when it cannot be read (read_regular: no FIFO or device is ever opened)."""
        base = self._path(pid, 'root') if os.path.isabs(path) else self._path(pid, 'cwd')
        found = read_regular(os.path.join(base, path.lstrip('/')), owner, limit)
        return (found[0].st_uid, _text(found[1])) if found else None

    def pid_namespace(self, pid):
        """The PID namespace of a process as ``pid:[INODE]``, or None when it cannot be read."""
        try:
            return os.readlink(self._path(pid, 'ns', 'pid'))
        except (IOError, OSError):
            return None

    def cgroup(self, pid):
        """The contents of /proc/PID/cgroup, or '' when it cannot be read."""
        try:
            return _text(_read(self._path(pid, 'cgroup')))
        except (IOError, OSError):
            return ''

    def uids(self, pid):
        """The real, effective, saved and filesystem UIDs of a process (/proc/PID/status); None when it is gone.

        /proc/PID itself belongs to the *effective* UID, which a setuid program gives any user: a user who execs
        ``su`` gets a process that /proc and ``ps`` show as root's while it waits at its password prompt. A tree
        without status files (a test's) is read by the owner of its PID directory."""
        try:
            return parse_status_uids(_read(self._path(pid, 'status')))
        except (IOError, OSError) as e:
            if e.errno != errno.ENOENT:
                return None
        try:
            return (os.stat(self._path(pid)).st_uid,) * 4
        except (IOError, OSError):
            return None

    def uid(self, pid):
        """The real UID of a process, the user who runs it; None when it is gone."""
        uids = self.uids(pid)
        return uids[0] if uids else None

    def secure_exec(self, pid):
        """Whether the process runs the image of a setuid, setgid or file-capability program that its caller lacked
        the privilege of (AT_SECURE in /proc/PID/auxv); None when that cannot be read."""
        try:
            return parse_auxv_secure(_read(self._path(pid, 'auxv')))
        except (IOError, OSError) as e:
            return False if e.errno == errno.ENOENT and os.path.isdir(self._path(pid)) else None

    def trusted_root(self, pid):
        """Whether root itself runs the process: its real, effective, saved and filesystem UIDs are all 0, and its
        image is not a setuid program that some other user exec'd. A root-owned /proc/PID alone proves neither."""
        uids = self.uids(pid)
        return bool(uids) and not any(uids) and self.secure_exec(pid) is False

    def user_name(self, uid):
        """The name of UID, or the UID as text where it has none."""
        try:
            return pwd.getpwuid(uid).pw_name
        except KeyError:
            return str(uid)

    def owner(self, pid):
        """The user name (or UID where it has none) of the real UID of a process; None when it is gone."""
        uid = self.uid(pid)
        return None if uid is None else self.user_name(uid)

    def hidden(self):
        """Why this /proc shows only some processes (``hidepid``, ``subset``), or None.

        Read from the mount options of /proc in /proc/self/mountinfo.
        """
        try:
            lines = _text(_read(os.path.join(self.root, 'self', 'mountinfo'))).splitlines()
        except (IOError, OSError):
            return None
        for line in lines:
            head, dummy, tail = line.partition(' - ')
            fields, super_fields = head.split(), tail.split()
            if len(fields) < 5 or len(super_fields) < 3 or super_fields[0] != 'proc':
                continue
            if fields[4] != os.path.abspath(self.root):
                continue
            for option in super_fields[2].split(','):
                name, dummy, value = option.partition('=')
                if name == 'hidepid' and value not in ('0', 'off'):
                    return 'hidepid=%s' % value
                if name == 'subset':
                    return 'subset=%s' % value
        return None

    def ancestry(self, pid):
        """``pid`` and its ancestors up to the namespace's init, read fresh from /proc."""
        chain = []
        while pid > 0 and pid not in chain:
            chain.append(pid)
            proc = self.stat(pid)
            if proc is None:
                break
            pid = proc.ppid
        return chain

    def current(self, proc):
        """``proc`` as /proc shows it now (stat fields), or None when that process is gone.

        None also when the PID now names another process (a different start time).
        """
        now = self.stat(proc.pid)
        if now is None or now.start != proc.start:
            return None
        return now

    def alive(self, proc):
        """True while ``proc`` exists and has not exited.

        A zombie has exited: it holds no memory and no files, only a PID its parent has
        not collected yet.
        """
        now = self.current(proc)
        return now is not None and not now.zombie

    def send_signal(self, proc, signum):
        """Signal ``proc`` if its PID still names the same process; False when it is gone.

        With pidfds (Python 3.9+, Linux 5.3+) the identity check and the signal refer to
        one process without a race; otherwise the start time is checked just before kill().
        """
        pidfd = None
        if hasattr(os, 'pidfd_open') and hasattr(signal, 'pidfd_send_signal'):
            try:
                pidfd = os.pidfd_open(proc.pid)
            except OSError as e:
                if e.errno in _GONE:
                    return False
                pidfd = None  # kernel without pidfd_open: fall back below
        try:
            if not self.alive(proc):
                return False
            if pidfd is not None:
                signal.pidfd_send_signal(pidfd, signum)
            else:
                os.kill(proc.pid, signum)
            return True
        except OSError as e:
            if e.errno in _GONE:
                return False
            raise
        finally:
            if pidfd is not None:
                os.close(pidfd)

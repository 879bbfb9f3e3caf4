# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Reading a model's files into the page cache before a server loads them (model_prefetch).

A plan says, file by file, how many bytes are already in memory (``mincore(2)`` on a shared
read-only mapping) and which byte ranges are not; running the plan reads only those ranges,
at most at a given rate, while the host keeps a given amount of memory available. The page
cache, clock, sleep and meminfo reader are injected, so the logic runs without real files.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fnmatch
import mmap
import os
import stat
import time

MIB = 1024 * 1024
PAGE = mmap.PAGESIZE
WINDOW = 64 * MIB        # mincore() and the memory check work a window at a time
READ_SIZE = 8 * MIB      # one read() call
DEFAULT_PATTERNS = ('*.safetensors', '*.bin', '*.pt', '*.pth')


class PrefetchError(Exception):
    """The prefetch cannot run or was stopped; RESULT holds what was done until then."""

    def __init__(self, msg, result=None):
        super().__init__(msg)
        self.result = result or {}


def mib(n):
    return round(n / MIB, 1)


def model_roots(path):
    """The directories a model's files may resolve into: the model directory itself and, for a snapshot of a
    Hugging Face cache (``models--ORG--NAME/snapshots/REVISION``, whose files are links to ``../../blobs/...``),
    its repository directory."""
    real = os.path.realpath(path)
    roots = [real]
    if os.path.basename(os.path.dirname(real)) == 'snapshots':
        roots.append(os.path.dirname(os.path.dirname(real)))
    return roots


def _inside(real, roots):
    return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def find_files(path, patterns, recurse, expired=lambda: False):
    """(path, size) of every regular file under PATH (or PATH itself) whose name matches a pattern. A link is
    followed only to a regular file inside the model's directories (model_roots): the path returned is where it
    resolves, so that the read opens no link (O_NOFOLLOW). Nothing else is listed: another user's link to
    /etc/shadow or a FIFO is not a model file. EXPIRED() is asked at each directory: a tree that another user
    makes deep or wide without end stops the walk there (PrefetchError)."""
    if not os.path.isdir(path):
        if os.path.isfile(path):
            real = os.path.realpath(path)
            return [(real, os.stat(real).st_size)]
        raise PrefetchError('%s is neither a file nor a directory' % path)
    roots = model_roots(path)
    found = []
    for root, dirs, names in os.walk(path):
        if expired():
            raise PrefetchError('Stopped listing the files under %s at %s: its timeout passed' % (path, root))
        dirs.sort()
        if not recurse:
            dirs[:] = []
        for name in sorted(names):
            if not any(fnmatch.fnmatch(name, p) for p in patterns):
                continue
            real = os.path.realpath(os.path.join(root, name))
            try:
                st = os.stat(real)
            except (IOError, OSError):
                continue
            if _inside(real, roots) and stat.S_ISREG(st.st_mode):
                found.append((real, st.st_size))
    return found


def read_meminfo(path='/proc/meminfo'):
    """/proc/meminfo as a dict of byte counts."""
    values = {}
    with open(path) as f:
        for line in f:
            key, dummy, rest = line.partition(':')
            fields = rest.split()
            if fields:
                values[key] = int(fields[0]) * (1024 if fields[1:] == ['kB'] else 1)
    return values


def available_bytes(meminfo):
    info = meminfo()
    if 'MemAvailable' not in info:
        raise PrefetchError('the kernel reports no MemAvailable in /proc/meminfo (Linux 3.14 or later needed)')
    return info['MemAvailable']


def missing_ranges(vector, start, page=PAGE):
    """Byte ranges (offset, length) of the pages VECTOR (one byte per page, bit 0 = resident) says are not in
    memory, for a window that begins at byte START."""
    flags = bytes(vector).translate(_RESIDENT)
    ranges, pos = [], 0
    while True:
        hole = flags.find(b'\0', pos)
        if hole < 0:
            return ranges
        end = flags.find(b'\1', hole)
        end = len(flags) if end < 0 else end
        ranges.append((start + hole * page, (end - hole) * page))
        pos = end


_RESIDENT = bytes((b & 1) for b in range(256))


class PageCache:
    """Which pages of a file are in memory: mincore(2) over an mmap(2) of one window at a time."""

    PROT_READ = 1
    MAP_SHARED = 1

    def __init__(self):
        libc = ctypes.CDLL(ctypes.util.find_library('c') or 'libc.so.6', use_errno=True)
        self._mmap = libc.mmap
        self._mmap.restype = ctypes.c_void_p
        self._mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                               ctypes.c_long]
        self._mincore = libc.mincore
        self._mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
        self._munmap = libc.munmap
        self._munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]

    def missing(self, fd, offset, length):
        """Byte ranges of [OFFSET, OFFSET+LENGTH) not in memory; the whole window where mmap() fails."""
        addr = self._mmap(None, length, self.PROT_READ, self.MAP_SHARED, fd, offset)
        if addr in (None, ctypes.c_void_p(-1).value):
            return [(offset, length)]
        try:
            vector = ctypes.create_string_buffer((length + PAGE - 1) // PAGE)
            if self._mincore(addr, length, vector) != 0:
                return [(offset, length)]
            end = offset + length
            return [(o, min(n, end - o)) for o, n in missing_ranges(vector.raw, offset)]
        finally:
            self._munmap(addr, length)


def open_regular(path):
    """PATH opened for reading, where every component of it is what the listing resolved: each directory from ``/``
    is opened relative to the one before with O_NOFOLLOW, so a link swapped in anywhere on the way (not only at the
    last component) fails the open; the file itself is looked at (O_PATH, fstat) before it is opened, so a FIFO or a
    device swapped in since the listing (a watchdog arms on open) is never opened. OSError unless it is a regular
    file, so such a swap is skipped, never read."""
    parts = [p for p in os.path.abspath(path).split('/') if p]
    if not parts:
        raise OSError(errno.EINVAL, 'not a regular file')
    fd = os.open('/', os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in parts[:-1]:
            step = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = step
        handle = os.open(parts[-1], os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    finally:
        os.close(fd)
    try:
        seen = os.fstat(handle)
        if not stat.S_ISREG(seen.st_mode):
            raise OSError(errno.EINVAL, 'not a regular file (it changed since it was listed)')
        fd = os.open('/proc/self/fd/%d' % handle, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC)
    finally:
        os.close(handle)
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (seen.st_dev, seen.st_ino):
            raise OSError(errno.EINVAL, 'not the file that was looked at (it changed since)')
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, 'rb', buffering=0)


class Prefetcher:
    """Plans and runs the reading of model files into the page cache."""

    def __init__(self, cache=None, meminfo=read_meminfo, clock=time.monotonic, sleep=time.sleep, opener=None,
                 timeout=0):
        self.cache = cache if cache is not None else PageCache()
        self.meminfo = meminfo
        self.clock = clock
        self.sleep = sleep
        self.opener = opener or open_regular
        self.skipped = []
        self.timeout = timeout
        self.started = clock()

    def _check_time(self, doing, result=None):
        """Raise a PrefetchError once TIMEOUT seconds (0: no bound) have passed since the prefetcher was made."""
        elapsed = self.clock() - self.started
        if self.timeout and elapsed >= self.timeout:
            raise PrefetchError('Stopped prefetching %s, after %.1f s, its timeout (%s s)' % (doing, elapsed, self.timeout),
                                result() if result else None)

    def _open(self, path):
        """The file PATH through the opener, or None (and an entry in .skipped) when it cannot be opened."""
        try:
            return self.opener(path)
        except (IOError, OSError) as e:
            self.skipped.append({'path': path, 'reason': e.strerror or str(e)})
            return None

    def plan(self, files):
        """Per file: path, size, bytes already in memory, and the byte ranges left to read. A file that cannot be
        opened as a regular file is left out, in .skipped."""
        plan = []
        for path, size in files:
            self._check_time('while finding what is in memory, at %s' % path)
            ranges = []
            if size:
                f = self._open(path)
                if f is None:
                    continue
                with f:
                    for start in range(0, size, WINDOW):
                        length = min(WINDOW, size - start)
                        ranges += self.cache.missing(f.fileno(), start, length)
            missing = sum(n for dummy, n in ranges)
            plan.append({'path': path, 'size': size, 'resident': size - missing, 'ranges': ranges})
        return plan

    def check_memory(self, plan, min_available):
        """Refuse, before reading, a plan whose reads would leave less than MIN_AVAILABLE bytes available."""
        need = sum(f['size'] - f['resident'] for f in plan)
        available = available_bytes(self.meminfo)
        if need and available - need < min_available:
            raise PrefetchError(
                'Not prefetching %d files: %s MiB of them are not in memory, MemAvailable is %s MiB, and reading '
                'them would leave %s MiB, under min_available_mib (%s MiB)'
                % (len(plan), mib(need), mib(available), mib(available - need), mib(min_available)),
                summarize(plan, 0, 0.0, available, available))
        return available

    def run(self, plan, bandwidth, min_available):
        """Read every missing range of PLAN at most at BANDWIDTH bytes/s (0: no limit), stopping with a
        PrefetchError when MemAvailable falls under MIN_AVAILABLE. Returns the result dict."""
        before = self.check_memory(plan, min_available)
        buf = bytearray(READ_SIZE)
        view = memoryview(buf)
        done, next_check, start = 0, WINDOW, self.clock()
        total = sum(e['size'] - e['resident'] for e in plan)
        for entry in plan:
            entry['read'] = 0
            if not entry['ranges']:
                continue
            f = self._open(entry['path'])
            if f is None:
                continue
            with f:
                for offset, length in entry['ranges']:
                    f.seek(offset)
                    left = length
                    while left > 0:
                        self._check_time('at %s, %s MiB of %s MiB read' % (entry['path'], mib(done), mib(total)),
                                         lambda: summarize(plan, done, self.clock() - start, before,
                                                           available_bytes(self.meminfo)))
                        if done >= next_check:
                            next_check = done + WINDOW
                            available = available_bytes(self.meminfo)
                            if available < min_available:
                                raise PrefetchError(
                                    'Stopped prefetching at %s after %s MiB of %s MiB: MemAvailable fell to %s MiB, '
                                    'under min_available_mib (%s MiB)'
                                    % (entry['path'], mib(done), mib(total), mib(available), mib(min_available)),
                                    summarize(plan, done, self.clock() - start, before, available))
                        n = f.readinto(view[:min(READ_SIZE, left)])
                        if not n:      # the file shrank since the plan
                            break
                        left -= n
                        done += n
                        entry['read'] += n
                        if bandwidth:
                            ahead = done / float(bandwidth) - (self.clock() - start)
                            if ahead > 0:
                                self.sleep(ahead)
        return summarize(plan, done, self.clock() - start, before, available_bytes(self.meminfo))


def summarize(plan, bytes_read, seconds, available_before, available_after):
    """The module's result for PLAN after BYTES_READ were read in SECONDS."""
    total = sum(f['size'] for f in plan)
    resident = sum(f['resident'] for f in plan)
    return {
        'files': [{'path': f['path'], 'size': f['size'], 'resident_before': f['resident'],
                   'read': f.get('read', 0)} for f in plan],
        'bytes_total': total,
        'bytes_resident_before': resident,
        'bytes_to_read': total - resident,
        'bytes_read': bytes_read,
        'seconds': round(seconds, 3),
        'mib_per_second': round(bytes_read / MIB / seconds, 1) if seconds > 0 and bytes_read else None,
        'available_mib_before': mib(available_before),
        'available_mib_after': mib(available_after),
    }


def prefetch(path, patterns, recurse, bandwidth_mib, min_available_mib, check_mode, prefetcher=None, timeout=0):
    """What model_prefetch does: plan, then (unless CHECK_MODE) read, within TIMEOUT seconds (0: no bound).
    Returns the result dict with 'changed'."""
    if bandwidth_mib < 0 or min_available_mib < 0 or timeout < 0:
        raise PrefetchError('bandwidth_mib, min_available_mib and timeout must not be negative')
    prefetcher = prefetcher or Prefetcher(timeout=timeout)
    files = find_files(path, patterns, recurse, lambda: bool(timeout) and prefetcher.clock() - prefetcher.started >= timeout)
    if not files:
        raise PrefetchError('no file under %s matches %s' % (path, ', '.join(patterns)))
    plan = prefetcher.plan(files)
    min_available = int(min_available_mib * MIB)
    if check_mode:
        available = prefetcher.check_memory(plan, min_available)
        result = summarize(plan, 0, 0.0, available, available)
    else:
        result = prefetcher.run(plan, int(bandwidth_mib * MIB), min_available)
    result['changed'] = result['bytes_to_read'] > 0
    result['skipped'] = prefetcher.skipped
    return result

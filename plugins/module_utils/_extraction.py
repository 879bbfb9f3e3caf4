# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What a hidden-state extraction run has written, read from its dump directory alone: the dump format is the
team's own patch's, so files are counted and sized, never parsed.

A run is *active* while its dump directory was written to within a window: a driver that feeds the server its
training set sends its next request a moment after the last one finished, so a drain that counts zero requests
between two of them says nothing about whether the run is still being fed. The server's own dumps of the readiness
check (``/health_generate`` generates, and the patch dumps it: ``HEALTH_CHECK`` in its request id, SGLang 0.5.23
``entrypoints/http_server.py`` ``health_generate``) and of the collection's probe (``gpuops-probe-``) are no work
of the run: they are counted apart and never make it active. Nor is anything written before the server was proven
ready: SGLang's own warm-up request (``_execute_server_warmup``, a random request id) dumps too.

What counts as a dump is every regular file under the run directory, or those whose names match the patterns given
(``dump_patterns``: a team's patch may write side files). The run's manifest (``gpuops-manifest.json`` at the top of
the run directory, and its temporary files while it is written: _manifest) is never a dump.
"""

from __future__ import annotations

import datetime
import fnmatch
import os
import re
from stat import S_ISDIR, S_ISREG

# Names of dumps that are not the run's records: the readiness check's and the probe's own.
OWN_DUMPS = ('*HEALTH_CHECK*', '*gpuops-probe-*')
# Every regular file is a dump, unless the caller names the patterns of its patch's files.
DUMPS = ('*',)
# The manifest that the collection writes at the top of a run directory, and the prefix of its temporary files.
MANIFEST = 'gpuops-manifest.json'
MANIFEST_TEMP = '.%s.' % MANIFEST
GB = 1e9


def _matcher(patterns):
    """One compiled expression for the name patterns PATTERNS (fnmatch's), None for none."""
    return re.compile('|'.join(fnmatch.translate(pattern) for pattern in patterns)).match if patterns else None


def is_manifest(name):
    """Whether NAME, at the top of a run directory, is the manifest or one of its temporary files."""
    return name == MANIFEST or name.startswith(MANIFEST_TEMP)


def scan(path, own=OWN_DUMPS, since=None, patterns=DUMPS, recent_since=None):
    """The files under PATH (no link under it followed, nothing opened but directories): ``files`` and
    ``bytes`` of the run's records (the regular files whose names match PATTERNS, the manifest never), ``own`` (the
    readiness check's and the probe's dumps, by the name patterns OWN, and every file written at or before SINCE, the
    moment the server was proven ready), ``newest`` (the latest mtime of a record, None without one), ``recent`` and
    ``recent_bytes`` (the records written at or after RECENT_SINCE; 0 without it) and ``exists``.

    One pass, each directory listed through a descriptor and its entries stat()ed relative to it: 100,000 files
    take about a fifth less than os.scandir with DirEntry.stat."""
    found = {'path': path, 'exists': False}
    is_own = _matcher(own) or (lambda name: None)
    is_dump = None if not patterns or tuple(patterns) == DUMPS else _matcher(patterns)
    # one expression for the rare names that need a second look: the manifest's, and the launch's own
    special = _matcher(tuple(own or ()) + (MANIFEST, MANIFEST_TEMP + '*'))
    newest = None
    files = size = recent = recent_bytes = own_count = 0
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    todo = [path]
    while todo:
        current = todo.pop()
        try:
            # PATH as named (a hand-started server's SGLANG_HS_DUMP_DIR may be a link), nothing below it
            fd = os.open(current, flags if current == path else flags | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            try:
                names = os.listdir(fd)
            except OSError:
                continue
            top = current == path
            if top:
                found['exists'] = True
            for name in names:
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue
                mode = st.st_mode
                if S_ISDIR(mode):
                    todo.append(os.path.join(current, name))
                    continue
                if not S_ISREG(mode) or (is_dump is not None and not is_dump(name)):
                    continue
                mtime = st.st_mtime
                if special(name):
                    if top and is_manifest(name):
                        continue
                    if is_own(name):
                        own_count += 1
                        continue
                if since is not None and mtime <= since:
                    own_count += 1
                    continue
                files += 1
                size += st.st_size
                if newest is None or mtime > newest:
                    newest = mtime
                if recent_since is not None and mtime >= recent_since:
                    recent += 1
                    recent_bytes += st.st_size
        finally:
            os.close(fd)
    found.update(files=files, bytes=size, own=own_count, newest=newest, recent=recent, recent_bytes=recent_bytes)
    return found


def activity(path, window, now, own=OWN_DUMPS, since=None, patterns=DUMPS):
    """scan(PATH, OWN, SINCE, PATTERNS) with ``age`` (seconds since the newest record was written, None without one)
    and ``active``: written within WINDOW seconds of NOW (the wall clock, as file times are)."""
    found = scan(path, own, since, patterns)
    found['age'] = None if found['newest'] is None else round(max(now - found['newest'], 0.0), 1)
    found['active'] = found['age'] is not None and window > 0 and found['age'] < window
    found['gb'] = round(found['bytes'] / GB, 3)
    return found


def status(path, now, window, since=None, patterns=DUMPS):
    """What a run has written and how fast it writes, read without touching it: scan(PATH, SINCE, PATTERNS) in one
    pass, with ``gb``, ``age`` (of the newest record, seconds before NOW), the rate over the last WINDOW seconds by the
    records' mtimes - ``rate_seconds`` (the seconds it covers: WINDOW, or less where the run was proven ready, SINCE,
    more recently), ``rate_files_per_min`` and ``rate_gb_per_hour`` (None without a span) - the free space of the
    file system that holds the run directory (statvfs of the dump root above it, which the server's user cannot
    replace) ``free_gb``, and ``hours_to_full`` at that rate (None while nothing is written)."""
    found = scan(path, since=since, patterns=patterns, recent_since=now - window)
    span = window if since is None else min(window, max(now - since, 0.0))
    found.update(gb=round(found['bytes'] / GB, 3), rate_seconds=round(span, 1), rate_files_per_min=None,
                 rate_gb_per_hour=None, free_gb=None, hours_to_full=None,
                 age=None if found['newest'] is None else round(max(now - found['newest'], 0.0), 1))
    if span > 0:
        found['rate_files_per_min'] = round(found['recent'] * 60.0 / span, 2)
        found['rate_gb_per_hour'] = round(found['recent_bytes'] * 3600.0 / span / GB, 3)
    try:
        vfs = os.statvfs(os.path.dirname(os.path.normpath(path)) or '/')
    except OSError:
        return found
    free = vfs.f_bavail * vfs.f_frsize
    found['free_gb'] = round(free / GB, 3)
    if span > 0 and found['recent_bytes'] > 0:
        found['hours_to_full'] = round(free / (found['recent_bytes'] / span) / 3600.0, 2)
    return found


def epoch(iso):
    """Seconds since the epoch of an ISO 8601 time (a record's ``checked``), None when there is none. A time without
    an offset is UTC: Ansible's ``now(utc=true).isoformat()``, which the record is written with, gives none."""
    try:
        moment = datetime.datetime.fromisoformat(str(iso)) if iso else None
    except ValueError:
        return None
    if moment is not None and moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return None if moment is None else moment.timestamp()


def describe(run):
    """A run's output in words: ``1234 dumps, 56.789 GB, the last written 12.0 s ago``."""
    last = 'none written' if run['age'] is None else 'the last written %.1f s ago' % run['age']
    return '%d dumps, %.3f GB, %s' % (run['files'], run['gb'], last)

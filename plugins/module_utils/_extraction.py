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
"""

from __future__ import annotations

import datetime
import fnmatch
import os
import re
import stat

# Names of dumps that are not the run's records: the readiness check's and the probe's own.
OWN_DUMPS = ('*HEALTH_CHECK*', '*gpuops-probe-*')
GB = 1e9


def scan(path, own=OWN_DUMPS, since=None):
    """The files under PATH (links not followed, nothing opened): ``files`` and ``bytes`` of the run's records,
    ``own`` (the readiness check's and the probe's dumps, by the name patterns OWN, and every file written at or
    before SINCE, the moment the server was proven ready), ``newest`` (the latest mtime of a record, None without
    one) and ``exists``."""
    found = {'path': path, 'exists': False, 'files': 0, 'bytes': 0, 'own': 0, 'newest': None}
    is_own = re.compile('|'.join(fnmatch.translate(pattern) for pattern in own)).match if own else (lambda name: None)
    newest = None
    todo = [path]
    while todo:
        current = todo.pop()
        try:
            entries = os.scandir(current)
        except OSError:
            continue
        if current == path:
            found['exists'] = True
        with entries:
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    todo.append(entry.path)
                    continue
                if not stat.S_ISREG(st.st_mode):
                    continue
                if is_own(entry.name) or (since is not None and st.st_mtime <= since):
                    found['own'] += 1
                    continue
                found['files'] += 1
                found['bytes'] += st.st_size
                if newest is None or st.st_mtime > newest:
                    newest = st.st_mtime
    found['newest'] = newest
    return found


def activity(path, window, now, own=OWN_DUMPS, since=None):
    """scan(PATH, OWN, SINCE) with ``age`` (seconds since the newest record was written, None without one) and
    ``active``: written within WINDOW seconds of NOW (the wall clock, as file times are)."""
    found = scan(path, own, since)
    found['age'] = None if found['newest'] is None else round(max(now - found['newest'], 0.0), 1)
    found['active'] = found['age'] is not None and window > 0 and found['age'] < window
    found['gb'] = round(found['bytes'] / GB, 3)
    return found


def epoch(iso):
    """Seconds since the epoch of an ISO 8601 time with its offset (a record's ``checked``), None when there is none."""
    try:
        return datetime.datetime.fromisoformat(str(iso)).timestamp() if iso else None
    except ValueError:
        return None


def describe(run):
    """A run's output in words: ``1234 dumps, 56.789 GB, the last written 12.0 s ago``."""
    last = 'none written' if run['age'] is None else 'the last written %.1f s ago' % run['age']
    return '%d dumps, %.3f GB, %s' % (run['files'], run['gb'], last)

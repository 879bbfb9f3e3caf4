# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Who can change what root is about to run or read: every directory on the way to a path, and the path itself,
before and after its links.

A user who can write a directory can rename or replace any entry in it, a root-owned file included; a user who
owns a file or directory can change its mode. So a path is safe for root to run or read only when each entry on the
way belongs to a trusted user and is writable by no one else, where a sticky directory (``/tmp``) counts as safe for
the entries it holds that a trusted user owns (sticky(1): only an entry's owner may rename or remove it).
"""

from __future__ import annotations

import glob
import os
import stat


def _chain(path):
    """PATH's ancestors from ``/``, then PATH, lexically (no link resolved)."""
    path = os.path.abspath(path)
    parts = [p for p in path.split('/') if p]
    return ['/'] + ['/' + '/'.join(parts[:i + 1]) for i in range(len(parts))]


def writers(path, trusted, lstat=os.lstat):
    """``[(entry, why)]`` for each entry on the way to PATH, lexically and after its links are resolved, that a user
    other than the UIDs TRUSTED can change; empty when there is none. A missing entry is not reported: what cannot
    be found is not run."""
    found = []
    seen = set()
    for entry in _chain(path) + _chain(os.path.realpath(path)):
        if entry in seen:
            continue
        seen.add(entry)
        try:
            st = lstat(entry)
        except OSError:
            continue
        why = _why(st, trusted)
        if why:
            found.append((entry, why))
    return found


def _why(st, trusted):
    if st.st_uid not in trusted:
        return 'owned by UID %d' % st.st_uid
    if stat.S_ISLNK(st.st_mode):
        return None
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        if stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX:
            return None
        return '%s (mode %04o)' % ('writable by every user' if st.st_mode & stat.S_IWOTH else 'writable by its group',
                                   stat.S_IMODE(st.st_mode))
    return None


def python_paths(python, pythonpath=()):
    """What a Python at PYTHON imports from, beside the standard library's own location: the interpreter, its venv
    (``pyvenv.cfg`` one level above its ``bin``) with the venv's site-packages directories, and each PYTHONPATH
    entry."""
    paths = [python]
    root = os.path.dirname(os.path.dirname(os.path.abspath(python)))
    if os.path.exists(os.path.join(root, 'pyvenv.cfg')):
        paths.append(os.path.join(root, 'pyvenv.cfg'))
        paths.extend(sorted(glob.glob(os.path.join(root, 'lib*', 'python*', 'site-packages'))))
    paths.extend(pythonpath)
    return paths


def untrusted_python(python, pythonpath, trusted):
    """``[(entry, why)]`` of python_paths that a user not in TRUSTED can change (writers)."""
    found = []
    for path in python_paths(python, pythonpath):
        for entry in writers(path, trusted):
            if entry not in found:
                found.append(entry)
    return found

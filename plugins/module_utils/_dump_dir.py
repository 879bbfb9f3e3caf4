# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The run directory of a server's hidden-state dumps, made by root under a dump root that no other user can steer
(dump_dir).

Root never follows a link that another user could have planted: the dump root and every directory above it must
belong to root or to the server's user and be writable by nobody else (a sticky directory above the root, such as
/tmp, is allowed: nobody but an entry's owner can move it); the run directory is created with mkdir(2) relative to
a descriptor of the checked root, so an entry already at its name (a directory, a link, a FIFO) fails the creation
instead of being used. The directory belongs to the server's user and the dump group, mode 2750: the group (a
training job) reads what the server writes there, and the setgid bit gives the server's files that group.
"""

from __future__ import annotations

import errno
import os
import re
import stat

NAME = re.compile(r'^[A-Za-z0-9_][A-Za-z0-9._-]*$')
MODE = 0o2750
GB = 1e9


class DumpDirError(Exception):
    """The run directory cannot be checked, made or removed; nothing was changed."""


def _describe(st, path):
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(path)
        except OSError:
            target = '?'
        return 'a symbolic link to %s, owned by UID %d' % (target, st.st_uid)
    kind = 'a directory' if stat.S_ISDIR(st.st_mode) else 'a file' if stat.S_ISREG(st.st_mode) else 'a special file'
    return '%s owned by UID %d, mode %04o' % (kind, st.st_uid, stat.S_IMODE(st.st_mode))


def _check_trusted(path, st, uids, last):
    """Raise DumpDirError unless directory PATH (its stat ST) belongs to one of UIDS and no other user can change
    its entries. Above the dump root (LAST false) a sticky directory may be writable by others."""
    if not stat.S_ISDIR(st.st_mode):
        raise DumpDirError('%s is not a directory (is its volume mounted?)' % path)
    writable = st.st_mode & 0o022
    if st.st_uid not in uids or (writable and (last or not st.st_mode & stat.S_ISVTX)):
        raise DumpDirError(
            '%s belongs to UID %d with mode %04o: another user could plant a link or a directory in it. The dump '
            'root and each directory above it must belong to root or to the server\'s user (UID %s) and be writable '
            'by nobody else' % (path, st.st_uid, stat.S_IMODE(st.st_mode), ' or '.join(str(u) for u in sorted(uids))))


def _ancestors(path):
    """PATH and every directory above it, from / down."""
    parts = [p for p in path.split(os.sep) if p]
    return [os.sep] + [os.sep + os.path.join(*parts[:i]) for i in range(1, len(parts) + 1)]


def check_root(root, uid):
    """The real path of the dump root ROOT, after checking it and the directories above it (see _check_trusted).
    A link on the way is accepted only when it belongs to root or the server's user and sits in a checked directory:
    its target is then their choice."""
    if not os.path.isabs(root):
        raise DumpDirError('the dump root %s is not an absolute path' % root)
    uids = {0, uid}
    for path in _ancestors(os.path.normpath(root))[1:]:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            break
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid not in uids:
                raise DumpDirError('%s is %s: only root or the server\'s user (UID %d) may choose where the dump '
                                   'root is' % (path, _describe(st, path), uid))
            parent = os.path.realpath(os.path.dirname(path))
            _check_trusted(parent, os.stat(parent), uids, False)
    real = os.path.realpath(root)
    for path in _ancestors(real):
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise DumpDirError('the dump root %s is not a directory on this host (is its volume mounted?)' % root)
        _check_trusted(path, st, uids, path == real)
    return real


class DumpDir:
    """The run directory NAME under ROOT, for the server's user UID and the dump group GID."""

    def __init__(self, root, name, uid, gid):
        if not NAME.match(name or '') or '..' in name:
            raise DumpDirError("the run directory's name %r is not a plain name (letters, digits, '.', '_', '-'; no "
                               "'/', no '..')" % name)
        if uid < 0 or gid < 0:
            raise DumpDirError('owner and group must be a UID and a GID, got %d and %d' % (uid, gid))
        self.root, self.name, self.uid, self.gid = root, name, uid, gid
        self.path = os.path.join(root, name)

    def _open_root(self):
        """A descriptor of the checked dump root, and its free bytes."""
        real = check_root(self.root, self.uid)
        fd = os.open(real, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            _check_trusted(real, os.fstat(fd), {0, self.uid}, True)
            vfs = os.fstatvfs(fd)
        except BaseException:
            os.close(fd)
            raise
        return fd, vfs.f_bavail * vfs.f_frsize

    def _entry(self, fd):
        try:
            return os.stat(self.name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def _refuse_existing(self, st):
        what = ' (%s)' % _describe(st, self.path) if st is not None else ''
        raise DumpDirError('The run directory %s already exists%s; earlier dumps are never overwritten or deleted, '
                           'and no link is followed. Choose another name' % (self.path, what))

    def create(self, min_free_gb=0.0, check_mode=False):
        """Make the run directory (unless CHECK_MODE), after checking the dump root, its free space and that
        nothing is at the name yet. Returns the result dict."""
        if min_free_gb < 0:
            raise DumpDirError('min_free_gb must not be negative, got %s' % min_free_gb)
        fd, free = self._open_root()
        try:
            if free < min_free_gb * GB:
                raise DumpDirError('%s has %.1f GB free, less than the %g GB asked for (min_free_gb)'
                                   % (self.root, free / GB, min_free_gb))
            st = self._entry(fd)
            if st is not None:
                self._refuse_existing(st)
            if not check_mode:
                try:
                    os.mkdir(self.name, 0o700, dir_fd=fd)
                except FileExistsError:     # planted since the check
                    self._refuse_existing(self._entry(fd) or st)
                made = os.open(self.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                try:
                    os.fchown(made, self.uid, self.gid)
                    os.fchmod(made, MODE)   # after the chown, which may clear the setgid bit
                finally:
                    os.close(made)
        finally:
            os.close(fd)
        return {'changed': True, 'path': self.path, 'owner': self.uid, 'group': self.gid, 'mode': '%04o' % MODE,
                'free_gb': round(free / GB, 1)}

    def open_run(self):
        """A descriptor of the existing run directory, opened relative to the checked dump root with O_NOFOLLOW: a
        link at its name fails, and so does a directory of another user than the server's or root (not the run
        directory that this collection made). The caller closes it."""
        fd, dummy = self._open_root()
        try:
            try:
                run = os.open(self.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as e:
                st = self._entry(fd)
                raise DumpDirError('the run directory %s cannot be opened (%s): %s' % (
                    self.path, _describe(st, self.path) if st is not None else 'nothing is there', e.strerror or e))
        finally:
            os.close(fd)
        st = os.fstat(run)
        if st.st_uid not in (0, self.uid):
            os.close(run)
            raise DumpDirError('the run directory %s is %s, not the server\'s user\'s (UID %d)'
                               % (self.path, _describe(st, self.path), self.uid))
        return run

    def remove_if_empty(self, check_mode=False):
        """Remove the run directory when it is an empty directory (rmdir(2), which follows no link); a run
        directory that holds dumps, or anything else at the name, is left as it is. Returns the result dict."""
        fd, dummy = self._open_root()
        try:
            st = self._entry(fd)
            removed, kept = False, None
            if st is not None and stat.S_ISDIR(st.st_mode):
                sub = os.open(self.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                try:
                    entries = os.listdir(sub)
                finally:
                    os.close(sub)
                if entries:
                    kept = 'it holds %d entries' % len(entries)
                else:
                    removed = True
                    if not check_mode:
                        try:
                            os.rmdir(self.name, dir_fd=fd)
                        except OSError as e:
                            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                                raise
                            removed, kept = False, 'it was written to meanwhile'
            elif st is not None:
                kept = 'it is %s' % _describe(st, self.path)
        finally:
            os.close(fd)
        return {'changed': removed, 'path': self.path, 'removed': removed, 'kept': kept}

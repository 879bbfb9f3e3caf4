# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A run's directory of secret files, made before the running server is stopped.

    written = prepare({'path': '/var/lib/gpuops/sglang/runs/extraction-...', 'group': 1000,
                       'owner': {'uid': 1000, 'gid': 1000}},
                      {'/var/lib/.../secret-args.yaml': 'api-key: ...\\n'}, check_mode=False,
                      environment='HF_TOKEN=...\\n')

The directory is root's and writable by root alone (mode 0750), its group the server's, which passes through it to
its --config files: no one else can rename, replace or link anything in it, so the environment file that root reads
(systemd's EnvironmentFile=, the starting shell, a rollback) stays root's. Each file is written beside its name and
renamed over it, opened with ``O_NOFOLLOW`` and ``O_EXCL``, its owner and mode set on the open file before it has a
name: the argument files (mode 0600) are the server's user's, the environment file (0600) root's, or the server's
user's where ``environment_owner`` says (a container's shell reads it as that user). A directory that is a link, or
not root's, is refused: it is another's to redirect.
"""

from __future__ import annotations

import os
import stat

from ansible_collections.gpuops.host.plugins.module_utils import _record as records

MODE = 0o750
FILE_MODE = 0o600
ENVIRONMENT = 'server.env'


class RunDirError(Exception):
    """The run directory or one of its files could not be made: the message says which and why."""


def directories(entries, check_mode):
    """Each directory of ENTRIES ({path, group}: the state directory, its runs, the log directory) made where it is
    missing (its parents too), root's, mode 0750, of its group where one is given; a link or a directory that is not
    root's is refused (RunDirError). The paths made, or in check mode that would be."""
    made = []
    for entry in entries:
        path = entry['path'].rstrip('/') or '/'
        if not os.path.lexists(path):
            made.append(path)
        if check_mode:
            continue
        parent = os.path.dirname(path)
        if parent and not os.path.isdir(parent):
            os.makedirs(parent, 0o755)
        _directory(path, entry.get('group'))
    return made


def log_file(path, check_mode):
    """The server's log at PATH, made where it is missing (mode 0600: SGLang logs its arguments, API key included) and
    kept as it is otherwise, but for its mode; opened with ``O_NOFOLLOW``, so a link there is refused. Whether it was
    made (in check mode, would be)."""
    missing = not os.path.lexists(path)
    if check_mode:
        return missing
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    except OSError as e:
        raise RunDirError('cannot open the server log %s: %s' % (path, e.strerror))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise RunDirError('the server log %s is not a regular file' % path)
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
    return missing


def _directory(path, group):
    try:
        os.mkdir(path, MODE)
    except FileExistsError:
        pass
    except OSError as e:
        raise RunDirError('cannot create the run directory %s: %s' % (path, e.strerror))
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0:
        raise RunDirError('%s is %s, not a directory of root\'s: refusing to write the run\'s secret files there'
                          % (path, 'a link' if stat.S_ISLNK(st.st_mode) else 'UID %d\'s' % st.st_uid))
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        if group is not None:
            os.fchown(fd, 0, group)
        os.fchmod(fd, MODE)
    finally:
        os.close(fd)


def write(path, content, uid=0, gid=0, mode=FILE_MODE):
    """CONTENT at PATH, of MODE and owned by UID:GID before it has its name; a link or file at PATH is replaced
    (_record.replace_file)."""
    try:
        records.replace_file(path, content, mode, (uid, gid))
    except records.RecordError as e:
        raise RunDirError(str(e))


def files_of(options, arguments, environment=None):
    """Path -> (content, uid, gid) of what the run directory OPTIONS holds: the ARGUMENTS files (path -> content,
    each directly in it) and the environment file of content ENVIRONMENT; RunDirError for an argument file
    elsewhere."""
    path = options['path'].rstrip('/')
    owner = options.get('owner') or {'uid': 0, 'gid': 0}
    out = {}
    for name, content in sorted((arguments or {}).items()):
        if os.path.dirname(name) != path:
            raise RunDirError('the argument file %s is not in the run directory %s: its secrets would go where the '
                              'run directory\'s protection does not reach' % (name, path))
        out[name] = (content, owner['uid'], owner['gid'])
    if environment is not None:
        env_owner = options.get('environment_owner') or {'uid': 0, 'gid': 0}
        out[os.path.join(path, ENVIRONMENT)] = (environment, env_owner['uid'], env_owner['gid'])
    return out


def prepare(options, arguments, check_mode, environment=None):
    """The run directory OPTIONS with its files (files_of); the paths written, or in check mode that would be."""
    found = files_of(options, arguments, environment)
    if check_mode:
        return sorted(found)
    _directory(options['path'].rstrip('/'), options.get('group') or 0)
    for path in sorted(found):
        content, uid, gid = found[path]
        write(path, content, uid, gid)
    return sorted(found)

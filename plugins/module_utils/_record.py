# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The node's record of its server, written once the server passed every check: what a later run compares, stops,
rolls back to and completes the manifest of.

The state directory is root's and writable by root alone (the launch makes it 0750, the server's group passing
through it to its run directory), so a file written beside its name and renamed over it cannot be redirected; each
file is opened with ``O_NOFOLLOW`` all the same, so that a link planted while the directory was another's is replaced,
never followed. What is written, in order:

- the record (``server.json``, 0640): the caller's fields with who the server is (``pid``, its ``start`` time, its
  ``owner``) and when it was ``checked``;
- the extraction run's manifest (``_manifest.running``), where the record names a run directory; a manifest that
  cannot be written does not fail a server that passed its checks: the result says why;
- a line of the host's run history (``runs.jsonl``, 0640);
- the run directories of older runs removed, keeping those named (this run's, and the previous one's for a rollback).
"""

from __future__ import annotations

import datetime
import errno
import json
import os
import shutil

from ansible_collections.gpuops.host.plugins.module_utils import _extraction as extraction
from ansible_collections.gpuops.host.plugins.module_utils import _manifest as manifests

MODE = 0o640


class RecordError(Exception):
    """The record or the history could not be written: the message says which and why."""


def iso(seconds, timespec='seconds'):
    """The wall-clock time SECONDS as ISO 8601 in UTC without an offset (the records' form), to the second or as
    TIMESPEC says."""
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).replace(tzinfo=None).isoformat(
        timespec=timespec)


def replace_file(path, content, mode=MODE, owner=None):
    """CONTENT (text) at PATH, of MODE, root's or OWNER's ((uid, gid), set before the file has its name): written to a
    new file beside it, then renamed over it, so that a link or a file at PATH is replaced, never followed or written
    through."""
    tmp = '%s.%d.tmp' % (path, os.getpid())
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as e:
        raise RecordError('cannot write %s: %s' % (path, e.strerror))
    try:
        with os.fdopen(fd, 'w') as f:
            if owner is not None:
                os.fchown(f.fileno(), owner[0], owner[1])
            os.fchmod(f.fileno(), mode)
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise RecordError('cannot write %s: %s' % (path, e.strerror))


def write_json(path, value):
    """VALUE as indented JSON at PATH (MODE, root's), as replace_file writes it."""
    replace_file(path, json.dumps(value, indent=4, sort_keys=True) + '\n')


def append_line(path, value):
    """VALUE as one line of JSON at the end of PATH (MODE, created if missing; a link there is refused)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, MODE)
    except OSError as e:
        raise RecordError('cannot add to %s: %s' % (path, 'a link is there' if e.errno == errno.ELOOP else e.strerror))
    with os.fdopen(fd, 'a') as f:
        f.write(json.dumps(value, sort_keys=True) + '\n')


def prune(runs_dir, keep):
    """Remove the directories under RUNS_DIR but those whose paths are in KEEP; the paths removed. A link or a file
    there is removed as itself, never followed (shutil.rmtree's fd-based walk)."""
    keep = set(os.path.normpath(k) for k in keep if k)
    removed = []
    try:
        names = sorted(os.listdir(runs_dir))
    except OSError:
        return removed
    for name in names:
        path = os.path.join(runs_dir, name)
        if os.path.normpath(path) in keep:
            continue
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        except OSError:
            continue
        removed.append(path)
    return removed


def commit(options, server, now):
    """Record the server that passed its checks, as OPTIONS say: ``path`` (the record), ``fields`` (what the record
    holds beside SERVER's ``pid``, ``start``, ``owner`` and, where it was started by this call, ``started``), ``dump_patterns`` (what the manifest counts),
    ``history`` and ``entry`` (the run history and its line, given ``pid``, ``seconds_to_ready`` and ``finished``),
    ``runs_dir`` and ``keep`` (older run directories to remove), ``remove`` (files to remove). NOW: the wall clock.
    What was written: ``record``, ``manifest`` (its summary, or None), ``manifest_error``, ``removed``."""
    record = dict(options['fields'])
    # checked to the millisecond: what the run directory holds from before it (SGLang's warm-up, the readiness
    # checks', the probe's dumps) is no work of the run (_extraction.scan's since), however fast the server came up.
    record.update(pid=server['pid'], start=server.get('start'), owner=server.get('user'),
                  checked=iso(now, 'milliseconds'))
    if server.get('started') is not None:
        record['started'] = server['started']
    write_json(options['path'], record)
    out = {'record': record, 'manifest': None, 'manifest_error': None, 'removed': []}
    if record.get('dump_dir'):
        try:
            out['manifest'] = manifests.running(options['path'], record['dump_dir'], now,
                                                options.get('dump_patterns') or extraction.DUMPS)
        except (manifests.ManifestError, OSError) as e:
            out['manifest_error'] = str(e)
    if options.get('history'):
        append_line(options['history'], dict(options.get('entry') or {}, pid=server['pid'],
                                             seconds_to_ready=server.get('seconds_to_ready'), finished=iso(now)))
    if options.get('runs_dir'):
        out['removed'] = prune(options['runs_dir'], options.get('keep') or ())
    for path in options.get('remove') or ():
        try:
            os.unlink(path)
            out['removed'].append(path)
        except OSError:
            pass
    return out

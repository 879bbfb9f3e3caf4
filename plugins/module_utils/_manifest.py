# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The manifest of a hidden-state extraction run: what the run produced and what produced it, in JSON at the top of
its run directory (``gpuops-manifest.json``), for the team that trains on the dumps.

It is written when the server is proven ready (``ended: running``) and completed when the run ends: by the stop that
drains the server (``drained``) or cuts its active run (``cut``), or by the first stop or launch that finds the
recorded server gone while its manifest still says ``running`` (``crashed``). Everything in it comes from root's
record of the server (server.json) and from the run directory's files; the dumps are counted and sized, never read.

Schema 1 - every key is always there, null where it is not known:

``schema``
    1.
``run``, ``host``, ``mode``, ``dump_dir``
    The run marker (the server's GPUOPS_RUN), the node's host name, the launch mode, the run directory.
``rolled_back_from``
    The marker of the failed launch after which this configuration was started again (a rollback), else null.
``model``
    ``path``, ``revision`` (a hub ID's snapshot), ``files`` and ``bytes`` (the model directory's top-level files) and
    ``fingerprint`` (``sha256:`` of _server_config.model_fingerprint: every file's name, size and mtime, and the
    content of its config and index files), or ``missing`` (why it could not be read at the launch).
``sglang``
    The SGLang release that the server's interpreter imported.
``dump_patch``
    ``files`` (the patched files, relative to the SGLang package) and ``digest`` (``sha256:`` of their names and
    content, _server_config.patch_digest; null without a patched file).
``argv``
    The command line, the value of any secret-named flag masked (secrets are in files, not on it).
``gpus``, ``pid``
    The NVML indices of the GPUs the server occupies, its main process.
``started``, ``ready``, ``end``, ``written``
    ISO 8601 times (UTC): the start, the moment it was proven ready (its checks passed), the end as the collection
    saw it (the end of the stop; for ``crashed``, the stop or launch that found it gone), this file's writing.
``ended``
    ``running``, ``drained``, ``cut`` or ``crashed``.
``counts``
    ``dumps``, ``bytes`` and ``gb`` (10^9 bytes) of the run's records: the regular files whose names match
    ``patterns``, written after the server was proven ready, less the readiness checks' and the probe's; ``own``
    (those, and the warm-up's, named apart); ``newest`` (the last record's time); ``recent`` (records written within
    ``recent_seconds`` before the stop - for ``crashed``, before the last write, the crash's moment being unknown -
    which may be partial).

It is written so that nothing the server's user does in the run directory (their own) redirects it: the directory
is opened relative to the checked dump root with O_NOFOLLOW, the file created beside the manifest's name with
O_CREAT | O_EXCL | O_NOFOLLOW, given to root and the dump group (0640) through its descriptor, written, synced,
and renamed over the name within that directory, which replaces whatever is there - a planted link included -
without following it. A manifest is read back only when it is a regular file of root's.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import pwd
import stat

from ansible_collections.gpuops.host.plugins.module_utils import _extraction as extraction
from ansible_collections.gpuops.host.plugins.module_utils._dump_dir import DumpDir, DumpDirError
from ansible_collections.gpuops.host.plugins.module_utils._procs import read_regular
from ansible_collections.gpuops.host.plugins.module_utils._sglang_args import Redactor

SCHEMA = 1
NAME = extraction.MANIFEST
ENDED = ('running', 'drained', 'cut', 'crashed')
# Records written within this many seconds before the stop may be partial.
RECENT_SECONDS = 10.0
MODE = 0o640
_READ_LIMIT = 4 << 20


class ManifestError(Exception):
    """The manifest cannot be written or read where the record says; nothing was written."""


def iso(seconds):
    """Seconds since the epoch as ISO 8601 in UTC, None for None."""
    if seconds is None:
        return None
    return datetime.datetime.fromtimestamp(float(seconds), datetime.timezone.utc).isoformat(timespec='seconds')


def model(fingerprint):
    """The manifest's ``model`` from the record's fingerprint (_server_config.model_fingerprint, _server_info.model_of)."""
    if not isinstance(fingerprint, dict):
        return {'path': None, 'revision': None, 'files': None, 'bytes': None, 'fingerprint': None,
                'missing': 'not recorded'}
    files = fingerprint.get('files') or {}
    digest = None
    if not fingerprint.get('missing'):
        text = json.dumps({'files': files, 'content': fingerprint.get('content') or {}}, sort_keys=True)
        digest = 'sha256:' + hashlib.sha256(text.encode('utf-8')).hexdigest()
    return {'path': fingerprint.get('path'), 'revision': fingerprint.get('revision'), 'files': len(files),
            'bytes': sum(int(f[0]) for f in files.values()), 'fingerprint': digest,
            'missing': fingerprint.get('missing')}


def counts(found, recent_seconds=RECENT_SECONDS, patterns=extraction.DUMPS):
    """The manifest's ``counts`` from _extraction.scan's FOUND."""
    return {'dumps': found['files'], 'bytes': found['bytes'], 'gb': round(found['bytes'] / extraction.GB, 3),
            'own': found['own'], 'newest': iso(found['newest']), 'recent': found['recent'],
            'recent_seconds': recent_seconds, 'patterns': list(patterns)}


def build(record, found, ended, host, now, end=None, recent_seconds=RECENT_SECONDS, patterns=extraction.DUMPS):
    """The manifest (schema 1, see the module's documentation) of the run that RECORD (server.json) names, with the
    counts of FOUND (_extraction.scan of its run directory), ENDED, the node's HOST, NOW (this writing) and END."""
    if ended not in ENDED:
        raise ValueError('ended must be one of %s, got %r' % (', '.join(ENDED), ended))
    identity = record.get('identity') or {}
    patch = identity.get('dump_patch')
    return {
        'schema': SCHEMA,
        'run': record.get('marker'),
        'host': host,
        'mode': record.get('mode'),
        'dump_dir': record.get('dump_dir'),
        'rolled_back_from': record.get('rolled_back_from'),
        'model': model(identity.get('model')),
        'sglang': identity.get('sglang'),
        'dump_patch': {'files': list(patch.get('files') or []), 'digest': patch.get('digest')}
        if isinstance(patch, dict) else None,
        'argv': Redactor().argv([str(a) for a in record.get('argv') or []]),
        'gpus': list(record.get('gpus_serving') or []),
        'pid': record.get('pid'),
        'started': iso(record.get('started')),
        'ready': iso(extraction.epoch(record.get('checked'))),
        'ended': ended,
        'end': iso(end),
        'counts': counts(found, recent_seconds, patterns),
        'written': iso(now),
    }


def owners(record):
    """(UID, GID) of the run directory that RECORD names: the server's user (its identity's ``user``, else the
    record's ``owner``) and the dump group (its identity's ``dumps``), each None where it is not known."""
    identity = record.get('identity') or {}
    uid = None
    for name in (identity.get('user'), record.get('owner')):
        if not name:
            continue
        try:
            uid = pwd.getpwnam(str(name)).pw_uid
            break
        except KeyError:
            continue
    dumps = identity.get('dumps')
    gid = int(dumps[1]) if isinstance(dumps, (list, tuple)) and len(dumps) == 2 and dumps[1] is not None else None
    return uid, gid


def _run_dir(path, uid):
    """An O_NOFOLLOW descriptor of the run directory PATH (DumpDir.open_run: the dump root checked, a directory of
    root's or UID's), or ManifestError."""
    root, name = os.path.split(os.path.normpath(path))
    try:
        return DumpDir(root, name, 0 if uid is None else uid, 0).open_run()
    except DumpDirError as e:
        raise ManifestError(str(e))
    except ValueError as e:
        raise ManifestError(str(e))
    except OSError as e:
        raise ManifestError('the run directory %s: %s' % (path, e.strerror or e))


def write(path, manifest, uid, gid):
    """Write MANIFEST into the run directory PATH (of the server's user UID) as NAME, root's and GID's, mode 0640,
    following no link (see the module's documentation). The manifest's path."""
    data = (json.dumps(manifest, indent=1, sort_keys=True) + '\n').encode('utf-8')
    fd = _run_dir(path, uid)
    try:
        tmp, out = None, None
        for dummy in range(8):
            tmp = '%s%s' % (extraction.MANIFEST_TEMP, os.urandom(6).hex())
            try:
                out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                              dir_fd=fd)
                break
            except FileExistsError:
                continue
        if out is None:
            raise ManifestError('no temporary name was free in %s' % path)
        try:
            try:
                os.fchown(out, os.geteuid(), os.getegid() if gid is None else gid)
                os.fchmod(out, MODE)
                view = memoryview(data)
                while view:
                    view = view[os.write(out, view):]
                os.fsync(out)
            finally:
                os.close(out)
            os.replace(tmp, NAME, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException as e:
            try:
                os.unlink(tmp, dir_fd=fd)
            except OSError:
                pass
            if isinstance(e, OSError):
                raise ManifestError('cannot write the manifest %s: %s' % (os.path.join(path, NAME), e.strerror or e))
            raise
        os.fsync(fd)
    finally:
        os.close(fd)
    return os.path.join(path, NAME)


def read(path, uid):
    """The manifest in the run directory PATH, where it is a regular file of root's (the server's user can plant
    anything there, and root never reads their file as its own: a link, a FIFO or their own file is not read); None
    where there is none."""
    try:
        fd = _run_dir(path, uid)
    except ManifestError:
        return None
    try:
        f = os.open(NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, dir_fd=fd)
        try:
            st = os.fstat(f)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                return None
            data = os.read(f, _READ_LIMIT)
        finally:
            os.close(f)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        found = json.loads(data.decode('utf-8'))
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def recorded(record):
    """Whether RECORD (server.json) names a run that has a manifest: a launch that passed its checks, in a dumping
    mode."""
    return bool(record) and record.get('status') == 'ok' and bool(record.get('dump_dir'))


def describe(record, ended, now, patterns=extraction.DUMPS, recent_since=None, end=None, check_mode=False):
    """Scan the run directory of the run that RECORD names and write its manifest (ENDED; NOW the wall clock; records
    written at or after RECENT_SINCE counted as recent), unless CHECK_MODE. For crashed, the recent records are
    those within RECENT_SECONDS of the last write. A summary for the caller's result: ``path``, ``manifest`` (its
    path, None when not written), ``ended``, ``files``, ``bytes``, ``gb``, ``own``, ``newest``, ``recent``, and
    ``manifest_error`` where it could not be written (ManifestError's message)."""
    path = record['dump_dir']
    since = extraction.epoch(record.get('checked'))
    found = extraction.scan(path, since=since, patterns=patterns, recent_since=recent_since)
    if ended == 'crashed' and found['newest'] is not None:
        found = extraction.scan(path, since=since, patterns=patterns, recent_since=found['newest'] - RECENT_SECONDS)
    summary = dict((k, found[k]) for k in ('path', 'exists', 'files', 'bytes', 'own', 'newest', 'recent'))
    summary.update(gb=round(found['bytes'] / extraction.GB, 3), ended=ended, manifest=None)
    if check_mode:
        return summary
    uid, gid = owners(record)
    manifest = build(record, found, ended, os.uname()[1], now, end=end, patterns=patterns)
    try:
        summary['manifest'] = write(path, manifest, uid, gid)
    except ManifestError as e:
        summary['manifest_error'] = str(e)
    return summary


def load_record(path):
    """The server record at PATH (server.json), where it is a regular file of root's (the module's user's) that holds
    a JSON object; ManifestError otherwise."""
    found = read_regular(path, owner=os.geteuid(), limit=_READ_LIMIT)
    if found is None:
        raise ManifestError('the server record %s is not a readable regular file of UID %d' % (path, os.geteuid()))
    try:
        record = json.loads(found[1].decode('utf-8'))
    except ValueError as e:
        raise ManifestError('the server record %s is not JSON: %s' % (path, e))
    if not isinstance(record, dict):
        raise ManifestError('the server record %s is not a JSON object' % path)
    return record


def running(record_path, path, now, patterns=extraction.DUMPS, check_mode=False):
    """Write the manifest (``ended: running``) of the run that the record at RECORD_PATH names into its run directory
    PATH, once its server was proven ready and recorded; describe's summary, with ``changed``. ManifestError where
    the record names no such run, or the manifest cannot be written."""
    record = load_record(record_path)
    if not recorded(record):
        raise ManifestError('the server record %s names no extraction run that passed its checks (status %s, '
                            'dump_dir %s)' % (record_path, record.get('status'), record.get('dump_dir')))
    if os.path.normpath(str(record['dump_dir'])) != os.path.normpath(path):
        raise ManifestError('the server record %s names the run directory %s, not %s'
                            % (record_path, record['dump_dir'], path))
    summary = describe(record, 'running', now, patterns, check_mode=check_mode)
    if summary.get('manifest_error'):
        raise ManifestError(summary['manifest_error'])
    return dict(summary, changed=True)


def crashed(record, now, patterns=extraction.DUMPS, check_mode=False):
    """Complete the manifest of the run that RECORD names as ``crashed``, where the manifest there (root's) is that
    run's and still says ``running``: the recorded server is gone, and nothing stopped it. describe's summary, or
    None where nothing was to complete."""
    if not recorded(record):
        return None
    found = read(record['dump_dir'], owners(record)[0])
    if not found or found.get('run') != record.get('marker') or found.get('ended') != 'running':
        return None
    return describe(record, 'crashed', now, patterns, end=now, check_mode=check_mode)


def after_stop(runs, record, began, now, running, gone, patterns=extraction.DUMPS, check_mode=False, warn=None):
    """RUNS (_sglang._runs': the extraction runs of the servers that a stop found) once the stop is done, each with
    what it holds now (scanned again: the drain let the last requests dump) and ``ended``: ``cut`` (stopped although
    active) or ``drained``; None where its server RUNNING(pid) still runs (a stop that failed). The run of the
    server that RECORD names gets its manifest completed (``manifest``: its path; ``manifest_error`` and a warning
    where it could not be written). With GONE (the recorded server ran no more when the stop looked, and nothing
    stopped it), its manifest, where it still says ``running``, is completed as ``crashed``, and the run is added to
    RUNS. BEGAN: when the stop began (the wall clock), from RECENT_SECONDS before which records count as recent. In
    CHECK_MODE nothing is written, and ``ended`` says what the stop would make of each run."""
    warn = warn or (lambda msg: None)
    recent_since = began - RECENT_SECONDS
    for run in runs:
        run.update(ended=None, manifest=None)
        if not check_mode and running(run['pid']):
            continue
        ended = 'cut' if run.get('cut') else 'drained'
        if run.get('recorded') and recorded(record) and run['path'] == record['dump_dir']:
            found = describe(record, ended, now, patterns, recent_since=recent_since, end=now, check_mode=check_mode)
        else:
            found = extraction.scan(run['path'], patterns=patterns, recent_since=recent_since)
            found['gb'] = round(found['bytes'] / extraction.GB, 3)
        run.update((k, found[k]) for k in ('files', 'bytes', 'gb', 'own', 'newest', 'recent', 'manifest',
                                           'manifest_error') if k in found)
        run['ended'] = ended
    if gone:
        found = crashed(record, now, patterns, check_mode)
        if found is not None:
            runs.append(dict(found, pid=record.get('pid'), marker=record.get('marker'), recorded=True, active=False,
                             cut=False, age=None))
    for run in runs:
        if run.get('manifest_error'):
            warn('the manifest of the extraction run %s was not written: %s'
                 % (run.get('marker') or run['path'], run['manifest_error']))
    return runs

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What gpuops.host.sglang_server's ``started`` does once its start failed, on plain values and injected
collaborators (_sglang.Deps):

    raise recover(p, deps, failure, before, made, timeline)

In this order: what the supervisor says of a unit or a container whose server failed while it started or loaded
(the unit is stopped then, so that ``Restart=`` starts it no more); the record of the failed launch, from the stop's
first signal on, so that no later run takes it for a good one; the stop of the failed server (forced: its dumps are no
run); the removal of the failed run's secret files (unless a unit written for it names them) and of its run directory
of dumps while that is empty; what the node runs now; with ``rollback``, the previous recorded configuration started
again as it was recorded (``relaunch``), from its own run directory, and checked as a new server is; the report
(_lifecycle.failure_report: ``server_now`` and the message); the line of the host's run history. The result is the
failure's, with ``server_now``, ``rollback``, ``cleanup`` (the failed server's stop) and ``launch`` (the history's
line, which the role reports).
"""

from __future__ import annotations

import os
import random
import shutil
import stat

from ansible_collections.gpuops.host.plugins.module_utils import _record as records
from ansible_collections.gpuops.host.plugins.module_utils import _run_dir as run_dirs
from ansible_collections.gpuops.host.plugins.module_utils import _sglang as sglang
from ansible_collections.gpuops.host.plugins.module_utils import _sglang_procs as sprocs
from ansible_collections.gpuops.host.plugins.module_utils import _supervisor as supervisors
from ansible_collections.gpuops.host.plugins.module_utils._dump_dir import DumpDir, DumpDirError
from ansible_collections.gpuops.host.plugins.module_utils._lifecycle import failure_report
from ansible_collections.gpuops.host.plugins.module_utils._server_config import env_lines

DUMP_VARIABLE = 'SGLANG_HS_DUMP_DIR'


def old_stopped(result):
    """Whether the old server is no longer untouched: the stop signalled it (and then failed), or it was done."""
    if result.get('stop_failed'):
        return bool(result.get('signalled'))
    return result.get('stopped') is not None or bool(result.get('signalled'))


def supervisor_said(p, deps, result, msg, redact):
    """MSG with what the supervisor says of the unit or container whose server failed while it started or loaded,
    and the last lines of its output (secrets masked by REDACT); MSG itself for a process, a server that answered
    ready, or a failure before the start. A unit is stopped then, so that Restart= starts it no more."""
    start = p.get('start') or {}
    if result.get('ready') or result.get('stop_failed') or 'started' not in result:
        return msg
    lines = p.get('log_lines', 50)
    if start.get('kind') == 'systemd':
        name = start['unit']['name']
        state, journal = supervisors.failed_unit(deps.run, name, result['started'], lines)
        parts = [msg, 'The unit %s: %s.' % (name, state)]
        tail = sprocs.log_tail(p.get('log_path'), lines, redact) if 'lines of' not in msg else []
        if tail:
            parts.append('Last %d lines of %s (secrets masked):\n%s' % (lines, p['log_path'], '\n'.join(tail)))
        parts.append('Last lines of its journal:\n%s' % '\n'.join(redact(line) for line in journal))
        return ' '.join(parts)
    if start.get('kind') in ('docker', 'podman'):
        state, output = supervisors.failed_container(deps.run, start['kind'], start['container'], lines)
        return '%s The container %s: %s. Last lines of %s logs (secrets masked):\n%s' % (
            msg, start['container'], redact(state), start['kind'], '\n'.join(redact(line) for line in output))
    return msg


def failed_record(fields, pid, error, before, now):
    """The record of a failed launch (FIELDS: the record it would have written), so that no later run takes it for a
    good one; ``previous`` keeps the last record that passed its checks."""
    keep = ('marker', 'mode', 'url', 'supervisor', 'unit', 'log', 'argv')
    record = dict((k, fields.get(k)) for k in keep)
    record.update(status='failed', pid=pid or 0, error=error, failed=records.iso(now),
                  previous=before if before.get('status') == 'ok' else before.get('previous'))
    return record


def remove_run_dir(path, before):
    """Remove the failed run's directory of secret files: root's own directory (never a link, never another user's),
    and never the recorded run's. True when it was removed."""
    if not path or os.path.normpath(path) == os.path.normpath(before.get('run_dir') or ''):
        return False
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0:
        return False
    shutil.rmtree(path, ignore_errors=True)
    return not os.path.lexists(path)


def _previous_files(record):
    """The previous run's directory, refused where another user could have replaced its files since that run."""
    run_dir = record.get('run_dir')
    env = os.path.join(run_dir, 'server.env') if run_dir else None
    try:
        st = os.lstat(run_dir) if run_dir else None
        env_st = os.lstat(env) if env else None
    except OSError:
        st = env_st = None
    if env_st is None:
        raise sglang.ActionFailed('The previous run %s left no environment file in %s (records of release 0.1 have '
                                  'none); it cannot be started again as it was.'
                                  % (record.get('marker'), run_dir or 'its run directory'))
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) \
            or stat.S_ISLNK(env_st.st_mode):
        raise sglang.ActionFailed(
            'The previous run directory %s is not root\'s alone (owner UID %d, mode %04o%s): its files could have been '
            'replaced since that run, so root does not read them. Earlier releases of gpuops.host left the directory '
            'to the server\'s user; start that configuration with a new launch instead.'
            % (run_dir, st.st_uid, stat.S_IMODE(st.st_mode),
               ', its server.env is a link' if stat.S_ISLNK(env_st.st_mode) else ''))
    if not record.get('relaunch'):
        raise sglang.ActionFailed('The previous run %s was recorded without how it was started (an earlier release of '
                                  'gpuops.host recorded it); it cannot be started again as it was.'
                                  % record.get('marker'))
    return env, env_st


def _fresh_dump_dir(record, env, env_st, owner, random_hex):
    """A fresh run directory for the previous configuration's dumps, beside its own (which holds what it dumped
    before, never written over), owned as that one is; the line of its environment file that names it rewritten."""
    old = record['dump_dir']
    fresh = '%s-rollback-%s' % (old, random_hex())
    try:
        st = os.lstat(old)
        uid, gid = st.st_uid, st.st_gid
    except OSError:
        uid, gid = owner
    try:
        DumpDir(os.path.dirname(fresh), os.path.basename(fresh), uid, gid).create()
    except (DumpDirError, OSError) as e:
        raise sglang.ActionFailed('cannot make a fresh run directory for the previous configuration\'s dumps: %s' % e)
    syntax = 'systemd' if record.get('supervisor') == 'systemd' else 'shell'
    line = env_lines({DUMP_VARIABLE: fresh}, syntax)[0]
    try:
        fd = os.open(env, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd) as f:
            lines = f.read().splitlines()
        lines = [line if old_line.startswith(DUMP_VARIABLE + '=') else old_line for old_line in lines]
        if line not in lines:
            lines.append(line)
        run_dirs.write(env, '\n'.join(lines) + '\n', env_st.st_uid, env_st.st_gid)
    except (run_dirs.RunDirError, OSError) as e:
        try:
            os.rmdir(fresh)
        except OSError:
            pass
        raise sglang.ActionFailed('cannot point the previous configuration\'s environment file %s at its fresh run '
                                  'directory of dumps: %s' % (env, e))
    return fresh


def recorded_checks(checks, path):
    """What the record keeps of the checks CHECKS of a server ready at PATH, so that a rollback checks it again as it
    was checked: every option but the API key (the server's own files hold it)."""
    kept = dict((k, v) for k, v in (checks or {}).items() if k != 'api_key')
    return dict(kept, path=path)


def _checks_of(p, before, fresh):
    """The checks of the previous configuration BEFORE: those its record keeps (recorded_checks), else P's with the
    record's GPUs and /server_info values; its dumps in FRESH. Its key is in its own 0600 files: the checks read it
    there, by the server's PID."""
    kept = before.get('checks')
    if kept:
        checks = dict((k, v) for k, v in kept.items() if k != 'path')
    elif p.get('checks') is not None:
        checks = dict(p['checks'], expected_info=before.get('expected_info'), gpus=before.get('gpus_serving') or [])
    else:
        return None, p['path']
    return dict(checks, dump_dir=fresh, api_key=None), (kept or {}).get('path') or p['path']


def rollback(p, deps, before, timeline, random_hex=None, failed=None):
    """Start the previous recorded configuration BEFORE again as it was recorded (its ``relaunch``, from its own run
    directory), wait until it is ready, check it as it was checked (_checks_of), and record it again, with
    ``rolled_back_from`` the marker FAILED (P's record's, unset). ``ok``, ``marker``, ``pid``, ``gpus_serving`` and
    ``message``."""
    random_hex = random_hex or (lambda: '%08x' % random.getrandbits(32))
    marker = before.get('marker')
    try:
        with timeline.step('rollback', marker=marker) as entry:
            env, env_st = _previous_files(before)
            relaunch = dict(before['relaunch'])
            if relaunch.get('unit'):
                # an earlier release's unit was migrated by the launch that made this record
                relaunch['unit'] = dict(relaunch['unit'], migrate=None)
            dump = p.get('dump_dir') or {}
            fresh = (_fresh_dump_dir(before, env, env_st, (dump.get('owner', 0), dump.get('group', 0)), random_hex)
                     if before.get('dump_dir') else None)
            if relaunch['kind'] in ('docker', 'podman'):
                # its container, exited since the stop, holds the name: `rm` refuses a running one
                deps.run([relaunch['kind'], 'rm', '--', relaunch['container']], None)
            checks, path = _checks_of(p, before, fresh)
            failed = failed or (p['record'].get('fields') or {}).get('marker')
            again = dict(p, stop=None, start=relaunch, url=before['url'], path=path, log_path=before.get('log'),
                         checks=checks,
                         record={'path': p['record']['path'], 'dump_patterns': p['record'].get('dump_patterns'),
                                 'fields': dict(before, rolled_back_from=failed, dump_dir=fresh)})
            ready = sglang.ready(again, deps, timeline)
            entry['pid'] = ready['pid']
    except sglang.ActionFailed as e:
        return {'ok': False, 'marker': marker, 'pid': None, 'gpus_serving': [],
                'message': sglang._redactor(p)(e.msg)}
    manifest_error = (ready.get('record_written') or {}).get('manifest_error')
    return {'ok': True, 'marker': marker, 'pid': ready['pid'], 'gpus_serving': before.get('gpus_serving') or [],
            'message': None, 'dump_dir': fresh, 'manifest_error': manifest_error}


def recover(p, deps, failure, before, made, timeline):
    """After FAILURE (_sglang.ActionFailed) of started with the parameters P: the supervisor's word, the failed
    record, the failed server's stop, the removals, the rollback (P['rollback']), the report and the history's line.
    BEFORE is the record read before the call; MADE what the call made (``dump_made``). The ActionFailed to raise."""
    result = dict(failure.result)
    if result.get('lock_lost'):
        # another run holds the host now: nothing more is done here, not even the record of the failure
        return failure
    redact = sglang._redactor(p)
    stopped_old = old_stopped(result)
    pid = result.get('pid')
    msg = supervisor_said(p, deps, result, redact(failure.msg), redact)
    record = p.get('record')
    if stopped_old and record is not None:
        try:
            records.write_json(record['path'], failed_record(record['fields'], pid, msg, before, deps.wall_clock()))
        except records.RecordError as e:
            deps.warn('the failed launch could not be recorded: %s' % e)
    stop_failure = None
    tail = (result.get('log_tail') or sprocs.log_tail(p.get('log_path'), p.get('log_lines', 50), redact)) if pid else []
    if pid and p.get('stop') is None:
        stop_failure = 'no stop options (stop) were given, so the failed server %d was left as it is' % pid
    elif pid:
        try:
            with timeline.step('stop', of='the failed server') as entry:
                # the launch's own server, which failed: its dumps (warm-up, readiness checks, probe) are no run, and
                # it is not drained (a node of rank 1 or more does not wait for its rank 0 either); the lock stays
                # held: the run's own release, after the failure, is the one that frees it
                cleanup = sglang.stop(sglang.stopping(dict(p, stop=sglang.keeping_lock(
                    dict(p['stop'], force=True, active_window=0, timeout=0)))), deps)
                entry['servers'] = [s['pid'] for s in cleanup.get('servers') or []]
            result['cleanup'] = cleanup
        except sglang.ActionFailed as e:
            stop_failure = redact(e.msg)
            result['cleanup'] = e.result
    if not result.get('unit_written') and remove_run_dir((p.get('run_dir') or {}).get('path'), before):
        result['removed_run_dir'] = p['run_dir']['path']
    dump = p.get('dump_dir')
    if made.get('dump_made') and dump:
        try:
            DumpDir(dump['root'], dump['name'], dump['owner'], dump['group']).remove_if_empty()
        except (DumpDirError, OSError) as e:
            deps.warn('the empty run directory %s/%s could not be removed: %s' % (dump['root'], dump['name'], e))
    left = []
    if stopped_old:
        stop = p.get('stop') or {}
        found = sglang.find(dict(presets=stop.get('presets') or ['sglang'], patterns=stop.get('patterns') or [],
                                 default_url=stop.get('default_url') or 'http://127.0.0.1:30000',
                                 record_path=(record or {}).get('path') or stop.get('record_path')), deps)
        left = [s['pid'] for s in found['servers']]
    back = None
    if p.get('rollback') and stopped_old and before.get('status') == 'ok' and stop_failure is None:
        back = rollback(p, deps, before, timeline) if record is not None else {
            'ok': False, 'marker': before.get('marker'), 'pid': None, 'gpus_serving': [],
            'message': 'no record (record.path) was given, into which the previous configuration would be recorded'}
    report = failure_report(msg, stopped_old, left, marker=(record or {}).get('fields', {}).get('marker'),
                            new_started=bool(pid), record_marker=before.get('marker'), rollback=back,
                            rollback_enabled=bool(p.get('rollback')), stop_failure=stop_failure, tail=tail,
                            tail_lines=p.get('log_lines', 50), log=p.get('log_path'))
    summary = (result.get('stopped') or {}).get('summary') or {}
    launch = dict((record or {}).get('entry') or {}, status='failed', server=report['server'], changed=stopped_old,
                  pid=None, seconds_to_clean=summary.get('seconds_to_clean'), seconds_to_ready=None,
                  gpus_verified=summary.get('gpus_verified'), gpus_serving=(back or {}).get('gpus_serving') or [],
                  message=msg + (' Stopping the failed launch failed too: ' + stop_failure if stop_failure else ''),
                  rollback=back)
    if stopped_old and (record or {}).get('history'):
        try:
            records.append_line(record['history'], dict(launch, finished=records.iso(deps.wall_clock())))
        except records.RecordError as e:
            deps.warn('the failed launch could not be added to the run history: %s' % e)
    result.update(server_now=report['server'], rollback=back, launch=launch, changed=stopped_old)
    return sglang.ActionFailed(report['message'], result)

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpuops.host.sglang_server's states on plain values and injected collaborators (_sglang.Deps).

    result = converge(params, deps)

``started``: this run's directory of secret files (_run_dir), then in one call the stop of what runs, the start of
the new server under its supervisor, the wait until it answers ready, its checks and its record (_sglang.ready);
when that fails, what becomes of the node (_recovery.recover: the failed launch stopped and recorded, the opt-in
rollback, ``server_now`` and the message that says what the node runs now).
``stopped``: the stop of every server of the node (_sglang.stop). ``absent``: that stop, then the removal of what the
collection made to run the recorded server (_start.remove), never a dump. Each result has ``actions`` (_timeline: the steps
taken, in order, with their seconds; in a failure too) and, for ``started``, ``diff``: the recorded server's identity
before, the new record's after. In check mode ``started`` reads what the stop would stop, signals and writes nothing,
and returns the steps it would take (``would``) with ``changed`` true.
"""

from __future__ import annotations

import socket

from ansible_collections.gpuops.host.plugins.module_utils._dump_dir import DumpDir, DumpDirError
from ansible_collections.gpuops.host.plugins.module_utils import _sglang as sglang
from ansible_collections.gpuops.host.plugins.module_utils import _start as starts
from ansible_collections.gpuops.host.plugins.module_utils._timeline import Timeline

STATES = ('started', 'stopped', 'absent')

# _recovery, _run_dir and _server_config are imported by the functions of a start only: a stop (the module's process
# compiles every module it imports from the payload's source, before its SIGTERM) does not load them.


def _record_path(p):
    return (p.get('record') or {}).get('path') or (p.get('stop') or {}).get('record_path') or p.get('record_path')


def recorded(p):
    """The record of the server started last, as P's record path holds it ({} where there is none)."""
    path = _record_path(p)
    return (sglang._record({'record_path': path}) if path else {}) or {}


def diff(p, before=None):
    """Before: the identity of the server recorded now (BEFORE, read where not given); after: that of the record
    this start writes."""
    from ansible_collections.gpuops.host.plugins.module_utils import _server_config as config
    path = _record_path(p)
    before = recorded(p) if before is None else before
    after = ((p.get('record') or {}).get('fields') or {})
    return {'before_header': '%s (recorded)' % path if path else 'recorded', 'after_header': 'started',
            'before': config.render(before.get('identity')) if before.get('status') == 'ok' else '',
            'after': config.render(after.get('identity'))}


def _arguments(p):
    """The argument files of P's command (its secret arguments from P['secret_server_args']), path -> content."""
    command = p.get('command')
    if not command:
        return {}
    full = dict(command, python='python', entry_module='sglang', secret_server_args=p.get('secret_server_args') or {})
    return sglang.argument_files(sglang.merged(full), command.get('config_keys'))


def _would(p, deps, timeline):
    """What started would do, in check mode: the stop's own check-mode reading, then the steps not taken."""
    result = {'changed': True, 'ready': False, 'pid': None}
    if p.get('stop') is not None:
        # the lock guards what is done: a reading takes and checks none
        stopping = sglang.stopping(dict(p, stop=dict(p['stop'], lock=None)))
        with timeline.step('stop', check_mode=True) as entry:
            result['stopped'] = sglang.stop(stopping, deps)
            entry['servers'] = [s['pid'] for s in result['stopped'].get('servers') or []]
    timeline.would('start', kind=p['start']['kind'])
    timeline.would('wait', path=p['path'])
    for name in sglang.check_names(p['checks']) if p.get('checks') is not None else []:
        timeline.would('check', check=name)
    if p.get('record') is not None:
        timeline.would('record', path=p['record']['path'])
    return result


def started(p, deps):
    from ansible_collections.gpuops.host.plugins.module_utils import _recovery as recovery
    from ansible_collections.gpuops.host.plugins.module_utils import _run_dir as run_dirs
    timeline = Timeline(deps.clock)
    before = recorded(p)
    changes = diff(p, before)
    made = {}
    try:
        _prepare(p, deps, timeline, made)
        if p.get('run_dir') is not None:
            with timeline.step('run_dir', path=p['run_dir']['path']) as entry:
                try:
                    entry['files'] = run_dirs.prepare(p['run_dir'], _arguments(p), deps.check_mode,
                                                      p.get('environment_file'))
                except run_dirs.RunDirError as e:
                    raise sglang.ActionFailed('%s; the running server was not touched' % e, {'signalled': False})
        if deps.check_mode:
            result = _would(p, deps, timeline)
        else:
            if p.get('record') is not None and p.get('checks') is not None:
                # so that a rollback to this server checks it as it is checked now
                fields = dict(p['record']['fields'], checks=recovery.recorded_checks(p['checks'], p['path']))
                p = dict(p, record=dict(p['record'], fields=fields))
            lock = (p.get('stop') or {}).get('lock') or {}
            # a lock to release goes once the new server is recorded, not when the stop is done
            result = sglang.ready(dict(p, stop=sglang.keeping_lock(p['stop'])) if lock else p, deps, timeline)
            if lock.get('release') and not lock.get('take'):
                result['lock'] = sglang.release_lock(lock, deps)
    except sglang.ActionFailed as e:
        failure = e if deps.check_mode else recovery.recover(p, deps, e, before, made, timeline)
        failure.result.update(actions=timeline.done, diff=changes, **made)
        raise failure
    result.update(actions=timeline.done, diff=changes, **made)
    return result


def _prepare(p, deps, timeline, made):
    """Before anything is stopped: P's directories, a systemd unit's log file, a container engine's exited containers
    of the collection's earlier runs, then the run directory of the dumps
    (``dump_made`` in MADE once it is made, so that a failure after it can remove it while it is empty)."""
    from ansible_collections.gpuops.host.plugins.module_utils import _run_dir as run_dirs
    if p.get('directories'):
        with timeline.step('directories') as entry:
            try:
                entry['made'] = run_dirs.directories(p['directories'], deps.check_mode)
            except (run_dirs.RunDirError, OSError) as e:
                raise sglang.ActionFailed('cannot make the directories of the server: %s; the running server was not '
                                          'touched' % e, {'signalled': False})
    if (p.get('start') or {}).get('kind') == 'systemd' and p.get('log_path'):
        # the unit appends to it (StandardOutput=append:): root's alone, made before the unit starts
        with timeline.step('log', path=p['log_path']) as entry:
            try:
                entry['made'] = run_dirs.log_file(p['log_path'], deps.check_mode)
            except run_dirs.RunDirError as e:
                raise sglang.ActionFailed('%s; the running server was not touched' % e, {'signalled': False})
    engine = (p.get('start') or {}).get('kind')
    if engine in ('docker', 'podman'):
        # so that this run's container name is free: the running server's container is not exited, and stays after
        # its stop, with its output, until the next launch or a rollback
        with timeline.step('old_containers') as entry:
            try:
                entry['removed'] = starts.remove_containers(engine, deps.run, deps.check_mode)
            except starts.StartFailed as e:
                raise sglang.ActionFailed('%s; the running server was not touched' % e, {'signalled': False})
    dump = p.get('dump_dir')
    if dump:
        with timeline.step('dump_dir', path='%s/%s' % (dump['root'], dump['name'])) as entry:
            try:
                entry['free_gb'] = DumpDir(dump['root'], dump['name'], dump['owner'], dump['group']).create(
                    dump['min_free_gb'], deps.check_mode).get('free_gb')
            except (DumpDirError, OSError) as e:
                raise sglang.ActionFailed('%s; the running server was not touched' % e, {'signalled': False})
        made['dump_made'] = not deps.check_mode


def stopped(p, deps):
    timeline = Timeline(deps.clock)
    try:
        with timeline.step('stop') as entry:
            found = sglang.stop(sglang.stopping(p), deps)
            entry['servers'] = [s['pid'] for s in found.get('servers') or []]
    except sglang.ActionFailed as e:
        e.result['actions'] = timeline.done
        raise
    found['actions'] = timeline.done
    return found


def relaunched(p, deps):
    """The configuration of the record P['relaunch']['record'] started again as it was recorded, checked as it was
    checked and recorded again (_recovery.rollback): what a multi-node server's nodes do together once the group
    failed and each one's server is stopped."""
    from ansible_collections.gpuops.host.plugins.module_utils import _recovery as recovery
    timeline = Timeline(deps.clock)
    back = recovery.rollback(p, deps, p['relaunch']['record'], timeline, failed=p['relaunch'].get('failed'))
    if not back['ok']:
        raise sglang.ActionFailed('starting the configuration of %s again failed: %s' % (back['marker'], back['message']),
                                  dict(back, rollback=back, actions=timeline.done))
    return dict(back, changed=True, rollback=back, actions=timeline.done)


def absent(p, deps):
    """The stop of every server (stopped), then the removal of what the collection made to run the recorded one
    (_start.remove): its unit file, its exited containers, its run directories of secret files and its record."""
    path = _record_path(p)
    before = recorded(p)
    found = stopped(p, deps)
    timeline = Timeline(deps.clock)
    timeline.done[:0] = found['actions']
    try:
        with timeline.step('remove', check_mode=deps.check_mode) as entry:
            removal = starts.remove(path, before, deps.run, deps.check_mode) if path else {'removed': [], 'kept': []}
            entry['removed'] = removal['removed']
    except (starts.StartFailed, OSError) as e:
        raise sglang.ActionFailed('every SGLang server was stopped, but removing what ran the recorded one failed: %s'
                                  % getattr(e, 'msg', e), dict(found, actions=timeline.done, signalled=True))
    said = ['%s what ran the recorded server: %s' % ('Would remove' if deps.check_mode else 'Removed',
                                                     ', '.join(removal['removed']))] if removal['removed'] else []
    said.extend('Left: %s' % kept for kept in removal['kept'])
    found.update(removal, actions=timeline.done, changed=bool(found.get('changed') or removal['removed']),
                 said=list(found.get('said') or []) + said)
    return found


# What of the plan the launch returns (the rest is read again by the next plan).
_PLAN = ('owner', 'supervisor', 'needs_restart', 'reasons', 'changes', 'current', 'record', 'command', 'refusals',
         'unit_files', 'mounts')


def _unchanged(record, reasons):
    """The result of a launch whose configuration already runs."""
    return {'status': 'unchanged', 'server': 'unchanged', 'changed': False, 'mode': record.get('mode'),
            'marker': record.get('marker'), 'pid': record.get('pid'), 'url': record.get('url'),
            'dump_dir': record.get('dump_dir'), 'seconds_to_clean': None, 'seconds_to_ready': None,
            'gpus_verified': 0, 'gpus_serving': record.get('gpus_serving') or [], 'message': None, 'rollback': None,
            'reasons': reasons, 'lock_released': '', 'said': []}


def launch(params, deps, validated):
    """PARAMS['launch'] converged in one call: the plan (_server_info.info) of the request (_launch.Request), then,
    where the server must (re)start, the start (started) with the options the plan's answers give. VALIDATED(kind,
    options) fills in the defaults of the plan's (``plan``) or the start's (``start``) options as their modules' argument
    specs do."""
    # loaded for a launch only: a stop does not pay for them
    from ansible_collections.gpuops.host.plugins.module_utils import _launch as launches
    from ansible_collections.gpuops.host.plugins.module_utils import _server_info as server_info
    r = params['launch']
    request = launches.Request(r, params.get('secret_server_args'), params.get('secret_environment'),
                               marker=launches.marker(r['mode'], r['node_name'] or socket.gethostname()))
    found = server_info.info(validated('plan', request.plan_options()), deps)
    plan = dict((k, found[k]) for k in _PLAN if k in found)
    if not found['needs_restart']:
        return dict(_unchanged(found['record'], found['reasons']), plan=plan, diff=found['diff'])
    p = validated('start', request.start_options(found, params.get('stop') or {}))
    try:
        result = started(p, deps)
    except sglang.ActionFailed as e:
        e.result['plan'] = plan
        if e.result.get('launch') is not None and e.result.get('stopped'):
            # what the summary reads of the stop that came first (the extraction runs it left)
            e.result['launch'] = dict(e.result['launch'], stopped={'summary': e.result['stopped'].get('summary')})
        raise
    # the record's entry is the launch's result, less what the start adds
    launched = p['record']['entry']
    stopped = result.get('stopped') or {}
    summary = stopped.get('summary') or {}
    made = launches.would(launched) if deps.check_mode else dict(
        launched, pid=result.get('pid'), seconds_to_ready=result.get('seconds_to_ready'),
        seconds_to_clean=summary.get('seconds_to_clean'), gpus_verified=summary.get('gpus_verified'),
        lock_released=r['lock_run'] if (result.get('lock') or {}).get('released') else '')
    manifest_error = (result.get('record_written') or {}).get('manifest_error')
    said = list(stopped.get('said') or []) + (
        ['The manifest of the extraction run %s was not written: %s' % (request.marker, manifest_error)]
        if manifest_error else [])
    # before: the running server's identity; after: the desired one (the plan's)
    result.update(made, plan=plan, said=said, changed=True, diff=found['diff'])
    return result


def converge(params, deps, validated=None):
    """PARAMS['state'] reached; a dict of results, or _sglang.ActionFailed. The command's options are checked first.
    With PARAMS['launch'] and state started, see launch."""
    if params['state'] == 'started' and params.get('launch'):
        return launch(params, deps, validated)
    if params.get('command'):
        sglang.refuse_bad_command(dict(params['command'], secret_server_args=params.get('secret_server_args') or {}))
    if params['state'] == 'started' and params.get('relaunch'):
        if params.get('record') is None:
            raise sglang.ActionFailed('relaunch needs record (its path): the configuration started again is recorded')
        return relaunched(params, deps)
    if params['state'] == 'started' and not (params.get('url') and params.get('start')):
        raise sglang.ActionFailed('state=started needs url and start, or relaunch')
    states = {'started': started, 'stopped': stopped, 'absent': absent}
    return states[params['state']](params, deps)

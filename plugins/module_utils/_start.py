# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Starting a server under its supervisor, as the caller rendered it: a process in its own session (the starting
shell prints its PID), a systemd unit (its file written, then restarted), or a container (the engine's ``run``); and
removing what the collection made to run it (remove: its unit file, its exited containers, its run directories and
its record).

What the start returns names what the readiness wait then reads: ``pid`` for a process; ``main_process_of`` for a
unit or a container, whose main process becomes the server once it is there. Every helper program is the caller's
argv, run without a shell of this module's own; the unit file is written beside its name and renamed over it (the
unit directory is root's), never through a link.
"""

from __future__ import annotations

import os

from ansible_collections.gpuops.host.plugins.module_utils import _record as records
from ansible_collections.gpuops.host.plugins.module_utils import _supervisor as supervisors

KINDS = ('process', 'systemd', 'docker', 'podman')


class StartFailed(Exception):
    """The server could not be started: the message says which command failed and what it said."""

    def __init__(self, msg, result=None):
        super().__init__(msg)
        self.msg = msg
        self.result = result or {}


def _said(out, err):
    text = (err or '').strip() or (out or '').strip()
    return text[-2000:] if text else 'no output'


def _must(run, argv, what):
    rc, out, err = run(argv, None)
    if rc != 0:
        raise StartFailed('%s failed (%s, exit %d): %s' % (what, ' '.join(argv), rc, _said(out, err)))
    return out


def _process(options, run):
    out = _must(run, options['argv'], 'The start of the server')
    words = (out or '').split()
    if not words or not words[-1].isdigit():
        raise StartFailed('The start of the server printed no PID: %s' % _said(out, ''))
    return {'pid': int(words[-1])}


def _unit(options, run):
    unit = options['unit']
    old = unit.get('migrate')
    migrated = bool(old and os.path.lexists(old['path']))
    if migrated:
        # An earlier release's unit, whose server the stop has stopped: it goes, so that nothing starts it again.
        _must(run, ['systemctl', 'stop', '--', old['name']], 'Stopping the earlier release\'s unit')
        _must(run, ['systemctl', 'disable', '--', old['name']], 'Disabling the earlier release\'s unit')
        try:
            os.unlink(old['path'])
        except FileNotFoundError:
            pass
    try:
        records.replace_file(unit['path'], unit['content'], 0o644)
    except records.RecordError as e:
        raise StartFailed('The unit file of the server cannot be written: %s' % e)
    written = {'unit_written': True}
    try:
        _must(run, ['systemctl', 'daemon-reload'], 'Reloading systemd')
        if migrated:
            # A removed unit whose last stop ended in a SIGKILL (TimeoutStopSec) stays listed as failed until this;
            # one that stopped cleanly has no such state, and systemctl says so with an error that changes nothing.
            run(['systemctl', 'reset-failed', '--', old['name']], None)
        if unit.get('enable'):
            _must(run, ['systemctl', 'enable', '--', unit['name']], 'Enabling the unit')
        # restart, not start: a unit still active would keep its old main process, never the new server. Type=exec:
        # it returns once the server's binary runs, so MainPID is set at once, unless the unit failed already.
        _must(run, ['systemctl', 'restart', '--', unit['name']], 'Starting the unit')
    except StartFailed as e:
        raise StartFailed(e.msg, written)
    return dict(written, main_process_of={'kind': 'systemd', 'name': unit['name']})


def _container(options, run):
    _must(run, options['argv'], 'The start of the server\'s container')
    return {'main_process_of': {'kind': options['kind'], 'name': options['container']}}


def start(options, run):
    """Start the server as OPTIONS say: ``kind`` (KINDS); ``argv`` (the command that starts a process, printing its
    PID last, or that runs the container ``container``); ``unit`` for systemd (``name``, ``path``, ``content``,
    ``enable``, and ``migrate``: an earlier release's unit, ``name`` and ``path``, to stop, disable and remove first).
    RUN(argv, environ) -> (rc, out, err). A dict with ``pid`` or ``main_process_of`` (and ``unit_written``);
    StartFailed otherwise, its result saying whether a unit file was written."""
    kind = options['kind']
    if kind == 'process':
        return _process(options, run)
    if kind == 'systemd':
        return _unit(options, run)
    return _container(options, run)


# The label of the containers that the collection starts (sglang_launch), by which their removal knows them.
CONTAINER_LABEL = 'gpuops.host.role=sglang_launch'


def _remove_unit(record, run, check_mode, out):
    name = record['unit'] if record['unit'].endswith('.service') else record['unit'] + '.service'
    rc, said, err = run(['systemctl', 'show', '--property=FragmentPath', '--', name], None)
    path = supervisors.parse_show(said).get('FragmentPath') if rc == 0 else None
    if not path:
        return
    if supervisors.unit_kind(path, supervisors.UNIT_HEADER) != 'ours':
        out['kept'].append('the unit file %s of %s, which gpuops.host did not write' % (path, name))
        return
    out['removed'].append(path)
    if check_mode:
        return
    # stopped by the stop already; disabled, so that no boot starts it, then gone
    run(['systemctl', 'disable', '--', name], None)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    _must(run, ['systemctl', 'daemon-reload'], 'Reloading systemd')
    # a unit whose last stop ended in a SIGKILL stays listed as failed until this; otherwise an error that changes nothing
    run(['systemctl', 'reset-failed', '--', name], None)


def remove_containers(engine, run, check_mode):
    """Remove the exited containers that the collection started with ENGINE (its label), so that a run's container
    name is free again; a running one is never listed. In CHECK_MODE, only what would go. ``['ENGINE container ID',
    ...]``; StartFailed where a command failed."""
    said = _must(run, [engine, 'ps', '--all', '--quiet', '--filter', 'label=' + CONTAINER_LABEL, '--filter',
                       'status=exited'], 'Listing the collection\'s exited containers')
    ids = said.split()
    if ids and not check_mode:
        _must(run, [engine, 'rm', '--'] + ids, 'Removing the collection\'s exited containers')
    return ['%s container %s' % (engine, i) for i in ids]


def remove(record_path, record, run, check_mode):
    """Remove what the collection made to run the server of RECORD (the record at RECORD_PATH), once it is stopped:
    its systemd unit file, where gpuops.host wrote it (disabled, removed, systemd reloaded); the exited containers
    that the collection started with the record's engine (its label); the run directories of secret files
    (``runs`` beside the record), the PID file and the record itself. Never a dump, a log or the run history. In
    CHECK_MODE, only what would go. ``removed`` (paths, containers) and ``kept`` (what was left, and why);
    StartFailed where a command failed."""
    out = {'removed': [], 'kept': []}
    supervisor = record.get('supervisor')
    if supervisor == 'systemd' and record.get('unit'):
        _remove_unit(record, run, check_mode, out)
    elif supervisor in ('docker', 'podman'):
        out['removed'].extend(remove_containers(supervisor, run, check_mode))
    state_dir = os.path.dirname(record_path)
    runs = os.path.join(state_dir, 'runs')
    if os.path.isdir(runs) and not os.path.islink(runs):
        out['removed'].extend(records.prune(runs, ()) if not check_mode else
                              [os.path.join(runs, name) for name in sorted(os.listdir(runs))])
        out['removed'].append(runs)
        if not check_mode:
            os.rmdir(runs)
    for path in (os.path.join(state_dir, 'server.pid'), record_path):
        if os.path.lexists(path):
            out['removed'].append(path)
            if not check_mode:
                os.unlink(path)
    return out

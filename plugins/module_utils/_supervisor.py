# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What runs a server: a systemd unit, a container engine, or nobody (a process in a session
of its own), from its cgroup and from the supervisor's own answer; and the stop through it.

Cgroup paths (``/proc/PID/cgroup``, see cgroups(7)):

- cgroup v2 has one line, ``0::PATH``; a cgroup v1 host (or the hybrid layout) has one line per
  hierarchy, and systemd's own is ``N:name=systemd:PATH`` (v1 hybrid) beside the unified
  ``0::PATH``. The ``name=systemd`` path is read first, then ``0::``.
- systemd puts each service in ``/system.slice/NAME.service`` (``systemd.service(5)``, the
  control group hierarchy of ``systemd.special(7)``: slices nest as ``a.slice/a-b.slice``, user
  services under ``/user.slice/user-UID.slice/user@UID.service/...``) and login sessions in
  ``session-N.scope`` (not a supervisor: nothing restarts a scope's processes).
- Docker's ``cgroupfs`` driver puts a container in ``/docker/ID`` (64 hex digits), its
  ``systemd`` driver in ``/system.slice/docker-ID.scope``; Podman in ``libpod-ID.scope``
  (systemd driver) or ``/libpod_parent/libpod-ID`` (cgroupfs driver). Measured on this kind of
  machine: a systemd unit inside a Podman container reads
  ``9:name=systemd:/libpod_parent/libpod-ID/system.slice/team-sglang.service``.
- A process inside the same container as the module shares the container's prefix, which is
  left out: the unit is judged inside it, as ``systemctl`` there sees it.
"""

from __future__ import annotations

import json
import os
import re
import stat

from ansible_collections.gpuops.host.plugins.module_utils import _procs as procs
from ansible_collections.gpuops.host.plugins.module_utils._namespaces import container_of

_SERVICE = re.compile(r'^(?P<unit>[^/]+\.service)$')
_DOCKER_SCOPE = re.compile(r'^docker-(?P<id>[0-9a-f]{64})\.scope$')
_LIBPOD = re.compile(r'^libpod-(?P<id>[0-9a-f]{64})(?:\.scope)?$')
_HEX64 = re.compile(r'^[0-9a-f]{64}$')
# A user's own service manager (systemd.special(7): user@UID.service), and everything it runs below it.
_USER_MANAGER = re.compile(r'^user@[0-9]+\.service$')
_ENGINE_COMMANDS = {'docker': 'docker', 'podman': 'podman'}
# The first line of every unit file that sglang_launch writes (templates/sglang.service.j2).
UNIT_HEADER = '# Managed by gpuops.host'
# Restart policies under which a container comes back by itself, after a reboot or a daemon restart.
COMES_BACK = ('always', 'unless-stopped')


class SupervisorError(Exception):
    """The supervisor could not be asked, or refused the stop; the message says how."""


def _paths(cgroup_text):
    """The systemd hierarchy's path (v1 ``name=systemd``) first, then the unified one (``0::``)."""
    named, unified = [], []
    for line in cgroup_text.splitlines():
        parts = line.split(':', 2)
        if len(parts) != 3:
            continue
        if 'name=systemd' in parts[1].split(','):
            named.append(parts[2])
        elif parts[0] == '0' and parts[1] == '':
            unified.append(parts[2])
    return named + unified


def _container(parts):
    """(engine, id, index) of the innermost container named in the path components PARTS, or None."""
    found = None
    for i, part in enumerate(parts):
        m = _DOCKER_SCOPE.match(part)
        if m:
            found = ('docker', m.group('id'), i)
        elif _LIBPOD.match(part):
            found = ('podman', _LIBPOD.match(part).group('id'), i)
        elif _HEX64.match(part) and i > 0 and parts[i - 1] == 'docker':
            found = ('docker', part, i)
    return found


def classify(cgroup_text, own_cgroup_text=''):
    """What the cgroup says runs a process: ``{'kind': 'systemd', 'unit': NAME, 'path': PATH}``,
    ``{'kind': 'container', 'engine': 'docker'|'podman', 'id': ID, 'path': PATH, 'scope': SCOPE}``, or
    ``{'kind': 'process'}``. PATH is the process's cgroup without the module's own container's prefix, SCOPE the
    container's; a unit's claim also has FULL, the cgroup as /proc shows it (systemd in a container of cgroup v1 names
    its units' ControlGroup with the container's prefix, measured with Podman 4.3 here).

    This is a claim, not an answer: a user's own systemd manager makes cgroups of any name below
    ``user@UID.service`` (``systemd-run --user --unit=nvidia-fabricmanager``, ``--scope --unit=docker-ID``), so
    nothing below a ``user@`` unit is a system unit or a container of the system's engine, and what is above one
    holds only once the supervisor's own answer contains the process (see confirm).

    OWN_CGROUP_TEXT is the module's own: the container the module runs in is not one of its
    servers' supervisors, and its prefix is left out."""
    own = container_of(own_cgroup_text) if own_cgroup_text else None
    for full in _paths(cgroup_text):
        path = full
        if own and (path == own or path.startswith(own + '/')):
            path = path[len(own):] or '/'
        parts = [p for p in path.split('/') if p]
        if any(_USER_MANAGER.match(p) for p in parts):
            return {'kind': 'process'}
        engine = _container(parts)
        if engine:
            return {'kind': 'container', 'engine': engine[0], 'id': engine[1], 'path': path,
                    'scope': '/' + '/'.join(parts[:engine[2] + 1])}
        units = [p for p in parts if _SERVICE.match(p)]
        if units:
            return {'kind': 'systemd', 'unit': units[-1], 'path': path, 'full': full}
    return {'kind': 'process'}


def confirm(claim, supervisor, main_cgroup_text='', own_cgroup_text=''):
    """Why SUPERVISOR (read_unit's or read_container's answer) does not hold the process whose cgroup CLAIM
    (classify's) names it; None when it does. A unit holds it when the process's cgroup is the unit's
    ControlGroup or below it; a container, when the engine's main process of that container (State.Pid, whose
    cgroup is MAIN_CGROUP_TEXT) is in the same container cgroup."""
    if claim['kind'] == 'systemd':
        group = (supervisor.get('control_group') or '').rstrip('/')
        paths = (claim['path'], claim.get('full') or claim['path'])
        if group and any(path == group or path.startswith(group + '/') for path in paths):
            return None
        return ('its cgroup %s is not in the unit %s, whose ControlGroup is %s'
                % (claim['path'], claim['unit'], group or 'empty (the unit runs nothing)'))
    main = supervisor.get('main_pid') or 0
    if main <= 0:
        return 'the container %s runs no process (State.Pid 0)' % claim['id'][:12]
    theirs = classify(main_cgroup_text, own_cgroup_text)
    if theirs.get('id') == claim['id'] and theirs.get('scope') == claim['scope']:
        return None
    return ('its cgroup %s is not the cgroup of the container %s, whose main process %d is in %s'
            % (claim['path'], claim['id'][:12], main, theirs.get('scope') or theirs.get('path') or 'no container'))


# -- the supervisor's own answer --------------------------------------------------------------

UNIT_PROPERTIES = ('Id', 'ControlGroup', 'FragmentPath', 'Restart', 'TimeoutStopUSec', 'UnitFileState', 'ActiveState', 'SubState',
                   'Result', 'MainPID', 'NRestarts', 'KillMode', 'ExecMainCode', 'ExecMainStatus')


def parse_show(text):
    """``systemctl show`` output (``KEY=VALUE`` lines) as a dict."""
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition('=')
        if sep:
            values[key] = value
    return values


# How long a supervisor just started may take to name its main process: systemd's Type=exec sets MainPID once the
# server's binary runs, an engine's State.Pid once `run --detach` has returned.
MAIN_PROCESS_WAIT = 10.0


def main_process(run, kind, name):
    """The main process of the unit NAME (KIND systemd) or of the container NAME (KIND docker or podman):
    ``(pid, ended, state)``, PID 0 while there is none, ENDED when the supervisor says that the server has exited
    (a unit failed, inactive or stopping; a container exited or dead), STATE the supervisor's words for it."""
    if kind == 'systemd':
        rc, out, err = run(['systemctl', 'show', '--property=MainPID,ActiveState,SubState,Result', '--', name], None)
        show = parse_show(out) if rc == 0 else {}
        state = ', '.join('%s=%s' % (k, show[k]) for k in ('ActiveState', 'SubState', 'Result') if k in show)
        return (int(show.get('MainPID') or 0), show.get('ActiveState') in ('failed', 'inactive', 'deactivating'),
                state or (err or out).strip())
    rc, out, err = run([_ENGINE_COMMANDS[kind], 'inspect', '--type', 'container', '--format',
                        '{{.State.Pid}} {{.State.Status}} {{.State.ExitCode}}', '--', name], None)
    fields = out.split() if rc == 0 else []
    if len(fields) < 3:
        return 0, False, (err or out).strip()
    return (int(fields[0]) if fields[0].isdigit() else 0, fields[1] in ('exited', 'dead'),
            'Status=%s, ExitCode=%s' % (fields[1], fields[2]))


def failed_unit(run, name, since, lines):
    """What systemd says of the unit NAME whose server failed while it started or loaded: ``(state, journal)``, its
    state, result and restarts as ``systemctl show`` words them, and the last LINES lines of its journal since SINCE
    (wall-clock seconds). The unit is stopped then, so that its Restart= starts it no more."""
    rc, out, err = run(['systemctl', 'show', '--property=ActiveState,SubState,Result,ExecMainStatus,NRestarts', '--',
                        name], None)
    state = ' '.join(out.split()) if rc == 0 else (err or out).strip()
    rc, out, err = run(['journalctl', '--unit=' + name, '--since=@%d' % int(since), '--lines=%d' % lines,
                        '--no-pager', '--output=short-iso'], None)
    journal = out.splitlines() if rc == 0 else [(err or out).strip()]
    run(['systemctl', 'stop', '--', name], None)
    return state, journal


def failed_container(run, engine, name, lines):
    """What the engine says of the container NAME whose server failed while it started or loaded: ``(state,
    output)``, its status, exit code, error and restarts, and the last LINES lines of its output."""
    command = _ENGINE_COMMANDS[engine]
    rc, out, err = run([command, 'inspect', '--type', 'container', '--', name], None)
    try:
        info = (json.loads(out) or [{}])[0] if rc == 0 else {}
    except ValueError:
        info = {}
    state = info.get('State') or {}
    said = 'Status=%s ExitCode=%s Error=%s RestartCount=%s' % (
        state.get('Status', 'unknown'), state.get('ExitCode', 'unknown'), state.get('Error') or '',
        info.get('RestartCount', 0))
    rc, out, err = run([command, 'logs', '--tail', str(lines), '--', name], None)
    return said, (out or '').splitlines() + (err or '').splitlines()


def _seconds(usec_text):
    """systemd's time span text (``1min 30s``, ``45s``, ``500ms``, ``infinity``) in seconds; None when unknown."""
    if not usec_text or usec_text == 'infinity':
        return None
    units = {'us': 1e-6, 'ms': 1e-3, 's': 1, 'min': 60, 'h': 3600, 'd': 86400}
    total = 0.0
    for number, unit in re.findall(r'([0-9.]+)\s*(us|ms|min|s|h|d)', usec_text):
        total += float(number) * units[unit]
    return total if total else None


def chosen(supervisor, procfs):
    """The supervisor that SUPERVISOR names: for ``auto``, systemd where it is this node's init (PID 1's name, as
    PROCFS reads it), else the process supervisor."""
    if supervisor != 'auto':
        return supervisor
    init = procfs.stat(1)
    return 'systemd' if init is not None and init.comm == 'systemd' else 'process'


def unit_kind(path, mark, old_description=None):
    """What the unit file PATH is to the collection: ``absent``; ``ours`` (a regular file of root's whose first line
    starts with MARK, the header the collection writes); ``old`` (an earlier release's, the unit it migrates: a first
    line that is a comment, and a line that matches the regular expression OLD_DESCRIPTION, where given); ``foreign``
    otherwise - a team's own unit, a link (a masked unit's /dev/null), anything but a regular file of root's - never
    written over, nor removed."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return 'absent'
    except OSError:
        return 'foreign'
    if not stat.S_ISREG(st.st_mode):
        return 'foreign'
    read = procs.read_regular(path, owner=0)
    if read is None:
        return 'foreign'
    text = read[1].decode('utf-8', 'replace')
    first = text.split('\n', 1)[0]
    if first.startswith(mark):
        return 'ours'
    if old_description and first.startswith('# ') and re.search(old_description, text, re.MULTILINE):
        return 'old'
    return 'foreign'


def read_unit(run, unit):
    """The unit's answer: restart policy, stop timeout, enablement, state, main PID and, from its
    unit file, whether sglang_launch wrote it."""
    rc, out, err = run(['systemctl', 'show', '--property=' + ','.join(UNIT_PROPERTIES), '--', unit], None)
    if rc != 0:
        raise SupervisorError('systemctl show %s failed (rc %d): %s' % (unit, rc, (err or out).strip()))
    show = parse_show(out)
    ours = False
    path = show.get('FragmentPath')
    if path:
        try:
            with open(path) as f:
                ours = f.readline().startswith(UNIT_HEADER)
        except (IOError, OSError):
            ours = False
    return {
        'kind': 'systemd', 'unit': unit, 'fragment_path': path or None, 'written_by_gpuops': ours,
        'restart': show.get('Restart'), 'timeout_stop': _seconds(show.get('TimeoutStopUSec')),
        'enabled': show.get('UnitFileState') in ('enabled', 'enabled-runtime', 'alias', 'linked', 'linked-runtime'),
        'unit_file_state': show.get('UnitFileState'), 'active_state': show.get('ActiveState'),
        'main_pid': int(show.get('MainPID') or 0), 'n_restarts': int(show.get('NRestarts') or 0),
        'kill_mode': show.get('KillMode'), 'control_group': show.get('ControlGroup') or None,
    }


def read_container(run, engine, container_id):
    """The engine's answer (``inspect``): name, image, restart policy, network mode and published ports."""
    command = _ENGINE_COMMANDS[engine]
    rc, out, err = run([command, 'inspect', '--type', 'container', '--', container_id], None)
    if rc != 0:
        raise SupervisorError('%s inspect %s failed (rc %d): %s' % (command, container_id[:12], rc, (err or out).strip()))
    try:
        info = json.loads(out)[0]
    except (ValueError, IndexError, TypeError):
        raise SupervisorError('%s inspect %s answered no container' % (command, container_id[:12]))
    host = info.get('HostConfig') or {}
    ports = {}
    for key, bindings in ((info.get('NetworkSettings') or {}).get('Ports') or {}).items():
        port, sep, proto = key.partition('/')
        if proto == 'tcp' and bindings:
            ports[int(port)] = sorted(set(int(b['HostPort']) for b in bindings if b.get('HostPort')))
    return {
        'kind': 'container', 'engine': engine, 'id': container_id, 'name': (info.get('Name') or '').lstrip('/'),
        'image': (info.get('Config') or {}).get('Image') or info.get('ImageName'),
        'restart': ((host.get('RestartPolicy') or {}).get('Name') or 'no'),
        'network': host.get('NetworkMode'), 'ports': ports,
        'comes_back': ((host.get('RestartPolicy') or {}).get('Name') or 'no') in COMES_BACK,
        'main_pid': int((info.get('State') or {}).get('Pid') or 0),
    }


def container_url(supervisor, argv_url):
    """Where a container server answers from the host: its own URL with host networking, else the host port
    published for its port; None when it is not reachable from here."""
    if supervisor.get('network') == 'host':
        return argv_url
    port = int(argv_url.rsplit(':', 1)[1])
    published = supervisor.get('ports', {}).get(port)
    return 'http://127.0.0.1:%d' % published[0] if published else None


def disable_hint(supervisor):
    """The command that keeps SUPERVISOR from starting the server again."""
    if supervisor['kind'] == 'systemd':
        return 'systemctl disable --now %s' % supervisor['unit']
    if supervisor['kind'] == 'container':
        name = supervisor.get('name') or supervisor['id'][:12]
        if supervisor['engine'] == 'podman':
            # `podman update --restart` came with Podman 5.1; Debian 12's Podman 4.3 answers rc 125, "unknown flag:
            # --restart", and no other command of it changes a container's restart policy
            return 'podman update --restart=no %s with Podman 5.1 and later, podman rm %s before it' % (name, name)
        return '%s update --restart=no %s' % (_ENGINE_COMMANDS[supervisor['engine']], name)
    return None


def stop(run, supervisor, timeout, clock):
    """Stop the server through its supervisor (``systemctl stop`` with the unit's own KillMode and TimeoutStopSec;
    ``docker|podman stop --time TIMEOUT``). Returns ``{'seconds', 'forced', 'how'}``: FORCED when the supervisor
    had to escalate to SIGKILL."""
    start = clock()
    if supervisor['kind'] == 'systemd':
        unit = supervisor['unit']
        rc, out, err = run(['systemctl', 'stop', '--', unit], None)
        seconds = clock() - start
        if rc != 0:
            raise SupervisorError('systemctl stop %s failed (rc %d) after %.1f s: %s'
                                  % (unit, rc, seconds, (err or out).strip()))
        rc, out, err = run(['systemctl', 'show', '--property=Result,ExecMainCode,ExecMainStatus,ActiveState', '--',
                            unit], None)
        show = parse_show(out) if rc == 0 else {}
        # systemd.exec(5) $SERVICE_RESULT: "timeout" when the stop timed out and systemd sent SIGKILL;
        # ExecMainCode 2 is CLD_KILLED (waitid(2)), ExecMainStatus the signal.
        forced = show.get('Result') == 'timeout' or (show.get('ExecMainCode') == '2' and show.get('ExecMainStatus') == '9')
        return {'seconds': round(seconds, 2), 'forced': forced, 'how': 'systemctl stop %s' % unit,
                'result': show.get('Result'), 'state': show.get('ActiveState')}
    command = _ENGINE_COMMANDS[supervisor['engine']]
    rc, out, err = run([command, 'stop', '--time', str(int(round(timeout))), '--', supervisor['id']], None)
    seconds = clock() - start
    if rc != 0:
        raise SupervisorError('%s stop %s failed (rc %d) after %.1f s: %s'
                              % (command, supervisor['id'][:12], rc, seconds, (err or out).strip()))
    rc, out, err = run([command, 'inspect', '--type', 'container', '--format', '{{.State.ExitCode}}',
                        supervisor['id']], None)
    code = out.strip() if rc == 0 else ''
    # 128 + 9: the engine's SIGKILL after --time
    return {'seconds': round(seconds, 2), 'forced': code == '137',
            'how': '%s stop --time %d %s' % (command, int(round(timeout)), supervisor.get('name') or supervisor['id'][:12]),
            'result': 'exit code %s' % code if code else None, 'state': 'exited'}

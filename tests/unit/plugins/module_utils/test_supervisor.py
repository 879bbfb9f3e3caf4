# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What runs a server, from /proc/PID/cgroup as each layout writes it, and the supervisor's own answer."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpuops.host.plugins.module_utils import _sglang
from ansible_collections.gpuops.host.plugins.module_utils import _supervisor as sup
from ansible_collections.gpuops.host.plugins.module_utils._procs import ProcFS

ID = 'a' * 64
OTHER = 'b' * 64
# cgroup v1 hybrid, as this kind of machine shows it inside a Podman container running systemd (measured)
V1_IN_PODMAN = ('11:pids:/libpod_parent/libpod-%s/system.slice/team-sglang.service\n'
                '9:name=systemd:/libpod_parent/libpod-%s/system.slice/team-sglang.service\n'
                '0::/libpod_parent/libpod-%s\n') % (ID, ID, ID)
OWN_IN_PODMAN = ('9:name=systemd:/libpod_parent/libpod-%s/user.slice/user-0.slice/session-c1.scope\n'
                 '0::/libpod_parent/libpod-%s\n') % (ID, ID)


@pytest.mark.parametrize('cgroup, own, expected', [
    # cgroup v2 (Ubuntu 22.04 and later): systemd.special(7)'s system.slice
    ('0::/system.slice/team-sglang.service\n', '', {'kind': 'systemd', 'unit': 'team-sglang.service'}),
    ('0::/system.slice/gpu.slice/gpu-serve.slice/sglang@a.service\n', '', {'kind': 'systemd', 'unit': 'sglang@a.service'}),
    # a login session and a user's own manager are no supervisor of a server
    ('0::/user.slice/user-1000.slice/session-4.scope\n', '', {'kind': 'process'}),
    ('0::/user.slice/user-1000.slice/user@1000.service/app.slice/x.scope\n', '', {'kind': 'process'}),
    ('0::/\n', '', {'kind': 'process'}),
    # the systemd unit inside the container that the module itself runs in
    (V1_IN_PODMAN, OWN_IN_PODMAN, {'kind': 'systemd', 'unit': 'team-sglang.service'}),
    # Docker's cgroupfs driver (cgroup v1, as Debian's docker.io 20.10 runs here) and its systemd driver
    ('9:name=systemd:/docker/%s\n0::/docker/%s\n' % (ID, ID), '', {'kind': 'container', 'engine': 'docker', 'id': ID}),
    ('0::/system.slice/docker-%s.scope\n' % ID, '', {'kind': 'container', 'engine': 'docker', 'id': ID}),
    # Podman: systemd driver, cgroupfs driver
    ('0::/machine.slice/libpod-%s.scope/container\n' % ID, '', {'kind': 'container', 'engine': 'podman', 'id': ID}),
    ('9:name=systemd:/libpod_parent/libpod-%s\n' % OTHER, '', {'kind': 'container', 'engine': 'podman', 'id': OTHER}),
    # the whole file of a container's main process, Podman 4.3 (Debian 12) with cgroup_manager=cgroupfs on this
    # kind of machine's cgroup v1 hybrid layout (measured)
    (''.join('%s:/libpod_parent/libpod-%s\n' % (h, ID) for h in (
        '9:name=systemd', '8:pids', '7:blkio', '6:freezer', '5:devices', '4:memory', '3:cpuset', '2:cpuacct', '1:cpu',
        '0:')), '', {'kind': 'container', 'engine': 'podman', 'id': ID}),
    # a container nested in the module's own: the inner one
    ('9:name=systemd:/libpod_parent/libpod-%s/docker/%s\n' % (ID, OTHER), OWN_IN_PODMAN,
     {'kind': 'container', 'engine': 'docker', 'id': OTHER}),
])
def test_classify(cgroup, own, expected):
    got = sup.classify(cgroup, own)
    assert dict((k, v) for k, v in got.items() if k not in ('path', 'scope', 'full')) == expected


@pytest.mark.parametrize('cgroup', [
    # systemd-run --user --unit=nvidia-fabricmanager: a unit of the user's own manager, named as a system one
    '0::/user.slice/user-65534.slice/user@65534.service/app.slice/nvidia-fabricmanager.service\n',
    # systemd-run --user --scope --unit=docker-ID: a scope named as another tenant's container
    '9:name=systemd:/user.slice/user-65534.slice/user@65534.service/app.slice/docker-%s.scope\n' % ID,
    '0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-%s.scope/container\n' % ID,
])
def test_nothing_below_a_user_s_own_manager_is_a_system_unit_or_container(cgroup):
    assert sup.classify(cgroup) == {'kind': 'process'}


def test_the_claim_carries_the_paths_that_the_supervisor_must_confirm():
    assert sup.classify(V1_IN_PODMAN, OWN_IN_PODMAN) == {
        'kind': 'systemd', 'unit': 'team-sglang.service', 'path': '/system.slice/team-sglang.service',
        'full': '/libpod_parent/libpod-%s/system.slice/team-sglang.service' % ID}
    assert sup.classify('9:name=systemd:/docker/%s/sub\n' % ID) == {
        'kind': 'container', 'engine': 'docker', 'id': ID, 'path': '/docker/%s/sub' % ID, 'scope': '/docker/%s' % ID}


@pytest.mark.parametrize('path, group, holds', [
    ('/system.slice/team-sglang.service', '/system.slice/team-sglang.service', True),
    ('/system.slice/team-sglang.service/payload', '/system.slice/team-sglang.service', True),   # Delegate=yes
    # a cgroup of another name that ends the same: not the unit's
    ('/gpuops.slice/team-sglang.service', '/system.slice/team-sglang.service', False),
    ('/system.slice/team-sglang.service-x', '/system.slice/team-sglang.service', False),
    ('/system.slice/team-sglang.service', '', False),     # an inactive unit has no ControlGroup
])
def test_a_unit_holds_a_process_only_in_its_own_control_group(path, group, holds):
    claim = {'kind': 'systemd', 'unit': 'team-sglang.service', 'path': path}
    why = sup.confirm(claim, {'control_group': group})
    assert (why is None) == holds, why


def test_systemd_in_a_container_names_the_control_group_with_the_container_s_prefix():
    """Measured with Podman 4.3 on this kind of machine's cgroup v1 hybrid layout: systemd as PID 1 of the
    container answers ControlGroup=/libpod_parent/libpod-ID/system.slice/gpuops-sglang.service."""
    claim = sup.classify(V1_IN_PODMAN, OWN_IN_PODMAN)
    assert sup.confirm(claim, {'control_group': '/libpod_parent/libpod-%s/system.slice/team-sglang.service' % ID}) is None
    assert sup.confirm(claim, {'control_group': '/system.slice/team-sglang.service'}) is None
    assert sup.confirm(claim, {'control_group': '/libpod_parent/libpod-%s/system.slice/other.service' % ID}) is not None


def test_a_container_holds_a_process_only_in_the_cgroup_of_its_main_process():
    claim = sup.classify('9:name=systemd:/docker/%s\n' % ID)
    assert sup.confirm(claim, {'main_pid': 4242}, '9:name=systemd:/docker/%s\n' % ID) is None
    # the engine's container of that id runs elsewhere than the process that names it
    planted = sup.classify('9:name=systemd:/gpuops.slice/docker-%s.scope\n' % ID)
    why = sup.confirm(planted, {'main_pid': 4242}, '9:name=systemd:/docker/%s\n' % ID)
    assert why == ('its cgroup /gpuops.slice/docker-%s.scope is not the cgroup of the container aaaaaaaaaaaa, whose '
                   'main process 4242 is in /docker/%s' % (ID, ID))
    assert sup.confirm(claim, {'main_pid': 0}, '') == 'the container aaaaaaaaaaaa runs no process (State.Pid 0)'


def test_the_module_s_own_container_is_no_supervisor_of_its_neighbours():
    neighbour = ('9:name=systemd:/libpod_parent/libpod-%s/user.slice/user-0.slice/session-c2.scope\n'
                 '0::/libpod_parent/libpod-%s\n') % (ID, ID)
    assert sup.classify(neighbour, OWN_IN_PODMAN) == {'kind': 'process'}


class Run:
    """The commands a test expects, each with its (rc, stdout, stderr), and those that were run."""

    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def __call__(self, argv, environ):
        self.calls.append(argv)
        for prefix, answer in self.answers:
            if argv[:len(prefix)] == prefix:
                return answer
        raise AssertionError('unexpected command %r' % argv)


def test_read_unit_says_whether_gpuops_wrote_it(tmp_path):
    ours, theirs = tmp_path / 'gpuops-sglang.service', tmp_path / 'sglang.service'
    ours.write_text(sup.UNIT_HEADER + ' (sglang_launch)\n[Service]\n')
    theirs.write_text('[Unit]\nDescription=team server\n')
    for path, written in ((ours, True), (theirs, False)):
        show = ('Id=x.service\nFragmentPath=%s\nRestart=always\nTimeoutStopUSec=1min 30s\nUnitFileState=enabled\n'
                'ActiveState=active\nMainPID=4200\nNRestarts=2\nKillMode=mixed\n' % path)
        unit = sup.read_unit(Run([(['systemctl', 'show'], (0, show, ''))]), 'x.service')
        assert unit['written_by_gpuops'] is written
        assert (unit['restart'], unit['timeout_stop'], unit['enabled'], unit['main_pid'], unit['n_restarts']) == \
            ('always', 90.0, True, 4200, 2)


# `docker inspect` of a container started with --restart unless-stopped -p 30000:30000 (the keys read, as
# Docker 20.10 writes them)
INSPECT = [{'Id': ID, 'Name': '/team-sglang', 'Config': {'Image': 'lmsysorg/sglang:latest'},
            'HostConfig': {'RestartPolicy': {'Name': 'unless-stopped', 'MaximumRetryCount': 0},
                           'NetworkMode': 'default'},
            'NetworkSettings': {'Ports': {'30000/tcp': [{'HostIp': '0.0.0.0', 'HostPort': '31000'},
                                                        {'HostIp': '::', 'HostPort': '31000'}],
                                          '9000/udp': None}}}]


def test_read_container_and_its_url():
    c = sup.read_container(Run([(['docker', 'inspect'], (0, json.dumps(INSPECT), ''))]), 'docker', ID)
    assert (c['name'], c['image'], c['restart'], c['comes_back'], c['ports']) == \
        ('team-sglang', 'lmsysorg/sglang:latest', 'unless-stopped', True, {30000: [31000]})
    assert sup.container_url(c, 'http://127.0.0.1:30000') == 'http://127.0.0.1:31000'
    assert sup.container_url(c, 'http://127.0.0.1:30001') is None
    assert sup.container_url(dict(c, network='host'), 'http://127.0.0.1:30001') == 'http://127.0.0.1:30001'
    assert sup.disable_hint(c) == 'docker update --restart=no team-sglang'


# `podman inspect --type container` of a container started with --network host --restart unless-stopped (the keys
# read, as Podman 4.3 writes them, measured): Name without Docker's leading /, the image with its localhost/ prefix
PODMAN_INSPECT = [{'Id': ID, 'Name': 'team-sglang', 'ImageName': 'localhost/gpuops-empty:latest',
                   'Config': {'Image': 'localhost/gpuops-empty:latest', 'User': ''},
                   'HostConfig': {'RestartPolicy': {'Name': 'unless-stopped', 'MaximumRetryCount': 0},
                                  'NetworkMode': 'host', 'PortBindings': {}},
                   'NetworkSettings': {'Ports': {}}, 'RestartCount': 0}]


def test_read_a_podman_container_and_the_command_that_disables_its_restart_policy():
    c = sup.read_container(Run([(['podman', 'inspect'], (0, json.dumps(PODMAN_INSPECT), ''))]), 'podman', ID)
    assert (c['name'], c['image'], c['restart'], c['comes_back'], c['network'], c['ports']) == \
        ('team-sglang', 'localhost/gpuops-empty:latest', 'unless-stopped', True, 'host', {})
    assert sup.container_url(c, 'http://127.0.0.1:30000') == 'http://127.0.0.1:30000'
    # Podman 4.3 has no `podman update --restart` (rc 125, "Error: unknown flag: --restart"); 5.1 added it
    assert sup.disable_hint(c) == ('podman update --restart=no team-sglang with Podman 5.1 and later, '
                                   'podman rm team-sglang before it')


def test_a_failed_inspect_is_an_error_with_the_engine_s_words():
    with pytest.raises(sup.SupervisorError, match=r'podman inspect aaaaaaaaaaaa failed \(rc 125\): no such container'):
        sup.read_container(Run([(['podman', 'inspect'], (125, '', 'no such container\n'))]), 'podman', ID)


@pytest.mark.parametrize('show, forced', [
    ('Result=success\nExecMainCode=1\nExecMainStatus=0\nActiveState=inactive\n', False),
    # What systemd 252 answered in the molecule systemd scenario (escalation.yml) after TimeoutStopSec=4 ran out, a
    # scheduler hanging in its release: the unit failed, its main process killed by systemd's SIGKILL 4.2 s after
    # systemctl stop.
    ('Result=timeout\nExecMainCode=2\nExecMainStatus=9\nActiveState=failed\n', True),
    ('Result=success\nExecMainCode=2\nExecMainStatus=9\nActiveState=inactive\n', True),
])
def test_stop_through_systemd_reports_an_escalation(show, forced):
    run = Run([(['systemctl', 'stop'], (0, '', '')), (['systemctl', 'show'], (0, show, ''))])
    clock = iter([10.0, 16.5])
    result = sup.stop(run, {'kind': 'systemd', 'unit': 'team-sglang.service'}, 60, lambda: next(clock))
    assert (result['forced'], result['seconds'], result['how']) == (forced, 6.5, 'systemctl stop team-sglang.service')


def test_stop_through_the_engine_waits_its_time_and_reads_the_exit_code():
    run = Run([(['docker', 'stop'], (0, ID + '\n', '')), (['docker', 'inspect'], (0, '137\n', ''))])
    clock = iter([0.0, 60.4])
    result = sup.stop(run, {'kind': 'container', 'engine': 'docker', 'id': ID, 'name': 'team-sglang'}, 60,
                      lambda: next(clock))
    assert run.calls[0] == ['docker', 'stop', '--time', '60', '--', ID]
    assert result['forced'] and result['how'] == 'docker stop --time 60 team-sglang'


def test_a_podman_stop_that_the_server_obeyed_is_not_forced():
    # Podman 4.3: `podman stop --time 5 ID` prints the ID, rc 0; then ExitCode 0 for a main process that exited on
    # SIGTERM by itself, 137 after the SIGKILL of --time (both measured)
    run = Run([(['podman', 'stop'], (0, ID + '\n', '')), (['podman', 'inspect'], (0, '0\n', ''))])
    clock = iter([0.0, 1.6])
    result = sup.stop(run, {'kind': 'container', 'engine': 'podman', 'id': ID, 'name': 'team-sglang'}, 5,
                      lambda: next(clock))
    assert run.calls == [['podman', 'stop', '--time', '5', '--', ID],
                         ['podman', 'inspect', '--type', 'container', '--format', '{{.State.ExitCode}}', ID]]
    assert (result['forced'], result['how'], result['result']) == \
        (False, 'podman stop --time 5 team-sglang', 'exit code 0')


@pytest.mark.parametrize('kind, answer, expected', [
    # systemctl show prints the properties asked for as KEY=VALUE lines, in its own order (systemctl(1))
    ('systemd', 'MainPID=4200\nActiveState=active\nSubState=running\nResult=success\n',
     (4200, False, 'ActiveState=active, SubState=running, Result=success')),
    # Type=exec: the unit whose binary could not be run has failed before it had a main process
    ('systemd', 'MainPID=0\nActiveState=failed\nSubState=failed\nResult=exit-code\n',
     (0, True, 'ActiveState=failed, SubState=failed, Result=exit-code')),
    ('systemd', 'MainPID=0\nActiveState=activating\nSubState=start\nResult=success\n',
     (0, False, 'ActiveState=activating, SubState=start, Result=success')),
    # the --format of main_process itself: State.Pid, State.Status, State.ExitCode
    ('docker', '4200 running 0\n', (4200, False, 'Status=running, ExitCode=0')),
    ('podman', '0 exited 1\n', (0, True, 'Status=exited, ExitCode=1')),
    ('docker', '0 created 0\n', (0, False, 'Status=created, ExitCode=0')),
])
def test_main_process_of_a_unit_or_a_container(kind, answer, expected):
    engine = 'systemctl' if kind == 'systemd' else kind
    run = Run([([engine], (0, answer, ''))])
    assert sup.main_process(run, kind, 'gpuops-sglang.service' if kind == 'systemd' else 'gpuops-sglang-x') == expected


def test_main_process_of_a_container_that_the_engine_does_not_know():
    run = Run([(['docker', 'inspect'], (1, '', 'Error: No such container: gpuops-sglang-x\n'))])
    assert sup.main_process(run, 'docker', 'gpuops-sglang-x') == (0, False, 'Error: No such container: gpuops-sglang-x')


def test_ready_fails_at_once_when_the_unit_failed_before_it_had_a_main_process():
    run = Run([(['systemctl', 'show'], (0, 'MainPID=0\nActiveState=failed\nSubState=failed\nResult=exit-code\n', ''))])
    clock = iter(float(t) for t in range(100))
    deps = _sglang.Deps(ProcFS(), run, clock=lambda: next(clock), sleep=lambda s: None)
    params = {'url': 'http://127.0.0.1:9', 'main_process_of': {'kind': 'systemd',
              'name': 'gpuops-sglang.service'}, 'path': '/health', 'timeout': 600, 'interval': 1,
              'request_timeout': 1, 'log_lines': 10}
    with pytest.raises(_sglang.ActionFailed) as failed:
        _sglang.ready(_sglang.merged(params), deps)
    assert str(failed.value) == ('The unit gpuops-sglang.service has no main process after systemctl start: its server '
                                 'exited, or never started (ActiveState=failed, SubState=failed, Result=exit-code)')
    assert failed.value.result['died'] is True and failed.value.result['pid'] is None
    assert len(run.calls) == 1


# -- what the supervisor says of a server that failed while it started or loaded (failed_unit, failed_container) --

SHOW_FAILED = 'ActiveState=failed\nSubState=failed\nResult=exit-code\nExecMainStatus=1\nNRestarts=3\n'


def test_a_failed_unit_is_described_with_its_journal_since_its_start_and_stopped():
    journal = ('2026-12-05T03:06:31+0000 node1 systemd[1]: Started x.service.\n'
               '2026-12-05T03:06:39+0000 node1 python[4200]: ValueError: bad model\n')
    run = Run([(['systemctl', 'show'], (0, SHOW_FAILED, '')), (['journalctl'], (0, journal, '')),
               (['systemctl', 'stop'], (0, '', ''))])
    state, lines = sup.failed_unit(run, 'x.service', 1796439990.9, 20)
    assert run.calls == [
        ['systemctl', 'show', '--property=ActiveState,SubState,Result,ExecMainStatus,NRestarts', '--', 'x.service'],
        ['journalctl', '--unit=x.service', '--since=@1796439990', '--lines=20', '--no-pager', '--output=short-iso'],
        # Restart= starts it no more
        ['systemctl', 'stop', '--', 'x.service']]
    assert state == 'ActiveState=failed SubState=failed Result=exit-code ExecMainStatus=1 NRestarts=3'
    assert lines == journal.splitlines()


def test_a_failed_unit_that_systemd_cannot_describe_is_stopped_all_the_same():
    run = Run([(['systemctl', 'show'], (1, '', 'Failed to connect to bus: No such file or directory\n')),
               (['journalctl'], (1, 'No journal files were found.\n', '')), (['systemctl', 'stop'], (5, '', 'x'))])
    state, lines = sup.failed_unit(run, 'x.service', 7, 50)
    assert state == 'Failed to connect to bus: No such file or directory'
    assert lines == ['No journal files were found.']
    assert [argv[:2] for argv in run.calls] == [['systemctl', 'show'], ['journalctl', '--unit=x.service'],
                                                ['systemctl', 'stop']]


@pytest.mark.parametrize('engine', ['docker', 'podman'])
def test_a_failed_container_is_described_with_its_last_output(engine):
    inspect = [{'Id': ID, 'State': {'Status': 'exited', 'ExitCode': 1, 'Error': '', 'Pid': 0}, 'RestartCount': 2}]
    run = Run([([engine, 'inspect'], (0, json.dumps(inspect), '')),
               ([engine, 'logs'], (0, 'loading\n', 'ValueError: bad model\n'))])
    state, lines = sup.failed_container(run, engine, 'sglang-run-2', 30)
    assert run.calls == [[engine, 'inspect', '--type', 'container', '--', 'sglang-run-2'],
                         [engine, 'logs', '--tail', '30', '--', 'sglang-run-2']]
    assert state == 'Status=exited ExitCode=1 Error= RestartCount=2'
    # its stdout, then its stderr
    assert lines == ['loading', 'ValueError: bad model']


@pytest.mark.parametrize('inspect', [(1, '', 'Error: No such container: sglang-run-2\n'), (0, 'not json', ''),
                                     (0, '[]', '')])
def test_a_failed_container_that_the_engine_cannot_describe(inspect):
    run = Run([(['docker', 'inspect'], inspect), (['docker', 'logs'], (1, '', 'Error: No such container\n'))])
    state, lines = sup.failed_container(run, 'docker', 'sglang-run-2', 30)
    assert state == 'Status=unknown ExitCode=unknown Error= RestartCount=0'
    assert lines == ['Error: No such container'] and len(run.calls) == 2


def _proc_root(tmp_path, comm):
    """A /proc of one process, PID 1, named COMM."""
    (tmp_path / '1').mkdir()
    (tmp_path / '1' / 'stat').write_text('1 (%s) S 0 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0' % comm)
    return ProcFS(str(tmp_path))


@pytest.mark.parametrize('asked, init, chosen', [
    ('auto', 'systemd', 'systemd'),
    # a container's init, or a node without systemd: the process supervisor
    ('auto', 'tini', 'process'),
    ('auto', None, 'process'),
    # asked by name: PID 1 is not read
    ('process', 'systemd', 'process'),
    ('docker', None, 'docker'),
])
def test_auto_chooses_systemd_where_it_is_the_node_s_init(tmp_path, asked, init, chosen):
    procfs = _proc_root(tmp_path, init) if init else ProcFS(str(tmp_path))
    assert sup.chosen(asked, procfs) == chosen


def test_the_plan_keeps_a_unit_s_settings_only_under_systemd(monkeypatch, tmp_path):
    from ansible_collections.gpuops.host.plugins.module_utils import _server_info as server_info
    monkeypatch.setattr(server_info.sglang, '_record', lambda p: {})
    monkeypatch.setattr(server_info.sglang, 'find', lambda p, deps, record=None: {
        'servers': [], 'elsewhere': [], 'others': [], 'gateways': [], 'recorded': None})
    monkeypatch.setattr(server_info, 'observe', lambda p, deps, checked=None: {})
    unit_files = {'path': str(tmp_path / 'gpuops-sglang.service'), 'old_path': str(tmp_path / 'sglang.service'),
                  'mark': '# Managed by gpuops.host', 'old_description': '^Description=x$'}
    for init, unit in (('systemd', {'name': 'gpuops-sglang'}), ('bash', None)):
        (tmp_path / init).mkdir()
        deps = _sglang.Deps(_proc_root(tmp_path / init, init), None)
        result = server_info.info({'record_path': '/x/server.json', 'unit_files': unit_files,
                                   'config': {'mode': 'serving', 'supervisor': 'auto',
                                              'unit': {'name': 'gpuops-sglang'}}}, deps)
        assert (result['supervisor'], result['current']['supervisor']) == (init if unit else 'process',) * 2
        assert result['current']['unit'] == unit
        assert ('unit_files' in result) == (unit is not None)

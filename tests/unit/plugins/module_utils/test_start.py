# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Starting a server under its supervisor (_start): the commands run, in order, on a recording runner, and the unit
file written into a directory of the test's own."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.gpuops.host.plugins.module_utils import _start as starts


class Runner:
    """Records every argv; answers (rc, out, err) from ANSWERS by the argv's first words, 0 otherwise."""

    def __init__(self, answers=None):
        self.calls = []
        self.answers = answers or {}

    def __call__(self, argv, environ):
        self.calls.append(list(argv))
        for head, answer in self.answers.items():
            if tuple(argv[:len(head)]) == head:
                return answer
        return 0, '', ''


def test_a_process_is_named_by_the_pid_its_start_prints():
    run = Runner({('/bin/sh',): (0, '4200\n', '')})
    assert starts.start({'kind': 'process', 'argv': ['/bin/sh', '-c', 'start']}, run) == {'pid': 4200}
    assert run.calls == [['/bin/sh', '-c', 'start']]


@pytest.mark.parametrize('answer,said', [
    ((0, '', ''), 'printed no PID: no output'),
    ((127, '', '/bin/sh: 1: /usr/bin/setsid: not found\n'), r'failed \(/bin/sh -c start, exit 127\): .*setsid: not found'),
])
def test_a_process_start_that_fails_says_how(answer, said):
    with pytest.raises(starts.StartFailed, match=said):
        starts.start({'kind': 'process', 'argv': ['/bin/sh', '-c', 'start']}, Runner({('/bin/sh',): answer}))


def unit(tmp_path, **more):
    return dict({'name': 'gpuops-sglang.service', 'path': str(tmp_path / 'gpuops-sglang.service'),
                 'content': '# Managed by gpuops.host (sglang_launch)\n[Service]\nExecStart="/bin/true"\n',
                 'enable': False, 'migrate': None}, **more)


def test_a_unit_is_written_then_reloaded_and_restarted(tmp_path):
    run = Runner()
    out = starts.start({'kind': 'systemd', 'unit': unit(tmp_path)}, run)
    assert out == {'unit_written': True, 'main_process_of': {'kind': 'systemd', 'name': 'gpuops-sglang.service'}}
    assert run.calls == [['systemctl', 'daemon-reload'], ['systemctl', 'restart', '--', 'gpuops-sglang.service']]
    path = tmp_path / 'gpuops-sglang.service'
    assert path.read_text().startswith('# Managed by gpuops.host') and stat.S_IMODE(path.stat().st_mode) == 0o644


def test_an_enabled_unit_is_enabled_before_its_restart_and_a_link_at_its_name_is_replaced(tmp_path):
    target = tmp_path / 'elsewhere'
    target.write_text('kept\n')
    os.symlink(str(target), str(tmp_path / 'gpuops-sglang.service'))
    run = Runner()
    starts.start({'kind': 'systemd', 'unit': unit(tmp_path, enable=True)}, run)
    assert run.calls[1:] == [['systemctl', 'enable', '--', 'gpuops-sglang.service'],
                             ['systemctl', 'restart', '--', 'gpuops-sglang.service']]
    assert target.read_text() == 'kept\n' and not os.path.islink(tmp_path / 'gpuops-sglang.service')


def test_an_earlier_release_s_unit_is_stopped_disabled_and_removed_first_where_it_is_there(tmp_path):
    old = tmp_path / 'sglang.service'
    old.write_text('# old\n')
    run = Runner()
    starts.start({'kind': 'systemd', 'unit': unit(tmp_path, migrate={'name': 'sglang.service', 'path': str(old)})}, run)
    assert run.calls[:2] == [['systemctl', 'stop', '--', 'sglang.service'], ['systemctl', 'disable', '--', 'sglang.service']]
    # once its file is gone and systemd reloaded: a stop that its supervisor ended with SIGKILL leaves it failed
    assert run.calls[2:4] == [['systemctl', 'daemon-reload'], ['systemctl', 'reset-failed', '--', 'sglang.service']]
    assert not old.exists()
    again = Runner()
    starts.start({'kind': 'systemd', 'unit': unit(tmp_path, migrate={'name': 'sglang.service', 'path': str(old)})}, again)
    assert again.calls[0] == ['systemctl', 'daemon-reload']


def test_a_migrated_unit_that_stopped_cleanly_has_no_failed_state_to_reset_and_the_start_goes_on(tmp_path):
    old = tmp_path / 'sglang.service'
    old.write_text('# old\n')
    run = Runner({('systemctl', 'reset-failed'): (1, '', 'Failed to reset failed state of unit sglang.service: '
                                                         'Unit sglang.service not loaded.')})
    started = starts.start({'kind': 'systemd', 'unit': unit(tmp_path, migrate={'name': 'sglang.service',
                                                                               'path': str(old)})}, run)
    assert started['unit_written'] and run.calls[-1] == ['systemctl', 'restart', '--', 'gpuops-sglang.service']


def test_a_unit_that_fails_to_start_says_so_and_that_its_file_was_written(tmp_path):
    run = Runner({('systemctl', 'restart'): (1, '', 'Job for gpuops-sglang.service failed because the control process '
                                                    'exited with error code.\n')})
    with pytest.raises(starts.StartFailed) as e:
        starts.start({'kind': 'systemd', 'unit': unit(tmp_path)}, run)
    assert e.value.msg.startswith('Starting the unit failed (systemctl restart -- gpuops-sglang.service, exit 1): Job for')
    assert e.value.result == {'unit_written': True}


def test_a_unit_file_that_cannot_be_written_is_said_before_systemd_is_asked(tmp_path):
    run = Runner()
    with pytest.raises(starts.StartFailed, match='unit file of the server cannot be written') as e:
        starts.start({'kind': 'systemd', 'unit': unit(tmp_path, path=str(tmp_path / 'missing' / 'x.service'))}, run)
    assert run.calls == [] and e.value.result == {}


@pytest.mark.parametrize('engine', ['docker', 'podman'])
def test_a_container_is_named_for_the_wait(engine):
    run = Runner()
    out = starts.start({'kind': engine, 'argv': [engine, 'run', '--detach'], 'container': 'gpuops-sglang-run-1'}, run)
    assert out == {'main_process_of': {'kind': engine, 'name': 'gpuops-sglang-run-1'}}
    with pytest.raises(starts.StartFailed, match=r"container failed \(%s run --detach, exit 125\): Error: no such image"
                       % engine):
        starts.start({'kind': engine, 'argv': [engine, 'run', '--detach'], 'container': 'c'},
                     Runner({(engine, 'run'): (125, '', 'Error: no such image\n')}))


# -- remove: what the collection made to run the recorded server --

def state_dir(tmp_path):
    """A state directory as a launch leaves it: the record, the PID file, two runs' secret files, the run history."""
    state = tmp_path / 'state'
    for run in ('serving-1', 'tuning-2'):
        (state / 'runs' / run).mkdir(parents=True)
        (state / 'runs' / run / 'server.env').write_text('HF_TOKEN=hf_x\n')
    (state / 'server.json').write_text('{}')
    (state / 'server.pid').write_text('4242\n')
    (state / 'runs.jsonl').write_text('{}\n')
    return state


@pytest.mark.parametrize('check_mode', [False, True])
def test_a_unit_of_the_collection_is_disabled_and_removed_with_the_run_directories_and_the_record(tmp_path, check_mode):
    state = state_dir(tmp_path)
    unit_file = tmp_path / 'gpuops-sglang.service'
    unit_file.write_text('# Managed by gpuops.host\n[Service]\n')
    run = Runner({('systemctl', 'show'): (0, 'FragmentPath=%s\n' % unit_file, '')})
    out = starts.remove(str(state / 'server.json'), {'supervisor': 'systemd', 'unit': 'gpuops-sglang'}, run, check_mode)
    assert out['kept'] == []
    assert out['removed'] == [str(unit_file), str(state / 'runs' / 'serving-1'), str(state / 'runs' / 'tuning-2'),
                              str(state / 'runs'), str(state / 'server.pid'), str(state / 'server.json')]
    if check_mode:
        # only what would go: systemd is read, nothing is removed
        assert run.calls == [['systemctl', 'show', '--property=FragmentPath', '--', 'gpuops-sglang.service']]
        assert unit_file.exists() and (state / 'runs' / 'tuning-2' / 'server.env').exists()
        assert (state / 'server.json').exists()
    else:
        assert run.calls[1:] == [['systemctl', 'disable', '--', 'gpuops-sglang.service'], ['systemctl', 'daemon-reload'],
                                 ['systemctl', 'reset-failed', '--', 'gpuops-sglang.service']]
        assert not unit_file.exists() and sorted(os.listdir(str(state))) == ['runs.jsonl']


@pytest.mark.parametrize('planted', ['foreign', 'link', pytest.param('another user\'s', marks=pytest.mark.skipif(
    os.geteuid() != 0, reason='chown needs root'))])
def test_a_unit_file_the_collection_did_not_write_is_kept_and_said(tmp_path, planted):
    state = state_dir(tmp_path)
    unit_file = tmp_path / 'team-sglang.service'
    ours = tmp_path / 'ours.service'
    ours.write_text('# Managed by gpuops.host\n')
    if planted == 'link':
        unit_file.symlink_to(ours)
    elif planted == 'foreign':
        unit_file.write_text('[Service]\nExecStart=/opt/team/serve\n')
    else:
        # the collection's header, in a file that is not root's: as the plan counts it, foreign
        unit_file.write_text('# Managed by gpuops.host\n')
        os.chown(str(unit_file), 4242, 4242)
    run = Runner({('systemctl', 'show'): (0, 'FragmentPath=%s\n' % unit_file, '')})
    out = starts.remove(str(state / 'server.json'), {'supervisor': 'systemd', 'unit': 'team-sglang.service'}, run, False)
    assert out['kept'] == ['the unit file %s of team-sglang.service, which gpuops.host did not write' % unit_file]
    assert os.path.lexists(str(unit_file)) and ours.exists()
    assert [c[:2] for c in run.calls] == [['systemctl', 'show']]
    assert str(state / 'server.json') in out['removed']


@pytest.mark.parametrize('engine', ['docker', 'podman'])
def test_the_collection_s_exited_containers_go_by_their_label(tmp_path, engine):
    state = state_dir(tmp_path)
    run = Runner({(engine, 'ps'): (0, 'a1b2\nc3d4\n', '')})
    out = starts.remove(str(state / 'server.json'), {'supervisor': engine, 'container': 'gpuops-sglang-x'}, run, False)
    assert run.calls == [[engine, 'ps', '--all', '--quiet', '--filter', 'label=gpuops.host.role=sglang_launch',
                          '--filter', 'status=exited'], [engine, 'rm', '--', 'a1b2', 'c3d4']]
    assert out['removed'][:2] == ['%s container a1b2' % engine, '%s container c3d4' % engine]


def test_a_failed_removal_says_which_command_failed(tmp_path):
    state = state_dir(tmp_path)
    run = Runner({('docker', 'rm'): (1, '', 'Error: container a1b2 is running'), ('docker', 'ps'): (0, 'a1b2\n', '')})
    with pytest.raises(starts.StartFailed) as e:
        starts.remove(str(state / 'server.json'), {'supervisor': 'docker'}, run, False)
    assert e.value.msg == ("Removing the collection's exited containers failed (docker rm -- a1b2, exit 1): Error: "
                           "container a1b2 is running")
    # nothing of the state directory went before it
    assert (state / 'server.json').exists()

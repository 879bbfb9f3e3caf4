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

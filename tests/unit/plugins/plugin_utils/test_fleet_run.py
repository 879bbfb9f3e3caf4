# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A run of the gpuops playbooks (plugin_utils/_fleet_run.py): the requests the playbooks make are named, the others
refused before any host is touched."""

from __future__ import annotations

import datetime

import pytest

from ansible_collections.gpuops.host.plugins.plugin_utils._fleet_run import FleetRunError, named

NOW = datetime.datetime(2026, 12, 5, 10, 15, 0, tzinfo=datetime.timezone.utc)
CONTROLLER = {'controller': 'ops-1', 'controller_pid': 4242, 'user': 'alice'}


def run(**variables):
    return named(lambda name, default=None: variables.get(name, default), NOW, 481516, CONTROLLER)


def test_a_restart_is_named_with_its_mode_and_its_owner():
    assert run(gpuops_action='restart', sglang_launch_mode='tuning', ansible_play_name='Restart SGLang in tuning mode',
               ansible_check_mode=False) == {
        'run': '20261205T101500Z-481516', 'action': 'restart', 'mode': 'tuning', 'locked': True,
        'owner': {'playbook': 'Restart SGLang in tuning mode', 'controller': 'ops-1', 'controller_pid': 4242,
                  'user': 'alice'}}


@pytest.mark.parametrize('action', ['stop', 'verify'])
def test_a_stop_or_a_verification_is_its_own_mode(action):
    named_run = run(gpuops_action=action, sglang_launch_mode='tuning')
    assert named_run['mode'] == action and named_run['action'] == action


def test_check_mode_holds_no_lock():
    assert run(gpuops_action='stop', ansible_check_mode=True)['locked'] is False


@pytest.mark.parametrize('variables', [
    {},
    {'gpuops_action': 'restrat', 'sglang_launch_mode': 'tuning'},
    {'gpuops_action': 'restart'},
    {'gpuops_action': 'stop', 'gpuops_mode': 'serving'},
])
def test_a_request_that_no_playbook_makes_is_refused_saying_what_to_run(variables):
    with pytest.raises(FleetRunError) as err:
        run(**variables)
    assert str(err.value) == (
        'Run one of the playbooks restart_extraction, restart_tuning, restart_serving, stop_sglang or verify_gpus: '
        "gpuops_action must be one of restart, stop, verify (got '%s'), a restart needs sglang_launch_mode, and "
        'gpuops_mode is no longer read (set sglang_launch_mode instead).' % variables.get('gpuops_action', ''))

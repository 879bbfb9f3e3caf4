# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import json
import os

from ansible_collections.gpuops.host.plugins.modules import host_lock


def test_take_refuse_and_release(tmp_path, run_module):
    path = str(tmp_path / 'gpuops')
    args = {'path': path, 'run': 'run-a', 'owner': {'playbook': 'Stop SGLang'}}

    outcome, result, dummy = run_module(host_lock, args)
    assert outcome == 'exit' and result['changed'] is True and result['lock'] == path + '/lock.json'
    assert result['owner']['run'] == 'run-a' and result['owner']['playbook'] == 'Stop SGLang'

    outcome, result, dummy = run_module(host_lock, {'path': path, 'run': 'run-b'})
    assert outcome == 'fail' and result['holder']['run'] == 'run-a' and 0 <= result['age'] < 60
    assert result['msg'].startswith('Another gpuops run holds the lock %s/lock.json on this host: run run-a '
                                    '(Stop SGLang), taken ' % path)

    outcome, result, dummy = run_module(host_lock, {'path': path, 'run': 'run-b', 'state': 'absent'})
    assert outcome == 'exit' and result['changed'] is False and result['owner']['run'] == 'run-a'

    outcome, result, dummy = run_module(host_lock, {'path': path, 'run': 'run-a', 'state': 'absent'})
    assert outcome == 'exit' and result['changed'] is True and result['released'] is True
    assert os.listdir(path) == []


def test_check_mode_takes_nothing(tmp_path, run_module):
    path = str(tmp_path / 'gpuops')
    outcome, result, dummy = run_module(host_lock, {'path': path, 'run': 'run-a', '_ansible_check_mode': True})
    assert outcome == 'exit' and result['changed'] is True and not os.path.exists(path)


def test_a_directory_others_can_write_is_moved_aside(tmp_path, run_module):
    path = tmp_path / 'lock'
    path.mkdir()
    os.chmod(str(path), 0o1777)
    outcome, result, dummy = run_module(host_lock, {'path': str(path), 'run': 'run-a'})
    assert outcome == 'exit' and result['moved_aside'].startswith(str(path) + '.untrusted-')
    outcome, result, dummy = run_module(host_lock, {'path': result['moved_aside'], 'run': 'run-a', 'state': 'absent'})
    assert outcome == 'fail' and 'with mode 1777; it must belong to UID' in result['msg']


def test_a_stale_lock_is_taken_over(tmp_path, run_module):
    path = tmp_path / 'gpuops'
    path.mkdir(mode=0o700)
    (path / 'lock.json').write_text(json.dumps({'run': 'dead', 'taken': 0}))
    outcome, result, dummy = run_module(host_lock, {'path': str(path), 'run': 'run-a', 'max_age': 60})
    assert outcome == 'exit' and result['taken_over']['run'] == 'dead' and result['owner']['run'] == 'run-a'


def test_held_passes_for_the_holder_and_fails_naming_another(tmp_path, run_module):
    path = tmp_path / 'gpuops'
    path.mkdir(mode=0o700)
    run_module(host_lock, {'path': str(path), 'run': 'run-a'})
    outcome, result, dummy = run_module(host_lock, {'path': str(path), 'run': 'run-a', 'state': 'held'})
    assert outcome == 'exit' and result['changed'] is False and result['owner']['run'] == 'run-a'

    (path / 'lock.json').write_text(json.dumps({'run': 'run-b', 'controller': 'ops-2', 'taken': 0}))
    outcome, result, dummy = run_module(host_lock, {'path': str(path), 'run': 'run-a', 'state': 'held'})
    assert outcome == 'fail' and result['holder']['run'] == 'run-b'
    assert result['msg'].startswith('This run (run-a) no longer holds the lock %s on this host: it is now held by '
                                    'run run-b from ops-2' % (path / 'lock.json'))

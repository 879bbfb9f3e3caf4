# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The lookup gpuops.host.fleet_run with ansible-core's own templar: the variables as the task sees them, the
controller's PID as ansible-playbook's (the parent of the worker that runs a task), and a refusal as a lookup error."""

from __future__ import annotations

import multiprocessing
import os
import re
import socket

import pytest

from ansible.errors import AnsibleLookupError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.gpuops.host.plugins.lookup.fleet_run import LookupModule


def run(variables, terms=()):
    loader = DataLoader()
    return LookupModule(loader=loader, templar=Templar(loader=loader, variables=variables)).run(list(terms), variables)


def test_the_run_is_named_from_the_variables_as_the_task_sees_them(monkeypatch):
    monkeypatch.setenv('USER', 'alice')
    variables = {'mode': 'tuning', 'sglang_launch_mode': trust_as_template('{{ mode }}'), 'gpuops_action': 'restart',
                 'ansible_play_name': 'Restart SGLang in tuning mode', 'ansible_check_mode': False}
    [named] = run(variables)
    assert re.fullmatch(r'\d{8}T\d{6}Z-\d{1,6}', named['run']), named
    assert named['mode'] == 'tuning' and named['locked'] is True
    assert named['owner'] == {'playbook': 'Restart SGLang in tuning mode', 'controller': socket.gethostname(),
                              'controller_pid': os.getpid(), 'user': 'alice'}


def _in_worker(queue):
    queue.put(run({'gpuops_action': 'stop'})[0]['owner']['controller_pid'])


def test_in_a_forked_worker_the_controller_is_its_parent():
    # ansible-playbook forks a worker (multiprocessing, fork) for each task: the lookup names ansible-playbook
    context = multiprocessing.get_context('fork')
    queue = context.Queue()
    worker = context.Process(target=_in_worker, args=(queue,))
    worker.start()
    pid = queue.get(timeout=30)
    worker.join(30)
    assert pid == os.getpid() != worker.pid


def test_a_refused_request_fails_the_lookup():
    with pytest.raises(AnsibleLookupError, match=r"gpuops_action must be one of restart, stop, verify \(got 'reboot'\)"):
        run({'gpuops_action': 'reboot'})


def test_terms_are_refused():
    with pytest.raises(AnsibleLookupError, match='takes no terms, got stop'):
        run({'gpuops_action': 'stop'}, ['stop'])

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
name: fleet_run
short_description: Check and name a run of the gpuops playbooks
version_added: 0.3.0
description:
  - Reads what the calling task sees of C(gpuops_action) (V(restart), V(stop) or V(verify), which each gpuops playbook
    sets), C(sglang_launch_mode) (a restart's mode), C(ansible_check_mode) and C(ansible_play_name), and returns the run -
    its name, what it does, whether it may hold the host lock, and its owner as M(gpuops.host.host_lock) records it.
  - Fails, saying which playbooks to run, for an action that no playbook sets, a restart without a mode, or a request
    that still sets C(gpuops_mode), which is no longer read.
  - The play of C(playbooks/fleet_run.yml) sets C(fleet_run_result) from it, once per host.
options: {}
"""

EXAMPLES = r"""
- name: Name this run
  ansible.builtin.set_fact:
    fleet_run_result: "{{ lookup('gpuops.host.fleet_run') }}"
  vars:
    gpuops_action: stop
"""

RETURN = r"""
_raw:
  description: One dict, the run.
  type: list
  elements: dict
  contains:
    run:
      description: The run's name, the UTC time and a random number; the host lock holds it.
      type: str
      sample: 20261205T101500Z-481516
    action:
      description: V(restart), V(stop) or V(verify).
      type: str
    mode:
      description: A restart's mode (C(sglang_launch_mode)); otherwise the action.
      type: str
    locked:
      description: Whether the run may hold the host lock, which it then releases at its end; false in check mode.
      type: bool
    owner:
      description:
        - The owner that the host lock records and quotes to a run that finds it held - C(playbook) (the play's name),
          C(controller) (the controller's host name), C(controller_pid) (the PID of ansible-playbook) and C(user)
          (C(USER) of its environment).
      type: dict
      sample: {playbook: Stop SGLang, controller: ops-1, controller_pid: 4242, user: alice}
"""

import datetime
import multiprocessing
import os
import random
import socket

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible_collections.gpuops.host.plugins.plugin_utils._fleet_run import FleetRunError, named
from ansible_collections.gpuops.host.plugins.plugin_utils._variables import reader


def _controller():
    # A task's lookup runs in the worker that ansible-playbook forked for it: its parent is ansible-playbook.
    parent = multiprocessing.parent_process()
    return {'controller': socket.gethostname(), 'controller_pid': parent.pid if parent else os.getpid(),
            'user': os.environ.get('USER', '')}


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        if terms:
            raise AnsibleLookupError('gpuops.host.fleet_run takes no terms, got %s' % ', '.join(map(str, terms)))
        get = reader(self._templar, variables or {})
        try:
            return [named(get, datetime.datetime.now(datetime.timezone.utc), random.randrange(1000000), _controller())]
        except FleetRunError as exc:
            raise AnsibleLookupError(str(exc)) from exc

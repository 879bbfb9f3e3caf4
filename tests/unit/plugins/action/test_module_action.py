# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The action of the gpuops.host modules (plugin_utils/_action.py): every module has it, and it freezes the worker's
objects before ansible.builtin.normal assembles and runs the module."""

from __future__ import annotations

import gc
import importlib
import os

import pytest

from ansible.plugins.action.normal import ActionModule as NormalAction

from ansible_collections.gpuops.host.plugins.plugin_utils._action import ModuleAction

MODULES = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..', '..', 'plugins', 'modules')


@pytest.mark.parametrize('name', sorted(n[:-3] for n in os.listdir(MODULES) if n.endswith('.py') and n != '__init__.py'))
def test_every_module_runs_through_the_action(name):
    action = importlib.import_module('ansible_collections.gpuops.host.plugins.action.' + name).ActionModule
    assert issubclass(action, ModuleAction)


def test_the_workers_objects_are_frozen_before_the_module_runs(monkeypatch):
    frozen_then = []

    def normal_run(self, tmp=None, task_vars=None):
        frozen_then.append(gc.get_freeze_count())
        return {'changed': False, 'task_vars': task_vars}

    monkeypatch.setattr(NormalAction, 'run', normal_run)
    gc.unfreeze()
    try:
        result = ModuleAction(None, None, None, None, None).run(task_vars={'x': 1})
    finally:
        gc.unfreeze()
    assert result == {'changed': False, 'task_vars': {'x': 1}}
    assert frozen_then and frozen_then[0] > 0

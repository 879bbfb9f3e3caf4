# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The lookup gpuops.host.role_options with ansible-core's own templar: each variable it reads is templated as the
task sees it, an unset one is left out, and an unknown call is refused by name."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleLookupError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.gpuops.host.plugins.lookup.role_options import LookupModule


def run(terms, variables):
    loader = DataLoader()
    return LookupModule(loader=loader, templar=Templar(loader=loader, variables=variables)).run(terms, variables)


def test_variables_are_templated_as_the_task_sees_them():
    # as a role's defaults or the inventory give it: a template that the play trusts
    variables = {'minutes': 2, 'gpu_clean_verify_timeout': trust_as_template('{{ minutes * 60 }}'),
                 'gpu_clean_gpus': [0, 1]}
    assert run(['gpu_clean_verify'], variables) == [{'timeout': 120, 'gpus': [0, 1]}]


def test_an_unknown_call_is_refused_by_name():
    with pytest.raises(AnsibleLookupError, match='knows the calls sglang_launch, sglang_stop, gpu_clean_verify, not gpu_reap'):
        run(['gpu_reap'], {})


def test_a_variable_of_the_wrong_kind_fails_the_lookup_naming_it():
    variables = {'sglang_launch_modes': ['tuning'], 'sglang_launch_mode': 'tuning'}
    with pytest.raises(AnsibleLookupError, match='sglang_launch_modes must be a dict, got list'):
        run(['sglang_launch'], variables)


def test_each_variable_is_templated_once_per_lookup(monkeypatch):
    variables = {'sglang_stop_api_key': trust_as_template('{{ "sk-" ~ "stop" }}'), 'sglang_stop_state_dir': '/s'}
    loader = DataLoader()
    templar = Templar(loader=loader, variables=variables)
    seen = []
    template = templar.template
    monkeypatch.setattr(templar, 'template', lambda value, **kw: seen.append(value) or template(value, **kw))
    stop = LookupModule(loader=loader, templar=templar).run(['sglang_stop'], variables)[0]
    assert stop['api_key'] == 'sk-stop' and stop['record_path'] == '/s/server.json'
    # stop_options reads sglang_stop_api_key twice: whether it is set, then its value
    assert seen.count(variables['sglang_stop_api_key']) == 1

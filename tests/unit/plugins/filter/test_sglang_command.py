# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The sglang_command filter: the server's command line rendered on the controller - flags by SGLang's own names,
secret arguments never on it, the argument files it names (which it never writes), and what it refuses."""

from __future__ import annotations

import json
import os

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.host.plugins.filter.sglang_command import FilterModule, sglang_command

PYTHON = '/opt/sglang/bin/python'


def test_the_command_line_has_a_flag_per_argument_by_sglangs_own_names():
    command = {'python': PYTHON, 'environment': {'CUDA_VISIBLE_DEVICES': '4,5,6,7', 'SPT_NOENV': '1'},
               'server_args': {'model_path': '/models/qwen', 'tp_size': 4, 'enable_metrics': True,
                               'disable_radix_cache': False, 'chunked_prefill_size': None,
                               'cuda_graph_bs': [1, 8, 16]}}
    assert sglang_command(command) == {
        'argv': [PYTHON, '-m', 'sglang.launch_server', '--cuda-graph-bs', '1', '8', '16', '--enable-metrics',
                 '--model-path', '/models/qwen', '--tp-size', '4'],
        'server_argv': ['--cuda-graph-bs', '1', '8', '16', '--enable-metrics', '--model-path', '/models/qwen',
                        '--tp-size', '4'],
        'expected_gpus': [4, 5, 6, 7], 'secret_args': [], 'files': []}
    other = sglang_command(dict(command, entry_module='sglang.cli.main'))
    assert other['argv'][:3] == [PYTHON, '-m', 'sglang.cli.main']
    assert FilterModule().filters()['sglang_command'] is sglang_command


def test_secret_arguments_go_into_the_secrets_file_never_onto_the_command_line(tmp_path):
    secrets = str(tmp_path / 'runs' / 'r1' / 'secret-args.yaml')
    out = sglang_command({'python': PYTHON, 'secrets_path': secrets, 'secret_args': ['served_model_name'],
                          'server_args': {'model_path': '/m', 'api_key': 'k-123456',
                                          'served_model_name': 'private-name'}})
    assert out['argv'] == [PYTHON, '-m', 'sglang.launch_server', '--model-path', '/m', '--config', secrets]
    assert out['secret_args'] == ['api_key', 'served_model_name'] and out['files'] == [secrets]
    assert 'k-123456' not in json.dumps(out) and 'private-name' not in json.dumps(out)
    # pure: the file is named, never written
    assert not os.path.exists(os.path.dirname(secrets))


def test_secret_arguments_without_a_secrets_file_are_left_to_the_caller():
    out = sglang_command({'python': PYTHON, 'server_args': {'model_path': '/m', 'admin_api_key': 'k-123456'}})
    assert out['argv'] == [PYTHON, '-m', 'sglang.launch_server', '--model-path', '/m']
    assert out['secret_args'] == ['admin_api_key'] and out['files'] == [] and 'k-123456' not in json.dumps(out)


def test_a_config_file_holds_every_argument_and_the_command_line_none(tmp_path):
    config = str(tmp_path / 'server-args.yaml')
    out = sglang_command({'python': PYTHON, 'config_file': True, 'config_path': config,
                          'server_args': {'model_path': '/m', 'tp_size': 2, 'api_key': 'k-123456'}})
    assert out['argv'] == [PYTHON, '-m', 'sglang.launch_server', '--config', config]
    assert out['server_argv'] == ['--config', config] and out['files'] == [config] and out['expected_gpus'] == [0, 1]
    assert 'k-123456' not in json.dumps(out) and not os.path.exists(config)


@pytest.mark.parametrize('command, message', [
    ({'python': PYTHON, 'config_file': True, 'server_args': {'model_path': '/m'}},
     'config_file is true but config_path is not set'),
    ({'python': PYTHON, 'secrets_path': '/r/secrets.txt', 'server_args': {'api_key': 'k-123456'}},
     '/r/secrets.txt: SGLang reads a --config file only when its name ends in .yaml or .yml'),
    ({'server_args': {'model_path': '/m'}}, 'takes a dict with at least python and server_args'),
    ('--model-path /m', 'takes a dict with at least python and server_args'),
])
def test_what_cannot_be_rendered_is_refused(command, message):
    with pytest.raises(AnsibleFilterError) as e:
        sglang_command(command)
    assert message in str(e.value) and 'k-123456' not in str(e.value)


@pytest.mark.parametrize('name', ['model_path\nadmin_api_key', 'tp-size', 'Tp_size', '_x', 'x: 1', 'x\n'])
def test_a_server_argument_name_that_is_not_plain_is_refused(name):
    """A name that is no SGLang argument name would render a flag SGLang never defined, break a --config file's line,
    or (with a secret word in it) silently drop the argument: refused, as the modules refuse it."""
    for args in ({'model_path': '/m', name: 'v'}, {'model_path': '/m', 'api_key': 'k-123456', name: 'v'}):
        with pytest.raises(AnsibleFilterError) as e:
            sglang_command({'python': PYTHON, 'secrets_path': '/r/secret-args.yaml', 'server_args': args})
        assert 'server argument name(s) %r: each must be a plain name' % name in str(e.value)

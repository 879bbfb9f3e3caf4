# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The roles' variables turned into their calls' options (_role_options, the lookup gpuops.host.role_options): the
launch option from sglang_launch_* by name, the secrets apart, the refusals, the stop's and the verification's options
with only what is set."""

from __future__ import annotations

import os

import pytest
import yaml

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.gpuops.host.plugins.module_utils import _role_options as ro
from ansible_collections.gpuops.host.plugins.module_utils._launch_options import OPTIONS
from ansible_collections.gpuops.host.plugins.module_utils._launch_request import failure

ROLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..', '..', 'roles')


def defaults(role):
    with open(os.path.join(ROLES, role, 'defaults', 'main.yml')) as f:
        return yaml.safe_load(f)


def role_variables(**changes):
    """The three roles' defaults, their templated ones as they resolve, a request for tuning mode, and CHANGES."""
    v = dict(defaults('gpu_clean'), **defaults('sglang_stop'))
    v.update(defaults('sglang_launch'))
    v.update(sglang_launch_restart=False, sglang_stop_state_dir=v['sglang_launch_state_dir'],
             sglang_stop_owners=['root'], inventory_hostname='gpu-a', sglang_launch_mode='tuning',
             sglang_launch_model_path='/models/glm-5', sglang_launch_python='/opt/sglang/bin/python')
    v.update(changes)
    return v


def getter(variables):
    def get(name, default=None):
        return variables.get(name, default)
    return get


def call(**changes):
    return ro.launch_call(getter(role_variables(**changes)))


def test_every_suboption_of_the_launch_comes_from_the_role_and_the_module_takes_it():
    launch = call()['launch']
    assert sorted(launch) == sorted(OPTIONS)
    result = ArgumentSpecValidator(OPTIONS).validate(launch)
    assert not result.error_messages, result.error_messages
    assert launch['server_args'] == {'mem_fraction_static': 0.92, 'cuda_graph_max_bs_decode': 160,
                                     'model_path': '/models/glm-5', 'host': '127.0.0.1', 'port': 30000}
    assert (launch['mode'], launch['node_name'], launch['dumps'], launch['verify_info']) == ('tuning', 'gpu-a', False,
                                                                                             True)
    assert (launch['term_timeout'], launch['owners'], launch['expected_count']) == (60, ['root'], None)
    assert call()['refusals'] == [] and call()['staged'] is False


def test_the_mode_table_sets_dumps_and_the_environment_over_the_role():
    c = call(sglang_launch_mode='extraction', sglang_launch_environment={'SPT_NOENV': '0', 'X_FLAG': 'on'},
             sglang_launch_modes={'extraction': {'dump_hidden_states': 'yes', 'verify_server_info': True,
                                                 'server_args': {'disable_radix_cache': True},
                                                 'environment': {'SPT_NOENV': '1'}}})
    assert (c['launch']['dumps'], c['launch']['verify_info']) == (True, True)
    assert c['launch']['server_args']['disable_radix_cache'] is True
    assert c['launch']['environment'] == {'SPT_NOENV': '1'}
    assert c['secret_environment'] == {'X_FLAG': 'on'}


def test_secrets_go_apart_by_name_or_by_sglang_launch_secret_args():
    c = call(sglang_launch_server_args={'api_key': 'sk-live-123', 'hf-token': 'hf_abc', 'admin_pass': 'pw-9876',
                                        'served_model_name': 'glm'},
             sglang_launch_secret_args=['--admin-pass'],
             sglang_launch_environment={'HF_TOKEN': 'hf_envtoken', 'HOME': '/home/sglang', 'CUDA_VISIBLE_DEVICES': '0'})
    assert c['secret_server_args'] == {'api_key': 'sk-live-123', 'hf-token': 'hf_abc', 'admin_pass': 'pw-9876'}
    assert 'served_model_name' in c['launch']['server_args']
    for name in c['secret_server_args']:
        assert name not in c['launch']['server_args']
    assert c['secret_environment'] == {'HF_TOKEN': 'hf_envtoken'}
    assert c['launch']['environment'] == {'HOME': '/home/sglang', 'CUDA_VISIBLE_DEVICES': '0'}
    # every value of the environment and of the secret arguments, of 4 characters or more, the longer first
    assert c['secrets'] == ['sk-live-123', 'pw-9876', 'hf_envtoken', 'hf_abc', '/home/sglang']


def test_a_multi_node_place_adds_its_arguments_and_says_worker():
    node = {'rank': 1, 'args': {'nnodes': 2, 'node_rank': 1, 'dist_init_addr': 'gpu-a:20000'}}
    c = call(sglang_launch_multinode_group='pair', sglang_launch_node=node)
    assert (c['launch']['multinode'], c['launch']['worker'], c['staged']) == (True, True, True)
    assert c['launch']['server_args']['node_rank'] == 1
    head = call(sglang_launch_multinode_group='pair', sglang_launch_node=dict(node, rank=0))
    assert (head['launch']['worker'], call(sglang_launch_node=node)['launch']['multinode']) == (False, False)


@pytest.mark.parametrize('changes, staged, patch', [
    ({}, False, False),
    ({'sglang_launch_prefetch': True}, True, False),
    ({'sglang_launch_mode': 'extraction'}, False, False),
    ({'sglang_launch_mode': 'extraction', 'sglang_launch_supervisor': 'podman', 'sglang_launch_image': 'img'}, True,
     True),
    ({'sglang_launch_supervisor': 'docker', 'sglang_launch_image': 'img'}, False, False),
])
def test_staged_for_a_prefetch_a_group_or_a_dump_patch_in_an_image(changes, staged, patch):
    c = call(**changes)
    assert (c['staged'], c['image_dump_patch']) == (staged, patch)


def test_restart_takes_a_truthy_string():
    assert call(sglang_launch_restart='yes')['launch']['restart'] is True
    assert call(sglang_launch_restart='false')['launch']['restart'] is False


def test_the_refusals_read_the_whole_request():
    said = call(sglang_launch_planned=None, sglang_launch_server_args={'mem_fraction_static': 1.2})['refusals']
    assert said[0].startswith('sglang_launch_planned was removed')
    assert said[1] == 'mem_fraction_static must be in (0, 1), got 1.2; refusing before the running server is touched.'
    # an unknown mode is refused, not a KeyError
    said = call(sglang_launch_mode='benchmark')['refusals']
    assert len(said) == 1 and said[0].startswith('sglang_launch_mode must be one of serving, extraction, tuning')
    said = call(sglang_launch_environment={'X': 'a\nExecStartPre=/bin/sh'})['refusals']
    assert 'the value of the environment variable X' in said[0] and 'ExecStartPre' not in said[0]


def test_a_variable_of_the_wrong_kind_is_named():
    with pytest.raises(ro.RoleOptionsError, match='sglang_launch_server_args must be a dict, got list'):
        call(sglang_launch_server_args=['--port', '1'])


def test_the_stop_sets_what_the_roles_set_and_no_more():
    stop = ro.stop_options(getter(role_variables()))
    assert stop == {'record_path': '/var/lib/gpuops/sglang/server.json', 'presets': ['sglang'], 'patterns': [],
                    'pids': [], 'owners': ['root'], 'stop_timeout': 60, 'disable_supervisors': False,
                    'reap': {'kill_mode': 'mixed'}, 'settle': 2, 'active_window': 120, 'cut_active_run': False,
                    'dump_patterns': stop['dump_patterns'], 'verify': {}}
    stop = ro.stop_options(getter(role_variables(
        gpu_clean_stop_holders_of=[0, 3], gpu_clean_kill_timeout=5, gpu_clean_expected_count=8,
        gpu_clean_verify_timeout=30, sglang_stop_api_key='sk-stop', sglang_stop_drain_timeout=90,
        sglang_stop_force=True, sglang_stop_lock={'path': '/run/gpuops.lock', 'run': 'r1'})))
    assert stop['reap'] == {'kill_mode': 'mixed', 'kill_timeout': 5, 'device_holders': True,
                            'devices': ['/dev/nvidia0', '/dev/nvidia3']}
    assert stop['verify'] == {'expected_count': 8, 'timeout': 30}
    assert (stop['api_key'], stop['timeout'], stop['force'], stop['lock']['run']) == ('sk-stop', 90, True, 'r1')
    assert 'verify' not in ro.stop_options(getter(role_variables(gpu_clean_verify=False)))
    assert 'verify' in ro.stop_options(getter(dict((k, v) for k, v in role_variables().items()
                                                   if k != 'gpu_clean_verify')))


def test_a_removed_stop_variable_is_refused_naming_its_replacement():
    said = call(sglang_stop_kill_timeout=5)['refusals']
    assert said == ["sglang_stop_kill_timeout was removed: the wait after SIGKILL is gpuops.host.gpu_clean's, set "
                    "gpu_clean_kill_timeout instead (unset, gpuops.host.gpu_reap's default applies)."]
    with pytest.raises(ro.RoleOptionsError, match='set gpu_clean_kill_timeout instead'):
        ro.stop_options(getter(role_variables(sglang_stop_kill_timeout=None)))


def test_verify_options_by_gpu_clean_names():
    assert ro.verify_options(getter({'gpu_clean_verify_timeout': 9, 'gpu_clean_gpus': [1], 'gpu_clean_x': 1})) == {
        'timeout': 9, 'gpus': [1]}


def test_a_failed_call_reports_the_nodes_own_result_or_a_refusal_with_secrets_masked():
    report = {'status': 'failed', 'server': 'none', 'message': 'the new server failed'}
    assert failure({'msg': 'the new server failed', 'launch': report}, 'tuning') is report
    refused = failure({'msg': 'value of port must be an int: got sk-live-123'}, 'tuning', ['sk-live-123'])
    assert (refused['status'], refused['server'], refused['mode']) == ('failed', 'old', 'tuning')
    assert refused['message'] == 'value of port must be an int: got ******** The running server was not touched.'
    said = failure({'msg': '/usr/bin/python3 cannot import sglang'}, 'serving')['message']
    assert 'sglang_launch_python must be the interpreter of the environment SGLang is installed in' in said

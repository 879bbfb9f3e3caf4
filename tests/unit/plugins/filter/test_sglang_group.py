# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The filter sglang_group, as the sglang_launch role calls it: a host's place in its group, each refusal of
_group as an AnsibleFilterError with its message, and a clear error for what it cannot take."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.host.plugins.filter.sglang_group import FilterModule, sglang_group

MEMBERS = ['gpu-a', 'gpu-b']


def options(**changes):
    """The role's input for gpu-b of the group glm5, with CHANGES."""
    base = {'host': 'gpu-b', 'group': 'glm5', 'members': list(MEMBERS), 'ranks': {'gpu-a': None, 'gpu-b': None},
            'dist_hosts': {'gpu-a': '10.0.0.1', 'gpu-b': None}, 'ansible_hosts': {'gpu-a': None, 'gpu-b': None},
            'port': 20000, 'server_args': {'tp_size': 16}, 'play_hosts': list(MEMBERS), 'batch': list(MEMBERS)}
    base.update(changes)
    return base


def test_the_filter_gives_the_host_its_place():
    assert sglang_group(options()) == {'args': {'nnodes': 2, 'node_rank': 1, 'dist_init_addr': '10.0.0.1:20000'},
                                       'rank': 1, 'nnodes': 2, 'head': 'gpu-a', 'members': MEMBERS}
    assert FilterModule().filters()['sglang_group'] is sglang_group


@pytest.mark.parametrize('changes, message', [
    ({'host': 'gpu-z'}, 'gpu-z is not a host of the inventory group glm5'),
    ({'ranks': {'gpu-a': 0, 'gpu-b': 0}}, 'the ranks of the group glm5 must be 0 to 1, each once; got gpu-a=0, gpu-b=0'),
    ({'server_args': {'node_rank': 0}}, 'node_rank=0 (the inventory gives 1) set by hand disagree(s) with the group glm5'),
    ({'play_hosts': ['gpu-b']}, 'this run names only part of the group glm5: gpu-a is not in it'),
    ({'batch': ['gpu-b']}, 'the serial batch of this run splits the group glm5: gpu-a is in another batch'),
    ({'port': 70000}, 'sglang_launch_dist_port must be a TCP port, got 70000'),
])
def test_a_refusal_is_a_filter_error_with_its_message(changes, message):
    with pytest.raises(AnsibleFilterError) as e:
        sglang_group(options(**changes))
    assert message in str(e.value) and not str(e.value).startswith('sglang_group:')


@pytest.mark.parametrize('value', [
    None,
    'gpu-b',
    ['gpu-b', 'glm5'],
    {},
    {'group': 'glm5', 'members': MEMBERS, 'port': 20000},
    {'host': 'gpu-b', 'members': MEMBERS, 'port': 20000},
    {'host': '', 'group': 'glm5', 'members': MEMBERS, 'port': 20000},
    {'host': 'gpu-b', 'group': '', 'members': MEMBERS, 'port': 20000},
])
def test_what_is_no_dict_with_host_and_group_is_refused(value):
    with pytest.raises(AnsibleFilterError, match='sglang_group takes a dict with host, group, members and port'):
        sglang_group(value)


@pytest.mark.parametrize('changes, message', [
    ({'port': 'twenty'}, "sglang_group: invalid literal for int() with base 10: 'twenty'"),
    ({'port': None}, 'sglang_group: int() argument must be'),
    ({'ranks': {'gpu-a': 'first', 'gpu-b': 'second'}}, "sglang_group: invalid literal for int() with base 10: 'first'"),
    ({'members': 7}, "sglang_group: 'int' object is not iterable"),
])
def test_bad_values_are_a_filter_error_naming_the_filter(changes, message):
    with pytest.raises(AnsibleFilterError) as e:
        sglang_group(options(**changes))
    assert str(e.value).startswith(message)


def test_a_missing_port_is_a_filter_error_naming_it():
    value = options()
    del value['port']
    with pytest.raises(AnsibleFilterError) as e:
        sglang_group(value)
    assert str(e.value) == "sglang_group: 'port'"


def test_the_ranks_and_addresses_are_read_from_the_members_host_variables(host_vars):
    """The role gives each member's host variables: the filter reads sglang_launch_node_rank, sglang_launch_dist_host
    and ansible_host of the members only, an unset or null one as not set."""
    hostvars = {'gpu-a': host_vars({'sglang_launch_node_rank': 2, 'sglang_launch_dist_host': None,
                                    'ansible_host': '192.0.2.1'}),
                'gpu-b': host_vars({'sglang_launch_node_rank': 0, 'ansible_host': '2001:db8::b'}),
                'gpu-c': host_vars({'sglang_launch_node_rank': '1', 'sglang_launch_dist_host': '10.0.0.3'}),
                'other': host_vars({'sglang_launch_node_rank': 0, 'sglang_launch_dist_host': '10.9.9.9'})}
    value = dict(options(host='gpu-a', members=['gpu-a', 'gpu-b', 'gpu-c'], play_hosts=['gpu-a', 'gpu-b', 'gpu-c'],
                         batch=['gpu-a', 'gpu-b', 'gpu-c'], hostvars=hostvars))
    for key in ('ranks', 'dist_hosts', 'ansible_hosts'):
        del value[key]
    assert sglang_group(value) == {'args': {'nnodes': 3, 'node_rank': 2, 'dist_init_addr': '[2001:db8::b]:20000'},
                                   'rank': 2, 'nnodes': 3, 'head': 'gpu-b', 'members': ['gpu-b', 'gpu-c', 'gpu-a']}
    assert set(hostvars['gpu-a'].reads) == {'sglang_launch_node_rank', 'sglang_launch_dist_host', 'ansible_host'}
    assert set(hostvars['gpu-b'].reads) == {'sglang_launch_node_rank', 'ansible_host'}
    assert set(hostvars['gpu-c'].reads) == {'sglang_launch_node_rank', 'sglang_launch_dist_host'}
    assert hostvars['other'].reads == {}


def test_host_variables_that_set_a_rank_on_some_members_only_are_refused(host_vars):
    hostvars = {'gpu-a': host_vars({'sglang_launch_node_rank': 1}), 'gpu-b': host_vars({'sglang_launch_node_rank': None})}
    with pytest.raises(AnsibleFilterError, match='sglang_launch_node_rank is set on gpu-a but not on gpu-b of the group glm5'):
        sglang_group(options(hostvars=hostvars))


def test_the_group_failure_filter_takes_the_role_s_values_and_refuses_others():
    from ansible_collections.gpuops.host.plugins.filter.sglang_group_failure import sglang_group_failure
    out = sglang_group_failure({'status': 'launched', 'pid': 4200}, ['gpu-b'], None, None)
    assert (out['server'], out['pid'], out['rollback']) == ('none', None, None)
    assert out['message'] == 'node(s) gpu-b of the multi-node server failed; this node was stopped with it.'
    with pytest.raises(AnsibleFilterError):
        sglang_group_failure('failed', ['gpu-b'])

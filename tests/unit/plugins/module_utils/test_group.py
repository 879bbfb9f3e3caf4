# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A host's place in a multi-node SGLang server over an inventory group (_group): the ranks, the three flags, and
every refusal of a group that cannot run as one server, or a run that would restart part of it only."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.host.plugins.module_utils._group import GroupError, failure_outcome, group_plan, place, ranks

MEMBERS = ['gpu-a', 'gpu-b', 'gpu-c']


def options(**changes):
    """What the sglang_launch role gives the filter for gpu-b of the group glm5 (three hosts, no ranks set), with
    CHANGES."""
    base = {'host': 'gpu-b', 'group': 'glm5', 'members': list(MEMBERS), 'ranks': {}, 'dist_hosts': {},
            'ansible_hosts': {}, 'addresses': {}, 'port': 20000, 'server_args': {}, 'play_hosts': list(MEMBERS),
            'batch': list(MEMBERS)}
    base.update(changes)
    return base


# -- ranks -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('members, explicit, expected', [
    (['a', 'b'], {}, {'a': 0, 'b': 1}),
    (['a', 'b', 'c'], {'a': None, 'b': None, 'c': None}, {'a': 0, 'b': 1, 'c': 2}),
    (['a', 'b', 'c'], {'a': 2, 'b': 0, 'c': 1}, {'a': 2, 'b': 0, 'c': 1}),
    (['a', 'b'], {'a': '1', 'b': '0'}, {'a': 1, 'b': 0}),
    (['a', 'b'], {'a': 0, 'b': 1, 'z': 7}, {'a': 0, 'b': 1}),
])
def test_ranks(members, explicit, expected):
    assert ranks('glm5', members, explicit) == expected


@pytest.mark.parametrize('members, explicit, message', [
    (['a', 'b', 'c'], {'a': 0, 'c': 1}, 'sglang_launch_node_rank is set on a, c but not on b of the group glm5: set it '
                                        'on every host of the group, or on none'),
    (['a', 'b'], {'b': 0}, 'is set on b but not on a of the group glm5'),
    (['a', 'b'], {'a': 0, 'b': 0}, 'the ranks of the group glm5 must be 0 to 1, each once; got a=0, b=0'),
    (['a', 'b'], {'a': 1, 'b': 2}, 'must be 0 to 1, each once; got a=1, b=2'),
    (['a', 'b', 'c'], {'a': 0, 'b': 1, 'c': 3}, 'must be 0 to 2, each once; got a=0, b=1, c=3'),
    (['a', 'b'], {'a': -1, 'b': 0}, 'must be 0 to 1, each once; got a=-1, b=0'),
])
def test_ranks_refuses(members, explicit, message):
    with pytest.raises(GroupError) as e:
        ranks('glm5', members, explicit)
    assert message in str(e.value)


# -- place -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('host, rank', [('gpu-a', 0), ('gpu-b', 1), ('gpu-c', 2)])
def test_each_host_gets_its_place_in_inventory_order(host, rank):
    node = place(options(host=host))
    assert node == {'args': {'nnodes': 3, 'node_rank': rank, 'dist_init_addr': 'gpu-a:20000'}, 'rank': rank,
                    'nnodes': 3, 'head': 'gpu-a', 'members': MEMBERS}


def test_explicit_ranks_choose_the_head_and_the_order():
    node = place(options(ranks={'gpu-a': 2, 'gpu-b': 1, 'gpu-c': 0}, dist_hosts={'gpu-c': '10.0.0.3'}))
    assert node == {'args': {'nnodes': 3, 'node_rank': 1, 'dist_init_addr': '10.0.0.3:20000'}, 'rank': 1,
                    'nnodes': 3, 'head': 'gpu-c', 'members': ['gpu-c', 'gpu-b', 'gpu-a']}


@pytest.mark.parametrize('changes, address', [
    ({'dist_hosts': {'gpu-a': '10.0.0.1'}, 'ansible_hosts': {'gpu-a': '192.0.2.1'}, 'addresses': {'gpu-a': '198.51.100.1'}},
     '10.0.0.1:20000'),
    ({'dist_hosts': {'gpu-a': None, 'gpu-b': '10.0.0.2'}, 'ansible_hosts': {'gpu-a': '192.0.2.1'},
      'addresses': {'gpu-a': '198.51.100.1'}}, '192.0.2.1:20000'),
    ({'ansible_hosts': {'gpu-a': None}, 'addresses': {'gpu-a': '198.51.100.1'}}, '198.51.100.1:20000'),
    ({'dist_hosts': None, 'ansible_hosts': None, 'addresses': None}, 'gpu-a:20000'),
    ({'dist_hosts': {'gpu-b': '10.0.0.2'}, 'ansible_hosts': {'gpu-c': '192.0.2.3'}}, 'gpu-a:20000'),
    ({'dist_hosts': {'gpu-a': 'fd00::1'}}, '[fd00::1]:20000'),
    ({'ansible_hosts': {'gpu-a': '2001:db8::a'}, 'port': '29500'}, '[2001:db8::a]:29500'),
    ({'port': 1}, 'gpu-a:1'),
    ({'port': 65535}, 'gpu-a:65535'),
])
def test_the_dist_address_is_the_head_s_first_address_set(changes, address):
    assert place(options(**changes))['args']['dist_init_addr'] == address


@pytest.mark.parametrize('server_args', [
    {},
    {'tp_size': 16, 'nnodes': None, 'node_rank': None, 'dist_init_addr': None},
    {'nnodes': 3},
    {'nnodes': '3', 'node_rank': 1, 'dist_init_addr': 'gpu-a:20000'},
    {'node_rank': '1'},
])
def test_hand_set_flags_that_match_the_group_are_fine(server_args):
    assert place(options(server_args=server_args))['args'] == {'nnodes': 3, 'node_rank': 1,
                                                               'dist_init_addr': 'gpu-a:20000'}


@pytest.mark.parametrize('changes, message', [
    ({'host': 'gpu-z'}, 'gpu-z is not a host of the inventory group glm5 (sglang_launch_multinode_group)'),
    ({'members': []}, 'gpu-b is not a host of the inventory group glm5'),
    ({'members': None}, 'gpu-b is not a host of the inventory group glm5'),
    ({'members': ['gpu-b'], 'play_hosts': ['gpu-b'], 'batch': ['gpu-b']},
     'the group glm5 has one host (gpu-b): a server on one node needs no sglang_launch_multinode_group'),
    ({'ranks': {'gpu-a': 0, 'gpu-b': 1}}, 'sglang_launch_node_rank is set on gpu-a, gpu-b but not on gpu-c of the group glm5'),
    ({'ranks': {'gpu-a': 0, 'gpu-b': 2, 'gpu-c': 2}}, 'the ranks of the group glm5 must be 0 to 2, each once; got gpu-a=0, '
                                                      'gpu-b=2, gpu-c=2'),
    ({'port': 0}, 'sglang_launch_dist_port must be a TCP port, got 0'),
    ({'port': 65536}, 'sglang_launch_dist_port must be a TCP port, got 65536'),
    ({'port': '-5'}, "sglang_launch_dist_port must be a TCP port, got '-5'"),
    ({'server_args': {'nnodes': 2}}, 'nnodes=2 (the inventory gives 3) set by hand disagree(s) with the group glm5 '
                                     '(ranks from sglang_launch_node_rank or the inventory order, rank 0 gpu-a at '
                                     'gpu-a:20000): leave them out of sglang_launch_server_args, or fix the inventory'),
    ({'server_args': {'node_rank': 0, 'dist_init_addr': '10.9.9.9:20000'}},
     'node_rank=0 (the inventory gives 1); dist_init_addr=10.9.9.9:20000 (the inventory gives gpu-a:20000) set by hand'),
    ({'server_args': {'dist_init_addr': 'gpu-a:20001'}}, 'dist_init_addr=gpu-a:20001 (the inventory gives gpu-a:20000)'),
    ({'play_hosts': ['gpu-b']}, 'this run names only part of the group glm5: gpu-a, gpu-c are not in it (a -l limit?). '
                                'A node restarted alone leaves its peers waiting until --dist-timeout, holding their '
                                'GPUs: run on every host of the group (-l glm5), or on none; nothing was touched'),
    ({'play_hosts': ['gpu-a', 'gpu-b', 'other']}, 'only part of the group glm5: gpu-c is not in it'),
    ({'batch': ['gpu-a', 'gpu-b']}, "the serial batch of this run splits the group glm5: gpu-c is in another batch. Make "
                                    "the batch size (gpuops_serial, and a canary of one group) a multiple of the group "
                                    "size (3) and list each group's hosts together; nothing was touched"),
    ({'batch': ['gpu-b', 'other']}, 'splits the group glm5: gpu-a, gpu-c are in another batch'),
])
def test_place_refuses(changes, message):
    with pytest.raises(GroupError) as e:
        place(options(**changes))
    assert message in str(e.value)


def test_missing_hosts_are_named_in_rank_order():
    with pytest.raises(GroupError) as e:
        place(options(ranks={'gpu-a': 1, 'gpu-b': 2, 'gpu-c': 0}, play_hosts=['gpu-b']))
    assert 'only part of the group glm5: gpu-c, gpu-a are not in it' in str(e.value)


def test_a_limit_is_refused_before_a_serial_split():
    with pytest.raises(GroupError, match='a -l limit'):
        place(options(play_hosts=['gpu-b'], batch=['gpu-b']))


@pytest.mark.parametrize('changes', [
    {'play_hosts': None, 'batch': None},
    {'play_hosts': [], 'batch': []},
    {'play_hosts': MEMBERS + ['other'], 'batch': ['other'] + MEMBERS},
])
def test_a_run_on_every_host_of_the_group_passes(changes):
    assert place(options(**changes))['rank'] == 1


@pytest.mark.parametrize('plan, restarting, expected', [
    ({'needs_restart': False, 'reasons': []}, ['gpu-a', 'gpu-b'],
     {'needs_restart': True, 'reasons': ['node gpu-b of the multi-node server restarts']}),
    ({'needs_restart': False, 'reasons': []}, ['gpu-a'], {'needs_restart': False, 'reasons': []}),
    ({'needs_restart': False, 'reasons': []}, [], {'needs_restart': False, 'reasons': []}),
    ({'needs_restart': True, 'reasons': ['mode: serving -> extraction']}, ['gpu-a', 'gpu-b'],
     {'needs_restart': True, 'reasons': ['mode: serving -> extraction']}),
], ids=['another-restarts', 'only-itself', 'none', 'restarts-anyway'])
def test_a_node_restarts_where_another_node_of_its_group_does(plan, restarting, expected):
    assert group_plan(plan, 'gpu-a', restarting) == expected


OWN = {'status': 'failed', 'server': 'none', 'pid': None, 'message': 'the SGLang server 4300 did not answer'}
PASSED = {'status': 'launched', 'server': 'new', 'pid': 4200, 'message': None}
BACK = {'changed': True, 'rollback': {'ok': True, 'marker': 'serving-1', 'pid': 4400, 'message': None}}
NOT_BACK = {'failed': True, 'msg': 'starting the configuration of serving-1 again failed: it exited',
            'rollback': {'ok': False, 'marker': 'serving-1', 'pid': None, 'message': 'it exited'}}


@pytest.mark.parametrize('result, failed, rolled_back, relaunch_failed, server, message', [
    (PASSED, ['gpu-b'], None, [], 'none',
     'node(s) gpu-b of the multi-node server failed; this node was stopped with it.'),
    (OWN, [], None, [], 'none', 'the SGLang server 4300 did not answer'),
    (PASSED, ['gpu-b'], BACK, [], 'rollback',
     'node(s) gpu-b of the multi-node server failed; this node was stopped with it. The previous configuration '
     '(serving-1) was started again on every node of the multi-node server and passed its checks: serving-1 serves '
     'again.'),
    (OWN, [], BACK, [], 'rollback',
     'the SGLang server 4300 did not answer The previous configuration (serving-1) was started again on every node of '
     'the multi-node server and passed its checks: serving-1 serves again.'),
    # this node started it, another did not: every node is stopped again
    (PASSED, ['gpu-b'], BACK, ['gpu-b'], 'none',
     'node(s) gpu-b of the multi-node server failed; this node was stopped with it. The previous configuration could '
     'not be started again on every node (gpu-b), so every node of the multi-node server was stopped again.'),
    (OWN, [], NOT_BACK, ['gpu-b'], 'none',
     'the SGLang server 4300 did not answer The previous configuration could not be started again on every node '
     '(gpu-b): it exited, so every node of the multi-node server was stopped again.'),
], ids=['peer-failed', 'own', 'peer-failed-rolled-back', 'own-rolled-back', 'peer-not-rolled-back', 'own-not-back'])
def test_a_node_of_a_failed_group_says_what_it_runs_now(result, failed, rolled_back, relaunch_failed, server, message):
    out = failure_outcome(result, failed, rolled_back, relaunch_failed)
    assert (out['status'], out['server'], out['message']) == ('failed', server, message)
    assert out['pid'] == (4400 if server == 'rollback' else None)
    assert out['rollback'] == (rolled_back or {}).get('rollback')

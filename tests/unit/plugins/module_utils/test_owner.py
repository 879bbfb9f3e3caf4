# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The server's owner, looked up on the node (_owner.resolve), and what of a plan follows from it (_owner.apply)."""

from __future__ import annotations

import grp
import os
import pwd
from types import SimpleNamespace

import pytest

from ansible_collections.gpuops.host.plugins.module_utils import _owner as owners

USERS = {'sglang': SimpleNamespace(pw_uid=1001, pw_gid=1001, pw_dir='/home/sglang')}
GROUPS = {'gpu': SimpleNamespace(gr_gid=2000), 'research': SimpleNamespace(gr_gid=3000)}


def resolve(**names):
    return owners.resolve(names, getpwnam=USERS.__getitem__, getgrnam=GROUPS.__getitem__)


@pytest.mark.parametrize('names, gid, dump_gid', [
    # no group: the user's primary group serves, and reads the dumps
    ({'user': 'sglang'}, 1001, 1001),
    ({'user': 'sglang', 'group': 'gpu'}, 2000, 2000),
    ({'user': 'sglang', 'dump_group': 'research'}, 1001, 3000),
    ({'user': 'sglang', 'group': 'gpu', 'dump_group': 'research'}, 2000, 3000),
])
def test_the_owner_is_the_node_s_user_with_its_groups(names, gid, dump_gid):
    assert resolve(**names) == {
        'user': 'sglang', 'uid': 1001, 'gid': gid, 'dump_gid': dump_gid, 'home': '/home/sglang',
        'environment': {'HOME': '/home/sglang', 'HF_HOME': '/home/sglang/.cache/huggingface'}}


@pytest.mark.parametrize('names, said', [
    ({'user': 'nobody-here'}, 'user nobody-here, which this host does not know (no user nobody-here)'),
    ({'user': 'sglang', 'group': 'nogroup-x', 'dump_group': 'research'},
     'user sglang and group nogroup-x, its dumps read by group research, which this host does not know (no group '
     'nogroup-x)'),
    # every unknown name at once
    ({'user': 'ghost', 'group': 'gpu', 'dump_group': 'nodumps'},
     'which this host does not know (no user ghost, no group nodumps)'),
])
def test_a_name_the_node_does_not_know_is_refused_naming_it(names, said):
    with pytest.raises(owners.UnknownOwner) as e:
        resolve(**names)
    assert said in str(e.value)
    assert str(e.value).endswith('refusing before the running server is touched.')


def test_the_real_databases_answer_for_root():
    found = owners.resolve({'user': 'root'})
    assert (found['uid'], found['gid']) == (0, 0) and found['home'] == pwd.getpwnam('root').pw_dir
    assert found['dump_gid'] == grp.getgrnam(grp.getgrgid(0).gr_name).gr_gid


OWNER = resolve(user='sglang', group='gpu', dump_group='research')


def test_a_plan_gets_the_owner_where_it_leaves_it_out():
    p = {'environment': {'PATH': '/opt/venv/bin:/usr/bin'}, 'model_path': '/models/m',
         'config': {'mode': 'extraction', 'environment': {'PATH': '/opt/venv/bin:/usr/bin'}, 'user': 'sglang',
                    'dumps': ['/data/dumps', None]},
         'refuse': {'dump_dir': {'root': '/data/dumps', 'name': 'run1', 'owner': None, 'group': None},
                    'model': {'path': '/models/m', 'hub': False, 'offline': False}}}
    got = owners.apply(p, OWNER)
    home = {'HOME': '/home/sglang', 'HF_HOME': '/home/sglang/.cache/huggingface'}
    assert got['run_as'] == {'uid': 1001, 'gid': 2000}
    assert got['environment'] == dict(home, PATH='/opt/venv/bin:/usr/bin')
    assert got['config']['environment'] == got['environment']
    assert (got['config']['group'], got['config']['dumps']) == (2000, ['/data/dumps', 3000])
    assert (got['refuse']['dump_dir']['owner'], got['refuse']['dump_dir']['group']) == (1001, 3000)
    assert got['hf_home'] == '/home/sglang/.cache/huggingface'
    assert got['refuse']['model'] == {'path': '/models/m', 'hub': False, 'offline': False, 'user': 'sglang',
                                      'hf_home': '/home/sglang/.cache/huggingface'}
    assert 'run_as' not in p and p['config']['dumps'] == ['/data/dumps', None], 'the caller\'s options changed'


def test_what_the_caller_sets_wins_over_the_owner_s():
    p = {'environment': {'HF_HOME': '/cache/hf', 'HOME': '/srv/sglang'}, 'model_path': 'moonshotai/Kimi-K2.5',
         'config': {'environment': {'HF_HOME': '/cache/hf', 'HOME': '/srv/sglang'}},
         'refuse': {'dump_dir': {'root': '/d', 'name': 'n', 'owner': 0, 'group': 0},
                    'model': {'path': 'moonshotai/Kimi-K2.5', 'hub': True, 'offline': True}},
         'container': {'image': 'sglang:0.5.23', 'mounts': ['/d', '/var/lib/gpuops']}}
    got = owners.apply(p, OWNER)
    assert got['environment'] == {'HF_HOME': '/cache/hf', 'HOME': '/srv/sglang'}
    assert got['config']['environment'] == got['environment'] and got['config'].get('dumps') is None
    assert got['hf_home'] == '/cache/hf'
    assert (got['refuse']['dump_dir']['owner'], got['refuse']['dump_dir']['group']) == (0, 0)
    # a hub ID: its cache in the environment's HF_HOME, which a container mounts too
    assert got['refuse']['model']['cache'] == '/cache/hf/hub/models--moonshotai--Kimi-K2.5'
    assert got['container']['mounts'] == ['/cache/hf', '/d', '/var/lib/gpuops']


def test_a_model_directory_adds_no_mount():
    p = {'model_path': '/models/m', 'container': {'image': 'i', 'mounts': ['/models/m']}}
    assert owners.apply(p, OWNER)['container']['mounts'] == ['/models/m']


def test_the_user_s_home_is_read_from_the_node(tmp_path):
    # the real passwd database: this process's user, whatever its home is
    me = pwd.getpwuid(os.getuid())
    assert owners.resolve({'user': me.pw_name})['environment']['HOME'] == me.pw_dir


def test_the_plan_refuses_an_unknown_owner_before_it_reads_anything(monkeypatch):
    from ansible_collections.gpuops.host.plugins.module_utils import _server_info as server_info
    monkeypatch.setattr(server_info.sglang, '_record', lambda p: pytest.fail('the record was read'))
    with pytest.raises(server_info.sglang.ActionFailed) as e:
        server_info.info({'record_path': '/x/server.json', 'owner': {'user': 'no-such-user-gpuops'}}, deps=None)
    assert 'no user no-such-user-gpuops' in e.value.msg and e.value.result == {'owner': None}


def test_the_plan_returns_the_owner_and_compares_with_it(monkeypatch):
    from ansible_collections.gpuops.host.plugins.module_utils import _server_info as server_info
    monkeypatch.setattr(server_info.sglang, '_record', lambda p: {})
    monkeypatch.setattr(server_info.sglang, 'find', lambda p, deps, record=None: {
        'servers': [], 'elsewhere': [], 'others': [], 'gateways': [], 'recorded': None})
    monkeypatch.setattr(server_info, 'observe', lambda p, deps, checked=None: {})
    result = server_info.info({'record_path': '/x/server.json', 'owner': {'user': 'root'},
                               'config': {'mode': 'serving', 'environment': {'PATH': '/usr/bin'}}}, deps=None)
    assert result['owner']['uid'] == 0
    assert result['current']['group'] == 0
    assert result['current']['environment'] == dict(result['owner']['environment'], PATH='/usr/bin')

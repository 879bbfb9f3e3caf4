# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The record of a server that passed its checks (_record), on a state directory of the test's own."""

from __future__ import annotations

import json
import os
import stat

import pytest

from ansible_collections.gpuops.host.plugins.module_utils import _record as records
from ansible_collections.gpuops.host.plugins.module_utils._extraction import epoch

NOW = 1796440399.8978622
SERVER = {'pid': 4200, 'start': 991234, 'user': 'sglang', 'seconds_to_ready': 41.3}


@pytest.fixture
def state(tmp_path):
    runs = tmp_path / 'runs'
    for name in ('old-1', 'old-2', 'previous', 'this'):
        (runs / name).mkdir(parents=True)
        (runs / name / 'server.env').write_text('HF_TOKEN=x\n')
    return tmp_path


def options(state, **more):
    fields = {'status': 'ok', 'marker': 'this', 'dump_dir': None, 'run_dir': str(state / 'runs' / 'this')}
    return dict({'path': str(state / 'server.json'), 'fields': fields,
                 'history': str(state / 'runs.jsonl'), 'entry': {'status': 'launched', 'marker': 'this'},
                 'runs_dir': str(state / 'runs'), 'keep': [str(state / 'runs' / 'this'), str(state / 'runs' / 'previous')],
                 'remove': []}, **more)


def test_the_record_says_who_the_server_is_and_when_it_was_checked(state):
    out = records.commit(options(state), SERVER, NOW)
    with open(state / 'server.json') as f:
        record = json.load(f)
    assert record == out['record'] == {'status': 'ok', 'marker': 'this', 'dump_dir': None, 'pid': 4200,
                                       'start': 991234, 'owner': 'sglang', 'checked': '2026-12-05T03:13:19.897',
                                       'run_dir': str(state / 'runs' / 'this')}
    assert abs(epoch(record['checked']) - NOW) < 0.001
    assert stat.S_IMODE(os.stat(state / 'server.json').st_mode) == 0o640
    assert [name for name in os.listdir(state) if name.endswith('.tmp')] == []


def test_the_history_gets_one_line_and_older_runs_go(state):
    (state / 'runs.jsonl').write_text('{"marker": "previous"}\n')
    out = records.commit(options(state), SERVER, NOW)
    lines = (state / 'runs.jsonl').read_text().splitlines()
    assert json.loads(lines[1]) == {'status': 'launched', 'marker': 'this', 'pid': 4200, 'seconds_to_ready': 41.3,
                                    'finished': '2026-12-05T03:13:19'} and len(lines) == 2
    assert sorted(os.listdir(state / 'runs')) == ['previous', 'this']
    assert sorted(out['removed']) == [str(state / 'runs' / 'old-1'), str(state / 'runs' / 'old-2')]


def test_a_link_in_place_of_the_record_or_the_history_is_never_followed(state, tmp_path_factory):
    target = tmp_path_factory.mktemp('elsewhere') / 'shadow'
    target.write_text('root:*:0:0\n')
    os.symlink(str(target), str(state / 'server.json'))
    records.commit(options(state, history=None), SERVER, NOW)
    assert target.read_text() == 'root:*:0:0\n' and not os.path.islink(state / 'server.json')
    os.symlink(str(target), str(state / 'runs.jsonl'))
    with pytest.raises(records.RecordError, match='runs.jsonl: a link is there'):
        records.commit(options(state), SERVER, NOW)
    assert target.read_text() == 'root:*:0:0\n'


def test_a_link_among_the_runs_is_removed_as_itself(state, tmp_path_factory):
    kept = tmp_path_factory.mktemp('kept')
    (kept / 'model.safetensors').write_text('weights')
    os.symlink(str(kept), str(state / 'runs' / 'planted'))
    records.commit(options(state), SERVER, NOW)
    assert (kept / 'model.safetensors').read_text() == 'weights' and not os.path.lexists(state / 'runs' / 'planted')


def test_a_manifest_that_cannot_be_written_is_said_and_the_record_stays(state):
    fields = dict(options(state)['fields'], dump_dir=str(state / 'dumps' / 'missing'), mode='extraction')
    out = records.commit(options(state, fields=fields, history=None, runs_dir=None), SERVER, NOW)
    assert out['manifest'] is None and out['manifest_error']
    assert json.loads((state / 'server.json').read_text())['dump_dir'] == fields['dump_dir']


def test_a_record_that_cannot_be_written_fails(state):
    with pytest.raises(records.RecordError, match='cannot write .*/nowhere/server.json'):
        records.commit(options(state, path=str(state / 'nowhere' / 'server.json')), SERVER, NOW)


def test_named_files_go_once_recorded(state):
    legacy = state / 'server-args.yaml'
    legacy.write_text('api-key: x\n')
    out = records.commit(options(state, remove=[str(legacy), str(state / 'absent')]), SERVER, NOW)
    assert not legacy.exists() and str(legacy) in out['removed']

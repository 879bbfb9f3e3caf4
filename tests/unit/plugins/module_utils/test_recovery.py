# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What gpuops.host.sglang_server's ``started`` does once its start failed (_recovery.recover and rollback): the
supervisor's word on a failed unit or container, the record and the history's line of the failed launch, the forced
stop of the failed server, the removal of this run's directory of secret files and of its empty run directory of
dumps, what the node runs now, and the opt-in rollback to the previous recorded configuration, from its own run
directory (refused where that is not root's alone), with a fresh run directory of dumps. The stop, the search for
servers and ready are recording stand-ins; the records, the history, the run directories and the dump directories
are real files under tmp_path."""

from __future__ import annotations

import json
import os
import stat

import pytest

from ansible_collections.gpuops.host.plugins.module_utils import _recovery as recovery
from ansible_collections.gpuops.host.plugins.module_utils import _sglang
from ansible_collections.gpuops.host.plugins.module_utils._dump_dir import DumpDir
from ansible_collections.gpuops.host.plugins.module_utils._timeline import Timeline

as_root = pytest.mark.skipif(os.geteuid() != 0,
                             reason='the run directories and the dump directories are root\'s: needs root')
# the server's user and the dump group, whom the run directory of the dumps belongs to
SERVER_UID, DUMP_GID = 1001, 2001
SECRET = 'sk-live-4d9f2c71'
MASK = '********'
# the wall clock of the failure, and how the records write it
WALL = 1796440000.7
WALL_ISO = '2026-12-05T03:06:40'
# the failed server's PID, and the wall-clock second its supervisor started it
PID = 4200
STARTED = 1796439990
FAILED = 'the SGLang server %d exited while loading' % PID
# what the stop of the old server found, as _sglang.ready keeps it in a failure
STOPPED = {'changed': True, 'servers': [{'pid': 31}], 'summary': {'seconds_to_clean': 1.5, 'gpus_verified': 8}}
ENV = 'CUDA_VISIBLE_DEVICES=0,1\nSGLANG_HS_DUMP_DIR=/data/hs/run-1\nSGLANG_LOG_LEVEL=info\n'


class Deps:
    """check_mode, the clocks, warn (collected in WARNINGS) and run; CALLS has each command that run got, and each
    call of the _sglang stand-ins (stop, find, ready), in order: (name, argv or parameters)."""

    def __init__(self, answers=()):
        self.check_mode = False
        self.clock = lambda: 0.0
        self.wall_clock = lambda: WALL
        self.warnings = []
        self.warn = self.warnings.append
        self.calls = []
        self.answers = list(answers)

    def run(self, argv, environ):
        self.calls.append(('run', argv))
        for prefix, answer in self.answers:
            if argv[:len(prefix)] == prefix:
                return answer
        return 0, '', ''

    def named(self, name):
        return [arg for n, arg in self.calls if n == name]


@pytest.fixture
def node(monkeypatch):
    """_sglang.stop, find and ready, each recorded in its Deps' calls with the parameters it got. NODE says what they
    answer: 'stop' and 'ready', an ActionFailed they raise; 'left', the PIDs of the SGLang servers find still sees."""
    node = {'left': []}

    def stop(p, deps):
        deps.calls.append(('stop', p))
        failure = node.get('stop')
        if isinstance(failure, Exception):
            raise failure
        return {'changed': True, 'servers': [{'pid': PID}], 'summary': {'seconds_to_clean': 0.4, 'gpus_verified': 8}}

    def find(p, deps, record=None):
        deps.calls.append(('find', p))
        return {'servers': [{'pid': pid} for pid in node['left']]}

    def ready(p, deps, actions=None):
        deps.calls.append(('ready', p))
        failure = node.get('ready')
        if isinstance(failure, Exception):
            raise failure
        return {'changed': True, 'ready': True, 'pid': 5100, 'record_written': {'manifest_error': None}}

    monkeypatch.setattr(_sglang, 'stop', stop)
    monkeypatch.setattr(_sglang, 'find', find)
    monkeypatch.setattr(_sglang, 'ready', ready)
    return node


def params(tmp_path, **changes):
    """The parameters of the launch of run-2, which failed: a process, whose run directory is runs/run-2."""
    record = str(tmp_path / 'server.json')
    p = {'url': 'http://127.0.0.1:30000', 'path': '/health', 'secrets': [SECRET], 'log_lines': 50, 'log_path': None,
         'rollback': False,
         'stop': {'record_path': record, 'timeout': 600, 'lock': {'path': '/run/gpuops.lock', 'take': False},
                  'presets': ['sglang'], 'patterns': ['my_server'], 'default_url': 'http://127.0.0.1:30000'},
         'start': {'kind': 'process', 'argv': ['/opt/sglang/bin/python', '-m', 'sglang.launch_server']},
         'checks': {'dump_dir': '/data/hs/run-2', 'expected_info': {'tp_size': 4}, 'gpus': [0, 1, 2, 3],
                    'api_key': SECRET, 'schedulers': 4, 'probe': False, 'probe_timeout': 60},
         'record': {'path': record, 'history': str(tmp_path / 'history.jsonl'), 'dump_patterns': ['*.pt'],
                    'fields': {'marker': 'run-2', 'mode': 'serving', 'url': 'http://127.0.0.1:30000',
                               'supervisor': 'process', 'unit': None, 'log': '/var/log/sglang/run-2.log',
                               'config_hash': 'c2', 'argv': ['/opt/sglang/bin/python', '-m', 'sglang.launch_server'],
                               'run_dir': str(tmp_path / 'runs' / 'run-2'), 'gpus_serving': [0, 1, 2, 3]},
                    'entry': {'marker': 'run-2', 'mode': 'serving'}},
         'run_dir': {'path': str(tmp_path / 'runs' / 'run-2')}}
    p.update(changes)
    return p


def previous(tmp_path, status='ok', **changes):
    """The record of run-1, the server that ran before (its run directory runs/run-1)."""
    before = {'status': status, 'marker': 'run-1', 'mode': 'serving', 'pid': 31, 'url': 'http://127.0.0.1:30001',
              'supervisor': 'process', 'log': '/var/log/sglang/run-1.log', 'run_dir': str(tmp_path / 'runs' / 'run-1'),
              'gpus_serving': [0, 1], 'expected_info': {'tp_size': 2}, 'config_hash': 'c1',
              'relaunch': {'kind': 'process', 'argv': ['/opt/sglang/bin/python', '-m', 'sglang.launch_server']}}
    before.update(changes)
    return before


def run_dir(path, env=ENV, mode=0o750, uid=0, gid=0):
    """A run directory of secret files at PATH (its parents made), of MODE and UID:GID, with server.env holding ENV
    (root's, 0600) unless ENV is None."""
    path = str(path)
    os.makedirs(path)
    os.chmod(path, mode)
    if env is not None:
        fd = os.open(os.path.join(path, 'server.env'), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, 'w') as f:
            f.write(env)
    os.chown(path, uid, gid)
    return path


def recover(p, deps, result, before=None, made=None, msg=FAILED):
    """recover's answer to the failure MSG with RESULT, and the timeline it filled."""
    timeline = Timeline(deps.clock)
    failure = _sglang.ActionFailed(msg, result)
    got = recovery.recover(p, deps, failure, {} if before is None else before, made or {}, timeline)
    assert isinstance(got, _sglang.ActionFailed)
    return got, timeline


def read_json(path):
    with open(str(path)) as f:
        return json.load(f)


def history(tmp_path):
    with open(str(tmp_path / 'history.jsonl')) as f:
        return [json.loads(line) for line in f]


def failed_record(p, before, pid, error, previous_record):
    """The record of the failed launch that recover writes, from P's record fields."""
    fields = p['record']['fields']
    keep = dict((k, fields.get(k)) for k in ('marker', 'mode', 'url', 'supervisor', 'unit', 'log', 'argv'))
    return dict(keep, status='failed', pid=pid, error=error, failed=WALL_ISO, previous=previous_record)


# -- old_stopped: whether the old server is no longer untouched --------------------------------------------------

@pytest.mark.parametrize('result, stopped', [
    ({}, False),
    ({'signalled': False}, False),
    ({'signalled': True}, True),
    ({'stopped': STOPPED}, True),
    ({'stopped': None, 'signalled': False}, False),
    # a failed stop keeps what the stop said in 'stopped': only its signal counts
    ({'stop_failed': True, 'signalled': True, 'stopped': {'signalled': True}}, True),
    ({'stop_failed': True, 'signalled': False, 'stopped': {'signalled': False}}, False),
])
def test_the_old_server_counts_as_stopped_once_the_stop_signalled_it_or_was_done(result, stopped):
    assert recovery.old_stopped(result) is stopped


# -- another run holds the host ----------------------------------------------------------------------------------

@as_root
def test_a_lost_lock_comes_back_as_it_was_and_nothing_is_done(node, tmp_path):
    run_dir(tmp_path / 'runs' / 'run-2')
    p = params(tmp_path, rollback=True)
    deps = Deps()
    failure = _sglang.ActionFailed('another run took the lock', {'stop_failed': True, 'signalled': True,
                                                                 'lock_lost': True, 'pid': PID, 'started': STARTED})
    got = recovery.recover(p, deps, failure, previous(tmp_path), {}, Timeline(deps.clock))
    assert got is failure
    assert got.msg == 'another run took the lock' and 'server_now' not in got.result
    assert deps.calls == [] and deps.warnings == []
    assert sorted(os.listdir(str(tmp_path))) == ['runs'] and os.listdir(str(tmp_path / 'runs')) == ['run-2']


# -- a failure before the stop: the running server was not touched -----------------------------------------------

@as_root
@pytest.mark.parametrize('msg, expected', [
    (FAILED, FAILED + ' The running server was not touched.'),
    # said once, where the failure says it already (as _converge's failures before the stop do)
    ('cannot make the directories of the server: /srv/x is a link; the running server was not touched',
     'cannot make the directories of the server: /srv/x is a link; the running server was not touched'),
])
def test_a_failure_before_the_stop_writes_nothing_and_removes_this_run_s_directory(node, tmp_path, msg, expected):
    run = run_dir(tmp_path / 'runs' / 'run-2')
    deps = Deps()
    got, timeline = recover(params(tmp_path, rollback=True), deps, {'signalled': False}, previous(tmp_path), msg=msg)
    assert got.msg == expected
    assert got.msg.lower().count('the running server was not touched') == 1
    r = got.result
    assert (r['server_now'], r['changed'], r['rollback'], r['removed_run_dir']) == ('old', False, None, run)
    assert not os.path.lexists(run)
    # no record, no history line, no stop, no search: the old server runs as it was
    assert not os.path.lexists(str(tmp_path / 'server.json')) and not os.path.lexists(str(tmp_path / 'history.jsonl'))
    assert deps.calls == [] and timeline.done == [] and deps.warnings == []
    assert (r['launch']['status'], r['launch']['server'], r['launch']['changed'], r['launch']['message']) == \
        ('failed', 'old', False, msg)


@as_root
@pytest.mark.parametrize('case', ['recorded run', 'link', 'unit written', 'another user\'s'])
def test_the_run_directory_is_kept_where_it_is_not_this_run_s_own(node, tmp_path, case):
    before = previous(tmp_path)
    result = {'signalled': False}
    if case == 'recorded run':
        # the record's own run directory, however its path is written
        path = run_dir(before['run_dir']) + '/'
    elif case == 'link':
        target = run_dir(tmp_path / 'elsewhere')
        path = str(tmp_path / 'run-2')
        os.symlink(target, path)
    elif case == 'unit written':
        # a unit file written for this run names its files
        path = run_dir(tmp_path / 'runs' / 'run-2')
        result['unit_written'] = True
    else:
        path = run_dir(tmp_path / 'runs' / 'run-2', uid=SERVER_UID)
    got, timeline = recover(params(tmp_path, run_dir={'path': path}), Deps(), result, before)
    assert 'removed_run_dir' not in got.result and got.result['server_now'] == 'old'
    assert os.path.lexists(path) and os.path.isfile(os.path.join(path, 'server.env'))


def test_no_run_directory_and_none_on_disk_is_no_error(node, tmp_path):
    for run in ({}, {'path': str(tmp_path / 'runs' / 'absent')}):
        got, timeline = recover(params(tmp_path, run_dir=run or None), Deps(), {'signalled': False})
        assert 'removed_run_dir' not in got.result and got.result['server_now'] == 'old'


# -- a failure after the stop: the failed launch recorded and stopped --------------------------------------------

@as_root
@pytest.mark.parametrize('left, server_now', [([], 'none'), ([77, 78], 'unknown')])
@pytest.mark.parametrize('status', ['ok', 'failed'])
def test_a_failure_after_the_stop_is_recorded_and_its_server_stopped_by_force(node, tmp_path, status, left,
                                                                              server_now):
    node['left'] = left
    older = {'status': 'ok', 'marker': 'run-0'}
    before = previous(tmp_path, status=status, previous=older)
    run = run_dir(tmp_path / 'runs' / 'run-2')
    p = params(tmp_path)
    deps = Deps()
    result = {'stopped': STOPPED, 'ready': False, 'pid': PID, 'started': STARTED, 'log_tail': []}
    got, timeline = recover(p, deps, result, before, msg=FAILED + ' (api_key=%s)' % SECRET)
    masked = FAILED + ' (api_key=%s)' % MASK
    # the record: failed, and the last record that passed its checks as its previous
    assert read_json(tmp_path / 'server.json') == failed_record(p, before, PID, masked,
                                                                before if status == 'ok' else older)
    # the failed server's stop, forced, without a drain or an active window, the stop's other options kept
    assert [name for name, arg in deps.calls] == ['stop', 'find']
    stopping = deps.named('stop')[0]
    assert (stopping['force'], stopping['active_window'], stopping['timeout'], stopping['lock']) == \
        (True, 0, 0, {'path': '/run/gpuops.lock', 'take': False, 'release': False})
    assert (stopping['stop']['force'], stopping['stop']['active_window'], stopping['stop']['timeout']) == (True, 0, 0)
    assert 'force' not in p['stop'] and 'active_window' not in p['stop'] and p['stop']['timeout'] == 600
    # the failed server's stop keeps the lock that the run holds: the run's own release frees it, after the failure
    assert 'release' not in p['stop']['lock']
    # the search for what is left, with the stop's selectors and the record
    found = deps.named('find')[0]
    assert found == {'presets': ['sglang'], 'patterns': ['my_server'], 'default_url': 'http://127.0.0.1:30000',
                     'record_path': str(tmp_path / 'server.json')}
    r = got.result
    assert (r['server_now'], r['changed'], r['rollback'], r['removed_run_dir']) == (server_now, True, None, run)
    assert r['cleanup']['servers'] == [{'pid': PID}] and not os.path.lexists(run)
    assert timeline.done == [{'action': 'stop', 'of': 'the failed server', 'servers': [PID], 'seconds': 0.0}]
    if server_now == 'none':
        assert got.msg == masked + (' This node now runs NO SGLang server: its old server (run-1) was stopped and the '
                                    'new one (run-2) failed and was stopped.')
    else:
        assert got.msg == masked + ' SGLang servers are still running on this node: 77, 78.'
    assert SECRET not in got.msg
    # the history's line: the entry, the stop's figures, what the node runs now
    line = dict(r['launch'], finished=WALL_ISO)
    assert history(tmp_path) == [line]
    assert line == {'marker': 'run-2', 'mode': 'serving', 'status': 'failed', 'server': server_now, 'changed': True,
                    'pid': None, 'seconds_to_clean': 1.5, 'seconds_to_ready': None, 'gpus_verified': 8,
                    'gpus_serving': [], 'message': masked, 'rollback': None, 'finished': WALL_ISO}
    assert deps.warnings == []


def test_without_a_record_before_the_failed_record_has_no_previous(node, tmp_path):
    p = params(tmp_path)
    got, timeline = recover(p, Deps(), {'stopped': STOPPED, 'pid': PID})
    assert read_json(tmp_path / 'server.json') == failed_record(p, {}, PID, FAILED, None)
    assert got.msg == FAILED + (' This node now runs NO SGLang server: its old server was stopped and the new one '
                                '(run-2) failed and was stopped.')


def test_a_failure_before_the_start_records_pid_0_and_stops_nothing(node, tmp_path):
    p = params(tmp_path)
    deps = Deps()
    got, timeline = recover(p, deps, {'stopped': STOPPED, 'pid': None}, previous(tmp_path))
    assert read_json(tmp_path / 'server.json')['pid'] == 0
    assert [name for name, arg in deps.calls] == ['find'] and 'cleanup' not in got.result
    assert got.msg.endswith('its old server (run-1) was stopped and the new one (run-2) failed.')


@pytest.mark.parametrize('record', [None, 'no history'])
def test_without_a_record_or_a_history_nothing_is_written_there(node, tmp_path, record):
    if record:
        record = dict(params(tmp_path)['record'], history=None)
    deps = Deps()
    got, timeline = recover(params(tmp_path, record=record), deps, {'stopped': STOPPED, 'pid': PID}, previous(tmp_path))
    assert os.path.lexists(str(tmp_path / 'server.json')) is bool(record)
    assert not os.path.lexists(str(tmp_path / 'history.jsonl'))
    assert got.result['server_now'] == 'none' and got.result['launch']['status'] == 'failed'
    assert [name for name, arg in deps.calls] == ['stop', 'find'] and deps.warnings == []
    # without a record, the new one has no marker to name
    assert ('the new one (%s) failed' % ('run-2' if record else None)) in got.msg


def test_a_record_or_history_that_cannot_be_written_is_a_warning(node, tmp_path):
    absent = tmp_path / 'absent'
    p = params(tmp_path, record=dict(params(tmp_path)['record'], path=str(absent / 'server.json'),
                                     history=str(absent / 'history.jsonl')))
    deps = Deps()
    got, timeline = recover(p, deps, {'stopped': STOPPED, 'pid': PID}, previous(tmp_path))
    assert got.result['server_now'] == 'none'
    assert len(deps.warnings) == 2
    assert deps.warnings[0].startswith('the failed launch could not be recorded: cannot write %s' % (absent / 'server.json'))
    assert deps.warnings[1].startswith('the failed launch could not be added to the run history: cannot add to %s'
                                       % (absent / 'history.jsonl'))


def test_a_stop_that_failed_after_its_signal_counts_the_old_server_as_stopped(node, tmp_path):
    p = params(tmp_path)
    deps = Deps()
    result = {'stop_failed': True, 'signalled': True, 'lock_lost': False, 'ready': False, 'pid': None,
              'stopped': {'signalled': True}, 'said': []}
    got, timeline = recover(p, deps, result, previous(tmp_path), msg='3 request(s) still in flight')
    assert read_json(tmp_path / 'server.json') == failed_record(p, {}, 0, '3 request(s) still in flight',
                                                                previous(tmp_path))
    # nothing was started: nothing to stop, but what is left is searched for
    assert [name for name, arg in deps.calls] == ['find']
    assert got.msg == ('3 request(s) still in flight This node now runs NO SGLang server: its old server (run-1) was '
                       'stopped and the new one (run-2) failed.')
    r = got.result
    assert (r['server_now'], r['changed']) == ('none', True)
    line = history(tmp_path)[0]
    assert (line['status'], line['server'], line['seconds_to_clean'], line['gpus_verified']) == \
        ('failed', 'none', None, None)


def test_a_stop_that_failed_before_its_signal_leaves_the_old_server_running(node, tmp_path):
    deps = Deps()
    result = {'stop_failed': True, 'signalled': False, 'lock_lost': False, 'ready': False, 'pid': None,
              'stopped': {'signalled': False}, 'said': []}
    got, timeline = recover(params(tmp_path, rollback=True), deps, result, previous(tmp_path),
                            msg='3 request(s) still in flight')
    assert got.msg == '3 request(s) still in flight The running server was not touched.'
    assert (got.result['server_now'], got.result['changed']) == ('old', False)
    assert deps.calls == [] and not os.path.lexists(str(tmp_path / 'server.json'))
    assert not os.path.lexists(str(tmp_path / 'history.jsonl'))


@as_root
def test_a_failed_stop_of_the_failed_server_says_so_and_forbids_the_rollback(node, tmp_path):
    run_dir(tmp_path / 'runs' / 'run-1')
    node['stop'] = _sglang.ActionFailed('the server %d did not exit (api_key=%s)' % (PID, SECRET), {'signalled': True})
    deps = Deps()
    got, timeline = recover(params(tmp_path, rollback=True), deps, {'stopped': STOPPED, 'pid': PID}, previous(tmp_path))
    stop_failure = 'the server %d did not exit (api_key=%s)' % (PID, MASK)
    assert 'Stopping the failed launch failed too, so the previous configuration was not relaunched: ' \
        + stop_failure in got.msg
    assert SECRET not in got.msg
    # no rollback: the failed server may still hold its GPUs
    assert [name for name, arg in deps.calls] == ['stop', 'find']
    r = got.result
    assert (r['rollback'], r['cleanup'], r['server_now']) == (None, {'signalled': True}, 'none')
    assert timeline.done == [{'action': 'stop', 'of': 'the failed server', 'failed': True, 'seconds': 0.0}]
    assert r['launch']['message'] == FAILED + ' Stopping the failed launch failed too: ' + stop_failure
    assert history(tmp_path)[0]['message'] == r['launch']['message']


def test_a_failed_stop_of_the_failed_server_without_a_rollback_asked_for(node, tmp_path):
    node['stop'] = _sglang.ActionFailed('the server %d did not exit' % PID, {'signalled': True})
    got, timeline = recover(params(tmp_path), Deps(), {'stopped': STOPPED, 'pid': PID}, previous(tmp_path))
    assert ' Stopping the failed launch failed too: the server %d did not exit' % PID in got.msg
    assert 'was not relaunched' not in got.msg


def test_without_stop_options_the_failed_server_is_left_as_it_is(node, tmp_path):
    log = tmp_path / 'run-2.log'
    log.write_text('loading\nValueError: bad key %s\n' % SECRET)
    deps = Deps()
    p = params(tmp_path, stop=None, log_path=str(log), log_lines=5)
    got, timeline = recover(p, deps, {'ready': False, 'pid': PID}, previous(tmp_path))
    assert deps.calls == [] and 'cleanup' not in got.result
    assert got.msg == (FAILED + ' The running server was not touched. Stopping the failed launch failed too: no stop '
                       'options (stop) were given, so the failed server %d was left as it is Last 5 lines of %s '
                       '(secrets masked): loading\nValueError: bad key %s' % (PID, log, MASK))
    assert got.result['server_now'] == 'old'


def test_the_log_tail_of_the_failure_comes_first(node, tmp_path):
    log = tmp_path / 'run-2.log'
    log.write_text('from the file\n')
    got, timeline = recover(params(tmp_path, log_path=str(log)), Deps(),
                            {'stopped': STOPPED, 'pid': PID, 'log_tail': ['from the failure']}, previous(tmp_path))
    assert got.msg.endswith('Last 50 lines of %s (secrets masked): from the failure' % log)


# -- the run directory of the dumps ------------------------------------------------------------------------------

@as_root
@pytest.mark.parametrize('dumped, made, kept', [(False, True, False), (True, True, True), (False, False, True)])
def test_the_run_directory_of_the_dumps_goes_only_where_this_call_made_it_and_it_is_empty(node, tmp_path, dumped,
                                                                                          made, kept):
    dumps = tmp_path / 'dumps'
    dumps.mkdir(mode=0o755)
    dump = {'root': str(dumps), 'name': 'run-2', 'owner': SERVER_UID, 'group': DUMP_GID, 'min_free_gb': 0.0}
    DumpDir(dump['root'], dump['name'], SERVER_UID, DUMP_GID).create()
    if dumped:
        (dumps / 'run-2' / 'probe.pt').write_text('x')
    deps = Deps()
    got, timeline = recover(params(tmp_path, dump_dir=dump), deps, {'signalled': False}, previous(tmp_path),
                            made={'dump_made': made})
    assert os.path.lexists(str(dumps / 'run-2')) is kept
    assert deps.warnings == [] and got.result['server_now'] == 'old'


def test_a_run_directory_of_dumps_that_cannot_be_removed_is_a_warning(node, tmp_path):
    dump = {'root': str(tmp_path / 'absent'), 'name': 'run-2', 'owner': SERVER_UID, 'group': DUMP_GID}
    deps = Deps()
    recover(params(tmp_path, dump_dir=dump), deps, {'signalled': False}, made={'dump_made': True})
    assert len(deps.warnings) == 1
    assert deps.warnings[0].startswith('the empty run directory %s/run-2 could not be removed: the dump root'
                                       % (tmp_path / 'absent'))


# -- what the supervisor says of a failed unit or container ------------------------------------------------------

UNIT = {'name': 'x.service', 'path': '/etc/systemd/system/x.service', 'content': '[Service]\n', 'enable': False,
        'migrate': None}
SHOW = 'ActiveState=failed\nSubState=failed\nResult=exit-code\nExecMainStatus=1\nNRestarts=3\n'


def test_a_unit_that_failed_while_it_loaded_is_described_and_stopped(node, tmp_path):
    log = tmp_path / 'run-2.log'
    log.write_text('loading\napi_key %s\n' % SECRET)
    deps = Deps([(['systemctl', 'show'], (0, SHOW, '')),
                 (['journalctl'], (0, 'Started x.service.\nserver_args api_key %s\nx.service: Failed.\n' % SECRET, ''))])
    p = params(tmp_path, start={'kind': 'systemd', 'unit': UNIT}, log_path=str(log))
    got, timeline = recover(p, deps, {'signalled': False, 'ready': False, 'pid': None, 'started': STARTED})
    assert deps.named('run') == [
        ['systemctl', 'show', '--property=ActiveState,SubState,Result,ExecMainStatus,NRestarts', '--', 'x.service'],
        ['journalctl', '--unit=x.service', '--since=@%d' % STARTED, '--lines=50', '--no-pager', '--output=short-iso'],
        ['systemctl', 'stop', '--', 'x.service']]
    assert got.msg == (
        FAILED + ' The unit x.service: ActiveState=failed SubState=failed Result=exit-code ExecMainStatus=1 '
        'NRestarts=3. Last 50 lines of %s (secrets masked):\nloading\napi_key %s Last lines of its journal:\n'
        'Started x.service.\nserver_args api_key %s\nx.service: Failed. The running server was not touched.'
        % (log, MASK, MASK))
    assert SECRET not in got.msg
    # said once: the report adds no log tail of its own after the unit's
    assert got.msg.count('lines of %s' % log) == 1


def test_a_unit_s_log_tail_is_not_repeated_where_the_failure_has_one(node, tmp_path):
    log = tmp_path / 'run-2.log'
    log.write_text('from the file\n')
    deps = Deps([(['systemctl', 'show'], (0, SHOW, '')), (['journalctl'], (1, '', 'No journal files were found.\n'))])
    p = params(tmp_path, start={'kind': 'systemd', 'unit': UNIT}, log_path=str(log))
    failed = 'the server exited. Last 10 lines of %s (secrets masked): boom' % log
    got, timeline = recover(p, deps, {'signalled': False, 'ready': False, 'pid': None, 'started': STARTED}, msg=failed)
    assert 'from the file' not in got.msg
    assert got.msg.startswith(failed + ' The unit x.service: ActiveState=failed')
    assert 'Last lines of its journal:\nNo journal files were found.' in got.msg


@pytest.mark.parametrize('result', [
    # a server that answered ready and then failed its checks
    {'signalled': False, 'ready': True, 'pid': None, 'started': STARTED},
    # the stop failed: nothing was started
    {'stop_failed': True, 'signalled': False, 'ready': False, 'pid': None, 'started': STARTED},
    # a failure before the start
    {'signalled': False, 'ready': False, 'pid': None},
])
@pytest.mark.parametrize('start', [{'kind': 'systemd', 'unit': UNIT}, {'kind': 'docker', 'container': 'sglang-run-2'}])
def test_the_supervisor_is_not_asked_where_its_server_did_not_fail_while_it_started(node, tmp_path, result, start):
    deps = Deps()
    got, timeline = recover(params(tmp_path, start=start), deps, result)
    assert deps.named('run') == []
    assert got.msg == FAILED + ' The running server was not touched.'


def test_a_process_start_asks_no_supervisor(node, tmp_path):
    deps = Deps()
    got, timeline = recover(params(tmp_path), deps, {'signalled': False, 'ready': False, 'started': STARTED})
    assert deps.calls == [] and got.msg == FAILED + ' The running server was not touched.'


@pytest.mark.parametrize('engine', ['docker', 'podman'])
def test_a_container_that_failed_while_it_loaded_is_described(node, tmp_path, engine):
    inspect = [{'State': {'Status': 'exited', 'ExitCode': 1, 'Error': ''}, 'RestartCount': 0}]
    deps = Deps([([engine, 'inspect'], (0, json.dumps(inspect), '')),
                 ([engine, 'logs'], (0, 'loading\nValueError: key %s\n' % SECRET, 'a warning\n'))])
    p = params(tmp_path, start={'kind': engine, 'container': 'sglang-run-2', 'argv': []}, log_lines=20)
    got, timeline = recover(p, deps, {'signalled': False, 'ready': False, 'pid': None, 'started': STARTED})
    assert deps.named('run') == [[engine, 'inspect', '--type', 'container', '--', 'sglang-run-2'],
                                 [engine, 'logs', '--tail', '20', '--', 'sglang-run-2']]
    assert got.msg == (FAILED + ' The container sglang-run-2: Status=exited ExitCode=1 Error= RestartCount=0. Last lines '
                       'of %s logs (secrets masked):\nloading\nValueError: key %s\na warning The running server was '
                       'not touched.' % (engine, MASK))


# -- the rollback ------------------------------------------------------------------------------------------------

@as_root
@pytest.mark.parametrize('kind', ['process', 'systemd', 'docker'])
def test_the_rollback_relaunches_the_previous_configuration_as_it_was_recorded(node, tmp_path, kind):
    relaunch = {'process': {'kind': 'process', 'argv': ['/opt/sglang/bin/python', '-m', 'sglang.launch_server']},
                'systemd': {'kind': 'systemd', 'unit': dict(UNIT, name='run-1.service', migrate={'from': 'old.service'})},
                'docker': {'kind': 'docker', 'container': 'sglang-run-1', 'argv': ['--model', 'm']}}[kind]
    before = previous(tmp_path, relaunch=relaunch)
    run_dir(before['run_dir'])
    p = params(tmp_path, rollback=True)
    deps = Deps()
    got, timeline = recover(p, deps, {'stopped': STOPPED, 'pid': PID, 'ready': False}, before)
    names = [name for name, arg in deps.calls]
    assert names == ['stop', 'find'] + (['run'] if kind == 'docker' else []) + ['ready']
    if kind == 'docker':
        # its container, exited since the stop, holds the name
        assert deps.named('run') == [['docker', 'rm', '--', 'sglang-run-1']]
    again = deps.named('ready')[0]
    expected = dict(relaunch, unit=dict(relaunch['unit'], migrate=None)) if kind == 'systemd' else relaunch
    assert again['start'] == expected
    # the record is not changed by the relaunch
    assert before['relaunch'] == relaunch and (kind != 'systemd' or relaunch['unit']['migrate'] == {'from': 'old.service'})
    assert again['stop'] is None
    assert (again['url'], again['log_path']) == ('http://127.0.0.1:30001', '/var/log/sglang/run-1.log')
    # a record without the checks it passed (an earlier release's): this call's, with the record's GPUs and values
    assert again['checks'] == dict(p['checks'], dump_dir=None, expected_info={'tp_size': 2}, gpus=[0, 1], api_key=None)
    assert again['path'] == p['path']
    assert again['record'] == {'path': str(tmp_path / 'server.json'), 'dump_patterns': ['*.pt'],
                               'fields': dict(before, rolled_back_from='run-2', dump_dir=None)}
    r = got.result
    assert r['rollback'] == {'ok': True, 'marker': 'run-1', 'pid': 5100, 'gpus_serving': [0, 1], 'message': None,
                             'dump_dir': None, 'manifest_error': None}
    assert r['server_now'] == 'rollback'
    assert got.msg == FAILED + ' The previous configuration (run-1) was relaunched and passed its checks: run-1 serves again.'
    assert timeline.done[-1] == {'action': 'rollback', 'marker': 'run-1', 'pid': 5100, 'seconds': 0.0}
    # the failed launch was recorded before the relaunch (which records itself, here a stand-in)
    assert read_json(tmp_path / 'server.json')['status'] == 'failed'
    line = history(tmp_path)[0]
    assert (line['server'], line['gpus_serving'], line['rollback']) == ('rollback', [0, 1], r['rollback'])
    # the previous run's directory is its own, kept
    assert os.path.isfile(os.path.join(before['run_dir'], 'server.env'))


def test_the_record_keeps_the_checks_a_server_passed_but_its_api_key():
    checks = {'gpus': [0, 1], 'probe': False, 'schedulers': 2, 'api_key': 'sk-secret1', 'min_used_mib': 1024}
    assert recovery.recorded_checks(checks, '/health') == {'gpus': [0, 1], 'probe': False, 'schedulers': 2,
                                                           'min_used_mib': 1024, 'path': '/health'}


@as_root
def test_a_record_that_keeps_its_checks_is_checked_as_it_was_whatever_this_call_checks(node, tmp_path):
    """A worker of a multi-node server: its record says /health, no probe, its schedulers on its GPUs; this call's own
    checks (a probe, a stricter memory floor) are not the previous configuration's."""
    kept = {'gpus': [0, 1], 'probe': False, 'schedulers': 2, 'min_used_mib': 1024, 'dump_dir': '/data/hs/old',
            'path': '/health'}
    before = previous(tmp_path, checks=kept)
    run_dir(before['run_dir'])
    deps = Deps()
    p = params(tmp_path)
    p['checks'] = dict(p['checks'] or {}, probe=True, schedulers=0, min_used_mib=10 ** 7)
    back = recovery.rollback(p, deps, before, Timeline(deps.clock))
    again = deps.named('ready')[0]
    assert back['ok'] is True
    assert again['checks'] == {'gpus': [0, 1], 'probe': False, 'schedulers': 2, 'min_used_mib': 1024,
                               'dump_dir': None, 'api_key': None}
    assert again['path'] == '/health'


@as_root
def test_the_rollback_checks_nothing_where_no_checks_were_asked_for(node, tmp_path):
    before = previous(tmp_path)
    run_dir(before['run_dir'])
    deps = Deps()
    back = recovery.rollback(params(tmp_path, checks=None), deps, before, Timeline(deps.clock))
    assert back['ok'] is True and deps.named('ready')[0]['checks'] is None


@as_root
@pytest.mark.parametrize('case', ['rollback not asked', 'previous failed', 'old not stopped', 'no previous'])
def test_no_rollback_where_it_was_not_asked_for_or_has_nothing_to_start(node, tmp_path, case):
    before = previous(tmp_path, status='failed' if case == 'previous failed' else 'ok')
    run_dir(before['run_dir'])
    result = {'signalled': False} if case == 'old not stopped' else {'stopped': STOPPED, 'pid': PID}
    deps = Deps()
    got, timeline = recover(params(tmp_path, rollback=case != 'rollback not asked'), deps, result,
                            {} if case == 'no previous' else before)
    assert deps.named('ready') == [] and got.result['rollback'] is None
    assert 'relaunched' not in got.msg and 'rollback' not in got.msg


@as_root
@pytest.mark.parametrize('supervisor, line', [
    # a process's environment file is read by a shell; a unit's by systemd's EnvironmentFile=
    ('process', "SGLANG_HS_DUMP_DIR='%s'"),
    ('systemd', 'SGLANG_HS_DUMP_DIR="%s"'),
])
@pytest.mark.parametrize('env, expected', [
    # the line that names the old directory replaced, the others kept
    (ENV, 'CUDA_VISIBLE_DEVICES=0,1\n%s\nSGLANG_LOG_LEVEL=info\n'),
    # none: added
    ('CUDA_VISIBLE_DEVICES=0,1\n', 'CUDA_VISIBLE_DEVICES=0,1\n%s\n'),
])
def test_the_rollback_dumps_into_a_fresh_run_directory_beside_the_previous_one(node, tmp_path, supervisor, line, env,
                                                                               expected):
    # a dump root whose path needs quoting
    dumps = tmp_path / 'hs dumps'
    dumps.mkdir(mode=0o755)
    DumpDir(str(dumps), 'run-1', SERVER_UID, DUMP_GID).create()
    (dumps / 'run-1' / 'earlier.pt').write_text('x')
    old = str(dumps / 'run-1')
    before = previous(tmp_path, supervisor=supervisor, dump_dir=old)
    run = run_dir(before['run_dir'], env=env)
    # the parameters' owner is not the old directory's: the fresh one is owned as the old one is
    p = params(tmp_path, rollback=True, dump_dir={'root': str(dumps), 'name': 'run-2', 'owner': 0, 'group': 0})
    deps = Deps()
    back = recovery.rollback(p, deps, before, Timeline(deps.clock), random_hex=lambda: 'deadbeef')
    fresh = old + '-rollback-deadbeef'
    assert back == {'ok': True, 'marker': 'run-1', 'pid': 5100, 'gpus_serving': [0, 1], 'message': None,
                    'dump_dir': fresh, 'manifest_error': None}
    st = os.lstat(fresh)
    assert (stat.S_ISDIR(st.st_mode), st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == \
        (True, SERVER_UID, DUMP_GID, 0o2750)
    assert os.listdir(fresh) == [] and os.listdir(old) == ['earlier.pt']
    env_path = os.path.join(run, 'server.env')
    with open(env_path) as f:
        assert f.read() == expected % (line % fresh)
    st = os.lstat(env_path)
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o600, 0, 0)
    again = deps.named('ready')[0]
    assert again['checks']['dump_dir'] == fresh and again['record']['fields']['dump_dir'] == fresh


@as_root
def test_a_previous_run_directory_of_dumps_that_is_gone_is_made_afresh_for_the_parameters_owner(node, tmp_path):
    dumps = tmp_path / 'dumps'
    dumps.mkdir(mode=0o755)
    before = previous(tmp_path, dump_dir=str(dumps / 'run-1'))
    run_dir(before['run_dir'])
    p = params(tmp_path, dump_dir={'root': str(dumps), 'name': 'run-2', 'owner': SERVER_UID, 'group': DUMP_GID})
    deps = Deps()
    back = recovery.rollback(p, deps, before, Timeline(deps.clock), random_hex=lambda: '0badcafe')
    st = os.lstat(str(dumps / 'run-1-rollback-0badcafe'))
    assert back['ok'] is True and (st.st_uid, st.st_gid) == (SERVER_UID, DUMP_GID)


@as_root
def test_a_fresh_run_directory_of_dumps_that_cannot_be_made_fails_the_rollback(node, tmp_path):
    dumps = tmp_path / 'dumps'
    dumps.mkdir(mode=0o755)
    DumpDir(str(dumps), 'run-1', SERVER_UID, DUMP_GID).create()
    # already there: never written into
    DumpDir(str(dumps), 'run-1-rollback-deadbeef', SERVER_UID, DUMP_GID).create()
    before = previous(tmp_path, dump_dir=str(dumps / 'run-1'))
    run_dir(before['run_dir'])
    deps = Deps()
    back = recovery.rollback(params(tmp_path), deps, before, Timeline(deps.clock), random_hex=lambda: 'deadbeef')
    assert (back['ok'], back['pid'], back['gpus_serving']) == (False, None, [])
    assert back['message'].startswith('cannot make a fresh run directory for the previous configuration\'s dumps: The '
                                      'run directory %s already exists' % (dumps / 'run-1-rollback-deadbeef'))
    assert deps.named('ready') == []
    with open(os.path.join(before['run_dir'], 'server.env')) as f:
        assert f.read() == ENV


@as_root
def test_an_environment_file_that_cannot_be_rewritten_fails_the_rollback(node, tmp_path):
    dumps = tmp_path / 'dumps'
    dumps.mkdir(mode=0o755)
    DumpDir(str(dumps), 'run-1', SERVER_UID, DUMP_GID).create()
    before = previous(tmp_path, dump_dir=str(dumps / 'run-1'))
    run = run_dir(before['run_dir'])
    # the temporary file that the rewrite makes beside server.env cannot be made
    os.mkdir(os.path.join(run, 'server.env.%d.tmp' % os.getpid()))
    deps = Deps()
    # a rollback that failed, with the reason: the report, server_now and the history's line follow
    back = recovery.rollback(params(tmp_path), deps, before, Timeline(deps.clock), random_hex=lambda: 'deadbeef')
    assert (back['ok'], back['pid']) == (False, None)
    assert 'cannot write %s' % os.path.join(run, 'server.env') in back['message']
    assert deps.named('ready') == []
    # and no orphan fresh directory
    assert not os.path.lexists(str(dumps / 'run-1-rollback-deadbeef'))


def refuse(tmp_path, case):
    """The record of run-1 whose run directory cannot be trusted or read (CASE), and the message's start."""
    before = previous(tmp_path)
    path = before['run_dir']
    if case == 'another owner':
        run_dir(path, uid=SERVER_UID)
        return before, ('The previous run directory %s is not root\'s alone (owner UID %d, mode 0750): '
                        % (path, SERVER_UID))
    if case == 'another group':
        run_dir(path, gid=DUMP_GID)
        # a group that cannot write it is no harm
        return before, None
    if case == 'group-writable':
        run_dir(path, mode=0o770)
        return before, 'The previous run directory %s is not root\'s alone (owner UID 0, mode 0770): ' % path
    if case == 'writable by others':
        run_dir(path, mode=0o752)
        return before, 'The previous run directory %s is not root\'s alone (owner UID 0, mode 0752): ' % path
    if case == 'a link':
        os.makedirs(str(tmp_path / 'runs'))
        os.symlink(run_dir(tmp_path / 'elsewhere'), path)
        return before, 'The previous run directory %s is not root\'s alone (owner UID 0, mode 0777): ' % path
    if case == 'an environment file that is a link':
        run_dir(path, env=None)
        (tmp_path / 'env').write_text(ENV)
        os.symlink(str(tmp_path / 'env'), os.path.join(path, 'server.env'))
        return before, ('The previous run directory %s is not root\'s alone (owner UID 0, mode 0750, its server.env is '
                        'a link): ' % path)
    if case == 'no environment file':
        run_dir(path, env=None)
        return before, 'The previous run run-1 left no environment file in %s (records of release 0.1 have none)' % path
    if case == 'no run directory':
        return dict(before, run_dir=None), ('The previous run run-1 left no environment file in its run directory '
                                            '(records of release 0.1 have none)')
    if case == 'a run directory gone':
        return before, 'The previous run run-1 left no environment file in %s' % path
    run_dir(path)
    return dict(before, relaunch=None), ('The previous run run-1 was recorded without how it was started (an earlier '
                                         'release of gpuops.host recorded it)')


CASES = ['another owner', 'another group', 'group-writable', 'writable by others', 'a link',
         'an environment file that is a link', 'no environment file', 'no run directory', 'a run directory gone',
         'no relaunch']


@as_root
@pytest.mark.parametrize('case', CASES)
def test_a_previous_run_that_cannot_be_trusted_or_started_again_is_refused(node, tmp_path, case):
    before, refused = refuse(tmp_path, case)
    deps = Deps()
    got, timeline = recover(params(tmp_path, rollback=True), deps, {'stopped': STOPPED, 'pid': PID}, before)
    back = got.result['rollback']
    if refused is None:
        assert back['ok'] is True and got.result['server_now'] == 'rollback'
        return
    assert deps.named('ready') == []
    assert (back['ok'], back['marker'], back['pid'], back['gpus_serving']) == (False, 'run-1', None, [])
    assert back['message'].startswith(refused)
    assert got.result['server_now'] == 'none'
    assert 'The rollback failed too: ' + refused in got.msg
    assert got.msg.startswith(FAILED + ' This node now runs NO SGLang server: its old server (run-1) was stopped')
    assert timeline.done[-1] == {'action': 'rollback', 'marker': 'run-1', 'failed': True, 'seconds': 0.0}
    line = history(tmp_path)[0]
    assert (line['server'], line['rollback'], line['gpus_serving']) == ('none', back, [])


@as_root
def test_a_rollback_that_fails_its_wait_or_checks_says_why_with_secrets_masked(node, tmp_path):
    node['ready'] = _sglang.ActionFailed('the server at http://127.0.0.1:30001 refused the key %s' % SECRET,
                                         {'ready': False, 'pid': 5100})
    node['left'] = [5100]
    before = previous(tmp_path)
    run_dir(before['run_dir'])
    deps = Deps()
    got, timeline = recover(params(tmp_path, rollback=True), deps, {'stopped': STOPPED, 'pid': PID}, before)
    back = got.result['rollback']
    message = 'the server at http://127.0.0.1:30001 refused the key %s' % MASK
    assert back == {'ok': False, 'marker': 'run-1', 'pid': None, 'gpus_serving': [], 'message': message}
    assert [name for name, arg in deps.calls] == ['stop', 'find', 'ready']
    # the servers left were found before the rollback: what is said of them is what find saw then
    assert got.result['server_now'] == 'unknown'
    assert got.msg == (FAILED + ' SGLang servers are still running on this node: 5100. The rollback failed too: '
                       + message)
    assert SECRET not in json.dumps(got.result) and SECRET not in got.msg


@as_root
def test_a_manifest_error_of_the_rollback_s_record_is_reported(node, tmp_path, monkeypatch):
    def ready(p, deps, actions=None):
        deps.calls.append(('ready', p))
        return {'ready': True, 'pid': 5100, 'record_written': {'manifest_error': 'cannot write the manifest'}}

    monkeypatch.setattr(_sglang, 'ready', ready)
    before = previous(tmp_path)
    run_dir(before['run_dir'])
    deps = Deps()
    back = recovery.rollback(params(tmp_path), deps, before, Timeline(deps.clock))
    assert (back['ok'], back['manifest_error']) == (True, 'cannot write the manifest')


@as_root
def test_a_rollback_asked_for_without_a_record_to_write(node, tmp_path):
    # The module accepts rollback: true without record (its 'before' then comes from stop.record_path)
    before = previous(tmp_path)
    run_dir(before['run_dir'])
    deps = Deps()
    # nowhere to record it: no rollback is attempted, and the report says why
    got, timeline = recover(params(tmp_path, rollback=True, record=None), deps, {'stopped': STOPPED, 'pid': PID}, before)
    assert got.result['server_now'] == 'none' and deps.named('ready') == []
    assert got.result['rollback']['ok'] is False
    assert 'The rollback failed too: no record (record.path) was given' in got.msg

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_server's states (_converge): started - the run directory, then the stop, start, wait, checks and record in
one call (_sglang.ready), or in check mode the stop's own reading and the steps it would take - and stopped, each
with its actions and started with its diff. The stop and ready are recording stand-ins."""

from __future__ import annotations

import json
import os
import stat

import pytest

from ansible_collections.gpuops.host.plugins.module_utils import _converge as converging
from ansible_collections.gpuops.host.plugins.module_utils import _recovery
from ansible_collections.gpuops.host.plugins.module_utils import _server_config as config
from ansible_collections.gpuops.host.plugins.module_utils import _sglang

as_root = pytest.mark.skipif(os.geteuid() != 0, reason='the directories and the dump directory are root\'s: needs root')
# the server's user and the dump group, whom the run directory of the dumps belongs to
SERVER_UID, DUMP_GID = 1001, 2001


class Deps:
    def __init__(self, check_mode=False):
        self.check_mode = check_mode
        self.clock = lambda: 0.0
        self.wall_clock = lambda: 1796440000.7
        self.run = lambda argv, environ: (0, '', '')


IDENTITY = {'mode': 'serving', 'argv': ['/opt/sglang/bin/python', '-m', 'sglang.launch_server', '--port', '30000'],
            'sglang': '0.5.23'}
NEW = dict(IDENTITY, sglang='0.5.24')


@pytest.fixture
def steps(monkeypatch):
    """_sglang.stop and _sglang.ready, recorded with what each got (the stop: its parameters and whether check mode
    was on); FAIL names those that fail."""
    calls, fail = [], {}

    def stop(p, deps):
        calls.append(('stop', p, deps.check_mode))
        if 'stop' in fail:
            raise _sglang.ActionFailed('2 request(s) still in flight', {'signalled': False})
        return {'changed': not deps.check_mode, 'servers': [{'pid': 31}, {'pid': 32}], 'summary': {}}

    def ready(p, deps, actions=None):
        calls.append(('ready', p, deps.check_mode))
        with actions.step('wait', path=p['path']) as entry:
            entry['ready'] = 'ready' not in fail
        if 'ready' in fail:
            raise _sglang.ActionFailed('the SGLang server 4200 exited while loading', {'ready': False, 'pid': 4200})
        return {'changed': True, 'ready': True, 'pid': 4200}

    monkeypatch.setattr(_sglang, 'stop', stop)
    monkeypatch.setattr(_sglang, 'ready', ready)
    return calls, fail


def params(tmp_path, **changes):
    record = str(tmp_path / 'server.json')
    p = {'state': 'started', 'url': 'http://127.0.0.1:30000', 'path': '/health', 'command': None,
         'secret_server_args': {},
         'stop': {'record_path': record, 'timeout': 600, 'lock': {'path': '/run/gpuops.lock', 'take': False}},
         'start': {'kind': 'systemd', 'unit': {}},
         'checks': {'dump_dir': '/data/hs/run-1', 'expected_info': {'tp_size': 2}, 'gpus': [0, 1]},
         'record': {'path': record, 'fields': {'identity': NEW}, 'entry': {}}}
    p.update(changes)
    return p


def recorded(tmp_path, status):
    (tmp_path / 'server.json').write_text(json.dumps({'status': status, 'pid': 31, 'start': 7, 'identity': IDENTITY}))


def test_check_mode_reads_the_stop_without_its_lock_and_lists_every_step_it_would_take(steps, tmp_path):
    calls = steps[0]
    result = converging.converge(params(tmp_path), Deps(check_mode=True))
    assert [(name, check_mode) for name, p, check_mode in calls] == [('stop', True)]
    stopped = calls[0][1]
    # the stop's own options, the lock among them removed: a reading takes and checks none
    assert stopped['lock'] is None and stopped['timeout'] == 600
    assert result['changed'] is True and result['ready'] is False and result['pid'] is None
    assert result['stopped']['servers'] == [{'pid': 31}, {'pid': 32}]
    assert result['actions'] == [
        {'action': 'stop', 'check_mode': True, 'servers': [31, 32], 'seconds': 0.0},
        {'action': 'start', 'kind': 'systemd', 'seconds': 0.0, 'would': True},
        {'action': 'wait', 'path': '/health', 'seconds': 0.0, 'would': True},
        {'action': 'check', 'check': 'environ', 'seconds': 0.0, 'would': True},
        {'action': 'check', 'check': 'probe', 'seconds': 0.0, 'would': True},
        {'action': 'check', 'check': 'info', 'seconds': 0.0, 'would': True},
        {'action': 'check', 'check': 'gpus', 'seconds': 0.0, 'would': True},
        {'action': 'record', 'path': str(tmp_path / 'server.json'), 'seconds': 0.0, 'would': True}]
    assert result['diff']['after'] == config.render(NEW)


def test_check_mode_of_a_serving_server_would_check_its_gpus_only_and_lists_the_run_directory(steps, tmp_path):
    run = tmp_path / 'run-1'
    p = params(tmp_path, stop=None, record=None, checks={'dump_dir': None, 'expected_info': None, 'gpus': [0]},
               run_dir={'path': str(run)}, environment_file='A=1\n')
    result = converging.converge(p, Deps(check_mode=True))
    assert steps[0] == [] and 'stopped' not in result
    assert [(a['action'], a.get('check'), a.get('would', False)) for a in result['actions']] == [
        ('run_dir', None, False), ('start', None, True), ('wait', None, True), ('check', 'gpus', True)]
    assert result['actions'][0]['files'] == [str(run / 'server.env')] and not run.exists()
    # without checks, none would be made
    result = converging.converge(dict(p, checks=None), Deps(check_mode=True))
    assert [a['action'] for a in result['actions']] == ['run_dir', 'start', 'wait']


def test_started_runs_ready_after_the_run_directory_with_its_timeline(steps, tmp_path):
    calls = steps[0]
    result = converging.converge(params(tmp_path), Deps())
    assert [(name, check_mode) for name, p, check_mode in calls] == [('ready', False)]
    assert calls[0][1]['stop']['lock'] == {'path': '/run/gpuops.lock', 'take': False, 'release': False}
    assert result['actions'] == [{'action': 'wait', 'path': '/health', 'ready': True, 'seconds': 0.0}]
    assert (result['ready'], result['pid'], result['changed']) == (True, 4200, True)


def test_a_failure_carries_the_actions_and_the_diff(steps, tmp_path):
    recorded(tmp_path, 'ok')
    steps[1]['ready'] = True
    with pytest.raises(_sglang.ActionFailed) as e:
        converging.converge(params(tmp_path), Deps())
    assert e.value.msg == 'the SGLang server 4200 exited while loading The running server was not touched.'
    r = e.value.result
    assert r['server_now'] == 'old'
    assert r['pid'] == 4200
    # the failed server is stopped, forced: its dumps are no run
    assert r['actions'] == [{'action': 'wait', 'path': '/health', 'ready': False, 'seconds': 0.0},
                            {'action': 'stop', 'of': 'the failed server', 'servers': [31, 32], 'seconds': 0.0}]
    stopped = steps[0][-1][1]
    assert (stopped['force'], stopped['active_window'], stopped['timeout']) == (True, 0, 0)
    assert r['diff']['before'] == config.render(IDENTITY) and r['diff']['after'] == config.render(NEW)


def test_a_failing_stop_in_check_mode_carries_the_actions_and_the_diff(steps, tmp_path):
    steps[1]['stop'] = True
    with pytest.raises(_sglang.ActionFailed) as e:
        converging.converge(params(tmp_path), Deps(check_mode=True))
    assert e.value.result['actions'] == [{'action': 'stop', 'check_mode': True, 'failed': True, 'seconds': 0.0}]
    assert e.value.result['diff']['after'] == config.render(NEW)


@pytest.mark.parametrize('status, before', [('ok', config.render(IDENTITY)), ('failed', ''), (None, '')])
def test_the_diff_before_is_the_recorded_identity_only_where_its_status_is_ok(steps, tmp_path, status, before):
    if status:
        recorded(tmp_path, status)
    result = converging.converge(params(tmp_path), Deps())
    assert result['diff'] == {'before_header': '%s (recorded)' % (tmp_path / 'server.json'),
                              'after_header': 'started', 'before': before, 'after': config.render(NEW)}
    assert before == '' or 'sglang: 0.5.23' in before


def test_a_refused_run_directory_stops_nothing(steps, tmp_path):
    p = params(tmp_path, run_dir={'path': str(tmp_path / 'run-1')},
               command={'server_args': {'port': 30000}, 'secret_args': [], 'config_file': False,
                        'secrets_path': str(tmp_path / 'elsewhere' / 'secret-args.yaml')},
               secret_server_args={'api_key': 'sk-1234'})
    with pytest.raises(_sglang.ActionFailed) as e:
        converging.converge(p, Deps())
    assert e.value.msg.startswith('the argument file %s is not in the run directory' % p['command']['secrets_path'])
    assert e.value.msg.endswith('; the running server was not touched')
    assert e.value.result['signalled'] is False and steps[0] == []
    assert [(a['action'], a['failed']) for a in e.value.result['actions']] == [('run_dir', True)]


def test_a_secret_in_the_logged_command_is_refused_before_anything(steps, tmp_path):
    p = params(tmp_path, command={'server_args': {'api_key': 'sk-1234'}})
    with pytest.raises(_sglang.ActionFailed) as e:
        converging.converge(p, Deps(check_mode=True))
    assert e.value.result == {'leaked': ['server_args.api_key']} and steps[0] == []


def test_stopped_stops_every_server_with_the_stop_s_options_and_lists_their_pids(steps, tmp_path):
    calls = steps[0]
    p = {'state': 'stopped', 'stop': {'record_path': str(tmp_path / 'server.json'), 'timeout': 30, 'lock': None}}
    result = converging.converge(p, Deps())
    assert [(name, stopping['timeout']) for name, stopping, check_mode in calls] == [('stop', 30)]
    assert result['actions'] == [{'action': 'stop', 'servers': [31, 32], 'seconds': 0.0}]
    assert result['changed'] is True and result['servers'] == [{'pid': 31}, {'pid': 32}]


def test_a_failed_stop_carries_its_actions(steps, tmp_path):
    steps[1]['stop'] = True
    with pytest.raises(_sglang.ActionFailed) as e:
        converging.converge({'state': 'stopped', 'stop': {'timeout': 30}}, Deps())
    assert e.value.result == {'signalled': False, 'actions': [{'action': 'stop', 'failed': True, 'seconds': 0.0}]}


# -- before anything is stopped: the server's directories and the run directory of the dumps (_prepare) ----------

def prepared(tmp_path, **changes):
    """P with its directories (the state directory and its runs) and the run directory run-1 of the dumps under
    the dump root tmp_path/dumps, which is made here (root's, mode 0755: a trusted root)."""
    dumps = tmp_path / 'dumps'
    if not dumps.exists():
        dumps.mkdir(mode=0o755)
    state = tmp_path / 'state'
    return params(tmp_path, directories=[{'path': str(state), 'group': None},
                                         {'path': str(state / 'runs'), 'group': None}],
                  dump_dir={'root': str(dumps), 'name': 'run-1', 'owner': SERVER_UID, 'group': DUMP_GID,
                            'min_free_gb': 0.0}, **changes)


@as_root
@pytest.mark.parametrize('fails', [False, True])
def test_the_directories_and_the_dump_directory_come_first_and_an_empty_one_goes_with_a_failure(steps, tmp_path, fails):
    if fails:
        steps[1]['ready'] = True
    p = prepared(tmp_path)
    if fails:
        with pytest.raises(_sglang.ActionFailed) as e:
            converging.converge(p, Deps())
        assert e.value.msg.startswith('the SGLang server 4200 exited while loading')
        result = e.value.result
    else:
        result = converging.converge(p, Deps())
    assert result['dump_made'] is True
    # a failed server is stopped
    assert [name for name, q, check_mode in steps[0]] == ['ready', 'stop'] if fails else ['ready']
    actions = result['actions']
    assert [a['action'] for a in actions] == ['directories', 'dump_dir', 'wait'] + (['stop'] if fails else [])
    assert actions[0]['made'] == [str(tmp_path / 'state'), str(tmp_path / 'state' / 'runs')]
    assert actions[1]['path'] == '%s/run-1' % (tmp_path / 'dumps') and 'failed' not in actions[1]
    assert isinstance(actions[1]['free_gb'], float) and actions[1]['free_gb'] >= 0
    if fails:
        # made by the call, and left empty by its failed server: removed
        assert not os.path.lexists(str(tmp_path / 'dumps' / 'run-1'))
    else:
        st = os.lstat(str(tmp_path / 'dumps' / 'run-1'))
        assert (stat.S_ISDIR(st.st_mode), st.st_uid, st.st_gid) == (True, SERVER_UID, DUMP_GID)
    st = os.lstat(str(tmp_path / 'state' / 'runs'))
    assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o750, 0)


@as_root
def test_a_dump_root_that_does_not_exist_fails_before_the_server_is_touched(steps, tmp_path):
    p = prepared(tmp_path)
    p['dump_dir']['root'] = str(tmp_path / 'absent')
    with pytest.raises(_sglang.ActionFailed) as e:
        converging.converge(p, Deps())
    assert 'is not a directory on this host' in e.value.msg
    assert e.value.msg.endswith('; the running server was not touched')
    r = e.value.result
    assert r['signalled'] is False and 'dump_made' not in r and steps[0] == []
    assert [(a['action'], a.get('failed', False)) for a in r['actions']] == [('directories', False),
                                                                             ('dump_dir', True)]
    assert not (tmp_path / 'absent').exists()


@as_root
def test_a_refused_directory_fails_before_the_dump_directory_and_the_server(steps, tmp_path):
    (tmp_path / 'elsewhere').mkdir()
    os.symlink(str(tmp_path / 'elsewhere'), str(tmp_path / 'state'))
    with pytest.raises(_sglang.ActionFailed) as e:
        converging.converge(prepared(tmp_path), Deps())
    assert e.value.msg.startswith('cannot make the directories of the server: %s is a link' % (tmp_path / 'state'))
    assert e.value.msg.endswith('; the running server was not touched')
    r = e.value.result
    assert r['signalled'] is False and 'dump_made' not in r and steps[0] == []
    assert [(a['action'], a.get('failed', False)) for a in r['actions']] == [('directories', True)]
    assert os.listdir(str(tmp_path / 'dumps')) == [] and os.listdir(str(tmp_path / 'elsewhere')) == []


@as_root
def test_check_mode_checks_the_directories_and_the_dump_directory_and_makes_nothing(steps, tmp_path):
    result = converging.converge(prepared(tmp_path), Deps(check_mode=True))
    assert result['dump_made'] is False and [name for name, q, check_mode in steps[0]] == ['stop']
    assert [a['action'] for a in result['actions']][:3] == ['directories', 'dump_dir', 'stop']
    assert result['actions'][0]['made'] == [str(tmp_path / 'state'), str(tmp_path / 'state' / 'runs')]
    assert isinstance(result['actions'][1]['free_gb'], float)
    assert sorted(os.listdir(str(tmp_path))) == ['dumps'] and os.listdir(str(tmp_path / 'dumps')) == []


class Engine:
    """A container engine's CLI: its exited containers of the collection's label, each call recorded; RM answers
    `rm`."""

    def __init__(self, exited, rm=(0, '', '')):
        self.calls, self.exited, self.rm = [], exited, rm

    def __call__(self, argv, environ):
        self.calls.append(argv)
        return (0, ''.join(c + '\n' for c in self.exited), '') if argv[1] == 'ps' else self.rm


@pytest.mark.parametrize('engine', ['docker', 'podman'])
@pytest.mark.parametrize('check_mode', [False, True])
def test_a_container_start_frees_its_name_of_exited_containers_before_the_stop(steps, tmp_path, engine, check_mode):
    deps = Deps(check_mode=check_mode)
    deps.run = Engine(['a1b2', 'c3d4'])
    p = params(tmp_path, start={'kind': engine, 'argv': [engine, 'run'], 'container': 'gpuops-sglang-run-2'})
    result = converging.converge(p, deps)
    step = result['actions'][0]
    assert step['action'] == 'old_containers'
    assert step['removed'] == ['%s container a1b2' % engine, '%s container c3d4' % engine]
    assert [a[:2] for a in deps.run.calls] == [[engine, 'ps']] + ([] if check_mode else [[engine, 'rm']])
    # before the stop (check mode) or the call that stops and starts
    assert [name for name, q, dummy in steps[0]] == ['stop' if check_mode else 'ready']


def test_a_container_that_cannot_be_removed_fails_before_the_server_is_touched(steps, tmp_path):
    deps = Deps()
    deps.run = Engine(['a1b2'], rm=(1, '', 'Error: container a1b2 is running'))
    p = params(tmp_path, start={'kind': 'docker', 'argv': ['docker', 'run'], 'container': 'gpuops-sglang-run-2'})
    with pytest.raises(_sglang.ActionFailed) as e:
        converging.converge(p, deps)
    assert e.value.msg.endswith('Error: container a1b2 is running; the running server was not touched')
    assert e.value.result['signalled'] is False and steps[0] == []


def test_a_process_or_a_unit_start_asks_no_engine(steps, tmp_path):
    deps = Deps()
    deps.run = Engine(['a1b2'])
    converging.converge(params(tmp_path), deps)
    assert deps.run.calls == []


@pytest.mark.parametrize('fails', [False, True])
def test_a_lock_to_release_goes_once_the_new_server_is_recorded_and_stays_after_a_failure(
        steps, tmp_path, monkeypatch, fails):
    released = []
    monkeypatch.setattr(_sglang, 'release_lock', lambda options, deps: released.append(options) or
                        {'path': options['path'], 'released': True})
    lock = {'path': '/run/gpuops.lock', 'run': 'r-1', 'take': False, 'release': True}
    p = params(tmp_path, stop=dict(params(tmp_path)['stop'], lock=lock), record=None)
    if fails:
        steps[1]['ready'] = True
        with pytest.raises(_sglang.ActionFailed):
            converging.converge(p, Deps())
    else:
        result = converging.converge(p, Deps())
        assert result['lock'] == {'path': '/run/gpuops.lock', 'released': True}
    # the stop checks the lock and keeps it: the release comes after the start, the wait and the record
    assert steps[0][0][0] == 'ready' and steps[0][0][1]['stop']['lock'] == dict(lock, release=False)
    assert released == ([] if fails else [lock])


@pytest.mark.parametrize('check_mode', [False, True])
def test_absent_stops_every_server_then_removes_what_ran_the_recorded_one(steps, tmp_path, check_mode):
    recorded(tmp_path, 'ok')
    (tmp_path / 'runs' / 'serving-1').mkdir(parents=True)
    p = params(tmp_path, state='absent')
    result = converging.converge(p, Deps(check_mode=check_mode))
    assert [(name, mode) for name, q, mode in steps[0]] == [('stop', check_mode)]
    assert [a['action'] for a in result['actions']] == ['stop', 'remove']
    removed = [str(tmp_path / 'runs' / 'serving-1'), str(tmp_path / 'runs'), str(tmp_path / 'server.json')]
    assert result['removed'] == removed and result['actions'][1]['removed'] == removed
    assert result['changed'] is True
    assert (tmp_path / 'server.json').exists() is check_mode


def test_absent_where_nothing_is_left_changes_nothing(steps, tmp_path, monkeypatch):
    monkeypatch.setattr(_sglang, 'stop', lambda p, deps: {'changed': False, 'servers': [], 'summary': {}})
    result = converging.converge(params(tmp_path, state='absent'), Deps())
    assert (result['changed'], result['removed'], result['kept']) == (False, [], [])


def test_absent_whose_stop_fails_removes_nothing(steps, tmp_path):
    recorded(tmp_path, 'ok')
    steps[1]['stop'] = True
    with pytest.raises(_sglang.ActionFailed) as e:
        converging.converge(params(tmp_path, state='absent'), Deps())
    assert e.value.msg == '2 request(s) still in flight'
    assert (tmp_path / 'server.json').exists()


def test_the_record_of_a_started_server_keeps_the_checks_it_passes_but_the_api_key(steps, tmp_path):
    p = params(tmp_path)
    p['checks'] = dict(p['checks'], api_key='sk-secret1')
    converging.converge(p, Deps())
    fields = steps[0][0][1]['record']['fields']
    assert fields['checks'] == {'dump_dir': '/data/hs/run-1', 'expected_info': {'tp_size': 2}, 'gpus': [0, 1],
                                'path': '/health'}
    assert fields['identity'] == NEW


@pytest.mark.parametrize('ok', [True, False])
def test_relaunch_starts_the_record_s_configuration_again_and_stops_nothing(steps, tmp_path, monkeypatch, ok):
    got = []

    def rollback(p, deps, before, timeline, random_hex=None, failed=None):
        got.append((before, failed))
        return {'ok': ok, 'marker': before['marker'], 'pid': 4400 if ok else None, 'gpus_serving': [0, 1],
                'message': None if ok else 'it exited'}

    monkeypatch.setattr(_recovery, 'rollback', rollback)
    record = {'status': 'ok', 'marker': 'serving-1'}
    p = params(tmp_path, url=None, start=None, stop=None, relaunch={'record': record, 'failed': 'extraction-2'})
    if ok:
        result = converging.converge(p, Deps())
        assert (result['changed'], result['pid'], result['rollback']['ok']) == (True, 4400, True)
    else:
        with pytest.raises(_sglang.ActionFailed) as e:
            converging.converge(p, Deps())
        assert e.value.msg == 'starting the configuration of serving-1 again failed: it exited'
        assert e.value.result['rollback']['ok'] is False
    assert got == [(record, 'extraction-2')] and steps[0] == []


# -- launch: the plan, then where it says so the start, in one call --

CASES = json.load(open(os.path.join(os.path.dirname(__file__), 'launch_cases.json')))


@pytest.fixture
def launching(monkeypatch):
    """A launch of the recorded process request, with _server_info.info and started as recording stand-ins: PLAN
    is what info answers (needs_restart False: the server runs as desired), FAIL makes the start fail."""
    from ansible_collections.gpuops.host.plugins.module_utils import _server_info
    case = CASES['process_extraction']
    calls, state = [], {'needs': True, 'fail': False}

    def info(p, deps):
        calls.append(('plan', p))
        return dict(case['plan'], needs_restart=state['needs'], reasons=['mode: serving -> extraction'],
                    changes=[], diff={'before': 'mode: serving\n', 'after': 'mode: extraction\n'},
                    record=dict(case['plan']['record'], mode='serving', marker='serving-1', pid=4100,
                                url='http://127.0.0.1:30000', gpus_serving=[0, 1]))

    def started(p, deps):
        calls.append(('start', p))
        if state['fail']:
            raise _sglang.ActionFailed('the server exited while loading', {'launch': {'status': 'failed'}})
        return {'changed': True, 'ready': True, 'pid': 4200, 'seconds_to_ready': 3.2,
                'stopped': {'summary': {'seconds_to_clean': 1.5, 'gpus_verified': 2}, 'said': ['Stopped pid 4100']},
                'lock': {'released': True}, 'record_written': {'manifest_error': None}, 'diff': {'before': 'x'}}

    monkeypatch.setattr(_server_info, 'info', info)
    monkeypatch.setattr(converging, 'started', started)
    params = {'state': 'started', 'launch': dict(case['launch'], node_name='node1'),
              'secret_server_args': case['secret_server_args'], 'secret_environment': case['secret_environment'],
              'stop': {'dump_patterns': ['*']}}

    def validated(kind, options):
        calls.append(('validated', kind))
        return options

    return params, validated, calls, state


def test_launch_plans_then_starts_with_the_options_the_plan_gives(launching):
    params, validated, calls, state = launching
    result = converging.converge(params, Deps(), validated)
    assert [c[0] if c[0] != 'validated' else c[1] for c in calls] == ['plan', 'plan', 'start', 'start']
    plan_options, start_options = calls[1][1], calls[3][1]
    assert plan_options['config']['mode'] == 'extraction' and plan_options['secret_server_args'] == {
        'api_key': 'sk-secret-1234'}
    assert start_options['start']['kind'] == 'process'
    assert start_options['stop']['lock'] == {'run': 'run-1', 'release': True}
    marker = start_options['record']['fields']['marker']
    assert marker.startswith('extraction-') and '-node1-' in marker
    assert (result['status'], result['server'], result['changed'], result['pid']) == ('launched', 'new', True, 4200)
    assert (result['seconds_to_clean'], result['gpus_verified'], result['lock_released']) == (1.5, 2, 'run-1')
    assert result['said'] == ['Stopped pid 4100'] and result['reasons'] == ['mode: serving -> extraction']
    # the plan's diff: the running server against the desired one
    assert result['diff'] == {'before': 'mode: serving\n', 'after': 'mode: extraction\n'}
    assert result['plan']['needs_restart'] is True


def test_launch_of_a_server_that_runs_as_desired_starts_nothing(launching):
    params, validated, calls, state = launching
    state['needs'] = False
    result = converging.converge(params, Deps(), validated)
    assert [c[0] for c in calls if c[0] != 'validated'] == ['plan']
    assert (result['status'], result['server'], result['changed']) == ('unchanged', 'unchanged', False)
    assert (result['marker'], result['pid'], result['gpus_serving']) == ('serving-1', 4100, [0, 1])


def test_launch_in_check_mode_says_what_it_would_start(launching):
    params, validated, calls, state = launching
    result = converging.converge(params, Deps(check_mode=True), validated)
    assert (result['status'], result['server'], result['pid'], result['changed']) == ('check', 'old', None, True)
    assert 'lock_released' not in result


def test_a_failed_launch_carries_its_plan(launching):
    params, validated, calls, state = launching
    state['fail'] = True
    with pytest.raises(_sglang.ActionFailed) as failed:
        converging.converge(params, Deps(), validated)
    assert failed.value.result['plan']['reasons'] == ['mode: serving -> extraction']
    assert failed.value.result['launch'] == {'status': 'failed'}

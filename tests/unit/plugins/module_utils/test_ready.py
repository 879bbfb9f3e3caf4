# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_server's ready as one call from the stop to the record (_sglang.ready): the order of its steps and what its
result and its failures say, with the stop, the start, the wait and the checks replaced by recording stand-ins."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.host.plugins.module_utils import _sglang
from ansible_collections.gpuops.host.plugins.module_utils import _start as starts
from ansible_collections.gpuops.host.plugins.module_utils._timeline import Timeline


class Deps:
    def __init__(self):
        self.run = lambda argv, environ: (0, '', '')
        self.wall_clock = lambda: 1796440000.7
        self.clock = lambda: 0.0


SUMMARY = {'seconds_to_clean': 2.05, 'gpus_verified': 8}


@pytest.fixture
def steps(monkeypatch):
    """The steps of ready in the order called, with what each got; FAIL names those that fail."""
    calls, fail = [], {}

    def stop(p, deps):
        calls.append(('stop', p))
        if 'stop' in fail:
            failure = {'signalled': False, 'lock_lost': False, 'said': ['Not touched: pid 31']}
            raise _sglang.ActionFailed('2 request(s) still in flight', failure)
        return {'changed': True, 'signalled': True, 'summary': SUMMARY, 'said': [], 'servers': [{'pid': 31}]}

    def start(options, run):
        calls.append(('start', options))
        if 'start' in fail:
            raise starts.StartFailed('Starting the unit failed (systemctl restart -- x.service, exit 1): Job failed',
                                     {'unit_written': True})
        return {'pid': 4200} if options['kind'] == 'process' else {
            'main_process_of': {'kind': 'systemd', 'name': 'x.service'}, 'unit_written': True}

    def ready(p, deps, started=None, actions=None):
        calls.append(('ready', p))
        if actions is not None:
            actions.done.append({'action': 'wait'})
        if 'ready' in fail:
            failure = {'ready': False, 'died': True, 'pid': 4200}
            raise _sglang.ActionFailed('the SGLang server 4200 exited while loading', failure)
        return {'ready': True, 'pid': p.get('pid') or 4300, 'seconds': 4.2, 'record': p.get('record')}

    monkeypatch.setattr(_sglang, 'stop', stop)
    monkeypatch.setattr(starts, 'start', start)
    monkeypatch.setattr(_sglang, '_ready', ready)
    return calls, fail


P = {'url': 'http://127.0.0.1:30000', 'stop': {'timeout': 600, 'record_path': '/var/lib/gpuops/sglang/server.json'},
     'start': {'kind': 'process', 'argv': ['/bin/sh', '-c', 'start']},
     'record': {'path': '/var/lib/gpuops/sglang/server.json', 'fields': {}, 'entry': {'status': 'launched'}}}


def test_the_stop_then_the_start_then_the_wait_in_one_call(steps):
    calls, _fail = steps
    result = _sglang.ready(dict(P), Deps())
    assert [name for name, params in calls] == ['stop', 'start', 'ready']
    waited = calls[2][1]
    assert (waited['pid'], waited['main_process_of']) == (4200, None)
    # the run history's line gets what the stop took
    assert waited['record']['entry'] == {'status': 'launched', 'seconds_to_clean': 2.05, 'gpus_verified': 8}
    assert result['stopped']['summary'] == SUMMARY and result['started'] == 1796440000 and result['changed'] is True


def test_a_unit_is_waited_for_by_its_main_process_and_its_file_is_said(steps):
    calls, _fail = steps
    result = _sglang.ready(dict(P, start={'kind': 'systemd', 'unit': {}}), Deps())
    assert calls[2][1]['main_process_of'] == {'kind': 'systemd', 'name': 'x.service'} and result['unit_written'] is True


def test_a_stop_that_fails_starts_nothing_and_says_it_was_the_stop(steps):
    calls, fail = steps
    fail['stop'] = True
    with pytest.raises(_sglang.ActionFailed) as e:
        _sglang.ready(dict(P), Deps())
    assert [name for name, params in calls] == ['stop']
    r = e.value.result
    assert (r['stop_failed'], r['signalled'], r['lock_lost'], r['ready'], r['pid']) == (True, False, False, False, None)
    assert r['said'] == ['Not touched: pid 31'] and e.value.msg == '2 request(s) still in flight'


def test_a_start_that_fails_after_the_stop_carries_the_stop_and_the_unit_file(steps):
    calls, fail = steps
    fail['start'] = True
    with pytest.raises(_sglang.ActionFailed) as e:
        _sglang.ready(dict(P, start={'kind': 'systemd', 'unit': {}}), Deps())
    assert [name for name, params in calls] == ['stop', 'start']
    r = e.value.result
    assert r['stopped']['summary'] == SUMMARY and r['unit_written'] is True and r['died'] is True
    assert 'stop_failed' not in r and r['started'] == 1796440000


def test_a_server_that_dies_while_loading_fails_with_its_pid_and_the_stop(steps):
    calls, fail = steps
    fail['ready'] = True
    with pytest.raises(_sglang.ActionFailed) as e:
        _sglang.ready(dict(P), Deps())
    assert [name for name, params in calls] == ['stop', 'start', 'ready']
    assert (e.value.result['pid'], e.value.result['stopped']['signalled']) == (4200, True)


def test_without_stop_or_start_it_only_waits(steps):
    calls, _fail = steps
    result = _sglang.ready({'url': P['url'], 'pid': 4200}, Deps())
    assert [name for name, params in calls] == ['ready'] and 'stopped' not in result and result['changed'] is False


def test_its_steps_go_into_the_timeline_given_in_order_a_failing_one_marked(steps):
    dummy, fail = steps
    timeline = Timeline(lambda: 0.0)
    _sglang.ready(dict(P), Deps(), timeline)
    assert timeline.done == [{'action': 'stop', 'servers': [31], 'seconds': 0.0},
                             {'action': 'start', 'kind': 'process', 'pid': 4200, 'seconds': 0.0},
                             {'action': 'wait'}]
    fail['start'] = True
    timeline = Timeline(lambda: 0.0)
    with pytest.raises(_sglang.ActionFailed):
        _sglang.ready(dict(P), Deps(), timeline)
    assert [(a['action'], a.get('failed', False)) for a in timeline.done] == [('stop', False), ('start', True)]

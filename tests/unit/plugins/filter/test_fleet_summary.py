# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet table of a gpuops run, from the roles' documented results as plain dictionaries: every kind of row,
the columns that need a default, the lines in words after the table, and the table so far of a serial rollout."""

from __future__ import annotations

import re

import pytest

from ansible_collections.gpuops.host.plugins.filter.fleet_summary import FilterModule, fleet_summary

MARKER = 'extraction-20260114T101502Z-node1-9f2c4b17'


def restart(server='new', status='changed', reasons=(), mode='extraction', **launch):
    """The variables of a host that went through a restart: the lock's fleet_run_result and sglang_launch_result."""
    result = dict(mode=mode, marker=MARKER, seconds_to_clean=1.16, seconds_to_ready=5.9, gpus_verified=4,
                  gpus_serving=[0, 1, 2, 3], server=server, status=status, reasons=list(reasons))
    result.update(launch)
    return {'fleet_run_result': {'run': 'r', 'action': 'restart', 'mode': mode, 'locked': True},
            'sglang_launch_result': result}


def locked(action, **more):
    """The variables of a host that took the lock for ACTION, with MORE."""
    return dict({'fleet_run_result': {'run': 'r', 'action': action, 'mode': 'serving' if action == 'restart' else action,
                                      'locked': True}}, **more)


def run_left(files, size, ended='drained', marker='extraction-20260113T080000Z-node1-00aa11bb'):
    return {'files': files, 'bytes': size, 'ended': ended, 'marker': marker}


def cells(lines, host):
    """HOST's row as header -> cell (columns are two blanks or more apart; no cell holds two blanks)."""
    header = re.split(r' {2,}', lines[0])
    row = next(line for line in lines[1:] if line.split(' ', 1)[0] == host)
    values = re.split(r' {2,}', row)
    assert len(values) == len(header), lines
    return dict(zip(header, values))


def test_the_table_pads_its_columns_and_the_lines_in_words_follow():
    hostvars = {
        'gpu-node-01': dict(restart(server='none', status='failed', reasons=['sglang_release 0.5.14 -> 0.5.23'],
                                    mode='serving', marker='serving-20260114T101502Z-gpu-node-01-9f2c4b17',
                                    seconds_to_clean=6.12, seconds_to_ready=None, gpus_verified=8, gpus_serving=[]),
                            sglang_gateway_urls=['http://gw:30000'],
                            sglang_gateway_result={'summary': 'LEFT OUT of 1', 'status': 'left out'},
                            sglang_stop_result={'runs': []}),
        'gpu-node-02': {},
    }

    assert fleet_summary(['gpu-node-01', 'gpu-node-02'], ['gpu-node-02'], hostvars) == [
        'host         status     mode     run marker                                     clean s  ready s  GPUs verified'
        '  serving on GPUs  server now  gateway        dumps',
        'gpu-node-01  FAILED     serving  serving-20260114T101502Z-gpu-node-01-9f2c4b17  6.12     -        8            '
        '  -                none        LEFT OUT of 1  -',
        'gpu-node-02  untouched  -        -                                              -        -        -            '
        '  -                -           -              -',
        'gpu-node-01 restart failed: sglang_release 0.5.14 -> 0.5.23',
        'gpu-node-01 now runs NO SGLang server: its old server was stopped and the new one failed.',
        'gpu-node-01 stays out of its SGLang Model Gateways: it failed, and its old server does not serve.',
        'Rollout stopped after gpu-node-01 failed; 1 host(s) never touched: gpu-node-02.',
    ]


@pytest.mark.parametrize('host_vars, failed, row', [
    pytest.param(restart(), False,
                 ['ok', 'extraction', MARKER, '1.16', '5.9', '4', '0,1,2,3', 'new', '-', '-'], id='restart'),
    pytest.param(restart(server='unchanged', seconds_to_clean=None, seconds_to_ready=None, gpus_verified=0), False,
                 ['ok', 'extraction', MARKER, '-', '-', '0', '0,1,2,3', 'unchanged', '-', '-'], id='unchanged'),
    pytest.param(restart(server='none', status='failed', gpus_serving=[], seconds_to_ready=None), True,
                 ['FAILED', 'extraction', MARKER, '1.16', '-', '4', '-', 'none', '-', '-'], id='failed-server-none'),
    pytest.param(restart(server='rollback', status='failed'), True,
                 ['FAILED', 'extraction', MARKER, '1.16', '5.9', '4', '0,1,2,3', 'rollback', '-', '-'],
                 id='failed-rollback'),
    pytest.param(locked('stop', sglang_stop_result={'marker': 'serving-m', 'seconds_to_clean': 2.5, 'gpus_verified': 8}),
                 False, ['ok', 'stop', 'serving-m', '2.5', '-', '8', '-', 'none', '-', '-'], id='stop'),
    pytest.param(locked('verify', gpu_clean_result={'seconds': 0.31, 'gpus_verified': 8}), False,
                 ['ok', 'verify', '-', '0.31', '-', '8', '-', '-', '-', '-'], id='verify'),
    pytest.param(locked('restart'), True, ['FAILED', 'serving', '-', '-', '-', '-', '-', 'untouched', '-', '-'],
                 id='failed-at-the-lock'),
    pytest.param(locked('stop', sglang_stop_signalled=False), True,
                 ['FAILED', 'stop', '-', '-', '-', '-', '-', 'untouched', '-', '-'], id='failed-stop-before-a-signal'),
    pytest.param(locked('stop', sglang_stop_signalled=True), True,
                 ['FAILED', 'stop', '-', '-', '-', '-', '-', 'unverified', '-', '-'], id='failed-stop-after-a-signal'),
    pytest.param(locked('verify'), False, ['ok', 'verify', '-', '-', '-', '-', '-', '-', '-', '-'],
                 id='ok-without-a-result'),
    pytest.param(locked('verify'), True, ['FAILED', 'verify', '-', '-', '-', '-', '-', 'untouched', '-', '-'],
                 id='failed-verify-without-a-result'),
    # An action's result alone makes no row of that action: a stop's result in a restart that failed in its stop.
    pytest.param(locked('restart', sglang_stop_result={'marker': 'm', 'seconds_to_clean': 1.0, 'gpus_verified': 2},
                        sglang_stop_signalled=True), True,
                 ['FAILED', 'serving', '-', '-', '-', '-', '-', 'unverified', '-', '-'], id='restart-failed-in-its-stop'),
    pytest.param(restart(gpus_verified=0, seconds_to_clean=0, marker=''), False,
                 ['ok', 'extraction', '-', '0', '5.9', '0', '0,1,2,3', 'new', '-', '-'], id='zero-is-no-blank'),
])
def test_each_kind_of_row(host_vars, failed, row):
    lines = fleet_summary(['node1'], [] if failed else ['node1'], {'node1': host_vars})

    assert list(cells(lines, 'node1').values()) == ['node1'] + row, lines


@pytest.mark.parametrize('host_vars, gateway', [
    pytest.param(dict(restart(), sglang_gateway_result={'summary': 'back in 2', 'status': 'back in'}), 'back in 2',
                 id='back-in'),
    pytest.param(dict(restart(server='unchanged'), sglang_gateway_urls=['http://gw:30000']), 'untouched',
                 id='urls-and-never-left'),
    pytest.param(dict(restart(), sglang_gateway_urls=['http://gw:30000'], sglang_gateway_result={'status': 'untouched'}),
                 'untouched', id='urls-and-a-result-without-summary'),
    pytest.param(dict(restart(), sglang_gateway_urls=[]), '-', id='no-urls'),
    pytest.param(dict(restart(), sglang_gateway_urls=['http://gw:30000'],
                      sglang_gateway_result={'summary': 'not listed'}), 'not listed', id='not-listed'),
    pytest.param(dict(restart(), sglang_gateway_urls=['http://gw:30000'], sglang_gateway_result={'summary': None}),
                 '-', id='summary-none-stays-blank'),
    pytest.param({'sglang_gateway_urls': ['http://gw:30000']}, 'untouched', id='pending-host-with-urls'),
])
def test_the_gateway_column(host_vars, gateway):
    assert cells(fleet_summary(['node1'], ['node1'], {'node1': host_vars}), 'node1')['gateway'] == gateway


@pytest.mark.parametrize('stop, dumps', [
    pytest.param({'runs': [run_left(1200, 3.4e9)]}, '1200 / 3.4 GB drained', id='drained'),
    pytest.param({'runs': [run_left(17, 51_230_000, 'cut')]}, '17 / 0.1 GB cut', id='cut'),
    pytest.param({'runs': [run_left(0, 0, 'crashed')]}, '0 / 0.0 GB crashed', id='crashed-before-a-dump'),
    pytest.param({'runs': [run_left(3, 2e9, 'running')]}, '3 / 2.0 GB running', id='running'),
    pytest.param({'runs': [run_left(5, 1e9, None)]}, '5 / 1.0 GB', id='no-end-said'),
    pytest.param({'runs': [run_left(1200, 3.4e9), run_left(8, 9.87e9, 'cut')]}, '1200 / 3.4 GB drained, 8 / 9.9 GB cut',
                 id='two-runs'),
    pytest.param({'runs': []}, '-', id='no-run'),
    pytest.param({'marker': 'm'}, '-', id='no-runs-key'),
    pytest.param(None, '-', id='no-stop'),
])
def test_the_dumps_column_shows_the_runs_that_the_stop_left(stop, dumps):
    host_vars = restart()
    if stop is not None:
        host_vars['sglang_stop_result'] = stop

    lines = fleet_summary(['node1'], ['node1'], {'node1': host_vars})

    assert cells(lines, 'node1')['dumps'] == dumps
    assert lines[0].endswith('  gateway  dumps') or lines[0].endswith('  dumps'), lines[0]


def test_a_stop_s_row_shows_its_runs_too():
    host_vars = locked('stop', sglang_stop_result={'marker': 'm', 'seconds_to_clean': 2.5, 'gpus_verified': 8,
                                                   'runs': [run_left(1200, 3.4e9)]})

    row = cells(fleet_summary(['node1'], ['node1'], {'node1': host_vars}), 'node1')

    assert (row['server now'], row['dumps']) == ('none', '1200 / 3.4 GB drained')


@pytest.mark.parametrize('status, verb', [
    ('changed', 'restarted'), ('ok', 'restarted'), ('check', 'would restart'), ('failed', 'restart failed'),
])
def test_a_launch_that_named_its_reasons_gets_a_line(status, verb):
    hostvars = {'node1': restart(status=status, reasons=['the model files changed', 'a restart was asked for (restart)']),
                'node2': restart(status=status)}

    lines = fleet_summary(['node1', 'node2'], ['node1', 'node2'], hostvars)

    assert lines[3:] == ['node1 %s: the model files changed; a restart was asked for (restart)' % verb]


def test_hosts_that_a_rollout_has_not_reached_are_pending_until_one_fails():
    """The table so far after the first batch of a serial rollout: the later batches' hosts have no result yet."""
    hostvars = {'node1': restart(), 'node2': {}, 'node3': {'sglang_gateway_urls': ['http://gw:30000']}}

    lines = fleet_summary(['node1', 'node2', 'node3'], ['node1', 'node2', 'node3'], hostvars)

    assert [cells(lines, host)['status'] for host in ('node1', 'node2', 'node3')] == ['ok', 'pending', 'pending']
    assert len(lines) == 4, lines


def test_a_failed_rollout_names_its_failed_hosts_in_play_order_and_the_hosts_it_never_touched():
    hostvars = {'node1': restart(server='none', status='failed'), 'node2': restart(),
                'node3': dict(restart(server='old', status='failed'), sglang_gateway_result={'status': 'left out'}),
                'node4': {}, 'node5': {}}
    hosts = ['node1', 'node2', 'node3', 'node4', 'node5']

    lines = fleet_summary(hosts, ['node2', 'node4', 'node5'], hostvars)

    assert [cells(lines, host)['status'] for host in hosts] == ['FAILED', 'ok', 'FAILED', 'untouched', 'untouched']
    assert lines[6:] == [
        'node1 now runs NO SGLang server: its old server was stopped and the new one failed.',
        'node3 stays out of its SGLang Model Gateways: it failed, and its old server does not serve.',
        'Rollout stopped after node1, node3 failed; 2 host(s) never touched: node4, node5.',
    ]


def test_a_failed_host_among_hosts_that_all_went_through_stops_nothing():
    lines = fleet_summary(['node1', 'node2'], ['node2'], {'node1': locked('restart'), 'node2': restart()})

    assert not any(line.startswith('Rollout stopped') for line in lines), lines


def test_the_lines_in_words_are_for_failed_hosts_only():
    """A host that went through says nothing more, whatever its server or gateway step says."""
    hostvars = {'node1': dict(restart(server='none'), sglang_gateway_result={'status': 'left out'})}

    assert len(fleet_summary(['node1'], ['node1'], hostvars)) == 2


def test_only_the_documented_variables_are_read_each_once(host_vars):
    hostvars = {'node1': host_vars(dict(restart(reasons=['one']), sglang_stop_result={'runs': []},
                                        sglang_gateway_urls=['http://gw:30000'])),
                'node2': host_vars({})}

    lines = fleet_summary(['node1', 'node2'], ['node1'], hostvars)

    assert cells(lines, 'node1')['status'] == 'ok' and cells(lines, 'node2')['status'] == 'untouched'
    assert hostvars['node1'].reads == {'fleet_run_result': 1, 'sglang_launch_result': 1, 'sglang_stop_result': 1,
                                       'sglang_gateway_urls': 1}


def test_the_filter_is_gpuops_host_fleet_summary():
    assert FilterModule().filters() == {'fleet_summary': fleet_summary}

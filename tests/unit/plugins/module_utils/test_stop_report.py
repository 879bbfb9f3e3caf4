# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a stop did, in figures and in words (_stop_report), from results shaped as sglang_server's stop returns them."""

from __future__ import annotations

from ansible_collections.gpuops.host.plugins.module_utils import _stop_report as report


def server(pid, kind='process', tree=()):
    return {'pid': pid, 'supervisor': {'kind': kind}, 'tree': [{'pid': pid}] + [{'pid': p} for p in tree]}


FOUND = {
    'servers': [server(4200, tree=(4201, 4202)), server(5200, 'systemd', tree=(5201,))],
    'elsewhere': [{'pid': 88}], 'gateways': [], 'others': [], 'comes_back': [],
    'supervised_stops': [{'pid': 5200, 'supervisor': 'systemd', 'name': 'team-sglang.service',
                          'how': 'systemctl stop team-sglang.service', 'seconds': 1.5, 'forced': False}],
    'drains': [{'pid': 4200, 'in_flight': 2, 'lost': 0}, {'pid': 5200, 'in_flight': None, 'lost': 0}],
    'reap': {'elapsed': 0.554, 'verify': {'gpus': {'GPU-a': {}, 'GPU-b': {}}},
             'stopped': [{'pid': 4200, 'signals': ['SIGTERM']}, {'pid': 4202, 'signals': ['SIGTERM', 'SIGKILL']},
                         {'pid': 7, 'signals': ['SIGKILL']}]},
    'recorded': {'marker': 'extraction-1', 'pid': 4200},
    'runs': [],
}


def test_the_summary_counts_what_the_stop_did():
    s = report.summary(FOUND)
    assert (s['servers'], s['elsewhere'], s['marker']) == ([4200, 5200], [88], 'extraction-1')
    assert s['supervisors'] == ['process', 'systemd']
    # a scheduler needed SIGKILL, no main process did: nothing was cut by it, so no request was lost
    assert (s['killed'], s['escalated'], s['exited_on_their_own'], s['lost']) == ([4202], [], False, 0)
    assert (s['in_flight'], s['forced'], s['seconds_to_clean'], s['gpus_verified']) == (2, False, 2.05, 2)


def test_the_summary_names_the_run_whose_lock_the_stop_released():
    assert report.summary(FOUND)['lock_released'] == ''
    held = {'path': '/run/gpuops/lock.json', 'owner': {'run': '20261205T180000Z-7'}, 'taken_over': None}
    assert report.summary(dict(FOUND, lock=dict(held, released=True)))['lock_released'] == '20261205T180000Z-7'
    assert report.summary(dict(FOUND, lock=dict(held, released=False)))['lock_released'] == ''


def test_a_main_process_or_a_supervisor_that_needed_sigkill_makes_the_loss_unknown():
    killed_main = dict(FOUND, reap=dict(FOUND['reap'], stopped=[{'pid': 4200, 'signals': ['SIGTERM', 'SIGKILL']}]))
    assert report.summary(killed_main)['lost'] is None
    escalated = dict(FOUND, supervised_stops=[dict(FOUND['supervised_stops'][0], forced=True)])
    s = report.summary(escalated)
    assert (s['lost'], s['escalated'], s['exited_on_their_own']) == (None, [5200], False)


def test_an_abort_counts_as_forced_and_its_requests_as_lost():
    s = report.summary(dict(FOUND, drains=[{'pid': 4200, 'in_flight': 3, 'lost': 3}]))
    assert (s['forced'], s['lost'], s['in_flight']) == (True, 3, 3)


def test_the_lines_say_how_each_server_stopped_and_what_was_left():
    found = dict(FOUND, runs=[
        {'pid': 4200, 'marker': 'extraction-1', 'path': '/data/hs/extraction-1', 'files': 12, 'gb': 0.4, 'age': 3.2,
         'cut': True, 'ended': 'cut', 'recent': 2, 'manifest': '/data/hs/extraction-1/gpuops-manifest.json'},
        {'pid': 9, 'marker': None, 'path': '/data/hs/old', 'files': 3, 'gb': 0.0, 'cut': False, 'ended': 'crashed',
         'recent': 1, 'manifest': None},
        {'pid': 10, 'marker': 'x', 'path': '/p', 'files': 0, 'gb': 0.0, 'cut': False, 'ended': None}],
        others=[{'pid': 31, 'user': 'alice', 'cmdline': 'python -m sglang.launch_server --port 31000', 'ports': [31000]}],
        gateways=[{'pid': 41, 'user': 'root', 'cmdline': 'python -m sglang_router.launch_router ', 'ports': [30000, 29000]}],
        reap=dict(FOUND['reap'], foreign=[{'pid': 51, 'user': 'bob', 'cmdline': 'python3 train.py',
                                           'devices': ['/dev/nvidia3'], 'where': None}],
                  other_namespaces=[{'pid': 61, 'cmdline': 'sglang::scheduler_TP0', 'reason': 'in another PID namespace'}]))
    assert report.said(found, ['root', 'sglang']) == [
        'Stopped through its supervisor: the SGLang server 5200, with systemctl stop team-sglang.service in 1.5 s, it '
        'exited on its own',
        'Cut the active extraction run extraction-1 of the SGLang server 4200 (sglang_stop_cut_active_run): '
        '/data/hs/extraction-1 holds 12 dumps, 0.4 GB, the last written 3.2 s before the stop',
        'The extraction run extraction-1 of the SGLang server 4200 ended cut: /data/hs/extraction-1 holds 12 dumps, 0.4 GB, '
        '2 of them written within 10 s before the stop (possibly partial); its manifest: '
        '/data/hs/extraction-1/gpuops-manifest.json',
        'The extraction run  of the SGLang server 9 ended crashed: /data/hs/old holds 3 dumps, 0.0 GB',
        "Not touched: pid 31 (user alice) python -m sglang.launch_server --port 31000, listening on TCP ports 31000: "
        "another user's server (sglang_stop_owners are root, sglang); name it in sglang_stop_pids to stop it",
        'Left running: the SGLang Model Gateway, pid 41 (user root) python -m sglang_router.launch_router, listening on '
        'TCP ports 30000, 29000',
        'Left running: pid 51 (user bob) python3 train.py holds /dev/nvidia3',
        'Not touched: pid 61 sglang::scheduler_TP0, in another PID namespace',
    ]


def test_check_mode_says_what_would_be_stopped_and_no_run_as_ended():
    found = dict(FOUND, supervised_stops=[{'pid': 5200, 'supervisor': 'docker', 'name': 'team'}],
                 runs=[{'pid': 4200, 'path': '/p', 'files': 1, 'gb': 0.0, 'cut': False, 'ended': 'drained'}])
    assert report.said(found, ['root'], check_mode=True) == [
        'Stopped through its supervisor: the SGLang server 5200, with docker team (check mode: would stop it)']


def test_a_failed_stop_names_what_its_reap_left_running():
    assert report.left_running({'foreign': [{'pid': 51, 'user': 'bob', 'cmdline': 'python3 train.py',
                                             'devices': ['/dev/nvidia3', '/dev/nvidiactl'], 'where': 'in a container'}]}) == [
        'Left running: pid 51 (user bob) python3 train.py holds /dev/nvidia3, /dev/nvidiactl in a container']
    assert report.left_running(None) == []

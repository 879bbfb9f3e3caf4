# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""An extraction run as its dump directory shows it, on real files: what counts as the run's work, when it is
active, and the stop that refuses to cut it unless told to."""

from __future__ import annotations

import os

import pytest

from ansible_collections.gpuops.host.plugins.module_utils import _extraction as extraction
from ansible_collections.gpuops.host.plugins.module_utils import _sglang as sglang
from ansible_collections.gpuops.host.plugins.module_utils._procs import ProcFS

NOW = 1_800_000_000.0


def dump(directory, name, size, age):
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b'\0' * size)
    os.utime(str(path), (NOW - age, NOW - age))
    return path


def test_the_run_s_dumps_are_counted_and_sized_and_its_own_checks_apart(tmp_path):
    dump(tmp_path, 'hs_rec-1_layer3.pt', 100, 30)
    dump(tmp_path, 'shard0/hs_rec-2_layer3.pt', 250, 10)
    dump(tmp_path, 'hs_HEALTH_CHECK_9ab987fe.pt', 7, 1)         # the readiness check's, a second ago
    dump(tmp_path, 'hs_gpuops-probe-82-1796245527808.pt', 7, 1)  # the probe's
    os.symlink('/etc/passwd', str(tmp_path / 'link.pt'))       # never followed, never counted
    os.mkfifo(str(tmp_path / 'fifo.pt'))                        # never opened

    run = extraction.activity(str(tmp_path), 120, NOW)

    assert (run['files'], run['bytes'], run['own'], run['exists']) == (2, 350, 2, True)
    assert run['age'] == 10.0 and run['active'] is True
    assert extraction.describe(run) == '2 dumps, 0.000 GB, the last written 10.0 s ago'


@pytest.mark.parametrize('window, active', [(120, False), (30, False), (0, False), (1000, True)])
def test_a_run_is_active_while_it_wrote_within_the_window(tmp_path, window, active):
    dump(tmp_path, 'hs_rec-1.pt', 1, 300)
    assert extraction.activity(str(tmp_path), window, NOW)['active'] is active


def test_a_run_of_health_checks_only_is_quiet(tmp_path):
    dump(tmp_path, 'hs_HEALTH_CHECK_1.pt', 7, 0)
    run = extraction.activity(str(tmp_path), 120, NOW)
    assert (run['files'], run['own'], run['age'], run['active']) == (0, 1, None, False)
    assert extraction.activity(str(tmp_path / 'missing'), 120, NOW)['exists'] is False


def stat_line(pid, comm, start=12345):
    fields = ['S', 1, pid, pid, 0, -1, 4194560] + [0] * 12 + [start] + [0] * 30
    return '%d (%s) %s\n' % (pid, comm, ' '.join(str(f) for f in fields))


def server(root, pid, dump_dir):
    d = root / str(pid)
    (d / 'fd').mkdir(parents=True)
    (d / 'stat').write_text(stat_line(pid, 'python3'))
    (d / 'cmdline').write_bytes(b'python3\0-m\0sglang.launch_server\0--port\x0030000\0')
    (d / 'environ').write_bytes(('SGLANG_HS_DUMP_DIR=%s\0' % dump_dir).encode())


def stop_find(procfs, **p):
    params = dict({'drain': True, 'presets': ['sglang'], 'default_url': 'http://127.0.0.1:1',
                   'timeout': 0.2, 'interval': 0.1, 'request_timeout': 0.2, 'force': False, 'active_window': 120}, **p)
    return sglang.find(sglang.merged(params), sglang.Deps(procfs, run=None, wall_clock=lambda: NOW))


def test_a_server_in_an_active_run_is_not_drained_and_the_stop_names_the_run(tmp_path):
    dumps, proc = tmp_path / 'dumps', tmp_path / 'proc'
    dump(dumps, 'hs_rec-1.pt', 2_000_000, 4)
    server(proc, 100, dumps)

    with pytest.raises(sglang.ActionFailed) as e:
        stop_find(ProcFS(str(proc)))

    assert e.value.msg == (
        'the SGLang server 100 is in an active extraction run: its dump directory %s holds 1 dumps, 0.002 GB, the last '
        'written 4.0 s ago, within the 120 s window of an active run. Nothing was drained or signalled: stopping it now '
        'would cut the run, whose driver sends its next request to a server that is gone. Let the run finish, or set '
        'cut_active_run (sglang_stop_cut_active_run) to stop it anyway.' % dumps)
    assert e.value.result['signalled'] is False and 'drains' not in e.value.result
    assert [(r['pid'], r['active'], r['cut']) for r in e.value.result['runs']] == [(100, True, False)]


def test_cut_active_run_stops_it_and_says_so_and_a_quiet_run_is_stopped_as_any(tmp_path):
    dumps, proc = tmp_path / 'dumps', tmp_path / 'proc'
    dump(dumps, 'hs_rec-1.pt', 10, 4)
    server(proc, 100, dumps)
    warned = []

    found = sglang.find(sglang.merged({'drain': True, 'presets': ['sglang'],
                                       'default_url': 'http://127.0.0.1:1', 'timeout': 0.2, 'interval': 0.1,
                                       'request_timeout': 0.2, 'force': False, 'active_window': 120,
                                       'cut_active_run': True}),
                        sglang.Deps(ProcFS(str(proc)), run=None, wall_clock=lambda: NOW, warn=warned.append))

    assert [(r['active'], r['cut'], r['files']) for r in found['runs']] == [(True, True, 1)]
    assert warned[0].startswith('the active extraction run of the SGLang server 100 is cut (cut_active_run)')
    os.utime(str(dumps / 'hs_rec-1.pt'), (NOW - 600, NOW - 600))
    quiet = stop_find(ProcFS(str(proc)))
    assert [(r['active'], r['cut'], r['age']) for r in quiet['runs']] == [(False, False, 600.0)]
    assert stop_find(ProcFS(str(proc)), active_window=0)['runs'][0]['active'] is False


def test_what_the_launch_made_it_dump_before_it_was_ready_is_no_work_of_the_run(tmp_path):
    """SGLang's warm-up request (a random request id) dumps before the server is ready: up to the record's checked
    time, every file is the launch's own."""
    dump(tmp_path, 'hs_0f3c9a7be1d24b6e8a5f.pt', 64, 50)       # the warm-up's, before the checks ended
    run = extraction.activity(str(tmp_path), 120, NOW, since=NOW - 40)
    assert (run['files'], run['own'], run['active']) == (0, 1, False)
    dump(tmp_path, 'hs_rec-1.pt', 64, 5)                        # the driver's first record, after
    run = extraction.activity(str(tmp_path), 120, NOW, since=NOW - 40)
    assert (run['files'], run['own'], run['active']) == (1, 1, True)
    assert extraction.epoch('2027-01-15T08:00:00+00:00') == 1800000000.0 and extraction.epoch(None) is None

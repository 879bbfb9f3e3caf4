# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The manifest of an extraction run and the status of a run, on real files in real run directories (the tests run
as root, as the modules do): what the manifest says, field by field; how it is written where the server's user can
plant anything; how a stop completes it; and the rate, free space and hours to full of a run that is going."""

from __future__ import annotations

import json
import time
import os
import pwd
import stat

import pytest

from ansible_collections.gpuops.host.plugins.module_utils import _extraction as extraction
from ansible_collections.gpuops.host.plugins.module_utils import _manifest as manifests
from ansible_collections.gpuops.host.plugins.module_utils import _server_info as server_info
from ansible_collections.gpuops.host.plugins.module_utils._sglang import Deps

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="writes root's files into another user's directory")

NOW = 1_800_000_000.0
USER = 'nobody'
UID = pwd.getpwnam(USER).pw_uid
DUMP_GID = 2001
READY = '2027-01-15T07:50:00+00:00'        # NOW - 600
PATCH = {'files': ['sglang/srt/models/hs_dump.py'], 'digest': 'sha256:' + 'ab' * 32}
MODEL = {'path': '/models/GLM-5', 'files': {'config.json': [700, 1], 'model-00001.safetensors': [5000, 2]},
         'content': {'config.json': '0123456789abcdef'}}


@pytest.fixture
def run_dir(tmp_path):
    """A dump root (root's, 0755) with one run directory of the server's user and the dump group (2750)."""
    root = tmp_path / 'dumps'
    root.mkdir(mode=0o755)
    path = root / 'extraction-20270115T074500Z-node1-3f9a2c1b'
    path.mkdir()
    os.chown(str(path), UID, DUMP_GID)
    os.chmod(str(path), 0o2750)
    return path


def record_of(path, **extra):
    return dict({
        'status': 'ok', 'marker': path.name, 'mode': 'extraction', 'pid': 4242, 'start': 123456, 'owner': USER,
        'url': 'http://127.0.0.1:1', 'dump_dir': str(path), 'started': int(NOW - 660), 'checked': READY,
        'argv': ['/opt/sglang/bin/python', '-m', 'sglang.launch_server', '--model-path', '/models/GLM-5',
                 '--tp-size', '2', '--hf-token', 'hf_secret_value', '--admin-api-key=sk-abcdef'],
        'gpus_serving': [0, 1],
        'identity': {'mode': 'extraction', 'user': USER, 'dumps': [os.path.dirname(str(path)), DUMP_GID],
                     'sglang': '0.5.23', 'dump_patch': PATCH, 'model': MODEL},
    }, **extra)


def dump(directory, name, size, age):
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b'\0' * size)
    os.utime(str(path), (NOW - age, NOW - age))
    return path


def fill(path):
    """Two records and their side files after the server was ready, and the launch's own dumps."""
    dump(path, 'hs_0f3c9a7be1d24b6e.pt', 64, 620)           # SGLang's warm-up, before the record's checked
    dump(path, 'hs_HEALTH_CHECK_1.pt', 7, 605)              # the readiness check's
    dump(path, 'hs_gpuops-probe-1-2.pt', 7, 602)            # the probe's
    dump(path, 'hs_rec-1.pt', 1000, 300)
    dump(path, 'hs_rec-1.json', 100, 300)
    dump(path, 'hs_rec-2.pt', 3000, 5)
    dump(path, 'hs_rec-2.json', 100, 5)


def read_json(path):
    with open(str(path)) as f:
        return json.load(f)


def test_the_manifest_says_what_the_run_is_and_what_it_holds_field_by_field(run_dir):
    fill(run_dir)
    record = record_of(run_dir)
    found = extraction.scan(str(run_dir), since=extraction.epoch(READY), patterns=('*.pt',), recent_since=NOW - 10)

    m = manifests.build(record, found, 'drained', 'node1', NOW, end=NOW - 1, patterns=('*.pt',))

    assert m == {
        'schema': 1, 'run': run_dir.name, 'host': 'node1', 'mode': 'extraction', 'dump_dir': str(run_dir),
        'rolled_back_from': None,
        'model': {'path': '/models/GLM-5', 'revision': None, 'files': 2, 'bytes': 5700, 'missing': None,
                  'fingerprint': m['model']['fingerprint']},
        'sglang': '0.5.23', 'dump_patch': PATCH,
        'argv': ['/opt/sglang/bin/python', '-m', 'sglang.launch_server', '--model-path', '/models/GLM-5',
                 '--tp-size', '2', '--hf-token', '********', '--admin-api-key=********'],
        'gpus': [0, 1], 'pid': 4242, 'started': '2027-01-15T07:49:00+00:00', 'ready': READY,
        'ended': 'drained', 'end': '2027-01-15T07:59:59+00:00', 'written': '2027-01-15T08:00:00+00:00',
        'counts': {'dumps': 2, 'bytes': 4000, 'gb': 0.0, 'own': 3, 'newest': '2027-01-15T07:59:55+00:00',
                   'recent': 1, 'recent_seconds': 10.0, 'patterns': ['*.pt']},
    }
    assert m['model']['fingerprint'].startswith('sha256:') and len(m['model']['fingerprint']) == 71
    changed = dict(MODEL, files=dict(MODEL['files'], **{'config.json': [701, 1]}))
    assert manifests.model(changed)['fingerprint'] != m['model']['fingerprint']
    with pytest.raises(ValueError):
        manifests.build(record, found, 'finished', 'node1', NOW)


def test_it_is_written_as_root_s_for_the_dump_group_and_never_counted_as_a_dump(run_dir):
    fill(run_dir)
    record = record_of(run_dir)

    summary = manifests.describe(record, 'running', NOW)

    path = run_dir / manifests.NAME
    st = os.lstat(str(path))
    assert stat.S_ISREG(st.st_mode) and (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, DUMP_GID, 0o640)
    assert summary == {'path': str(run_dir), 'exists': True, 'files': 4, 'bytes': 4200, 'gb': 0.0, 'own': 3,
                       'newest': NOW - 5, 'recent': 0, 'ended': 'running', 'manifest': str(path)}
    assert read_json(path)['ended'] == 'running' and read_json(path)['counts']['dumps'] == 4
    # neither the manifest nor a temporary file of it counts, at the top of the run directory
    (run_dir / (extraction.MANIFEST_TEMP + 'abc')).write_bytes(b'{}')
    everything = extraction.scan(str(run_dir))                  # the warm-up's too: no ready time given
    assert (everything['files'], everything['own']) == (5, 2)
    names = sorted(n for n in os.listdir(str(run_dir)) if 'manifest' in n)
    assert names == [extraction.MANIFEST_TEMP + 'abc', manifests.NAME]
    assert manifests.read(str(run_dir), UID)['run'] == run_dir.name


def test_a_link_that_the_server_s_user_planted_at_the_manifest_s_name_is_not_followed(run_dir, tmp_path):
    target = tmp_path / 'root-file'
    target.write_text('root only\n')
    os.chmod(str(target), 0o600)
    link = run_dir / manifests.NAME
    os.symlink(str(target), str(link))
    os.lchown(str(link), UID, UID)

    manifests.describe(record_of(run_dir), 'running', NOW)

    assert target.read_text() == 'root only\n' and stat.S_IMODE(os.stat(str(target)).st_mode) == 0o600
    assert os.stat(str(target)).st_uid == 0
    st = os.lstat(str(link))
    assert stat.S_ISREG(st.st_mode) and st.st_uid == 0 and read_json(link)['run'] == run_dir.name


def test_a_manifest_of_the_user_s_own_or_a_link_is_never_read_as_root_s(run_dir, tmp_path):
    forged = run_dir / manifests.NAME
    forged.write_text(json.dumps({'run': run_dir.name, 'ended': 'running'}))
    os.chown(str(forged), UID, UID)
    assert manifests.read(str(run_dir), UID) is None
    forged.unlink()
    root_file = tmp_path / 'manifest-elsewhere.json'
    root_file.write_text(json.dumps({'run': run_dir.name, 'ended': 'running'}))
    os.symlink(str(root_file), str(forged))
    assert manifests.read(str(run_dir), UID) is None
    forged.unlink()
    os.mkfifo(str(forged))
    assert manifests.read(str(run_dir), UID) is None           # a FIFO is never opened for reading


def test_a_run_directory_replaced_by_a_link_or_another_user_s_directory_gets_no_manifest(run_dir, tmp_path):
    elsewhere = tmp_path / 'elsewhere'
    elsewhere.mkdir()
    moved = run_dir.parent / 'moved'
    os.rename(str(run_dir), str(moved))
    os.symlink(str(elsewhere), str(run_dir))

    summary = manifests.describe(record_of(run_dir), 'drained', NOW)

    assert summary['manifest'] is None and 'symbolic link' in summary['manifest_error']
    assert os.listdir(str(elsewhere)) == [] and os.listdir(str(moved)) == []
    os.unlink(str(run_dir))
    run_dir.mkdir()
    os.chown(str(run_dir), 4343, 4343)                          # a directory of a user other than the server's
    summary = manifests.describe(record_of(run_dir), 'drained', NOW)
    assert 'not the server\'s user\'s (UID %d)' % UID in summary['manifest_error']
    assert os.listdir(str(run_dir)) == []


def test_a_directory_at_the_manifest_s_name_fails_the_write_and_leaves_no_temporary_file(run_dir):
    (run_dir / manifests.NAME).mkdir()

    summary = manifests.describe(record_of(run_dir), 'running', NOW)

    assert summary['manifest'] is None and summary['manifest_error'].startswith(
        'cannot write the manifest %s/%s' % (run_dir, manifests.NAME))
    assert os.listdir(str(run_dir)) == [manifests.NAME]


def test_the_launch_writes_it_from_the_record_that_names_the_run_directory(run_dir, tmp_path):
    record_path = tmp_path / 'server.json'
    record_path.write_text(json.dumps(record_of(run_dir)))

    result = manifests.running(str(record_path), str(run_dir), NOW)

    assert result['changed'] and result['manifest'] == str(run_dir / manifests.NAME)
    with pytest.raises(manifests.ManifestError, match='names the run directory %s, not /elsewhere' % run_dir):
        manifests.running(str(record_path), '/elsewhere', NOW)
    record_path.write_text(json.dumps(record_of(run_dir, status='failed')))
    with pytest.raises(manifests.ManifestError, match='names no extraction run that passed its checks'):
        manifests.running(str(record_path), str(run_dir), NOW)
    os.chown(str(record_path), UID, UID)                        # a record that is not root's is not read
    with pytest.raises(manifests.ManifestError, match='not a readable regular file of UID 0'):
        manifests.running(str(record_path), str(run_dir), NOW)


def test_check_mode_counts_and_writes_nothing(run_dir):
    fill(run_dir)
    summary = manifests.describe(record_of(run_dir), 'running', NOW, check_mode=True)
    assert summary['manifest'] is None and summary['files'] == 4
    assert manifests.NAME not in os.listdir(str(run_dir))


def run_of(path, pid=4242, cut=False, recorded=True):
    return {'pid': pid, 'marker': path.name, 'path': str(path), 'files': 0, 'bytes': 0, 'gb': 0.0, 'cut': cut,
            'active': cut, 'recorded': recorded}


@pytest.mark.parametrize('cut, ended', [(False, 'drained'), (True, 'cut')])
def test_the_stop_completes_the_recorded_run_s_manifest_with_how_it_ended(run_dir, cut, ended):
    fill(run_dir)
    record = record_of(run_dir)
    manifests.describe(record, 'running', NOW - 60)
    warned = []

    runs = manifests.after_stop([run_of(run_dir, cut=cut)], record, NOW - 8, NOW, lambda pid: False, False,
                                patterns=('*.pt',), warn=warned.append)

    m = read_json(run_dir / manifests.NAME)
    assert (m['ended'], m['end'], m['counts']['dumps'], m['counts']['bytes'], m['counts']['recent']) == (
        ended, '2027-01-15T08:00:00+00:00', 2, 4000, 1)
    assert [(r['ended'], r['files'], r['bytes'], r['recent'], r['manifest']) for r in runs] == [
        (ended, 2, 4000, 1, str(run_dir / manifests.NAME))]
    assert warned == []


def test_a_run_whose_server_still_runs_after_a_failed_stop_is_not_ended(run_dir):
    record = record_of(run_dir)
    manifests.describe(record, 'running', NOW - 60)

    runs = manifests.after_stop([run_of(run_dir)], record, NOW - 8, NOW, lambda pid: pid == 4242, False)

    assert (runs[0]['ended'], runs[0]['manifest']) == (None, None)
    assert read_json(run_dir / manifests.NAME)['ended'] == 'running'


def test_a_hand_started_server_s_run_is_counted_again_and_gets_no_manifest(run_dir):
    fill(run_dir)

    runs = manifests.after_stop([run_of(run_dir, pid=77, recorded=False)], {}, NOW - 8, NOW, lambda pid: False, False)

    assert [(r['ended'], r['files'], r['manifest']) for r in runs] == [('drained', 5, None)]  # the warm-up's too: no record names when it was ready
    assert manifests.NAME not in os.listdir(str(run_dir))


def test_a_recorded_server_found_gone_is_completed_as_crashed_once(run_dir):
    fill(run_dir)
    record = record_of(run_dir)
    manifests.describe(record, 'running', NOW - 60)

    runs = manifests.after_stop([], record, NOW - 8, NOW, lambda pid: False, True)

    m = read_json(run_dir / manifests.NAME)
    # the files written within 10 s before the last write (5 s ago) may be partial: the crash's moment is unknown
    assert (m['ended'], m['end'], m['counts']['dumps'], m['counts']['recent']) == (
        'crashed', '2027-01-15T08:00:00+00:00', 4, 2)
    assert [(r['ended'], r['pid'], r['marker'], r['files'], r['cut']) for r in runs] == [
        ('crashed', 4242, run_dir.name, 4, False)]
    # completed: a later stop or launch leaves it as it is
    assert manifests.after_stop([], record, NOW, NOW + 60, lambda pid: False, True) == []
    assert read_json(run_dir / manifests.NAME)['end'] == '2027-01-15T08:00:00+00:00'


def test_no_manifest_of_the_run_no_crash_is_written(run_dir):
    assert manifests.after_stop([], record_of(run_dir), NOW, NOW, lambda pid: False, True) == []
    other = dict(record_of(run_dir), marker='extraction-other')
    manifests.describe(other, 'running', NOW)                  # another run's manifest, moved here
    assert manifests.crashed(record_of(run_dir), NOW) is None


def test_the_status_of_a_run_gives_its_rate_free_space_and_hours_to_full(run_dir):
    for i in range(30):                                          # 30 records of 1 MB in the last 10 minutes
        dump(run_dir, 'hs_rec-%d.pt' % i, 1_000_000, 20 * i)
    dump(run_dir, 'hs_old.pt', 5_000_000, 3000)                 # before the window
    vfs = os.statvfs(str(run_dir.parent))
    free = vfs.f_bavail * vfs.f_frsize

    found = extraction.status(str(run_dir), NOW, 600)

    assert (found['files'], found['bytes'], found['recent'], found['age']) == (31, 35_000_000, 30, 0.0)
    assert (found['rate_seconds'], found['rate_files_per_min'], found['rate_gb_per_hour']) == (600, 3.0, 0.18)
    assert abs(found['free_gb'] - free / 1e9) < 0.1
    assert abs(found['hours_to_full'] - free / (30_000_000 / 600) / 3600) < 0.1


def test_a_young_run_s_rate_is_taken_over_its_own_time_and_a_quiet_one_never_fills(run_dir):
    dump(run_dir, 'hs_rec-1.pt', 6_000_000, 10)
    young = extraction.status(str(run_dir), NOW, 600, since=NOW - 60)
    assert (young['rate_seconds'], young['rate_files_per_min'], young['rate_gb_per_hour']) == (60, 1.0, 0.36)
    quiet = extraction.status(str(run_dir), NOW + 3600, 600)
    assert (quiet['recent'], quiet['rate_files_per_min'], quiet['hours_to_full']) == (0, 0.0, None)
    missing = extraction.status(str(run_dir / 'missing'), NOW, 600)
    assert (missing['exists'], missing['files'], missing['age']) == (False, 0, None)


def status_of(record, server=None, **p):
    deps = Deps(procfs=None, run=None, wall_clock=lambda: NOW)
    return server_info.extraction_status(record, server, dict({'rate_window': 600, 'request_timeout': 0.2}, **p),
                                         deps)


def test_the_status_says_how_a_stopped_run_ended_from_its_manifest(run_dir):
    fill(run_dir)
    record = record_of(run_dir)
    down = status_of(record)
    assert (down['state'], down['dumping'], down['files'], down['own'], down['manifest']) == ('down', True, 4, 3, None)
    manifests.describe(record, 'cut', NOW)
    cut = status_of(record, dump_patterns=['*.pt'])
    assert (cut['state'], cut['files'], cut['uptime'], cut['in_flight'], cut['manifest']) == (
        'cut', 2, None, None, str(run_dir / manifests.NAME))
    assert status_of({})['state'] == 'none' and status_of({})['files'] is None


def test_the_status_of_a_running_server_reads_its_uptime_and_no_count_where_nothing_answers(run_dir):
    record = record_of(run_dir)
    running = status_of(record, server={'pid': 4242})
    assert (running['state'], running['pid'], running['uptime'], running['in_flight']) == ('running', 4242, 660.0, None)
    assert 'nothing listens at http://127.0.0.1:1' in running['in_flight_error']
    serving = status_of(dict(record, dump_dir=None, mode='serving'), server={'pid': 4242})
    assert (serving['dumping'], serving['mode'], serving['files'], serving['free_gb']) == (False, 'serving', None, None)


def test_the_record_s_time_without_an_offset_is_utc_whatever_the_node_s_time_zone(monkeypatch):
    """The record's checked comes from Ansible's now(utc=true).isoformat(), which carries no offset: read as local
    time, a node at UTC-5 would take every record of the run's first five hours for the launch's own dumps."""
    monkeypatch.setenv('TZ', 'America/New_York')
    time.tzset()
    try:
        assert extraction.epoch('2027-01-15T08:00:00') == NOW == extraction.epoch('2027-01-15T03:00:00-05:00')
        assert manifests.iso(extraction.epoch('2027-01-15T08:00:00')) == '2027-01-15T08:00:00+00:00'
    finally:
        monkeypatch.delenv('TZ')
        time.tzset()


def test_a_link_to_a_directory_under_the_run_is_not_followed_but_the_run_directory_s_own_name_is(run_dir, tmp_path):
    """A subdirectory is listed through a descriptor opened with O_NOFOLLOW; the run directory as named may be a
    link (a hand-started server's SGLANG_HS_DUMP_DIR): the active-run guard must see such a run."""
    elsewhere = tmp_path / 'elsewhere'
    dump(elsewhere, 'hs_other.pt', 10, 1)
    dump(run_dir, 'shard0/hs_rec-1.pt', 10, 1)
    os.symlink(str(elsewhere), str(run_dir / 'shard1'))
    assert extraction.scan(str(run_dir))['files'] == 1
    named = tmp_path / 'named'
    os.symlink(str(run_dir), str(named))
    assert extraction.scan(str(named))['files'] == 1

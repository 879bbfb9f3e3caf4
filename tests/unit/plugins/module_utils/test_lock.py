# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import json
import multiprocessing
import os
import time

import pytest

from ansible_collections.gpuops.host.plugins.module_utils._lock import (
    LOCK_FILE, HostLock, LockError, LockHeld, LockLost, describe)

NOW = 1767225600.0
OWNER = {'run': 'run-a', 'playbook': 'Restart SGLang in serving mode', 'user': 'alice', 'controller': 'bastion',
         'controller_pid': 4242}


class Clock:
    def __init__(self, now=NOW):
        self.now = now

    def __call__(self):
        return self.now


@pytest.fixture
def directory(tmp_path):
    return str(tmp_path / 'gpuops')


def lock_at(directory, now=NOW, pid=100, boot=(None, 0.0)):
    """A lock whose host reads NOW on its wall clock and BOOT as (boot_id, boot-time clock); no boot_id: the
    wall clock judges."""
    return HostLock(directory, clock=Clock(now), sleep=lambda s: None, pid=pid, boot=lambda: boot)


def write_record(directory, record):
    os.makedirs(directory, mode=0o700, exist_ok=True)
    with open(os.path.join(directory, LOCK_FILE), 'w') as f:
        json.dump(record, f)


def test_takes_a_free_lock_with_the_whole_record_and_a_0700_directory(directory):
    result = lock_at(directory).acquire(OWNER, max_age=60)

    assert result['changed'] is True and result['taken_over'] is None
    with open(os.path.join(directory, LOCK_FILE)) as f:
        record = json.load(f)
    assert record == dict(OWNER, host_pid=100, taken=NOW, taken_utc='2026-01-01T00:00:00Z', boot_id=None, taken_boottime=0.0)
    assert result['owner'] == record
    assert os.stat(directory).st_mode & 0o777 == 0o700
    assert os.listdir(directory) == [LOCK_FILE]


def test_taking_it_again_for_the_same_run_changes_nothing(directory):
    lock_at(directory).acquire(OWNER, max_age=60)
    assert lock_at(directory, now=NOW + 5).acquire(OWNER, max_age=60)['changed'] is False


def test_a_live_lock_of_another_run_is_refused_naming_it(directory):
    lock_at(directory).acquire(OWNER, max_age=3600)

    with pytest.raises(LockHeld) as e:
        lock_at(directory, now=NOW + 600).acquire({'run': 'run-b'}, max_age=3600)

    assert e.value.owner['run'] == 'run-a' and e.value.age == 600
    assert str(e.value).startswith(
        "Another gpuops run holds the lock %s on this host: run run-a (Restart SGLang in serving mode) by alice, "
        "from bastion, controller PID 4242, taken 600 s ago by this host's clock." % os.path.join(directory, LOCK_FILE))


def test_age_is_judged_by_the_host_clock_not_the_file_time(directory):
    write_record(directory, dict(OWNER, taken=NOW - 7200))
    os.utime(os.path.join(directory, LOCK_FILE), (NOW + 10 ** 6, NOW + 10 ** 6))  # mtime far in the future

    result = lock_at(directory).acquire({'run': 'run-b'}, max_age=3600)

    assert result['taken_over']['run'] == 'run-a' and result['owner']['run'] == 'run-b'


@pytest.mark.parametrize('taken, stale', [(NOW - 3601, True), (NOW - 3599, False), (NOW + 30, False),
                                          (NOW + 3600 * 24 * 365, True)])
def test_stale_means_older_than_max_age_or_dated_in_the_future(directory, taken, stale):
    write_record(directory, dict(OWNER, taken=taken))
    lock = lock_at(directory)
    if stale:
        assert lock.acquire({'run': 'run-b'}, max_age=3600)['taken_over']['run'] == 'run-a'
    else:
        with pytest.raises(LockHeld):
            lock.acquire({'run': 'run-b'}, max_age=3600)


def test_an_unreadable_record_is_aged_by_its_mtime(directory):
    os.makedirs(directory, mode=0o700)
    path = os.path.join(directory, LOCK_FILE)
    with open(path, 'w') as f:
        f.write('{"run": "half-writ')
    os.utime(path, (NOW - 10, NOW - 10))

    with pytest.raises(LockHeld) as e:
        lock_at(directory).acquire({'run': 'run-b'}, max_age=3600)

    assert 'a run whose record cannot be read' in str(e.value) and e.value.age == 10


def test_check_mode_neither_takes_nor_removes(directory):
    result = lock_at(directory).acquire(OWNER, max_age=60, check_mode=True)
    assert result['changed'] is True and not os.path.exists(directory)
    os.makedirs(directory)
    os.chmod(directory, 0o777)
    assert lock_at(directory).acquire(OWNER, max_age=60, check_mode=True)['moved_aside'] == directory
    assert os.path.isdir(directory) and os.stat(directory).st_mode & 0o777 == 0o777
    os.rmdir(directory)

    write_record(directory, dict(OWNER, taken=NOW - 7200))
    result = lock_at(directory).acquire({'run': 'run-b'}, max_age=60, check_mode=True)
    assert result['taken_over']['run'] == 'run-a'
    assert lock_at(directory).release('run-a', check_mode=True) == {'changed': True, 'released': True, 'owner': None}
    with open(os.path.join(directory, LOCK_FILE)) as f:
        assert json.load(f)['run'] == 'run-a'


def test_release_removes_only_the_lock_of_its_own_run(directory):
    lock_at(directory).acquire(OWNER, max_age=60)

    other = lock_at(directory).release('run-b')
    assert other['changed'] is False and other['owner']['run'] == 'run-a'
    assert os.path.exists(os.path.join(directory, LOCK_FILE))

    assert lock_at(directory).release('run-a')['released'] is True
    assert not os.path.exists(os.path.join(directory, LOCK_FILE))
    assert lock_at(directory).release('run-a') == {'changed': False, 'released': False, 'owner': None}


@pytest.mark.parametrize('mode', [0o755, 0o1777, 0o770])
def test_a_directory_that_others_can_enter_is_moved_aside_not_obeyed(directory, mode):
    os.makedirs(directory)
    os.chmod(directory, mode)
    with open(os.path.join(directory, LOCK_FILE), 'w') as f:
        json.dump({'run': 'planted', 'taken': NOW + 10 ** 6}, f)
    with pytest.raises(LockError, match='must belong to UID %d with mode 0700' % os.geteuid()):
        lock_at(directory).release('planted')

    result = lock_at(directory).acquire(OWNER, max_age=60)

    assert result['owner']['run'] == 'run-a' and result['moved_aside'] == directory + '.untrusted-%d-100' % NOW
    assert os.stat(directory).st_mode & 0o777 == 0o700
    assert os.path.exists(os.path.join(result['moved_aside'], LOCK_FILE))


def test_a_directory_of_another_user_is_moved_aside(directory):
    os.makedirs(directory, mode=0o700)
    lock = HostLock(directory, uid=os.geteuid() + 1)
    with pytest.raises(LockError, match='belongs to UID %d' % os.geteuid()):
        lock.acquire(OWNER, max_age=60)  # the new one belongs to this process's UID, not the injected one


def test_a_link_in_place_of_the_directory_is_moved_not_followed(directory, tmp_path):
    target = tmp_path / 'elsewhere'
    target.mkdir(mode=0o700)
    os.symlink(str(target), directory)

    result = lock_at(directory).acquire(OWNER, max_age=60)

    assert os.path.islink(result['moved_aside']) and os.listdir(str(target)) == []
    assert os.path.isdir(directory) and not os.path.islink(directory)


def test_describe_a_holder():
    assert describe({'run': 'r1'}) == 'run r1'
    assert describe({}) == 'a run whose record cannot be read'


def _race(directory, run, barrier, results):
    lock = HostLock(directory)
    barrier.wait()
    try:
        results.put((run, lock.acquire({'run': run}, max_age=3600)['taken_over']['run']))
    except LockHeld as e:
        results.put((run, 'held by ' + e.owner['run']))


@pytest.mark.parametrize('racers', [2, 8])
def test_of_runs_racing_for_one_stale_lock_exactly_one_takes_it(directory, racers):
    """Real processes, started together on a barrier, each with its own HostLock."""
    for attempt in range(20):
        write_record(directory, {'run': 'dead', 'taken': 0.0})
        ctx = multiprocessing.get_context('fork')
        barrier, results = ctx.Barrier(racers), ctx.Queue()
        procs = [ctx.Process(target=_race, args=(directory, 'run-%d' % i, barrier, results)) for i in range(racers)]
        for p in procs:
            p.start()
        outcomes = dict(results.get(timeout=60) for dummy in procs)
        for p in procs:
            p.join(60)

        winners = [run for run, outcome in outcomes.items() if outcome == 'dead']
        assert len(winners) == 1, (attempt, outcomes)
        assert all(outcome == 'held by ' + winners[0] for run, outcome in outcomes.items() if run != winners[0])
        with open(os.path.join(directory, LOCK_FILE)) as f:
            assert json.load(f)['run'] == winners[0]


BOOT = '0f6e8a2e-5a4b-4c1e-9a63-1c2d3e4f5a6b'


@pytest.mark.parametrize('step', [-10 ** 6, 10 ** 6])
def test_a_clock_step_neither_frees_a_live_lock_nor_keeps_a_dead_one(directory, step):
    """Age by the boot-time clock of the same boot: a wall clock stepped a million seconds either way changes nothing."""
    lock_at(directory, boot=(BOOT, 5000.0)).acquire(OWNER, max_age=3600)

    with pytest.raises(LockHeld) as e:
        lock_at(directory, now=NOW + step, boot=(BOOT, 5600.0)).acquire({'run': 'run-b'}, max_age=3600)
    assert e.value.age == 600.0
    result = lock_at(directory, now=NOW - step, boot=(BOOT, 8601.0)).acquire({'run': 'run-b'}, max_age=3600)
    assert result['taken_over']['run'] == 'run-a' and result['owner']['taken_boottime'] == 8601.0


def test_a_lock_of_an_earlier_boot_is_stale_whatever_the_clocks_say(directory):
    lock_at(directory, boot=(BOOT, 5000.0)).acquire(OWNER, max_age=3600)
    result = lock_at(directory, boot=('another-boot', 10.0)).acquire({'run': 'run-b'}, max_age=3600)
    assert result['taken_over']['boot_id'] == BOOT and result['owner']['boot_id'] == 'another-boot'


def test_the_record_carries_this_hosts_boot_id_and_boot_time_clock(directory):
    owner = HostLock(directory, sleep=lambda s: None).acquire(OWNER, max_age=3600)['owner']
    with open('/proc/sys/kernel/random/boot_id') as f:
        assert owner['boot_id'] == f.read().strip()
    assert 0 < owner['taken_boottime'] <= time.clock_gettime(time.CLOCK_BOOTTIME)


def test_check_passes_while_the_run_holds_the_lock(directory):
    lock_at(directory).acquire(OWNER, max_age=60)
    assert lock_at(directory, now=NOW + 5).check('run-a') == {'changed': False, 'owner': lock_at(directory).read()}


def test_check_fails_naming_the_run_that_broke_the_lock_as_stale(directory):
    lock_at(directory).acquire(OWNER, max_age=60)
    lock_at(directory, now=NOW + 120, pid=200).acquire({'run': 'run-b', 'controller': 'ops-2'}, max_age=60)

    with pytest.raises(LockLost) as e:
        lock_at(directory, now=NOW + 130).check('run-a')

    assert e.value.owner['run'] == 'run-b' and e.value.age == 10
    assert str(e.value).startswith(
        "This run (run-a) no longer holds the lock %s on this host: it is now held by run run-b from ops-2, taken 10 s "
        "ago by this host's clock." % os.path.join(directory, LOCK_FILE))


@pytest.mark.parametrize('remove', ['file', 'directory'])
def test_check_fails_when_the_lock_is_gone(directory, remove):
    lock_at(directory).acquire(OWNER, max_age=60)
    os.unlink(os.path.join(directory, LOCK_FILE))
    if remove == 'directory':
        os.rmdir(directory)

    with pytest.raises(LockLost) as e:
        lock_at(directory).check('run-a')

    assert e.value.owner is None and 'nobody holds it now (the lock file was removed)' in str(e.value)


def test_a_lock_directory_under_a_directory_that_another_user_can_change_is_refused(tmp_path):
    """A user who can write the parent renames the lock directory away, or plants another at its name."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(str(shared), 0o777)
    lock = HostLock(str(shared / "gpuops"))
    with pytest.raises(LockError) as e:
        lock.acquire({"run": "r1"}, max_age=60)
    assert str(e.value) == (
        "The lock directory %s is in a directory that another user can change: %s is writable by every user (mode "
        "0777); refusing to use it. Choose a lock directory under one that only root can write (the default, "
        "/run/gpuops)." % (shared / "gpuops", shared))
    assert not (shared / "gpuops").exists()
    os.chmod(str(shared), 0o1777)            # sticky, as /tmp: no one renames an entry of root's
    assert lock.acquire({"run": "r1"}, max_age=60)

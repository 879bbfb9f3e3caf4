# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import errno
import os

import pytest

from ansible_collections.gpuops.host.plugins.module_utils import _prefetch
from ansible_collections.gpuops.host.plugins.module_utils._prefetch import (
    MIB, PAGE, WINDOW, PageCache, Prefetcher, PrefetchError, find_files, missing_ranges, prefetch, read_meminfo,
)


class FakeCache:
    """Pages in memory per file, as a set of page numbers; reading through FakeFile adds to it."""

    def __init__(self):
        self.pages = {}

    def missing(self, fd, offset, length):
        resident = self.pages.get(fd, set())
        vector = bytes(1 if (offset // PAGE + i) in resident else 0 for i in range((length + PAGE - 1) // PAGE))
        return [(o, min(n, offset + length - o)) for o, n in missing_ranges(vector, offset)]


class FakeFile:
    def __init__(self, cache, path, size):
        self.cache, self.path, self.size, self.pos = cache, path, size, 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def fileno(self):
        return self.path

    def seek(self, pos):
        self.pos = pos

    def readinto(self, view):
        n = max(0, min(len(view), self.size - self.pos))
        self.cache.pages.setdefault(self.path, set()).update(range(self.pos // PAGE, (self.pos + n + PAGE - 1) // PAGE))
        self.pos += n
        return n


class Clock:
    def __init__(self):
        self.now = 100.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def prefetcher(sizes, available_mib=(64 * 1024,), cache=None, timeout=0):
    """A Prefetcher over fake files of SIZES (path -> bytes); MemAvailable answers AVAILABLE_MIB in turn."""
    cache = cache or FakeCache()
    clock = Clock()
    answers = list(available_mib)

    def meminfo():
        value = answers.pop(0) if len(answers) > 1 else answers[0]
        return {'MemTotal': 128 * 1024 * MIB, 'MemAvailable': int(value * MIB)}

    p = Prefetcher(cache=cache, meminfo=meminfo, clock=clock, sleep=clock.sleep,
                   opener=lambda path: FakeFile(cache, path, sizes[path]), timeout=timeout)
    return p, cache, clock


@pytest.mark.parametrize('vector, start, expected', [
    (b'\x01\x01\x01', 0, []),
    (b'\x00\x00', 0, [(0, 2 * PAGE)]),
    (b'\x01\x00\x00\x01\x00', WINDOW, [(WINDOW + PAGE, 2 * PAGE), (WINDOW + 4 * PAGE, PAGE)]),
    (b'\x03\x02', 0, [(PAGE, PAGE)]),            # only bit 0 means resident
])
def test_missing_ranges(vector, start, expected):
    assert missing_ranges(vector, start) == expected


def test_find_files_matches_names_sorted_and_recurses_on_request(tmp_path):
    for name in ('b.safetensors', 'a.safetensors', 'config.json', 'sub/c.safetensors'):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b'x' * 3)
    found = find_files(str(tmp_path), ['*.safetensors'], recurse=True)
    names = [os.path.relpath(p, str(tmp_path)) for p, dummy in found]
    assert names == ['a.safetensors', 'b.safetensors', 'sub/c.safetensors']
    assert [s for dummy, s in found] == [3, 3, 3]
    assert len(find_files(str(tmp_path), ['*.safetensors'], recurse=False)) == 2
    assert find_files(str(tmp_path / 'config.json'), ['*.safetensors'], recurse=False) == [
        (str(tmp_path / 'config.json'), 3)]
    with pytest.raises(PrefetchError, match='is neither a file nor a directory'):
        find_files(str(tmp_path / 'missing'), ['*'], recurse=True)


def test_read_meminfo_in_bytes(tmp_path):
    path = tmp_path / 'meminfo'
    path.write_text('MemTotal:       24684084 kB\nMemAvailable:   24246900 kB\nHugePages_Total:       0\n')
    assert read_meminfo(str(path)) == {'MemTotal': 24684084 * 1024, 'MemAvailable': 24246900 * 1024,
                                       'HugePages_Total': 0}


def test_plan_reads_only_what_is_not_in_memory():
    size = WINDOW + 3 * PAGE + 100                       # two windows, the last page partial
    p, cache, dummy = prefetcher({'/m/a': size, '/m/b': 0})
    cache.pages['/m/a'] = set(range(0, WINDOW // PAGE)) | {WINDOW // PAGE + 1}
    plan = p.plan([('/m/a', size), ('/m/b', 0)])
    assert plan[0]['ranges'] == [(WINDOW, PAGE), (WINDOW + 2 * PAGE, PAGE + 100)]
    assert plan[0]['resident'] == size - 2 * PAGE - 100
    assert plan[1] == {'path': '/m/b', 'size': 0, 'resident': 0, 'ranges': []}


def test_run_reads_the_ranges_then_a_second_run_reads_nothing():
    sizes = {'/m/a': 3 * WINDOW, '/m/b': 5 * MIB}
    p, dummy, dummy2 = prefetcher(sizes)
    first = p.run(p.plan(sorted(sizes.items())), bandwidth=0, min_available=MIB)
    assert (first['bytes_total'], first['bytes_to_read'], first['bytes_read']) == (3 * WINDOW + 5 * MIB,) * 3
    assert [f['read'] for f in first['files']] == [3 * WINDOW, 5 * MIB]
    second = p.run(p.plan(sorted(sizes.items())), bandwidth=0, min_available=MIB)
    assert (second['bytes_resident_before'], second['bytes_read'], second['mib_per_second']) == (
        3 * WINDOW + 5 * MIB, 0, None)


def test_bandwidth_cap_paces_the_reads():
    sizes = {'/m/a': 100 * MIB}
    p, dummy, clock = prefetcher(sizes)
    result = p.run(p.plan(list(sizes.items())), bandwidth=50 * MIB, min_available=0)
    assert result['seconds'] == pytest.approx(2.0)      # 100 MiB at 50 MiB/s on a clock that only sleeps move
    assert result['mib_per_second'] == pytest.approx(50.0)
    assert len(clock.sleeps) == 100 // 8 + 1             # one pause after each 8 MiB read


def test_the_reads_stop_at_the_timeout_saying_how_far_they_got():
    sizes = {'/m/a': 100 * MIB}
    p, cache, clock = prefetcher(sizes, timeout=1.0)
    with pytest.raises(PrefetchError) as e:
        p.run(p.plan(list(sizes.items())), bandwidth=50 * MIB, min_available=0)   # 2 s of reads
    assert str(e.value) == 'Stopped prefetching at /m/a, 56.0 MiB of 100.0 MiB read, after 1.1 s, its timeout (1.0 s)'
    assert e.value.result['bytes_read'] == 56 * MIB and e.value.result['seconds'] == pytest.approx(1.12)


def test_the_look_at_the_page_cache_stops_at_the_timeout_too():
    sizes = dict(('/m/%d' % i, MIB) for i in range(5))
    p, cache, clock = prefetcher(sizes, timeout=2.0)
    clock.now += 2.5
    with pytest.raises(PrefetchError, match=r'^Stopped prefetching while finding what is in memory, at /m/0, '
                                            r'after 2.5 s, its timeout \(2.0 s\)$'):
        p.plan(sorted(sizes.items()))


def test_no_timeout_means_no_bound():
    sizes = {'/m/a': 100 * MIB}
    p, cache, clock = prefetcher(sizes, timeout=0)
    clock.now += 1e6
    assert p.run(p.plan(list(sizes.items())), bandwidth=0, min_available=0)['bytes_read'] == 100 * MIB


def test_refuses_before_reading_when_memory_would_run_short():
    sizes = {'/m/a': 2048 * MIB}
    p, cache, dummy = prefetcher(sizes, available_mib=(6000,))
    with pytest.raises(PrefetchError) as e:
        p.run(p.plan(list(sizes.items())), bandwidth=0, min_available=4096 * MIB)
    assert str(e.value) == ('Not prefetching 1 files: 2048.0 MiB of them are not in memory, MemAvailable is '
                            '6000.0 MiB, and reading them would leave 3952.0 MiB, under min_available_mib '
                            '(4096.0 MiB)')
    assert e.value.result['bytes_read'] == 0 and not cache.pages


def test_stops_when_memory_falls_while_reading():
    sizes = {'/m/a': 4 * WINDOW}
    # the check before reading, the first window, then MemAvailable collapses
    p, cache, dummy = prefetcher(sizes, available_mib=(60000, 60000, 1000))
    with pytest.raises(PrefetchError) as e:
        p.run(p.plan(list(sizes.items())), bandwidth=0, min_available=4096 * MIB)
    assert str(e.value) == ('Stopped prefetching at /m/a after 128.0 MiB of 256.0 MiB: MemAvailable fell to '
                            '1000.0 MiB, under min_available_mib (4096.0 MiB)')
    assert e.value.result['bytes_read'] == 2 * WINDOW
    assert len(cache.pages['/m/a']) == 2 * WINDOW // PAGE


def test_prefetch_check_mode_predicts_and_reads_nothing(tmp_path, monkeypatch):
    (tmp_path / 'model.safetensors').write_bytes(b'w' * (3 * MIB))
    (tmp_path / 'config.json').write_text('{}')
    sizes = {str(tmp_path / 'model.safetensors'): 3 * MIB}
    p, cache, dummy = prefetcher(sizes)
    check = prefetch(str(tmp_path), ['*.safetensors'], True, 0, 1024, True, prefetcher=p)
    assert check['changed'] is True and check['bytes_to_read'] == 3 * MIB and check['bytes_read'] == 0
    assert not cache.pages
    real = prefetch(str(tmp_path), ['*.safetensors'], True, 0, 1024, False, prefetcher=p)
    assert real['changed'] is True and real['bytes_read'] == 3 * MIB
    again = prefetch(str(tmp_path), ['*.safetensors'], True, 0, 1024, True, prefetcher=p)
    assert again['changed'] is False and again['bytes_to_read'] == 0
    with pytest.raises(PrefetchError, match=r'^no file under .* matches \*\.bin$'):
        prefetch(str(tmp_path), ['*.bin'], True, 0, 1024, False, prefetcher=p)
    with pytest.raises(PrefetchError, match='must not be negative'):
        prefetch(str(tmp_path), ['*.bin'], True, -1, 1024, False, prefetcher=p)


def test_page_cache_sees_eviction_and_reads(tmp_path):
    """The real mincore() reader on a real file: evicted pages show missing, read pages resident."""
    path = tmp_path / 'shard.safetensors'
    path.write_bytes(os.urandom(64 * 1024) * 64)        # 4 MiB
    fd = os.open(str(path), os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        cache = PageCache()
        evicted = sum(n for dummy, n in cache.missing(fd, 0, 4 * MIB))
        os.pread(fd, MIB, 0)
        after = sum(n for dummy, n in cache.missing(fd, 0, 4 * MIB))
    finally:
        os.close(fd)
    if evicted == 0:
        pytest.skip('%s keeps file pages in memory (tmpfs): eviction cannot be observed' % tmp_path)
    assert after < evicted and evicted - after >= MIB


def test_find_files_follows_a_link_only_to_a_regular_file_inside_the_model(tmp_path):
    model = tmp_path / 'model'
    model.mkdir()
    (model / 'a.safetensors').write_bytes(b'x' * 3)
    (model / 'b.safetensors').symlink_to(model / 'a.safetensors')       # inside: read where it resolves
    (tmp_path / 'secret.bin').write_bytes(b's' * 5)
    (model / 'c.bin').symlink_to(tmp_path / 'secret.bin')               # another user's link out of the model
    (model / 'd.bin').symlink_to('/dev/zero')
    os.mkfifo(str(model / 'e.bin'))
    found = find_files(str(model), ['*.safetensors', '*.bin'], recurse=True)
    assert found == [(str(model / 'a.safetensors'), 3), (str(model / 'a.safetensors'), 3)]


def test_find_files_of_a_hugging_face_snapshot_follows_its_links_into_the_blobs(tmp_path):
    repo = tmp_path / 'hub' / 'models--org--name'
    (repo / 'blobs').mkdir(parents=True)
    (repo / 'snapshots' / 'rev1').mkdir(parents=True)
    (repo / 'blobs' / 'ab12').write_bytes(b'w' * 7)
    (repo / 'snapshots' / 'rev1' / 'model.safetensors').symlink_to('../../blobs/ab12')
    assert find_files(str(repo / 'snapshots' / 'rev1'), ['*.safetensors'], recurse=True) == [
        (str(repo / 'blobs' / 'ab12'), 7)]


def test_a_fifo_swapped_in_after_the_listing_is_skipped_not_waited_for(tmp_path):
    """Opened O_NONBLOCK and checked by fstat: the plan goes on at once. Run in a thread so that a regression shows
    as a failure (the thread still blocked in open) rather than a hung test run."""
    import threading
    model = tmp_path / 'model'
    model.mkdir()
    (model / 'a.safetensors').write_bytes(b'x' * (2 * MIB))
    (model / 'b.safetensors').write_bytes(b'y' * MIB)
    files = find_files(str(model), ['*.safetensors'], recurse=True)
    os.unlink(str(model / 'a.safetensors'))
    os.mkfifo(str(model / 'a.safetensors'))       # swapped between the listing and the read
    p = Prefetcher(meminfo=lambda: {'MemTotal': 128 * 1024 * MIB, 'MemAvailable': 64 * 1024 * MIB})
    out = {}
    worker = threading.Thread(target=lambda: out.update(result=p.run(p.plan(files), 0, MIB)), daemon=True)
    worker.start()
    worker.join(120)
    if worker.is_alive():   # unblock the open so the thread can end
        os.close(os.open(str(model / 'a.safetensors'), os.O_WRONLY | os.O_NONBLOCK))
    assert not worker.is_alive() and [f['path'] for f in out['result']['files']] == [str(model / 'b.safetensors')]
    assert p.skipped == [{'path': str(model / 'a.safetensors'),
                          'reason': 'not a regular file (it changed since it was listed)'}]


def test_a_link_swapped_in_on_the_way_to_a_listed_file_is_not_followed(tmp_path):
    """The model's user renames a directory of the model and puts a link to another directory in its place between
    the listing and the read: the open fails at the link, whichever component it is."""
    model, secret = tmp_path / 'model', tmp_path / 'secret'
    (model / 'shard').mkdir(parents=True)
    secret.mkdir()
    (model / 'shard' / 'w.safetensors').write_bytes(b'w' * 10)
    (secret / 'w.safetensors').write_bytes(b'private')
    listed = str(model / 'shard' / 'w.safetensors')
    with _prefetch.open_regular(listed) as f:
        assert f.read() == b'w' * 10
    os.rename(str(model / 'shard'), str(model / 'old'))
    os.symlink(str(secret), str(model / 'shard'))
    with pytest.raises(OSError) as e:
        _prefetch.open_regular(listed)
    assert e.value.errno in (errno.ELOOP, errno.ENOTDIR)


def test_a_fifo_swapped_in_for_a_listed_file_is_never_opened(tmp_path, fifo_writer):
    """A writer blocked in open() of a FIFO returns once a reader opens it: it stays blocked."""
    writer = fifo_writer(tmp_path / 'w.safetensors')
    with pytest.raises(OSError):
        _prefetch.open_regular(writer.path)
    assert not writer.opened()


def test_the_walk_stops_at_the_timeout(tmp_path):
    deep = tmp_path / 'model'
    for i in range(50):
        deep = deep / ('d%d' % i)
    deep.mkdir(parents=True)
    calls = []

    def expired():
        calls.append(1)
        return len(calls) > 5
    with pytest.raises(_prefetch.PrefetchError) as e:
        _prefetch.find_files(str(tmp_path / 'model'), ['*.safetensors'], True, expired)
    assert str(e.value).startswith('Stopped listing the files under %s at ' % (tmp_path / 'model'))
    assert len(calls) == 6

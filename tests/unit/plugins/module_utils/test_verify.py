# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import pytest

from ansible_collections.gpuops.host.plugins.module_utils._pci import nvidia_gpus
from ansible_collections.gpuops.host.plugins.module_utils._verify import (
    Limits, SelectionError, assess, check_seconds, count_problem, failure_message, gpu_problem, select,
    wait_until_clean)

LIMITS = Limits(max_used_mib=32, allow_processes=False, v1_reserved_mib=1024)
UUIDS = ['GPU-aaaa0000-0000-0000-0000-00000000000%d' % i for i in range(4)]


def gpu(index, used=0, reserved=700, processes=(), error=None):
    return {'index': index, 'uuid': UUIDS[index], 'name': 'NVIDIA H200', 'pci_bus_id': None,
            'total_mib': 143771, 'used_mib': used, 'reserved_mib': reserved, 'free_mib': 0,
            'v1_used_mib': used + (reserved or 0), 'processes': list(processes), 'error': error,
            'error_text': 'GPU is lost' if error else None}


def proc(pid, used, name='sglang::scheduler_TP3', exists=True, user=None, where=None):
    return {'pid': pid, 'used_mib': used, 'exists': exists, 'name': name if exists else None,
            'cmdline': name if exists else None, 'user': user, 'where': where}


def snapshot(*gpus, count=None):
    return {'driver_version': '570.133.20', 'memory_api': 'v2', 'gpus': list(gpus),
            'count': len(gpus) if count is None else count}


@pytest.mark.parametrize('g,limits,problem', [
    (gpu(0), LIMITS, None),
    (gpu(0, used=14), LIMITS, None),
    (gpu(0, used=32), LIMITS, None),
    (gpu(0, used=33), LIMITS, '33 MiB used with no process listed (limit 32 MiB)'),
    (gpu(3, used=8123, processes=[proc(4242, 8123)]), LIMITS, '8123 MiB used by pid 4242 (sglang::scheduler_TP3)'),
    (gpu(0, used=600, processes=[proc(1, 300, 'a'), proc(2, 300, 'b')]), LIMITS, '600 MiB used by pid 1 (a), pid 2 (b)'),
    (gpu(0, used=2, processes=[proc(7, 2, 'dcgm')]), LIMITS, '2 MiB used by pid 7 (dcgm)'),
    (gpu(0, used=2, processes=[proc(7, 2, 'dcgm')]), LIMITS._replace(allow_processes=True), None),
    (gpu(0, used=900, processes=[proc(7, 900, 'x')]), LIMITS._replace(allow_processes=True), '900 MiB used by pid 7 (x)'),
    (gpu(0, used=512, processes=[proc(999, 512, exists=False)]), LIMITS,
     '512 MiB held by pid 999 which no longer exists: GPU needs a reset'),
    (gpu(0, used=0, processes=[proc(999, None, exists=False)]), LIMITS,
     'memory held by pid 999 which no longer exists: GPU needs a reset'),
    (gpu(0, used=612, processes=[proc(5, 100, 'live'), proc(999, 512, exists=False)]), LIMITS,
     '612 MiB used by pid 5 (live); 512 MiB held by pid 999 which no longer exists: GPU needs a reset'),
    (gpu(0, error='NVML_ERROR_GPU_IS_LOST'), LIMITS, 'GPU lost (NVML_ERROR_GPU_IS_LOST)'),
    # who holds it: user and command line, and where it runs when that is elsewhere
    (gpu(3, used=20480, processes=[proc(7310, 20480, 'python3 train.py --epochs 3', user='alice')]), LIMITS,
     '20480 MiB used by pid 7310 (user alice: python3 train.py --epochs 3)'),
    (gpu(1, used=9000, processes=[proc(88, 9000, 'sglang::scheduler_TP0', user='root',
                                       where='in another PID namespace (pid:[4026532871])')]), LIMITS,
     '9000 MiB used by pid 88 in another PID namespace (pid:[4026532871]) (user root: sglang::scheduler_TP0)'),
    # a PID NVML lists that this namespace cannot see is not called gone
    (gpu(0, used=512, processes=[proc(4242, 512, exists=False, where='outside this PID namespace')]), LIMITS,
     "512 MiB held by pid 4242, which is not a process of this PID namespace: NVML lists the host's PIDs, so run "
     "the check in the host PID namespace to name it"),
    # v1 readings: used includes the driver's reservation, so only a known idle value proves zero
    (gpu(0, used=700, reserved=None), LIMITS, None),
    (gpu(0, used=1056, reserved=None), LIMITS, None),
    (gpu(0, used=1057, reserved=None), LIMITS, '1057 MiB used with no process listed (limit 1056 MiB)'),
    (gpu(0, used=700, reserved=None), LIMITS._replace(v1_reserved_mib=500), '700 MiB used with no process listed (limit 532 MiB)'),
    (gpu(0, used=700, reserved=None), LIMITS._replace(v1_reserved_mib=None),
     "700 MiB used as the v1 memory call reads it, driver-reserved memory included: zero cannot be proven without "
     "v1_reserved_mib (this GPU's v1 used memory when idle)"),
    (gpu(0, used=702, reserved=None, processes=[proc(7, 2, 'dcgm')]), LIMITS._replace(allow_processes=True),
     '702 MiB used by pid 7 (dcgm)'),
])
def test_gpu_problem(g, limits, problem):
    assert gpu_problem(g, limits) == problem


def test_other_nvml_errors_are_named():
    g = gpu(1, error='NVML_ERROR_UNKNOWN')
    g['error_text'] = 'Unknown Error'
    assert gpu_problem(g, LIMITS) == 'NVML cannot read the GPU: NVML_ERROR_UNKNOWN (Unknown Error)'


@pytest.mark.parametrize('wanted,indices', [
    ([], [0, 1, 2, 3]),
    (None, [0, 1, 2, 3]),
    (['2', '0'], [2, 0]),
    ([1, '1'], [1]),
    ([UUIDS[3]], [3]),
    ([UUIDS[3].lower()], [3]),
    ([UUIDS[2][4:]], [2]),
])
def test_select(wanted, indices):
    gpus = [gpu(i) for i in range(4)]
    assert [g['index'] for g in select(gpus, wanted)] == indices


@pytest.mark.parametrize('wanted', [['4'], ['GPU-nope']])
def test_select_unknown_gpu(wanted):
    with pytest.raises(SelectionError, match=r'^GPU \S+ not found: the host shows 4 GPUs \(0 GPU-aaaa'):
        select([gpu(i) for i in range(4)], wanted)


def test_assess_keys_by_uuid_and_index_for_lost_gpus():
    lost = gpu(1, error='NVML_ERROR_GPU_IS_LOST')
    lost['uuid'] = None
    report = assess(snapshot(gpu(0), lost), LIMITS)
    assert sorted(report['gpus']) == [UUIDS[0], 'index-1']
    assert report['dirty'] == ['index-1'] and report['final'] is True and report['clean'] is False
    assert 'error' not in report['gpus'][UUIDS[0]]


def test_assess_expected_count():
    report = assess(snapshot(gpu(0), gpu(1)), LIMITS, expected_count=8)
    assert report['clean'] is False and report['final'] is True and report['dirty'] == []
    assert report['problems'] == ['the host shows 2 GPUs, expected 8']
    assert assess(snapshot(gpu(0), gpu(1)), LIMITS, expected_count=2)['clean'] is True


class Clock(object):
    """A clock that only moves when the code under test sleeps."""

    def __init__(self):
        self.now = 100.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def readings(*snapshots):
    """A reader returning the given snapshots in turn, then the last one for ever."""
    left = list(snapshots)
    return lambda: left.pop(0) if len(left) > 1 else left[0]


def test_wait_returns_the_moment_all_are_clean():
    clock = Clock()
    dirty = snapshot(gpu(0, used=8123, processes=[proc(4242, 8123)]), gpu(1))
    read = readings(dirty, dirty, dirty, snapshot(gpu(0), gpu(1)))
    report = wait_until_clean(read, LIMITS, timeout=60, poll_interval=0.5, clock=clock, sleep=clock.sleep)
    assert report['clean'] is True and report['polls'] == 4 and report['elapsed'] == 1.5
    assert clock.sleeps == [0.5, 0.5, 0.5]
    assert 'final' not in report


def test_wait_gives_up_at_the_timeout_without_oversleeping():
    clock = Clock()
    read = readings(snapshot(gpu(0, used=512, processes=[proc(999, 512, exists=False)])))
    report = wait_until_clean(read, LIMITS, timeout=2.5, poll_interval=1, clock=clock, sleep=clock.sleep)
    assert report['clean'] is False and report['elapsed'] == 2.5 and report['polls'] == 4
    assert clock.sleeps == [1, 1, 0.5]
    assert failure_message(report, 2.5).splitlines() == [
        '1 of 1 checked GPUs not clean after 2.5 s (timeout 2.5 s)',
        'GPU 0 %s: 512 MiB held by pid 999 which no longer exists: GPU needs a reset' % UUIDS[0],
    ]


def test_timeout_zero_reads_once():
    clock = Clock()
    read = readings(snapshot(gpu(0, used=100)))
    report = wait_until_clean(read, LIMITS, timeout=0, clock=clock, sleep=clock.sleep)
    assert report['polls'] == 1 and clock.sleeps == [] and report['clean'] is False


def test_lost_gpu_and_count_mismatch_end_the_wait():
    clock = Clock()
    report = wait_until_clean(readings(snapshot(gpu(0), gpu(1, error='NVML_ERROR_GPU_IS_LOST'))), LIMITS,
                              timeout=60, clock=clock, sleep=clock.sleep)
    assert report['polls'] == 1 and clock.sleeps == []
    report = wait_until_clean(readings(snapshot(gpu(0))), LIMITS, expected_count=2, timeout=60,
                              clock=clock, sleep=clock.sleep)
    assert report['polls'] == 1
    assert failure_message(report, 60).splitlines() == [
        'GPU check failed after 0.0 s', 'the host shows 1 GPUs, expected 2']


def test_failure_message_one_line_per_gpu():
    report = assess(snapshot(gpu(0, used=8123, processes=[proc(4242, 8123)]), gpu(1),
                             gpu(2, used=64, processes=[proc(999, 64, exists=False)])), LIMITS)
    report['elapsed'] = 60.0
    assert failure_message(report, 60).splitlines() == [
        '2 of 3 checked GPUs not clean after 60.0 s (timeout 60 s)',
        'GPU 0 %s: 8123 MiB used by pid 4242 (sglang::scheduler_TP3)' % UUIDS[0],
        'GPU 2 %s: 64 MiB held by pid 999 which no longer exists: GPU needs a reset' % UUIDS[2],
    ]


@pytest.mark.parametrize('count, expected, pci, problem', [
    (8, None, ['0000:%02x:00.0' % b for b in range(8)], None),
    (7, None, ['0000:%02x:00.0' % b for b in range(8)],
     'NVML shows 7 GPUs, the PCI bus 8 NVIDIA GPUs (0000:00:00.0, 0000:01:00.0, 0000:02:00.0, 0000:03:00.0, '
     '0000:04:00.0, 0000:05:00.0, 0000:06:00.0, 0000:07:00.0): a GPU has fallen off the bus or its driver did not bind'),
    (8, None, [], None),
    (8, 8, ['0000:18:00.0'], None),
    (7, 8, [], 'the host shows 7 GPUs, expected 8'),
])
def test_count_problem(count, expected, pci, problem):
    assert count_problem(count, expected, pci) == problem


def test_assess_checks_the_count_against_the_pci_bus_by_default():
    report = assess(snapshot(gpu(0), gpu(1)), LIMITS, pci_gpus=['0000:18:00.0', '0000:2a:00.0', '0000:3a:00.0'])
    assert not report['clean'] and report['final'] and report['expected_count'] == 3
    assert report['problems'][0].startswith('NVML shows 2 GPUs, the PCI bus 3 NVIDIA GPUs')


def _pci_function(root, address, vendor, klass):
    d = root / 'bus' / 'pci' / 'devices' / address
    d.mkdir(parents=True)
    (d / 'vendor').write_text(vendor + '\n')
    (d / 'class').write_text(klass + '\n')


def test_nvidia_gpus_counts_nvidia_display_controllers_only(tmp_path):
    _pci_function(tmp_path, '0000:18:00.0', '0x10de', '0x030200')     # H200, 3D controller
    _pci_function(tmp_path, '0000:2a:00.0', '0x10de', '0x030000')     # VGA controller
    _pci_function(tmp_path, '0000:05:00.0', '0x10de', '0x068000')     # NVSwitch, a bridge
    _pci_function(tmp_path, '0000:2a:00.1', '0x10de', '0x040300')     # HDMI audio function
    _pci_function(tmp_path, '0000:00:02.0', '0x8086', '0x030000')     # another vendor's GPU
    (tmp_path / 'bus' / 'pci' / 'devices' / 'broken').mkdir()
    assert nvidia_gpus(str(tmp_path)) == ['0000:18:00.0', '0000:2a:00.0']
    assert nvidia_gpus(str(tmp_path / 'none')) == []


@pytest.mark.parametrize('value', [float('nan'), float('inf'), -1.0, None])
def test_check_seconds_refuses_what_cannot_end(value):
    with pytest.raises(ValueError) as e:
        check_seconds('timeout', value)
    assert str(e.value).startswith('timeout must be a finite number of seconds, 0 or more; got')


def test_check_seconds_positive():
    assert check_seconds('timeout', 0.0) == 0.0
    with pytest.raises(ValueError):
        check_seconds('poll_interval', 0.0, positive=True)

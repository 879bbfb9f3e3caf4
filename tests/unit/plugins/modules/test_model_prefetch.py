# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import os

from ansible_collections.gpuops.host.plugins.modules import model_prefetch

RESULT_KEYS = ['available_mib_after', 'available_mib_before', 'bytes_read', 'bytes_resident_before', 'bytes_to_read',
               'bytes_total', 'changed', 'files', 'mib_per_second', 'seconds', 'skipped']


def model(tmp_path):
    (tmp_path / 'config.json').write_text('{}')
    shard = tmp_path / 'model-00001-of-00001.safetensors'
    shard.write_bytes(b'w' * (2 * 1024 * 1024))
    return shard


def test_reads_the_shards_and_reports_what_it_read(tmp_path, run_module):
    shard = model(tmp_path)
    outcome, result, dummy = run_module(model_prefetch, {'path': str(tmp_path), 'min_available_mib': 0})
    assert outcome == 'exit' and sorted(result) == RESULT_KEYS
    assert result['bytes_total'] == 2 * 1024 * 1024
    assert result['bytes_read'] == result['bytes_to_read']
    assert result['files'][0]['path'] == str(shard) and result['files'][0]['size'] == 2 * 1024 * 1024
    assert result['changed'] is (result['bytes_to_read'] > 0)
    outcome, again, dummy = run_module(model_prefetch, {'path': str(tmp_path), 'min_available_mib': 0})
    assert outcome == 'exit' and again['changed'] is False and again['bytes_read'] == 0


def test_check_mode_reads_nothing(tmp_path, run_module):
    shard = model(tmp_path)
    fd = os.open(str(shard), os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    outcome, result, dummy = run_module(model_prefetch, {'path': str(tmp_path), '_ansible_check_mode': True})
    assert outcome == 'exit' and result['bytes_read'] == 0 and result['changed'] is (result['bytes_to_read'] > 0)


def test_fails_with_the_memory_figures(tmp_path, run_module):
    model(tmp_path)
    fd = os.open(str(tmp_path / 'model-00001-of-00001.safetensors'), os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    outcome, result, dummy = run_module(model_prefetch, {'path': str(tmp_path), 'min_available_mib': 2 ** 40})
    if outcome == 'exit':                # a file system that keeps every page in memory (tmpfs): nothing to read
        assert result['bytes_to_read'] == 0
    else:
        assert result['msg'].startswith('Not prefetching 1 files: 2.0 MiB of them are not in memory, MemAvailable is ')
        assert result['bytes_read'] == 0 and result['bytes_to_read'] == 2 * 1024 * 1024


def test_missing_path_fails(tmp_path, run_module):
    outcome, result, dummy = run_module(model_prefetch, {'path': str(tmp_path / 'nothing')})
    assert outcome == 'fail' and result['msg'] == '%s is neither a file nor a directory' % (tmp_path / 'nothing')

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The real-GPU check run where there is no GPU: its skips, and its sequence on the simulated node.

Run with: .venv/bin/pytest tests/gpu  (builds build/gpu-wheels with tests/gpu/bundle.sh if missing).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess

import pytest

from gpusim.nvml import Node, lib_dir

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
RUN = os.path.join(HERE, 'run.sh')

pytestmark = pytest.mark.slow


@pytest.fixture(scope='session')
def wheels():
    path = os.path.join(REPO, 'build', 'gpu-wheels')
    if not os.path.exists(os.path.join(path, 'ansible_core-2.19.14-py3-none-any.whl')):
        subprocess.run([os.path.join(HERE, 'bundle.sh'), path], check=True, stdout=subprocess.DEVNULL)
    return path


def run(tmp_path, wheels, *args, env=None):
    env = dict(os.environ if env is None else env, OUT=str(tmp_path / 'out'), GPU_CHECK_WORK=str(tmp_path / 'work'),
               GPU_CHECK_WHEELS=wheels)
    # run.sh bounds the check itself (270 s) but not the venv it sets up first, which took 2 min
    # on a loaded 2-core machine: the limit here only catches a hang.
    proc = subprocess.run([RUN] + list(args), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=900, check=False)
    with open(str(tmp_path / 'out' / 'gpu-check.json')) as f:
        return proc, json.load(f)


@pytest.mark.skipif(shutil.which('nvidia-smi') is not None, reason='this machine has nvidia-smi')
def test_skips_without_nvidia_smi(tmp_path):
    proc, report = run(tmp_path, '/nonexistent')
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.strip() == 'no NVIDIA GPU: skipped (nvidia-smi not found)'
    assert report == {'skipped': True, 'mode': 'real', 'reason': 'nvidia-smi not found', 'host': os.uname()[1]}


@pytest.mark.parametrize('init_error, reason', [
    ('DRIVER_NOT_LOADED', 'NVML init fails: Driver Not Loaded'),
    (None, 'torch could not be imported'),
])
def test_skips_when_nvml_or_torch_fails(tmp_path, wheels, init_error, reason):
    if init_error is None and importlib.util.find_spec('torch') is not None:
        pytest.skip('torch is installed here')
    node = Node.create(str(tmp_path / 'state'), gpus=1)
    node.set_init_error(init_error)
    fake = tmp_path / 'bin'
    fake.mkdir()
    (fake / 'nvidia-smi').write_text('#!/bin/sh\nexit 0\n')
    (fake / 'nvidia-smi').chmod(0o755)
    env = dict(os.environ, PATH='%s:%s' % (fake, os.environ['PATH']), **node.env())
    proc, report = run(tmp_path, wheels, env=env)
    assert proc.returncode == 0, proc.stdout
    assert 'no NVIDIA GPU: skipped (%s)' % reason in proc.stdout
    assert report['skipped'] is True and report['reason'] == reason


def test_sim_sequence_passes_and_measures_the_release_lag(tmp_path, wheels):
    lib_dir()
    proc, report = run(tmp_path, wheels, '--sim', '--sim-release-lag-ms', '300')
    assert proc.returncode == 0, proc.stdout
    assert report['ok'] is True and not report['skipped']
    assert [c for c in report['checks'] if not c['ok']] == []
    assert len(report['checks']) == 16
    (idle,) = report['idle'].values()
    assert (idle['used_mib'], idle['reserved_mib'], idle['v1_used_mib'], idle['total_mib']) == (0, 700, 700, 143771)
    # The times come from three processes, each of which may run late on a loaded machine: the
    # holder notes a SIGTERM when its handler runs (after the sending, before its death); the
    # controller notes reap_at before gpu_reap starts (before any signal); the watcher notes the
    # exit when its waitpid thread runs (any time after the death). The simulated memory comes
    # back release_lag (300) ms after a reader first sees the holder dead. So only these hold
    # however late each one runs; the watcher's own exit_to_memory_back does not (it comes out
    # below 300 ms when its exit stamp is late).
    for name, scenario in report['scenarios'].items():
        ms = scenario['ms']
        busy_msg = scenario['gpu_verify_busy']['msg']
        assert 'pid %d ' % scenario['holder_pid'] in busy_msg and 'sglang::scheduler_TP0' in busy_msg, busy_msg
        assert scenario['watch']['released'] is not None and ms['exit_to_memory_back'] is not None, name
        assert ms['sigterm_to_memory_back'] >= 300, name
        assert ms['sigterm_to_verified'] >= 300, name            # gpu_verify passed only once the memory was back
    sigkill = report['scenarios']['sigkill']['ms']
    assert sigkill['reap_start_to_exit'] >= 3000                # SIGKILL only after its term_timeout (3 s) ...
    # ... measured from the holder's SIGTERM handler, which may run late: half the term_timeout
    # tells a SIGKILL that waited from one that did not.
    assert sigkill['sigterm_to_exit'] >= 1500
    assert report['scenarios']['sigkill']['watch']['exit']['status'] == -9


def test_sim_sequence_fails_when_memory_stays_held(tmp_path, wheels):
    lib_dir()
    proc, report = run(tmp_path, wheels, '--sim', '--sim-ghost-mib', '512', '--verify-timeout', '1')
    assert proc.returncode == 1, proc.stdout
    assert report['ok'] is False
    failed = sorted({c['check'] for c in report['checks'] if not c['ok']})
    assert failed == ['gpu_verify passes after the reap']
    assert 'held by pid 999999 which no longer exists' in report['scenarios']['sigterm']['gpu_verify']['msg']

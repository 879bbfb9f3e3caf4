# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fixtures for the simulated GPU node: NVML state, pynvml probes, sandboxes, processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from gpusim import nvml
from gpusim.sandbox import Sandbox, VENV_PYTHON

PROBE = os.path.join(os.path.dirname(nvml.__file__), "probe.py")
PYTHON = VENV_PYTHON if os.path.exists(VENV_PYTHON) else sys.executable


@pytest.fixture
def node(tmp_path):
    """Four idle simulated H200s."""
    return nvml.Node.create(str(tmp_path / "state"), gpus=4)


def nvml_env(node, **overrides) -> dict:
    """This process's environment pointed at NODE; an override of None removes the variable."""
    env = dict(os.environ, **node.env(), PYTHONPATH=nvml.SIM_DIR)
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


@pytest.fixture
def probe():
    """Run gpusim/probe.py (real pynvml, fresh loader) against a node; return what it read."""
    def run(node, **env_overrides) -> dict:
        result = subprocess.run([PYTHON, PROBE], env=nvml_env(node, **env_overrides), capture_output=True,
                                text=True, timeout=60, check=False)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)
    return run


@pytest.fixture
def spawn():
    """Start processes; those still running at teardown are killed by PID and reaped."""
    started = []

    def start(argv, **kwargs) -> subprocess.Popen:
        proc = subprocess.Popen(argv, **kwargs)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)


@pytest.fixture
def sandbox(tmp_path):
    """A running sandbox with four GPUs and the decoy daemons."""
    with Sandbox(str(tmp_path / "node"), gpus=4) as sb:
        yield sb

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fixtures shared by the unit tests: a simulated GPU node in this process, and running a module."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading

import pytest

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args

SIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'sim')
if SIM not in sys.path:
    sys.path.insert(0, SIM)

from gpusim.nvml import Node, load_double  # noqa: E402  pylint: disable=wrong-import-position


@pytest.fixture(autouse=True)
def private_tempdir(tmp_path, monkeypatch):
    """Temporary files of the test, AnsibleModule's ansible-moduletmp-* among them, in its own tmp_path: a module
    whose exit_json raises never reaches the cleanup that would remove them from the host's /tmp."""
    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))


class BlockedWriter:
    """A writer blocked in open() of the FIFO at PATH: open() of a FIFO for writing returns once a reader opens it,
    so ``opened()`` tells whether anything opened the FIFO for reading meanwhile."""

    def __init__(self, path):
        self.path, self.fds = path, []
        os.mkfifo(path)
        self.thread = threading.Thread(target=lambda: self.fds.append(os.open(path, os.O_WRONLY)), daemon=True)
        self.thread.start()

    def opened(self, wait=0.5):
        self.thread.join(wait)
        return bool(self.fds)

    def close(self):
        unblock = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        self.thread.join(5)
        os.close(unblock)
        for fd in self.fds:
            os.close(fd)


@pytest.fixture
def fifo_writer():
    """BlockedWriter(PATH) for each path the test names; every one is unblocked and closed at the end."""
    made = []

    def make(path):
        made.append(BlockedWriter(str(path)))
        return made[-1]
    yield make
    for writer in made:
        writer.close()


class ModuleExit(Exception):
    pass


class ModuleFail(Exception):
    pass


@pytest.fixture
def sim_node(tmp_path, monkeypatch):
    """Create a simulated H200 node of GPUS GPUs that pynvml, loaded in this process, answers from."""
    def create(gpus):
        load_double()
        node = Node.create(str(tmp_path / 'state'), gpus=gpus, reserved_mib=700)
        monkeypatch.setenv('GPUSIM_STATE', node.state_dir)
        return node
    return create


@pytest.fixture
def node(sim_node):
    """A simulated 4-GPU H200 node."""
    return sim_node(4)


@pytest.fixture
def holder():
    """A process to register GPU memory for."""
    proc = subprocess.Popen(['sleep', '600'])
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def run_module(monkeypatch):
    """Run MODULE's main() with ARGS; returns (outcome, result, warnings), outcome 'exit' or 'fail'."""
    def exit_json(self, **result):
        raise ModuleExit(result)

    def fail_json(self, **result):
        raise ModuleFail(result)

    warnings = []
    monkeypatch.setattr(AnsibleModule, 'exit_json', exit_json)
    monkeypatch.setattr(AnsibleModule, 'fail_json', fail_json)
    monkeypatch.setattr(AnsibleModule, 'warn', lambda self, warning, **kwargs: warnings.append(warning))

    def run(module, args):
        del warnings[:]
        with patch_module_args(args):
            try:
                module.main()
            except ModuleExit as e:
                return 'exit', e.args[0], list(warnings)
            except ModuleFail as e:
                return 'fail', e.args[0], list(warnings)
        raise AssertionError('%s.main() returned without exit_json or fail_json' % module.__name__)
    return run

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Servers that something starts again: a `while true` wrapper around the server, on a sandboxed node.

(A real systemd and a real container engine: molecule/systemd and tests/integration/test_containers.py.)
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from gpusim import standin
from gpusim.fleet import VENV_PYTHON

pytestmark = pytest.mark.slow


@pytest.fixture
def wrapper(node):
    """`while true; do python -m sglang.launch_server ...; done`, in a session of its own, as a team's script."""
    argv = [VENV_PYTHON, "-m", "sglang.launch_server", "--model-path", node.model, "--port", str(node.port),
            "--tp-size", "2", "--enable-metrics"]
    loop = 'while true; do "$@"; sleep 0.2; done'
    env = dict(os.environ, **standin.FAST_ENV)
    env.update(node.server_env, PYTHONPATH=node.sglang)
    log = open(os.path.join(node.workdir, "wrapped.log"), "ab")
    proc = node.sandbox.popen(["setsid", "bash", "-c", loop, "team-serve-loop"] + argv, env=env,
                              stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    deadline = time.monotonic() + 60
    while not node.healthy():
        assert time.monotonic() < deadline and proc.poll() is None, "the wrapped server did not start"
        time.sleep(0.1)
    shell = [p["pid"] for p in node.sandbox.procs() if p["cmdline"][:2] == ["bash", "-c"]]
    assert len(shell) == 1
    yield shell[0]
    node.sandbox.run(["kill", "-KILL", str(shell[0])])
    for pid in node.main_pids():
        node.sandbox.run(["kill", "-KILL", str(pid)])
    proc.wait(10)


def test_a_server_that_its_wrapper_starts_again_fails_the_stop_naming_the_wrapper(node, fleet, wrapper):
    first = [pid for pid in node.main_pids() if pid != wrapper]

    run = fleet.playbook("stop_sglang.yml")

    text = run.words()
    assert run.rc != 0, run.output
    assert "a new SGLang server started within 2 s of the stop of the server(s) %d:" % first[0] in text, run.output
    assert ("started by pid %d (bash -c while true; do \"$@\"; sleep 0.2; done team-serve-loop" % wrapper) in text
    assert "stop that process first (kill %d)" % wrapper in text
    # what it stopped: the first server, which is gone; the wrapper started another
    assert len(first) == 1 and first[0] not in node.main_pids(), run.output
    assert "Find, drain, stop through the supervisors, stop what is left, verify the GPUs" in run.output

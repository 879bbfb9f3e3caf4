# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""make playground: the node outlives the command that started it, takes playbooks run by hand
with the ansible.cfg it wrote, and playground-stop ends exactly it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gpusim.fleet import http_get
from gpusim.nvml import REPO_ROOT
from gpusim.sandbox import VENV_PYTHON, Sandbox

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")]

PLAYGROUND = os.path.join(REPO_ROOT, "demo", "playground.py")


def playground(command, workdir):
    return subprocess.run([VENV_PYTHON if os.path.exists(VENV_PYTHON) else sys.executable, PLAYGROUND, command,
                           "--workdir", workdir], capture_output=True, text=True, timeout=300, check=False)


def test_playground_runs_playbooks_by_hand_until_stopped(tmp_path):
    workdir = str(tmp_path / "playground")
    started = playground("start", workdir)
    try:
        assert started.returncode == 0, started.stderr
        lines = started.stdout.strip().splitlines()
        assert len(lines) == 3 and "--check --diff" in lines[1], started.stdout
        with open(os.path.join(workdir, "playground.json")) as f:
            state = json.load(f)
        # the starting process has exited: the node and its server run on
        sandbox = Sandbox.attach(state["sandbox"])
        assert sandbox.alive and http_get(state["url"] + "/health")[0] == 200
        server = [p for p in sandbox.procs() if p["pid"] == state["server_pid_in_node"]]
        assert server and "sglang.launch_server" in server[0]["cmdline"]

        env = dict(os.environ, ANSIBLE_CONFIG=state["ansible_cfg"])
        env.pop("ANSIBLE_COLLECTIONS_PATH", None)       # the ansible.cfg alone must find gpuops.host
        run = subprocess.run([os.path.join(os.path.dirname(VENV_PYTHON), "ansible-playbook"),
                              os.path.join(REPO_ROOT, "playbooks", "restart_tuning.yml"), "--check", "--diff"],
                             env=env, capture_output=True, text=True, timeout=600, check=False, cwd=str(tmp_path))
        assert run.returncode == 0, run.stdout[-4000:]
        assert "failed=0" in run.stdout.split("PLAY RECAP")[-1]
        # check mode left the server as it was
        assert http_get(state["url"] + "/health")[0] == 200
        assert [p["pid"] for p in sandbox.procs() if p["pid"] == state["server_pid_in_node"]]

        again = playground("start", workdir)
        assert again.returncode == 0 and again.stdout == started.stdout      # one playground, not two
    finally:
        stopped = playground("stop", workdir)
    assert stopped.returncode == 0, stopped.stderr
    assert "playground stopped (sandbox init PID %d)" % state["init_pid"] in stopped.stdout
    assert not sandbox.alive                             # its init, and with it everything inside
    assert http_get(state["url"] + "/health")[0] is None
    assert playground("stop", workdir).stdout.startswith("no playground running")

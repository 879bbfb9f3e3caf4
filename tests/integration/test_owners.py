# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A shared host: another user's real SGLang server on other GPUs of the node, beside the one being stopped."""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import pytest

from gpusim import net, standin
from gpusim.fleet import VENV_PYTHON, Fleet, SimNode, http_get

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def node():
    """A 4-GPU node whose NVML state other users can read, as every user reads the driver's (pytest's own
    temporary directory is root's only)."""
    root = tempfile.mkdtemp(prefix="gpusim-owners-")
    os.chmod(root, 0o755)
    with SimNode(os.path.join(root, "node1"), gpus=4) as n:
        os.chmod(n.workdir, 0o755)
        yield n
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def fleet(node):
    return Fleet(os.path.dirname(node.workdir), [node])


@pytest.fixture
def colleague(node):
    """`python -m sglang.launch_server` as the user nobody, on GPUs 2 and 3, with an API key of its own."""
    # The NVML double keeps allocations in files: let any user's process register its memory, as the driver does.
    os.chmod(os.path.join(node.sandbox.state_dir, "alloc"), 0o1777)
    # a model directory of the colleague's own, which the test's private temporary directory is not
    home = tempfile.mkdtemp(prefix="gpusim-colleague-")
    os.chmod(home, 0o755)
    model = os.path.join(home, "model")
    standin.make_model_dir(model)
    port = net.free_port()
    launch = standin.Launch(node.sandbox, model, port=port,
                            args=["--tp-size", "2", "--base-gpu-id", "2", "--enable-metrics"],
                            env=dict(node.server_env, PYTHONPATH=standin.standin_root()),
                            argv=["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                                  VENV_PYTHON, "-m", "sglang.launch_server"],
                            log_path=os.path.join(node.workdir, "colleague.log"))
    launch.start().wait_ready(90)
    pid = [p["pid"] for p in node.sandbox.procs() if p["cmdline"][:1] == [VENV_PYTHON]
           and str(port) in p["cmdline"] and p["state"] != "Z"]
    assert len(pid) == 1
    launch.pid = pid[0]
    yield launch
    launch.stop()
    shutil.rmtree(home, ignore_errors=True)


def test_another_user_s_server_is_named_and_left_alone(node, fleet, colleague):
    ours = node.start_server(["--tp-size", "2", "--enable-metrics"]).find_pid()
    theirs = [p["pid"] for p in colleague.tree()]

    run = fleet.playbook("stop_sglang.yml", "-e", json.dumps({"gpu_clean_gpus": ["0", "1"]}))

    assert run.rc == 0, run.output
    procs = node.sandbox.procs()
    assert ours not in [p["pid"] for p in procs if p["state"] != "Z"]
    assert sorted(p["pid"] for p in procs if p["pid"] in theirs and p["state"] != "Z") == sorted(theirs)
    assert http_get(colleague.url + "/health")[0] == 200
    # never drained either: a drain reads its /metrics (or /v1/loads), and it logs every request
    assert "/metrics" not in colleague.log() and "/v1/loads" not in colleague.log()
    text = run.words()
    assert ("Not touched: pid %d (user nobody) %s" % (colleague.pid, VENV_PYTHON)) in text, run.output
    assert "listening on TCP ports %d: another user's server" % colleague.port in text
    used = node.used_mib()
    assert used[:2] == [0, 0] and used[2] > 0 and used[3] > 0, used

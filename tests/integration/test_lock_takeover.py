# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A restart whose host lock another controller takes over mid-run (a stale-lock break) stops before the old server
is touched, naming the run that holds the lock now: the stop's own call checks the lock before it drains or signals.
A real ansible-playbook run against a simulated node; the takeover rewrites the lock file as host_lock's rename(2)
does, while the launch reads the model ahead."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from gpusim import standin
from gpusim.fleet import Fleet, SimNode

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")]

EVICT = """
import os, sys
for root, dirs, names in os.walk(sys.argv[1]):
    for name in names:
        fd = os.open(os.path.join(root, name), os.O_RDONLY)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
"""


def take_over(lock_dir: str, record: dict) -> None:
    """Replace the lock file in one step, as host_lock does with a stale lock."""
    tmp = os.path.join(lock_dir, ".takeover.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(record, f)
    os.rename(tmp, os.path.join(lock_dir, "lock.json"))


def test_a_lock_taken_over_during_the_prefetch_fails_the_restart_before_the_stop(tmp_path):
    with SimNode(str(tmp_path / "node1"), gpus=2) as node:
        node.model = standin.make_model_dir(str(tmp_path / "weighted"), weights_mib=32, shards=2)
        old = node.serving()
        subprocess.run([sys.executable, "-c", EVICT, node.model], check=True)
        # 32 MiB at 4 MiB/s: the launch reads ahead for about 8 s, while the old server still serves.
        fleet = Fleet(str(tmp_path), [node], sglang_launch_prefetch=True, sglang_launch_prefetch_bandwidth_mib=4,
                      sglang_launch_server_args={"tp_size": 2})
        proc = fleet.popen("restart_serving.yml")
        lock = os.path.join(node.lock_path, "lock.json")
        deadline = time.monotonic() + 120
        while not os.path.exists(lock) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        with open(lock) as f:
            ours = json.load(f)
        # the owner it records names this ansible-playbook process and its play
        assert (ours["playbook"], ours["controller"], ours["controller_pid"]) == (
            "Restart SGLang in serving mode", socket.gethostname(), proc.pid), ours
        take_over(node.lock_path, {"run": "20260101T060000Z-77", "playbook": "Restart SGLang in tuning mode",
                                   "controller": "ops-2", "taken": time.time()})
        output = proc.communicate(timeout=300)[0]

        assert proc.returncode != 0, output
        assert ("This run (%s) no longer holds the lock %s on this host: it is now held by run 20260101T060000Z-77 "
                "(Restart SGLang in tuning mode) from ops-2" % (ours["run"], lock)) in output, output
        # The stop's own call found it before it touched the server, and the launch did nothing more.
        assert ("Another controller may have broken the lock as stale (its max_age); stopping before this run acts on the "
                "host again. Nothing was drained or signalled.") in " ".join(output.split()), output
        assert "TASK [gpuops.host.sglang_launch : Fail, this run having lost the host lock]" in output, output
        assert "TASK [gpuops.host.sglang_launch : Stop what failed, record it" not in output, output
        assert node.main_pids() == [old] and node.healthy()
        # The other run's lock is left as it is.
        with open(lock) as f:
            assert json.load(f)["run"] == "20260101T060000Z-77"

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Dumps that belong to one run: two hosts on one shared dump root (as an NFS or Lustre volume is) dump into two run
directories, and a dump root that other users can write is refused before the server is touched. Real
ansible-playbook runs against two simulated GPU nodes."""

from __future__ import annotations

import json
import os
import re

import pytest

from gpusim.fleet import Fleet, SimNode

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")]


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    root = tmp_path_factory.mktemp("dump-dirs")
    volume = root / "shared-dumps"
    volume.mkdir(mode=0o755)
    with SimNode(str(root / "node1"), gpus=2) as one, SimNode(str(root / "node2"), gpus=2) as two:
        yield Fleet(str(root), [one, two], sglang_launch_dump_root=str(volume),
                    sglang_launch_server_args={"tp_size": 2, "enable_metrics": True}), str(volume)


def test_two_hosts_on_one_shared_dump_root_dump_into_a_directory_each(shared):
    fleet, volume = shared

    run = fleet.playbook("restart_extraction.yml")

    assert run.rc == 0, run.output
    records = dict((n.name, n.record()) for n in fleet.nodes)
    for name, record in records.items():
        # the mode, the UTC second, the host and a random part: hosts that start in the same second differ too
        assert re.match(r"^extraction-\d{8}T\d{6}Z-%s-[0-9a-f]{8}$" % name, record["marker"]), record["marker"]
        assert record["dump_dir"] == os.path.join(volume, record["marker"])
    assert sorted(os.listdir(volume)) == sorted(os.path.basename(r["dump_dir"]) for r in records.values())
    # each server's own dumps (its warmup's, its probe's) in its own directory
    for record in records.values():
        assert any(f.endswith(".pt") for f in os.listdir(record["dump_dir"])), record["dump_dir"]


def test_a_dump_root_that_other_users_can_write_is_refused_before_the_server_is_touched(shared):
    fleet, volume = shared
    one = fleet.nodes[0]
    before = one.record()
    open_root = os.path.join(os.path.dirname(volume), "scratch")
    os.makedirs(open_root, exist_ok=True)
    os.chmod(open_root, 0o1777)

    run = fleet.playbook("restart_extraction.yml", "-l", one.name, "-e",
                         json.dumps({"sglang_launch_dump_root": open_root}))

    assert run.rc != 0
    text = " ".join(run.output.split())
    assert ("%s belongs to UID 0 with mode 1777: another user could plant a link or a directory in it" % open_root
            in text), run.output
    assert "Refusing before the running server is touched" in text
    assert os.listdir(open_root) == []
    assert one.main_pids() == [before["pid"]] and one.record() == before

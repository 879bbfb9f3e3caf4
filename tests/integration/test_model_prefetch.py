# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""model_prefetch run by ansible-playbook against real files whose pages the test evicts first."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time

import pytest

from gpusim import standin
from gpusim.fleet import collections_path
from gpusim.nvml import REPO_ROOT

BIN = os.path.dirname(sys.executable)
MIB = 1024 * 1024

pytestmark = pytest.mark.slow

# Five ways: check mode, apply, check mode again, apply again, then assert; and the refusal.
PLAYBOOK = """
- name: Prefetch a model five ways
  hosts: node
  gather_facts: false
  tasks:
    - name: Predict the reads in check mode
      gpuops.host.model_prefetch:
        path: "{{ model }}"
        min_available_mib: 64
      check_mode: true
      register: check1

    - name: Read the model into memory, capped at 1000 MiB/s
      gpuops.host.model_prefetch:
        path: "{{ model }}"
        bandwidth_mib: 1000
        min_available_mib: 64
      register: apply1

    - name: Predict again in check mode
      gpuops.host.model_prefetch:
        path: "{{ model }}"
        min_available_mib: 64
      check_mode: true
      register: check2

    - name: Read again
      gpuops.host.model_prefetch:
        path: "{{ model }}"
        min_available_mib: 64
      register: apply2

    - name: Evict the model's pages again
      ansible.builtin.command: "{{ ansible_python_interpreter }} {{ evict }} {{ model }}"
      changed_when: true

    - name: Ask for more available memory than the host has
      gpuops.host.model_prefetch:
        path: "{{ model }}"
        min_available_mib: 100000000
      register: refused
      failed_when: false

    - name: Check the five runs and the refusal
      ansible.builtin.assert:
        that:
          # The test evicted the files; a few pages just written by another CPU may have stayed.
          - check1 is changed
          - check1.bytes_to_read >= total * 0.9
          - check1.bytes_read == 0
          - apply1 is changed
          - apply1.bytes_read >= check1.bytes_to_read
          - apply1.bytes_read == apply1.bytes_to_read
          - apply1.files | map(attribute='read') | sum == apply1.bytes_read
          - apply1.mib_per_second <= 1100
          # A second run reads only what the kernel evicted in between: nothing, unless proactive reclaim
          # (such as DAMON's pageout on virtual machines) took back a few pages meanwhile.
          - check2.bytes_resident_before >= total * 0.9
          - (check2 is changed) == (check2.bytes_to_read > 0)
          - apply2.bytes_resident_before >= total * 0.9
          - (apply2 is changed) == (apply2.bytes_read > 0)
          - apply2.bytes_read == apply2.bytes_to_read
          - refused.bytes_to_read >= total * 0.9
          - refused.bytes_read == 0
          - "refused.msg is match('Not prefetching 3 files: [0-9.]+ MiB of them are not in memory, MemAvailable is ')"
          - "refused.msg is search('under min_available_mib [(]100000000.0 MiB[)]$')"
"""

EVICT = """
import os, stat, sys
for root, dirs, names in os.walk(sys.argv[1]):
    for name in names:
        if not stat.S_ISREG(os.lstat(os.path.join(root, name)).st_mode):
            continue
        fd = os.open(os.path.join(root, name), os.O_RDONLY)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
"""


def resident_bytes(path):
    """Bytes of PATH in memory, read through mincore() by the module's own reader."""
    spec = importlib.util.spec_from_file_location(
        "_prefetch", os.path.join(REPO_ROOT, "plugins", "module_utils", "_prefetch.py"))
    prefetch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prefetch)
    size = os.path.getsize(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        return size - sum(n for dummy, n in prefetch.PageCache().missing(fd, 0, size))
    finally:
        os.close(fd)


def test_prefetch_five_ways_and_refusal(tmp_path):
    model = standin.make_model_dir(str(tmp_path / "model"), weights_mib=24, shards=3)
    shards = sorted(os.path.join(model, n) for n in os.listdir(model) if n.endswith(".safetensors"))
    assert len(shards) == 3
    total = sum(os.path.getsize(p) for p in shards)
    evict = tmp_path / "evict.py"
    evict.write_text(EVICT)
    subprocess.run([sys.executable, str(evict), model], check=True)
    if sum(resident_bytes(p) for p in shards) > total // 2:
        pytest.skip("%s keeps file pages in memory (tmpfs): eviction cannot be observed" % tmp_path)
    collections = collections_path()
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    (tmp_path / "inventory.ini").write_text("node ansible_connection=local ansible_python_interpreter=%s\n"
                                            % sys.executable)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections, ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0")
    out = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", str(tmp_path / "inventory.ini"),
                          str(tmp_path / "play.yml"), "-e", json.dumps({"model": model, "evict": str(evict), "total": total})],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stdout
    assert "ok=7" in out.stdout and "failed=0" in out.stdout, out.stdout


BOUNDED = """
- name: Prefetch within a time bound
  hosts: node
  gather_facts: false
  tasks:
    - name: Read the model at 16 MiB/s within 60 s
      gpuops.host.model_prefetch:
        path: "{{ model }}"
        bandwidth_mib: 16
        min_available_mib: 64
        timeout: 60
      register: bounded

    - name: Evict the model's pages again
      ansible.builtin.command: "{{ ansible_python_interpreter }} {{ evict }} {{ model }}"
      changed_when: true

    - name: Read it at 16 MiB/s within half a second
      gpuops.host.model_prefetch:
        path: "{{ model }}"
        bandwidth_mib: 16
        min_available_mib: 64
        timeout: 0.5
      register: cut
      failed_when: false

    - name: Show both
      ansible.builtin.debug:
        msg: "{{ {'bounded': bounded, 'cut': cut} | to_json }}"
"""


def test_a_fifo_swapped_in_while_reading_is_skipped_and_the_reads_stop_at_the_timeout(tmp_path):
    """A model directory that a user can write: a shard replaced by a FIFO after the plan is skipped at once (never
    waited for), and a prefetch slower than its timeout stops there, saying how far it got."""
    model = standin.make_model_dir(str(tmp_path / "model"), weights_mib=48, shards=2)
    first, second = sorted(os.path.join(model, n) for n in os.listdir(model) if n.endswith(".safetensors"))
    evict = tmp_path / "evict.py"
    evict.write_text(EVICT)
    subprocess.run([sys.executable, str(evict), model], check=True)
    if resident_bytes(first) > os.path.getsize(first) // 2:
        pytest.skip("%s keeps file pages in memory (tmpfs): eviction cannot be observed" % tmp_path)
    (tmp_path / "play.yml").write_text(BOUNDED)
    (tmp_path / "inventory.ini").write_text("node ansible_connection=local ansible_python_interpreter=%s\n"
                                            % sys.executable)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path(), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0")
    play = subprocess.Popen([os.path.join(BIN, "ansible-playbook"), "-i", str(tmp_path / "inventory.ini"),
                             str(tmp_path / "play.yml"), "-e", json.dumps({"model": model, "evict": str(evict)})],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # the first shard's pages come back: the plan is made and the reads have begun
        deadline = time.monotonic() + 60
        while resident_bytes(first) < 4 * MIB:
            assert time.monotonic() < deadline and play.poll() is None, "the prefetch never began reading"
            time.sleep(0.05)
        os.unlink(second)
        os.mkfifo(second)
        out, dummy = play.communicate(timeout=120)
    finally:
        if play.poll() is None:
            play.kill()
    assert play.returncode == 0, out
    shown = json.loads(re.search(r'"msg": "(\{.*\})"', out).group(1).encode().decode("unicode_escape"))
    bounded, cut = shown["bounded"], shown["cut"]
    # planned while it was a shard, skipped when the reads came to it
    assert [(f["path"], f["read"] > 0) for f in bounded["files"]] == [(first, True), (second, False)], bounded
    assert bounded["skipped"] == [{"path": second, "reason": "not a regular file (it changed since it was listed)"}]
    assert bounded["seconds"] < 10, bounded
    assert re.match(r"^Stopped prefetching at %s, [0-9.]+ MiB of [0-9.]+ MiB read, after 0\.[5-9] s, "
                    r"its timeout \(0\.5 s\)$" % re.escape(first), cut["msg"]), cut["msg"]
    assert 0 < cut["bytes_read"] < cut["bytes_to_read"]


def test_restart_prefetches_the_model_before_the_old_server_is_stopped(tmp_path):
    """sglang_launch_prefetch: the model's shards are read (evicted before), before the stop, and the launch
    goes on when the prefetch cannot run."""
    from gpusim.fleet import Fleet, SimNode

    with SimNode(str(tmp_path / "node1"), gpus=2) as node:
        node.model = standin.make_model_dir(str(tmp_path / "weighted"), weights_mib=16, shards=2)
        shards = sorted(os.path.join(node.model, n) for n in os.listdir(node.model) if n.endswith(".safetensors"))
        node.start_server(["--tp-size", "2"])
        subprocess.run([sys.executable, "-c", EVICT, node.model], check=True)
        total = sum(os.path.getsize(p) for p in shards)
        # A few pages just read by another CPU may stay (the kernel drains only its own CPU's LRU batch).
        if sum(resident_bytes(p) for p in shards) > total // 2:
            pytest.skip("%s keeps file pages in memory (tmpfs): eviction cannot be observed" % tmp_path)
        fleet = Fleet(str(tmp_path), [node], sglang_launch_prefetch=True,
                      sglang_launch_server_args={"tp_size": 2})
        run = fleet.playbook("restart_serving.yml", "-v")
        assert run.rc == 0, run.output
        prefetched = run.output.index("TASK [gpuops.host.sglang_launch : Read the model's files]")
        stopped = run.output.rindex("TASK [gpuops.host.sglang_launch : Converge SGLang on this host to mode serving]")
        assert prefetched < stopped, run.output
        read = [int(n) for n in re.findall(r'"bytes_read": (\d+)', run.output)]
        assert len(read) == 1 and total * 0.9 <= read[0] <= total, run.output

        # Too little memory for the files: the prefetch is skipped with a message, the launch goes on (in check
        # mode, which predicts it without restarting the server).
        fleet.write_inventory(sglang_launch_prefetch=True, sglang_launch_prefetch_min_available_mib=1e9,
                              sglang_launch_server_args={"tp_size": 2, "mem_fraction_static": 0.8})
        subprocess.run([sys.executable, "-c", EVICT, node.model], check=True)
        run = fleet.playbook("restart_serving.yml", "--check")
        assert run.rc == 0, run.output
        assert "The model's files were not read ahead; the new server reads them from disk. Not prefetching 2 " \
               "files" in run.output, run.output

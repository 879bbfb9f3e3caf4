# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""model_prefetch run by ansible-playbook against real files whose pages the test evicts first."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

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
          - check1 is changed
          - check1.bytes_to_read == total
          - check1.bytes_read == 0
          - apply1 is changed
          - apply1.bytes_read == total
          - apply1.files | map(attribute='read') | sum == total
          - apply1.mib_per_second <= 1100
          # A second run reads only what the kernel evicted in between: nothing, unless proactive reclaim
          # (such as DAMON's pageout on virtual machines) took back a few pages meanwhile.
          - check2.bytes_resident_before >= total * 0.9
          - (check2 is changed) == (check2.bytes_to_read > 0)
          - apply2.bytes_resident_before >= total * 0.9
          - (apply2 is changed) == (apply2.bytes_read > 0)
          - apply2.bytes_read == apply2.bytes_to_read
          - refused.bytes_to_read == total
          - refused.bytes_read == 0
          - "refused.msg is match('Not prefetching 3 files: 24.0 MiB of them are not in memory, MemAvailable is ')"
          - "refused.msg is search('under min_available_mib [(]100000000.0 MiB[)]$')"
"""

EVICT = """
import os, sys
for root, dirs, names in os.walk(sys.argv[1]):
    for name in names:
        fd = os.open(os.path.join(root, name), os.O_RDONLY)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
"""


def resident_bytes(path):
    """Bytes of PATH in memory, read through mincore() by the module's own reader."""
    path = os.path.join(REPO_ROOT, "plugins", "module_utils", "_prefetch.py")
    spec = importlib.util.spec_from_file_location("_prefetch", path)
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
    if any(resident_bytes(p) for p in shards):
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

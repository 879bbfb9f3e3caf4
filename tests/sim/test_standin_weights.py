# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The stand-in's weight load reads the model's safetensors shards from disk, as SGLang's loader does."""

from __future__ import annotations

import importlib.util
import os

import pytest

from gpusim import standin
from gpusim.nvml import REPO_ROOT
from gpusim.sandbox import VENV_PYTHON
from gpusim.standin import Launch

pytestmark = pytest.mark.slow


def page_cache():
    """The page-cache reader of model_prefetch (mincore), loaded from its file."""
    spec = importlib.util.spec_from_file_location(
        "_prefetch", os.path.join(REPO_ROOT, "plugins", "module_utils", "_prefetch.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PageCache()


def resident(cache, path):
    size = os.path.getsize(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        return size - sum(n for dummy, n in cache.missing(fd, 0, size))
    finally:
        os.close(fd)


def test_model_load_reads_every_shard(sandbox, tmp_path):
    model = standin.make_model_dir(str(tmp_path / "model"), weights_mib=8, shards=4)
    shards = sorted(os.path.join(model, n) for n in os.listdir(model) if n.endswith(".safetensors"))
    assert [os.path.getsize(p) for p in shards] == [os.path.getsize(shards[0])] * 4
    cache = page_cache()
    for path in shards:
        fd = os.open(path, os.O_RDONLY)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    if any(resident(cache, p) for p in shards):
        pytest.skip("%s keeps file pages in memory (tmpfs): the reads cannot be observed" % tmp_path)
    with Launch(sandbox, model, args=["--tp-size", "2"], python=VENV_PYTHON) as srv:
        srv.wait_ready()
        # Every shard was read by one of the two ranks (a few pages may since have been reclaimed).
        assert all(resident(cache, p) >= os.path.getsize(p) * 0.9 for p in shards)
        assert srv.log().count("Load weight end. elapsed=") == 2

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the integration test modules share: one simulated 4-GPU node per module, and the fleet of it. A module
that needs another node (more GPUs, one per test) defines its own ``node`` and ``fleet``."""

from __future__ import annotations

import os

import pytest

from gpusim.fleet import Fleet, SimNode


@pytest.fixture(scope="module")
def node(request, tmp_path_factory):
    """A simulated 4-GPU node that the module's tests share, one after another (pytest-xdist --dist loadscope
    keeps a module on one worker)."""
    name = request.module.__name__.rsplit(".", 1)[-1].replace("_", "-")
    with SimNode(str(tmp_path_factory.mktemp(name) / "node1"), gpus=4) as n:
        yield n


@pytest.fixture(scope="module")
def fleet(node):
    return Fleet(os.path.dirname(node.workdir), [node])

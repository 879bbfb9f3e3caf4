# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the integration test modules share: one simulated 4-GPU node per module, and the fleet of it (a module
that needs another node, more GPUs or one per test, defines its own ``node`` and ``fleet``); and the closing of
every other tenant's process a test started."""

from __future__ import annotations

import os

import pytest

from gpusim.fleet import Fleet, SimNode
from gpusim.tenants import Tenant


@pytest.fixture(autouse=True)
def close_tenants():
    """After each test, close the tenants it left: those it expected to be stopped, and all of them when it failed
    (each has a directory in the host's temporary directory)."""
    yield
    while Tenant.unclosed:
        Tenant.unclosed[-1].close()


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

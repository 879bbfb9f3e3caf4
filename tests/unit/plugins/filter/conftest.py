# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the tests of the fleet tables' filters share."""

from __future__ import annotations

from collections.abc import Mapping

import pytest


class HostVarsVars(Mapping):
    """A host's variables as hostvars gives them: a read templates the variable (here: counts the read), ``in``
    does not, and a variable that the filter does not read fails as one that cannot be templated would."""

    def __init__(self, data):
        self.data, self.reads = dict(data, broken='{{ undefined }}'), {}

    def __getitem__(self, key):
        if key == 'broken':
            raise AssertionError('read a variable that the filter does not read: %s' % key)
        self.reads[key] = self.reads.get(key, 0) + 1
        return self.data[key]

    def __contains__(self, key):
        return key in self.data

    def __iter__(self):
        raise AssertionError('listed every variable of the host')

    def __len__(self):
        return len(self.data)


@pytest.fixture
def host_vars():
    """HostVarsVars, the class: a host's variables that count their reads."""
    return HostVarsVars

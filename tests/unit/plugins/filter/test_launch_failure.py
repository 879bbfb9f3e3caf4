# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The filter launch_failure, as the sglang_launch role calls it: the role's facts as they come (booleans as
strings among them), and a clear error for what it cannot take."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.host.plugins.filter.launch_failure import launch_failure

FAILED = 'the server did not answer ready within 600 s.'


def test_the_filter_takes_the_role_s_facts_as_they_come():
    report = launch_failure({'failure': FAILED, 'old_stopped': 'True', 'left_pids': [], 'new_started': 'false',
                             'marker': 'm', 'rollback': None, 'rollback_enabled': False, 'stop_failure': None,
                             'tail': [], 'tail_lines': 50, 'log': '/x', 'redact': 'zz', 'record_marker': None})
    assert report == {'server': 'none', 'message': FAILED + ' This node now runs NO SGLang server: its old server '
                      'was stopped and the new one (m) failed.'}
    with pytest.raises(AnsibleFilterError, match='failure and old_stopped'):
        launch_failure({'failure': FAILED})

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a node runs after a failed launch, and the message that says so: every branch, on plain values (what
gpuops.host.sglang_server's recovery from a failed start reports: tests/unit/plugins/module_utils/test_recovery.py)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.host.plugins.module_utils import _lifecycle as lifecycle

FAILED = 'the server did not answer ready within 600 s.'


@pytest.mark.parametrize('old_stopped, left, rollback_ok, expected', [
    (False, [], False, 'old'),
    (False, [42], False, 'old'),
    (True, [], False, 'none'),
    (True, [42], False, 'unknown'),
    (True, [], True, 'rollback'),
])
def test_what_the_node_runs_now(old_stopped, left, rollback_ok, expected):
    assert lifecycle.server_now(old_stopped, left, rollback_ok) == expected


@pytest.mark.parametrize('facts, expected', [
    (dict(old_stopped=False), FAILED + ' The running server was not touched.'),
    # said once, where the failure says it already
    (dict(failure='cannot make the run directory; the running server was not touched', old_stopped=False),
     'cannot make the run directory; the running server was not touched'),
    (dict(old_stopped=True, marker='tuning-x', new_started=True, record_marker='serving-y'),
     FAILED + ' This node now runs NO SGLang server: its old server (serving-y) was stopped and the new one (tuning-x) '
     'failed and was stopped.'),
    (dict(old_stopped=True, marker='tuning-x'),
     FAILED + ' This node now runs NO SGLang server: its old server was stopped and the new one (tuning-x) failed.'),
    (dict(old_stopped=True, left_pids=[42, 43]), FAILED + ' SGLang servers are still running on this node: 42, 43.'),
    (dict(old_stopped=True, record_marker='serving-y', rollback={'ok': True, 'marker': 'serving-y'}),
     FAILED + ' The previous configuration (serving-y) was relaunched and passed its checks: serving-y serves again.'),
    (dict(old_stopped=True, marker='t', rollback={'ok': False, 'message': 'it crashed'}, rollback_enabled=True),
     FAILED + ' This node now runs NO SGLang server: its old server was stopped and the new one (t) failed. '
     'The rollback failed too: it crashed'),
    (dict(old_stopped=True, left_pids=[42], rollback_enabled=True, stop_failure='42 survived SIGKILL'),
     FAILED + ' SGLang servers are still running on this node: 42. Stopping the failed launch failed too, so the '
     'previous configuration was not relaunched: 42 survived SIGKILL'),
    (dict(old_stopped=False, stop_failure='42 survived SIGKILL'),
     FAILED + ' The running server was not touched. Stopping the failed launch failed too: 42 survived SIGKILL'),
])
def test_the_message_says_what_failed_and_what_the_node_runs(facts, expected):
    assert lifecycle.failure_report(**dict({'failure': FAILED}, **facts))['message'] == expected


def test_the_log_tail_is_masked_and_left_out_where_the_failure_carries_it():
    facts = dict(old_stopped=False, tail=['server_args=ServerArgs(api_key=sk-secret1)', 'Traceback'], tail_lines=50,
                 log='/var/log/gpuops/x.log', redact='sk-secret1|hf_token2')
    report = lifecycle.failure_report(FAILED, **facts)
    assert report['message'] == (FAILED + ' The running server was not touched. Last 50 lines of /var/log/gpuops/x.log '
                                 '(secrets masked): server_args=ServerArgs(api_key=********)\nTraceback')
    # a failure that quotes the log's lines itself
    assert 'Last 50' not in lifecycle.failure_report('crashed; last 20 lines of x: ...', **facts)['message']

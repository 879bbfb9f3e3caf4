# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The lifecycle of a server's restart, on plain values: what a node runs after a launch failed, and the message
that says so.

    report = failure_report(failure='...', old_stopped=True, left_pids=[], ...)
    report['server']   # rollback, old, none or unknown
    report['message']  # the failure, what the node runs now, what else failed, the log's tail (secrets masked)
"""

from __future__ import annotations

import re

MASK = '********'
# What the node runs after a failed launch (sglang_launch_result.server).
SERVER_NOW = ('rollback', 'old', 'none', 'unknown')


def server_now(old_stopped, left_pids, rollback_ok):
    """What the node runs after a failed launch: ``rollback`` (the previous configuration was started again and
    passed its checks), ``old`` (the running server was never signalled), ``none`` (no SGLang server is left) or
    ``unknown`` (servers are left, LEFT_PIDS, that no one can vouch for)."""
    if rollback_ok:
        return 'rollback'
    if not old_stopped:
        return 'old'
    return 'unknown' if left_pids else 'none'


def failure_report(failure, old_stopped, left_pids=(), marker=None, new_started=False, record_marker=None,
                   rollback=None, rollback_enabled=False, stop_failure=None, tail=(), tail_lines=0, log=None,
                   redact=None):
    """The report of a failed launch: ``server`` (server_now) and ``message``.

    FAILURE is what failed (secrets masked already); OLD_STOPPED whether the stop had signalled the old server;
    LEFT_PIDS the SGLang servers found on the node afterwards; MARKER the failed run's marker and NEW_STARTED
    whether its server was started (and so stopped again); RECORD_MARKER the previous recorded run's; ROLLBACK the
    rollback's result (``ok``, ``marker``, ``message``) or None; ROLLBACK_ENABLED whether a rollback was asked for;
    STOP_FAILURE why stopping the failed server failed; TAIL the last TAIL_LINES lines of its LOG, masked here with
    the regular expression REDACT (secrets)."""
    rollback = rollback or {}
    now = server_now(old_stopped, left_pids, rollback.get('ok'))
    parts = [failure]
    if now == 'none':
        parts.append('This node now runs NO SGLang server: its old server%s was stopped and the new one (%s) failed%s.'
                     % (' (%s)' % record_marker if record_marker else '', marker,
                        ' and was stopped' if new_started else ''))
    elif now == 'rollback':
        parts.append('The previous configuration (%s) was relaunched and passed its checks: %s serves again.'
                     % (record_marker, rollback.get('marker')))
    elif now == 'unknown':
        parts.append('SGLang servers are still running on this node: %s.' % ', '.join(str(p) for p in left_pids))
    elif 'the running server was not touched' not in failure.lower():
        parts.append('The running server was not touched.')
    if stop_failure:
        parts.append('Stopping the failed launch failed too%s: %s'
                     % (', so the previous configuration was not relaunched' if rollback_enabled and old_stopped
                        else '', stop_failure))
    if rollback.get('message'):
        parts.append('The rollback failed too: %s' % rollback['message'])
    if tail and 'lines of' not in failure:
        mask = re.compile(redact) if redact else None
        lines = [mask.sub(MASK, line) if mask else line for line in tail]
        parts.append('Last %s lines of %s (secrets masked): %s' % (tail_lines, log, '\n'.join(lines)))
    return {'server': now, 'message': ' '.join(parts)}

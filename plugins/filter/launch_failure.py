# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
name: launch_failure
short_description: What a node runs after a failed SGLang launch, and the message that says so
version_added: 0.3.0
description:
  - Used by the C(sglang_launch) role once a launch failed. Says what the node runs now - V(rollback) (the previous
    configuration was started again and passed its checks), V(old) (the running server was never signalled), V(none)
    (no SGLang server is left) or V(unknown) (servers are left that no one can vouch for) - and builds the failure
    message - the failure, what the node runs now, what else failed (the stop of the failed server, the rollback),
    and the tail of the failed server's log with every match of O(_input.redact) masked.
options:
  _input:
    description: The facts of the failed launch.
    type: dict
    required: true
    suboptions:
      failure:
        description: What failed, secrets masked.
        type: str
        required: true
      old_stopped:
        description: Whether the stop had signalled the old server.
        type: bool
        required: true
      left_pids:
        description: The SGLang servers found on the node afterwards.
        type: list
        elements: int
      marker:
        description: The failed run's marker.
        type: str
      new_started:
        description: Whether the failed run's server was started, and so stopped again.
        type: bool
      record_marker:
        description: The marker of the previous recorded run.
        type: str
      rollback:
        description: The rollback's result (C(ok), C(marker), C(message)), or null.
        type: dict
      rollback_enabled:
        description: Whether a rollback was asked for.
        type: bool
      stop_failure:
        description: Why stopping the failed server failed, secrets masked.
        type: str
      tail:
        description: The last lines of the failed server's log.
        type: list
        elements: str
      tail_lines:
        description: How many lines were asked for.
        type: int
      log:
        description: The log's path.
        type: str
      redact:
        description: A regular expression of the secrets, masked in the tail.
        type: str
"""

EXAMPLES = r"""
- name: Say what the node runs now
  ansible.builtin.set_fact:
    report: "{{ {'failure': 'the server did not answer ready within 600 s', 'old_stopped': true, 'left_pids': []}
                | gpuops.host.launch_failure }}"
"""

RETURN = r"""
_value:
  description: C(server) (what the node runs now) and C(message).
  type: dict
  sample: {server: none, message: "... This node now runs NO SGLang server: its old server was stopped and the new one failed."}
"""

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.gpuops.host.plugins.module_utils._lifecycle import failure_report


def launch_failure(facts):
    """failure_report of the facts of a failed launch."""
    if not isinstance(facts, dict) or 'failure' not in facts or 'old_stopped' not in facts:
        raise AnsibleFilterError('launch_failure takes a dict with at least failure and old_stopped, got %r' % (facts,))
    facts = dict(facts)
    for name in ('old_stopped', 'new_started', 'rollback_enabled'):
        if name in facts:
            facts[name] = boolean(facts[name], strict=False)
    return failure_report(**facts)


class FilterModule:
    def filters(self):
        return {'launch_failure': launch_failure}

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
name: sglang_group_failure
short_description: What a node of a multi-node server runs after the group's launch failed, and the message
version_added: 0.3.0
description:
  - A multi-node server's launch that failed on one node fails the group - every node is stopped and, where
    C(sglang_launch_rollback) asks, every node starts the group's previous configuration again, together. This says
    what this node runs then (C(server) V(rollback) where every node did so and passed its checks, else V(none)) and
    the message - this node's own failure, or the nodes whose failure stopped it, and the rollback's outcome.
options:
  _input:
    description: This node's C(sglang_launch_result) (C(status) V(failed) where its own launch failed).
    type: dict
    required: true
  failed:
    description: The other nodes of the group whose launch failed.
    type: list
    elements: str
    required: true
  rolled_back:
    description: This node's start of the previous configuration (M(gpuops.host.sglang_server)'s result, with
      C(rollback)); null where none was tried.
    type: dict
  relaunch_failed:
    description: The nodes of the group whose start of the previous configuration failed.
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: Report the launch failed with its group
  ansible.builtin.set_fact:
    sglang_launch_result: "{{ sglang_launch_result | gpuops.host.sglang_group_failure(['gpu-b'], relaunched, []) }}"
"""

RETURN = r"""
_value:
  description: The result, with C(status) V(failed), C(server), C(pid), C(rollback) and C(message).
  type: dict
  sample: {status: failed, server: none, message: "node(s) gpu-b of the multi-node server failed; this node was stopped with it."}
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.host.plugins.module_utils._group import failure_outcome


def sglang_group_failure(result, failed, rolled_back=None, relaunch_failed=None):
    """RESULT of this node given FAILED, ROLLED_BACK and RELAUNCH_FAILED (see DOCUMENTATION)."""
    if not isinstance(result, dict) or not isinstance(failed, (list, tuple)):
        raise AnsibleFilterError('sglang_group_failure takes a launch result (dict) and a list of failed hosts')
    return failure_outcome(result, list(failed), rolled_back or None, list(relaunch_failed or ()))


class FilterModule:
    def filters(self):
        return {'sglang_group_failure': sglang_group_failure}

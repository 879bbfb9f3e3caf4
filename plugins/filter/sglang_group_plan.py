# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
name: sglang_group_plan
short_description: A node's restart plan once the plans of its multi-node server's other nodes are known
version_added: 0.3.0
description:
  - A multi-node server restarts as one. Where this node's plan (M(gpuops.host.sglang_server_info)'s) keeps its server
    but another node of the group restarts, the plan restarts this node too, and says which node makes it; otherwise
    the plan is returned as it is.
options:
  _input:
    description: This node's plan (C(needs_restart), C(reasons)).
    type: dict
    required: true
  host:
    description: This node's inventory name.
    type: str
    required: true
  restarting:
    description: The hosts of the group whose plan restarts their server.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Restart every node of the multi-node server where one of them must
  ansible.builtin.set_fact:
    plan: "{{ plan | gpuops.host.sglang_group_plan(inventory_hostname, ['gpu-b']) }}"
"""

RETURN = r"""
_value:
  description: The plan, with C(needs_restart) true and a reason per restarting node where another node restarts.
  type: dict
  sample: {needs_restart: true, reasons: ["node gpu-b of the multi-node server restarts"]}
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.host.plugins.module_utils._group import group_plan


def sglang_group_plan(plan, host, restarting):
    """PLAN of HOST given the hosts RESTARTING (see DOCUMENTATION)."""
    if not isinstance(plan, dict) or not isinstance(restarting, (list, tuple)):
        raise AnsibleFilterError('sglang_group_plan takes a plan (dict), the host and a list of restarting hosts')
    return group_plan(plan, host, list(restarting))


class FilterModule:
    def filters(self):
        return {'sglang_group_plan': sglang_group_plan}

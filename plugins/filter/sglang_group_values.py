# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
name: sglang_group_values
short_description: One variable of each host of a multi-node server, with a default for a host without it
version_added: 0.3.0
description:
  - Host to the value at a dotted path of its variables (C(sglang_launch_plan.needs_restart)), for each host of a list;
    the default where a host has none - a node that failed before it set it. What a node of a multi-node server reads
    of its peers - whether one must restart, whether one failed.
options:
  _input:
    description: The hosts.
    type: list
    elements: str
    required: true
  hostvars:
    description: Ansible's C(hostvars).
    type: dict
    required: true
  path:
    description: The variable, a dotted path into it.
    type: str
    required: true
  default:
    description: The value of a host without it.
    type: raw
"""

EXAMPLES = r"""
- name: Note the nodes of the group that failed
  ansible.builtin.set_fact:
    failed: >-
      {{ groups['glm5'] | gpuops.host.sglang_group_values(hostvars, 'sglang_launch_result.status', 'failed')
         | dict2items | selectattr('value', 'eq', 'failed') | map(attribute='key') | list }}
"""

RETURN = r"""
_value:
  description: Host to value.
  type: dict
  sample: {gpu-a: launched, gpu-b: failed}
"""


def sglang_group_values(members, hostvars, path, default=None):
    """Host -> the value at PATH (dotted: C(sglang_launch_plan.needs_restart)) of each host's variables of MEMBERS in
    HOSTVARS, DEFAULT where a host has none (a node that failed before it set it)."""
    out = {}
    for host in members or []:
        value = hostvars[host] if host in hostvars else {}
        for key in path.split('.'):
            try:
                value = value[key] if key in value else default
            except TypeError:
                value = default
            if value is default:
                break
        out[host] = value
    return out


class FilterModule:
    def filters(self):
        return {'sglang_group_values': sglang_group_values}

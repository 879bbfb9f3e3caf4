# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
name: sglang_launch_failure
short_description: The launch result of a converging call of gpuops.host.sglang_server that failed
version_added: 0.3.0
description:
  - Where the node answered, its own report (the failed call's C(launch)) - what the node runs now, the stop's summary,
    the opt-in rollback.
  - Else a refusal before the node was touched - an option the module refused, a variable that could not be read - with
    C(server) V(old) and the message, its secrets masked; an interpreter that cannot import SGLang is named as the
    variable to set.
options:
  _input:
    description: The failed task's result (C(ansible_failed_result) in a rescue).
    type: dict
    required: true
  mode:
    description: The mode that was launched.
    type: str
    required: true
  secrets:
    description: Values to mask in the message.
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Report the failed launch
  ansible.builtin.set_fact:
    sglang_launch_result: "{{ ansible_failed_result | gpuops.host.sglang_launch_failure('tuning', [vault_hf_token]) }}"
"""

RETURN = r"""
_value:
  description: The launch result, with C(status) V(failed), C(server) (what the node runs now) and C(message).
  type: dict
  sample: {status: failed, server: old, mode: tuning, message: "... The running server was not touched."}
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.host.plugins.module_utils._launch_request import failure


def sglang_launch_failure(failed, mode, secrets=None):
    """The launch result of FAILED in MODE (see DOCUMENTATION)."""
    if not isinstance(failed, dict):
        raise AnsibleFilterError('sglang_launch_failure takes a failed task\'s result (a dict)')
    return failure(failed, mode, [str(value) for value in secrets or ()])


class FilterModule:
    def filters(self):
        return {'sglang_launch_failure': sglang_launch_failure}

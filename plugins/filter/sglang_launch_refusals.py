# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
name: sglang_launch_refusals
short_description: What is wrong with a request to the sglang_launch role, before the node is read or touched
version_added: 0.3.0
description:
  - Checks the role's variables on the controller and returns one message per refusal, each naming the variable to
    set; an empty list lets the request go to the node.
  - A removed variable that is still set; a mode that is not a plain name of the mode table, or no model path; no
    interpreter; a container supervisor without an image, or with a colon in a path it mounts; a run name that is not
    a plain directory name; a memory fraction outside (0, 1); a control character in an argument, an environment value
    or a name that goes into the unit file or the environment file (and a space or a backslash in a path or name of
    the unit file), which could add directives or variables.
options:
  _input:
    description:
      - The variables - C(removed) (names of removed variables that are set), C(mode), C(modes), C(model_path),
        C(python), C(module), C(run_name), C(supervisor), C(image), C(server_args) (every argument, secret ones
        included), C(secret_args), C(config_file), C(state_dir), C(dump_root) (in a dumping mode), C(environment) (the
        role's and the mode's), C(pythonpath) and C(names) (the paths and names that go into the unit file).
      - The command line is rendered from them as the node renders it, and a container's mounts are the model (or, for
        a hub ID, the environment's C(HF_HOME)), the state directory and the dump root.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Check the role's variables
  ansible.builtin.assert:
    that: refused | length == 0
    fail_msg: "{{ refused | join(' ') }}"
  vars:
    refused: "{{ {'mode': 'tuning', 'modes': ['tuning'], 'model_path': '/models/m', 'python': '/opt/bin/python'}
                 | gpuops.host.sglang_launch_refusals }}"
"""

RETURN = r"""
_value:
  description: One message per refusal; empty where the request may go to the node.
  type: list
  elements: str
  sample: ["mem_fraction_static must be in (0, 1), got 1.2; refusing before the running server is touched."]
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.host.plugins.module_utils._launch_request import refusals


def sglang_launch_refusals(variables):
    """The refusals of VARIABLES (see DOCUMENTATION)."""
    if not isinstance(variables, dict) or 'modes' not in variables:
        raise AnsibleFilterError('sglang_launch_refusals takes the role\'s variables (a dict with modes)')
    return refusals(variables)


class FilterModule:
    def filters(self):
        return {'sglang_launch_refusals': sglang_launch_refusals}

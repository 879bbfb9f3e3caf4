# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
name: role_options
short_description: The options that a gpuops.host role's variables give its module call
version_added: 0.3.0
description:
  - Reads the variables of a gpuops.host role, as the task that looks it up sees them (role defaults, inventory, play
    and task variables, extra vars), and returns the options of the role's call, each option from the role's variable of
    the same name (the role's prefix, then the option's name). An option whose variable is unset is left out, so that
    the module's own default applies. A variable that was removed fails the lookup, naming its replacement.
  - The roles use it in their C(vars/main.yml); a play that calls the modules itself can use it the same way.
options:
  _terms:
    description:
      - V(sglang_launch) - the call of M(gpuops.host.sglang_server) that converges the node. Its C(launch) option
        (each suboption NAME from C(sglang_launch_NAME); the server's arguments from the mode's, C(sglang_launch_server_args),
        the model, the address and a multi-node server's place; the stop timeout, the owners and how the GPUs are read
        from C(sglang_stop_*) and C(gpu_clean_*)), C(secret_server_args) (the arguments named like a secret - key,
        token, secret or password between underscores or dashes - or in C(sglang_launch_secret_args)),
        C(secret_environment) (the environment less the variables the launch sets itself), C(refusals) (what is wrong
        with the request, before the node is read, as P(gpuops.host.sglang_launch_refusals#filter)), C(secrets) (the
        values to mask in a message), C(staged) and C(image_dump_patch).
      - V(sglang_stop) - the C(stop) option of M(gpuops.host.sglang_server), from C(sglang_stop_*), with the reap's
        and the verification's options from C(gpu_clean_*).
      - V(gpu_clean_verify) - the options of M(gpuops.host.gpu_verify) that C(gpu_clean_*) set.
    type: list
    elements: str
    required: true
    choices: [sglang_launch, sglang_stop, gpu_clean_verify]
"""

EXAMPLES = r"""
- name: Stop SGLang as gpuops.host.sglang_stop would, with this play's variables
  gpuops.host.sglang_server:
    state: stopped
    stop: "{{ lookup('gpuops.host.role_options', 'sglang_stop') }}"
  vars:
    sglang_stop_state_dir: /var/lib/gpuops/sglang
    sglang_stop_presets: [sglang]
    sglang_stop_patterns: []
    sglang_stop_pids: []
    sglang_stop_owners: [root]
    sglang_stop_term_timeout: 60
    sglang_stop_disable_supervisors: []
    sglang_stop_settle_seconds: 0
    sglang_stop_active_window: 120
    sglang_stop_cut_active_run: false
    sglang_stop_dump_patterns: []
"""

RETURN = r"""
_raw:
  description: One dict per term, the options of that role's call.
  type: list
  elements: dict
  sample:
    - {record_path: /var/lib/gpuops/sglang/server.json, presets: [sglang], stop_timeout: 60, reap: {kill_mode: mixed}}
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible_collections.gpuops.host.plugins.module_utils._role_options import CALLS, RoleOptionsError
from ansible_collections.gpuops.host.plugins.plugin_utils._variables import reader


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        # each variable templated once per lookup: a call's options read some of them more than once
        get = reader(self._templar, variables or {})

        unknown = [term for term in terms if term not in CALLS]
        if unknown:
            raise AnsibleLookupError('gpuops.host.role_options knows the calls %s, not %s'
                                     % (', '.join(CALLS), ', '.join(map(str, unknown))))
        try:
            return [CALLS[term](get) for term in terms]
        except RoleOptionsError as exc:
            raise AnsibleLookupError(str(exc)) from exc

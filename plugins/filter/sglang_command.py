# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
name: sglang_command
short_description: An SGLang server's command line, rendered from its arguments
version_added: 0.3.0
description:
  - The command line of C(PYTHON -m ENTRY_MODULE) with the server's arguments as flags named after SGLang's own
    argument names (C(model_path) becomes C(--model-path); V(true) a bare flag; V(false) and null left out; a list
    one value after another), the NVML indices of the GPUs it will occupy, and the argument files it names.
  - Secret arguments - named like one (C(key), C(token), C(secret) or C(password) between underscores or dashes) or
    listed in C(secret_args) - never go onto the command line, which every user of the host can read - with
    C(config_file) every argument is in the C(--config) file C(config_path); otherwise the secret ones are in the
    C(--config) file C(secrets_path), or, without it, left for the caller to pass (C(secret_args)).
  - Pure - it runs on the controller, reads nothing of the node and writes nothing; the node's installed SGLang checks
    the result (M(gpuops.host.sglang_server_info)'s O(gpuops.host.sglang_server_info#module:command)) and
    M(gpuops.host.sglang_server) writes the files.
options:
  _input:
    description:
      - C(python), C(entry_module) (default C(sglang.launch_server)), C(server_args), C(secret_args), C(environment)
        (only C(CUDA_VISIBLE_DEVICES) is read), C(config_file), C(config_path), C(secrets_path).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Render the command line
  ansible.builtin.set_fact:
    command: >-
      {{ {'python': '/opt/sglang/bin/python', 'server_args': {'model_path': '/models/qwen', 'tp_size': 4, 'api_key': 'k'},
          'secrets_path': '/var/lib/gpuops/sglang/runs/r1/secret-args.yaml'} | gpuops.host.sglang_command }}
"""

RETURN = r"""
_value:
  description:
    - C(argv) (the command line), C(server_argv) (its arguments alone), C(expected_gpus), C(secret_args) (the names
      kept off the command line) and C(files) (the argument files it names).
  type: dict
  sample: {argv: [/opt/sglang/bin/python, -m, sglang.launch_server, --model-path, /models/qwen, --tp-size, "4", --config,
                  /var/lib/gpuops/sglang/runs/r1/secret-args.yaml],
           expected_gpus: [0, 1, 2, 3], secret_args: [api_key], files: [/var/lib/gpuops/sglang/runs/r1/secret-args.yaml]}
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.host.plugins.module_utils._sglang_args import ArgsError, refuse_bad_names, render


def sglang_command(command):
    """The rendering of COMMAND (see DOCUMENTATION)."""
    if not isinstance(command, dict) or not command.get('python'):
        raise AnsibleFilterError('sglang_command takes a dict with at least python and server_args, got %r'
                                 % (sorted(command) if isinstance(command, dict) else command,))
    if command.get('config_file') and not command.get('config_path'):
        raise AnsibleFilterError('sglang_command: config_file is true but config_path is not set')
    try:
        refuse_bad_names(command)
        return render(dict(command, entry_module=command.get('entry_module') or 'sglang.launch_server'))
    except ArgsError as e:
        raise AnsibleFilterError('sglang_command: %s' % e)


class FilterModule:
    def filters(self):
        return {'sglang_command': sglang_command}

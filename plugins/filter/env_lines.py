# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
name: env_lines
short_description: The lines of an SGLang server's environment file
version_added: 0.3.0
description:
  - One C(NAME=value) line per variable, sorted by name without case, quoted for the reader of the file.
  - V(systemd) - for systemd's C(EnvironmentFile=) - double quotes, with backslash, double quote, dollar and
    backquote escaped by a backslash.
  - V(shell) - for a POSIX shell's C(set -a; . FILE), as the process and container supervisors read it - single
    quotes, as Python's C(shlex.quote) writes them.
options:
  _input:
    description: The environment, variable names mapped to values (each written as its string).
    type: dict
    required: true
  syntax:
    description: Who reads the file.
    type: str
    choices: [systemd, shell]
    required: true
"""

EXAMPLES = r"""
- name: Write the server's environment file for systemd
  ansible.builtin.copy:
    content: "{{ {'HF_TOKEN': 'hf_x', 'PATH': '/opt/venv/bin:/usr/bin'} | gpuops.host.env_lines('systemd') | join('\n') }}\n"
    dest: /var/lib/gpuops/sglang/runs/r1/server.env
    mode: "0600"
"""

RETURN = r"""
_value:
  description: The lines, without line ends.
  type: list
  elements: str
  sample: ['HF_TOKEN="hf_x"', 'PATH="/opt/venv/bin:/usr/bin"']
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.host.plugins.module_utils._server_config import env_lines as lines_of


def env_lines(env, syntax):
    """The environment file lines of ENV for SYNTAX (systemd or shell)."""
    if not isinstance(env, dict):
        raise AnsibleFilterError('env_lines takes a dict of variables, got %r' % (env,))
    try:
        return lines_of(env, syntax)
    except ValueError as e:
        raise AnsibleFilterError('env_lines: %s' % e)


class FilterModule:
    def filters(self):
        return {'env_lines': env_lines}

#!/usr/bin/python
# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_server_info
short_description: Read a node's SGLang servers and whether the recorded one matches a configuration
version_added: 0.3.0
description:
  - Reads the record of the server that M(gpuops.host.sglang_server) and the C(sglang_launch) role started last
    (O(record_path)), finds that server by its run marker and identifies it by PID and start time, asks its
    C(/health), and lists every SGLang server and gateway of the node with its owner, supervisor and listeners.
  - With O(config), also reads what makes a running server stale on the node now - the SGLang release that
    O(python) imports (run as O(run_as), isolated, never as root), in a dumping mode the digest of the hidden-state
    dump patch (O(dump_patch)), a container image's ID, and a fingerprint of the model directory (its config and
    index files, and every file's name, size and modification time) - and compares it, field by field, with the
    identity that the record keeps. RV(needs_restart) says whether the server must (re)start to match, and
    RV(reasons) why, in words. RV(diff) holds the before and after, secrets left out.
  - Nothing is signalled, started or written.
author:
  - gpuops maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.host.attributes
  - gpuops.host.attributes.INFO_MODULE
options:
  record_path:
    description: The record of the server started last (C(server.json) in the C(sglang_launch) role's state directory).
    type: path
    required: true
  presets:
    description: The kinds of process listed in RV(servers), as M(gpuops.host.gpu_reap)'s O(gpuops.host.gpu_reap#module:presets).
    type: list
    elements: str
    default: [sglang]
  config:
    description:
      - The desired configuration, as the C(sglang_launch) role renders it - C(mode), C(argv) (the command line,
        no secret on it), C(environment) (the variables that are no secret), C(supervisor), C(unit), C(container),
        C(user), C(group), C(dumps), C(run_name). Compared with the record's C(identity) key by key.
      - Without it, only the record and the servers are read.
    type: dict
  config_hash:
    description: The digest by which a record of an earlier release (which keeps no identity) is compared.
    type: str
  secret_server_args:
    description: The secret server arguments. Only their digest is compared and returned.
    type: dict
    default: {}
  secret_environment:
    description: The secret variables of the server's environment. Only their digest is compared and returned.
    type: dict
    default: {}
  environment:
    description: The variables that are no secret, for the interpreter that reads the SGLang release.
    type: dict
    default: {}
  python:
    description: The interpreter of the installed SGLang, which reads its release.
    type: path
    default: /usr/bin/python3
  pythonpath:
    description: Directories put first on that interpreter's C(sys.path).
    type: list
    elements: path
    default: []
  run_as:
    description: The user that runs the interpreter (the server's), never root's code.
    type: dict
    suboptions:
      uid:
        description: Its UID.
        type: int
        required: true
      gid:
        description: Its GID.
        type: int
        required: true
  container:
    description: A container server's engine and image; then the image's ID is compared instead of the release and the patch.
    type: dict
    suboptions:
      engine:
        description: The container engine.
        type: str
        choices: [docker, podman]
        default: docker
      image:
        description: The image.
        type: str
        required: true
  model_path:
    description: The model, a directory or a HuggingFace hub ID (then found in O(hf_home)'s cache), whose fingerprint is compared.
    type: str
  hf_home:
    description: The C(HF_HOME) of the server, where a hub ID's snapshot is.
    type: path
  dump_patch:
    description: In a dumping mode, where the hidden-state dump patch is in the SGLang package, whose digest is compared.
    type: dict
    suboptions:
      paths:
        description: Directories relative to the package.
        type: list
        elements: str
        required: true
      pattern:
        description: The text a patched file contains.
        type: str
        required: true
  restart:
    description: Count a restart as needed even where nothing differs (RV(reasons) says it was asked for).
    type: bool
    default: false
  request_timeout:
    description: Seconds the recorded server has to answer C(/health).
    type: float
    default: 10
seealso:
  - module: gpuops.host.sglang_server
"""

EXAMPLES = r"""
- name: Read the node's servers
  gpuops.host.sglang_server_info:
    record_path: /var/lib/gpuops/sglang/server.json
  register: node

- name: Show the recorded server and why it does not serve
  ansible.builtin.debug:
    msg: "{{ node.server | default('no recorded server', true) }}"

- name: Compare the running server with a tuning configuration
  gpuops.host.sglang_server_info:
    record_path: /var/lib/gpuops/sglang/server.json
    python: /opt/sglang/venv/bin/python
    run_as: {uid: 1001, gid: 1001}
    model_path: /models/GLM-5
    config:
      mode: tuning
      argv: [/opt/sglang/venv/bin/python, -m, sglang.launch_server, --model-path, /models/GLM-5,
             --mem-fraction-static, "0.92"]
      environment: {CUDA_VISIBLE_DEVICES: "0,1,2,3,4,5,6,7"}
      supervisor: systemd
  register: plan

- name: Say why the server would restart
  ansible.builtin.debug:
    var: plan.reasons
  when: plan.needs_restart
"""

RETURN = r"""
record:
  description: The record as read; empty where there is none.
  returned: success
  type: dict
  sample: {status: ok, marker: tuning-20261204T101500Z-node1-3f9a2c1b, pid: 4242, url: "http://127.0.0.1:30000"}
server:
  description: The recorded server as it runs now (identified by PID and start time), with its C(/health) status; null where it does not run.
  returned: success
  type: dict
  sample: {pid: 4242, start: 1234567, user: sglang, health: 200}
servers:
  description: Every SGLang server of the node, with its owner, supervisor and listeners.
  returned: success
  type: list
  elements: dict
elsewhere:
  description: Servers in another PID namespace, or in a container whose engine did not confirm them.
  returned: success
  type: list
  elements: dict
others:
  description: Servers left out by their owner.
  returned: success
  type: list
  elements: dict
gateways:
  description: SGLang Model Gateway processes of the node.
  returned: success
  type: list
  elements: dict
current:
  description: The desired identity and what the node has now (C(sglang), C(dump_patch), C(model), C(image)); the record keeps it after a launch.
  returned: config is set
  type: dict
needs_restart:
  description: Whether the recorded server must (re)start to match O(config).
  returned: config is set
  type: bool
  sample: true
reasons:
  description: Why, in words, one line per cause.
  returned: config is set
  type: list
  elements: str
  sample: ["command line: --mem-fraction-static 0.85 -> 0.92", "SGLang release: 0.5.14 -> 0.5.23"]
changes:
  description: The fields that differ, each with C(field) and C(words).
  returned: config is set
  type: list
  elements: dict
diff:
  description: The recorded server's identity (empty where none runs) and the desired one, one line per field, the command line one flag per line.
  returned: config is set
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.host.plugins.module_utils._procs import ProcFS
from ansible_collections.gpuops.host.plugins.module_utils._server_info import info
from ansible_collections.gpuops.host.plugins.module_utils._sglang import ActionFailed, Deps


def main():
    module = AnsibleModule(
        argument_spec=dict(
            record_path=dict(type='path', required=True),
            presets=dict(type='list', elements='str', default=['sglang']),
            config=dict(type='dict'),
            config_hash=dict(type='str'),
            secret_server_args=dict(type='dict', default={}, no_log=True),
            secret_environment=dict(type='dict', default={}, no_log=True),
            environment=dict(type='dict', default={}),
            python=dict(type='path', default='/usr/bin/python3'),
            pythonpath=dict(type='list', elements='path', default=[]),
            run_as=dict(type='dict', options=dict(uid=dict(type='int', required=True),
                                                  gid=dict(type='int', required=True))),
            container=dict(type='dict', options=dict(
                engine=dict(type='str', choices=['docker', 'podman'], default='docker'),
                image=dict(type='str', required=True))),
            model_path=dict(type='str'),
            hf_home=dict(type='path'),
            dump_patch=dict(type='dict', options=dict(paths=dict(type='list', elements='str', required=True),
                                                      pattern=dict(type='str', required=True))),
            restart=dict(type='bool', default=False),
            request_timeout=dict(type='float', default=10),
        ),
        supports_check_mode=True,
    )
    # Values of under 4 characters (SPT_NOENV=1) are masked nowhere: masking them would garble the command line that
    # the record keeps.
    module.no_log_values.difference_update([v for v in module.no_log_values if len(v) < 4])
    if not module.params['request_timeout'] > 0:
        module.fail_json(msg='request_timeout must be more than 0, got %r' % module.params['request_timeout'])

    def run(argv, environ):
        return module.run_command(argv, environ_update=environ)

    deps = Deps(ProcFS(), run, tmpdir=module.tmpdir, check_mode=module.check_mode, warn=module.warn,
                self_pids=(os.getpid(), os.getppid()))
    try:
        result = info(module.params, deps)
    except ActionFailed as e:
        module.fail_json(msg=e.msg, **e.result)
    module.exit_json(changed=False, **result)


if __name__ == '__main__':
    main()

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
    (O(record_path)), finds that server by its run marker and identifies it by PID and start time, and lists every
    SGLang server and gateway of the node with its owner, supervisor and listeners.
  - With O(config), also reads what makes a running server stale on the node now - the SGLang release that
    O(python) imports (run as O(run_as), isolated, never as root), in a dumping mode the digest of the hidden-state
    dump patch (O(dump_patch)), a container image's ID, and a fingerprint of the model directory (its config and
    index files, and every file's name, size and modification time) - and compares it, field by field, with the
    identity that the record keeps. RV(needs_restart) says whether the server must (re)start to match, and
    RV(reasons) why, in words. RV(diff) holds the before and after, secrets left out. Where nothing else makes it
    restart, the recorded server's C(/health) decides - asked only then, since on SGLang C(/health) generates a
    token, which a patched server in a dumping mode dumps into its run.
  - With O(extraction), also reads how the recorded hidden-state extraction run goes (RV(extraction)) - its mode,
    run marker and uptime, the dumps and gigabytes it has written, the rate over the last O(rate_window) seconds by
    the files' modification times, the free space on the dump volume and the hours until it is full at that rate,
    the requests in flight and the newest dump's age - from the run directory's file names, sizes and times (the
    dumps are never opened) and the server's C(/metrics) or C(/v1/loads), without an API key.
    C(playbooks/extraction_status.yml) prints it for the fleet.
  - Nothing is signalled, started or written, and no lock is taken.
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
        C(user), C(group), C(dumps), C(run_name). Compared with the record's C(identity) key by key. A record of an
        earlier release, which keeps no identity, counts as changed.
      - With O(owner), its C(group), the GID of C(dumps) and the owner's C(HOME) and C(HF_HOME) in C(environment) are
        this node's.
      - A C(supervisor) of V(auto) is chosen here (RV(supervisor)) - V(systemd) where systemd is the node's init
        (PID 1), else V(process) - and C(unit) then counts only under systemd, as O(unit_files) is read only then.
      - Without it, only the record and the servers are read.
    type: dict
  secrets_digest:
    description:
      - A digest of the server's secret arguments and variables (C(sha256:...)), compared as a field of O(config).
        The secrets themselves never reach this module - whatever a module takes as a secret, Ansible masks wherever
        it shows in the result, and the result is what the record keeps.
    type: str
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
  owner:
    description:
      - The server's user and groups by name, looked up on this node (RV(owner)); a name it does not know fails the
        module before anything is read.
      - Then the interpreter runs as that user and group (O(run_as)), with the user's C(HOME) and C(HF_HOME)
        (C(~/.cache/huggingface)) in O(environment) and in O(config)'s where they set neither, O(hf_home) is the
        environment's C(HF_HOME), and O(config)'s C(group) and dump group, the dump directory's owner and group, the
        model's user and hub cache, and for a hub ID the cache that a container server mounts follow from it.
    type: dict
    suboptions:
      user:
        description: The server's user.
        type: str
        required: true
      group:
        description: The server's group; empty, the user's primary group.
        type: str
        default: ''
      dump_group:
        description: The group that reads the hidden-state dumps; empty, the server's group.
        type: str
        default: ''
  run_as:
    description: The user that runs the interpreter (the server's), never root's code. O(owner) sets it.
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
      mounts:
        description:
          - The host paths the container will mount, resolved here (RV(mounts)) so that the engine gets paths no other
            user can redirect. A path on whose way a user other than root and O(run_as)'s user can change an entry
            (own it, or write a directory without the sticky bit), before or after its links, fails the module before
            anything is touched, naming the entries.
        type: list
        elements: path
        default: []
      options:
        description:
          - More options of the engine's C(run) for the parser's check of O(command) in the image (C(--volume=...) for the
            model and the run directory).
        type: list
        elements: str
        default: []
  command:
    description:
      - The new server's command line, checked with the installed SGLang's own parser
        (C(sglang.srt.server_args.prepare_server_args), what C(sglang serve) runs), without launching anything or writing
        any file of the server - run by O(python) as O(run_as)'s user, isolated (C(-I)), or in the image of O(container).
        Unknown, ambiguous (the parser accepts unambiguous abbreviations) and badly-valued arguments fail the module with
        SGLang's own message, before anything is touched. The release it reads serves the plan (RV(current)); RV(command)
        has the rest.
      - Secret arguments never go onto the command line, which every user of the host can read - with
        O(command.config_file) every argument is in the C(--config) file O(command.config_path); otherwise the secret ones
        are in the C(--config) file O(command.secrets_path). The check reads them from temporary files of its own.
      - O(command.server_args) and O(environment) are logged as given (syslog, or the journal), so a value there that is
        a secret (a name with C(key), C(token), C(secret) or C(password), or listed in O(command.secret_args)) is refused
        before anything is done.
    type: dict
    suboptions:
      entry_module:
        description: The module that C(python -m) runs.
        type: str
        default: sglang.launch_server
      server_args:
        description: The server's arguments by SGLang's own names (C(model_path), C(tp_size)), secrets apart.
        type: dict
        default: {}
      secret_args:
        description: More argument names whose values are secrets.
        type: list
        elements: str
        default: []
      config_file:
        description: Every argument in the C(--config) file O(command.config_path), none on the command line.
        type: bool
        default: false
      config_path:
        description: The C(--config) file of O(command.config_file).
        type: path
      secrets_path:
        description: The C(--config) file of the secret arguments.
        type: path
  secret_server_args:
    description: With O(command), the server's secret arguments (C(api_key)) - never logged, never on a command line.
    type: dict
    default: {}
  secret_environment:
    description: With O(command), the server's secret environment, which the parser's check runs with too; never logged.
    type: dict
    default: {}
  refuse:
    description:
      - With O(config), where the plan restarts the server - refuse, before anything is touched, a restart that the node
        cannot take (RV(refusals) says what was checked).
    type: dict
    suboptions:
      gpus:
        description: The GPU indices the new server would need; NVML must show each, and each once.
        type: list
        elements: int
      port:
        description:
          - The new server's port, which only the tree of a server that the restart replaces (one of O(refuse.owners))
            may hold.
        type: int
      bind_host:
        description: The address the new server binds; a listener on another address of the port is not counted.
        type: str
      owners:
        description: The users whose servers the restart replaces (the stop's owners).
        type: list
        elements: str
        default: []
      model:
        description:
          - The model the new server loads - its C(path) must exist; for a HuggingFace C(hub) ID that the server may
            not download (C(offline)), a snapshot must be in its C(cache) (the hub cache of the server's C(user), in
            C(hf_home)).
        type: dict
      dump_dir:
        description:
          - The run directory of the new server's hidden-state dumps, checked as M(gpuops.host.dump_dir) checks it
            before it makes it - the dump root (no link, no directory on its way that another user can change), its
            free space, and nothing at the run directory's name yet.
        type: dict
        suboptions:
          root:
            description: The dump root, as M(gpuops.host.dump_dir)'s O(gpuops.host.dump_dir#module:root).
            type: path
            required: true
          name:
            description: The run directory's name, as M(gpuops.host.dump_dir)'s O(gpuops.host.dump_dir#module:name).
            type: str
            required: true
          owner:
            description: The server's user (UID), who may own the dump root; unset, O(owner)'s, else root.
            type: int
          group:
            description: The dump group (GID); unset, O(owner)'s, else root's.
            type: int
          min_free_gb:
            description: The free space the dump root must have, in GB.
            type: float
            default: 0
  unit_files:
    description:
      - With O(config), the unit files a launch under systemd would write over or migrate, read here (RV(unit_files)).
      - With O(refuse), a restart under systemd whose unit file (O(unit_files.path)) the collection did not write - a
        team's own unit, a link, another user's file - fails the module before anything is touched.
    type: dict
    suboptions:
      path:
        description: The collection's unit file.
        type: path
        required: true
      old_path:
        description: The unit file of earlier releases, C(sglang.service).
        type: path
        required: true
      mark:
        description: The header the collection's unit files begin with.
        type: str
        required: true
      old_description:
        description: A regular expression that a line of an earlier release's unit file matches.
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
    description: Seconds the recorded server has to answer C(/health), and with O(extraction) each reading of its requests in flight.
    type: float
    default: 10
  extraction:
    description: Also read how the recorded extraction run goes (RV(extraction)).
    type: bool
    default: false
  rate_window:
    description:
      - With O(extraction), the seconds over which the rate of the dumps is taken, back from now - by the dumps'
        modification times; a run proven ready more recently is taken over its own time.
    type: float
    default: 600
  dump_patterns:
    description:
      - With O(extraction), the name patterns (shell-style, as C(fnmatch) reads them) of the files under the run
        directory that count as dumps; every regular file by default. A patch that writes a side file per record
        (C(hs_<rid>.json) beside C(hs_<rid>.pt)) is counted once per record with the one pattern V(*.pt).
      - The run's manifest (C(gpuops-manifest.json)) is never a dump, nor are the readiness checks' and the probe's
        own dumps (C(HEALTH_CHECK), C(gpuops-probe-) in their names) or what was written before the server was proven
        ready (its warm-up's), which are counted apart.
    type: list
    elements: str
    default: ['*']
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

- name: Read how the extraction run goes, counting the .pt dumps only
  gpuops.host.sglang_server_info:
    record_path: /var/lib/gpuops/sglang/server.json
    extraction: true
    dump_patterns: ["*.pt"]
  register: node

- name: Stop feeding a run whose dump volume fills within the hour
  ansible.builtin.debug:
    msg: "{{ node.extraction.marker }} fills its dump volume in {{ node.extraction.hours_to_full }} h"
  when: node.extraction.hours_to_full is not none and node.extraction.hours_to_full < 1

- name: Compare the running server with a tuning configuration
  gpuops.host.sglang_server_info:
    record_path: /var/lib/gpuops/sglang/server.json
    python: /opt/sglang/venv/bin/python
    owner: {user: sglang}
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
command:
  description: With O(command) - the command line as the installed SGLang's parser checked it.
  returned: command is set
  type: dict
  contains:
    argv:
      description: The command line, interpreter first; secret arguments are never on it.
      type: list
      elements: str
      sample: [/opt/sglang/bin/python, -m, sglang.launch_server, --model-path, /models/qwen, --tp-size, "4"]
    server_argv:
      description: The server's arguments alone.
      type: list
      elements: str
      sample: [--model-path, /models/qwen, --tp-size, "4"]
    files:
      description: The argument files the command line names (C(--config)), which M(gpuops.host.sglang_server) writes.
      type: list
      elements: str
      sample: [/var/lib/gpuops/sglang/runs/tuning-20260101T000000Z-node1-3f9a2c1b/secret-args.yaml]
    expected_gpus:
      description:
        - The NVML indices of the GPUs the server will occupy (its tensor x data parallel size, C(base_gpu_id),
          C(CUDA_VISIBLE_DEVICES)).
      type: list
      elements: int
      sample: [0, 1, 2, 3]
    secret_args:
      description: The names of the arguments kept off the command line.
      type: list
      elements: str
      sample: [api_key]
    release:
      description: The installed SGLang's version.
      type: str
      sample: 0.5.23
    package:
      description: The directory of the C(sglang) package that O(python) imports (with O(pythonpath)).
      type: str
      sample: /opt/sglang/lib/python3.11/site-packages/sglang
    expected_info:
      description:
        - The values the server will report in C(/server_info), secrets left out, by name
          (M(gpuops.host.sglang_server)'s O(gpuops.host.sglang_server#module:checks.expected_info)).
      type: dict
      sample: {cuda_graph_max_bs_decode: 160, mem_fraction_static: 0.92}
    config_keys:
      description:
        - The file keys the installed release accepts where they differ from the argument's name
          (M(gpuops.host.sglang_server)'s O(gpuops.host.sglang_server#module:command.config_keys)).
      type: dict
      sample: {}
supervisor:
  description: With O(config) - its C(supervisor), V(auto) chosen on this node (V(systemd) or V(process)).
  returned: config is set
  type: str
  sample: systemd
owner:
  description: With O(owner) - the server's user and groups as this node knows them, and the environment that follows.
  returned: owner is set
  type: dict
  contains:
    user:
      description: The user's name.
      type: str
    uid:
      description: The user's UID.
      type: int
    gid:
      description: The server's GID (O(owner.group)'s, else the user's primary group).
      type: int
    dump_gid:
      description: The GID of the group that reads the dumps.
      type: int
    home:
      description: The user's home directory.
      type: str
    environment:
      description: The user's C(HOME) and C(HF_HOME), which the server's environment has unless it sets them.
      type: dict
  sample: {user: sglang, uid: 1001, gid: 1001, dump_gid: 1002, home: /home/sglang,
           environment: {HOME: /home/sglang, HF_HOME: /home/sglang/.cache/huggingface}}
record:
  description: The record as read; empty where there is none.
  returned: success
  type: dict
  sample: {status: ok, marker: tuning-20261204T101500Z-node1-3f9a2c1b, pid: 4242, url: "http://127.0.0.1:30000"}
server:
  description:
    - The recorded server as it runs now (identified by PID and start time); null where it does not run.
    - C(health) is its C(/health) status where it decided RV(needs_restart), null where it was not asked.
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
extraction:
  description:
    - How the recorded extraction run goes, read without touching it.
    - C(dumping) (the record names a run directory), C(mode), C(marker), C(dump_dir), C(pid) (null where the recorded
      server does not run).
    - C(state) - V(running) while the recorded server runs; else how its manifest says the run ended (V(drained),
      V(cut), V(crashed)); V(down) where the server does not run and no manifest says more (for a dumping run whose
      manifest still says running, a crash, which the next stop or launch writes into the manifest); V(none) where no
      launch that passed its checks is recorded.
    - C(uptime) (seconds since the server was started, while it runs).
    - C(files), C(bytes), C(gb) (10^9 bytes) - the run's dumps (O(dump_patterns)), written after the server was proven
      ready; C(own) - the readiness checks', the probe's and the warm-up's dumps, apart; C(newest) (seconds since the
      epoch) and C(age) (seconds before now) of the newest dump.
    - C(recent) - the dumps written within the last C(rate_seconds) (O(rate_window), or the run's time since it was
      proven ready where that is shorter); C(rate_files_per_min) and C(rate_gb_per_hour) over them.
    - C(free_gb) - free space of the dump volume (C(statvfs) of the dump root, for an unprivileged user);
      C(hours_to_full) at that rate (null while nothing is written).
    - C(in_flight) - requests running and queued, from C(/metrics) (V(metrics), with C(--enable-metrics)) or
      C(/v1/loads) (V(loads)) as C(in_flight_source) says; null, with C(in_flight_error), where it cannot be read (no
      API key is sent - a server with one answers C(/v1/loads) with 401).
    - C(manifest) - the path of the run's manifest, null without one. The dump fields are null for a run that dumps
      nothing.
  returned: O(extraction) is true
  type: dict
  sample: {dumping: true, mode: extraction, marker: extraction-20261204T101500Z-node1-3f9a2c1b, state: running,
           dump_dir: /data/hs_dumps/extraction-20261204T101500Z-node1-3f9a2c1b, pid: 4242, uptime: 5400.0,
           files: 12040, bytes: 14087000000000, gb: 14087.0, own: 3, newest: 1796000000.5, age: 1.2, recent: 1330,
           rate_seconds: 600.0, rate_files_per_min: 133.0, rate_gb_per_hour: 9360.0, free_gb: 3210.5, hours_to_full: 0.34,
           in_flight: 2, in_flight_source: metrics, in_flight_error: null,
           manifest: /data/hs_dumps/extraction-20261204T101500Z-node1-3f9a2c1b/gpuops-manifest.json}
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
refusals:
  description:
    - With O(config) and O(refuse), where the plan restarts the server - what was checked - C(gpu_count) (NVML's),
      C(port) (its listeners and their holders) and C(dump_dir) (the dump root's free space, C(free_gb)).
  returned: config and refuse are set, and the plan restarts the server
  type: dict
  sample: {"gpu_count": 8, "port": {"listening": true, "holders": [{"pid": 4200, "cmdline": "python -m sglang.launch_server"}]}}
unit_files:
  description:
    - With O(config) and O(unit_files) - each unit file by its path - V(absent), V(ours) (its first line is the
      collection's header), V(old) (an earlier release's, which a launch migrates) or V(foreign) (a team's own unit, a
      link, anything but a regular file of root's; never written over).
  returned: config and unit_files are set
  type: dict
  sample: {"/etc/systemd/system/gpuops-sglang.service": "ours", "/etc/systemd/system/sglang.service": "foreign"}
mounts:
  description:
    - With O(container.mounts) - each path the container mounts, C(resolved) (its links followed on the
      node), and C(writers), the entries on its way that a user other than root and the server's user can change
      (empty, or the module failed).
  returned: container.mounts is set
  type: list
  elements: dict
  sample: [{"path": "/models/kimi-k2", "resolved": "/data/models/kimi-k2-20261101", "writers": []}]
diff:
  description: The recorded server's identity (empty where none runs) and the desired one, one line per field, the command line one flag per line.
  returned: config is set
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.gpuops.host.plugins.module_utils._checks import Unreadable
from ansible_collections.gpuops.host.plugins.module_utils._nvml import HAS_PYNVML, Nvml
from ansible_collections.gpuops.host.plugins.module_utils._procs import ProcFS
from ansible_collections.gpuops.host.plugins.module_utils._server_info import argument_spec, info
from ansible_collections.gpuops.host.plugins.module_utils._sglang import ActionFailed, Deps, plan_masks


def main():
    module = AnsibleModule(
        argument_spec=argument_spec(),
        mutually_exclusive=[('owner', 'run_as')],
        supports_check_mode=True,
    )
    if module.params['command'] and module.params['command']['config_file'] and not module.params['command']['config_path']:
        module.fail_json(msg='command.config_file is true but command.config_path is not set')
    # The secret arguments, and the secret environment's values under a secret's name (HF_TOKEN), are masked in every
    # result. The environment's other values are masked where the parser's check could show them (its own messages,
    # _sglang.check_args), not in the plan's identity, which records paths that an environment variable may name too
    # (HF_HOME): masked there, the next plan would read a change that is none. Values of under 4 characters
    # (HF_HUB_OFFLINE=1) are masked nowhere: masking them would garble every number.
    p = dict(module.params)
    masked, module.params['secret_environment'] = plan_masks(module.no_log_values, p['command'], p['secret_server_args'],
                                                             p['secret_environment'])
    module.no_log_values.clear()
    module.no_log_values.update(v for v in masked if len(v) >= 4)
    if not p['request_timeout'] > 0:
        module.fail_json(msg='request_timeout must be more than 0, got %r' % p['request_timeout'])
    if not 0 < p['rate_window'] < float('inf'):
        module.fail_json(msg='rate_window must be a number of seconds more than 0, got %r' % p['rate_window'])

    def run(argv, environ):
        return module.run_command(argv, environ_update=environ)

    def open_nvml():
        if not HAS_PYNVML:
            raise Unreadable(missing_required_lib('nvidia-ml-py'))
        return Nvml()

    deps = Deps(ProcFS(), run, tmpdir=module.tmpdir, check_mode=module.check_mode, warn=module.warn,
                self_pids=(os.getpid(), os.getppid()), open_nvml=open_nvml)
    try:
        result = info(p, deps)
    except ActionFailed as e:
        module.fail_json(msg=e.msg, **e.result)
    module.exit_json(changed=False, **result)


if __name__ == '__main__':
    main()

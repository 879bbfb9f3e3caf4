#!/usr/bin/python
# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_reap
short_description: Stop selected GPU workloads, escalating from a polite signal to SIGKILL
version_added: 0.1.0
description:
  - Stops the processes it is told to stop, and nothing else. It replaces hand procedures such as
    C(pkill -f sglang; sleep 2; kill -9 <every python3>; fuser -k /dev/nvidia*).
  - Processes are selected by command line (O(patterns), O(presets)), environment (O(environ)), PID (O(pids)),
    open NVIDIA device files (O(device_holders)) or the GPU process list of NVML (O(nvml_processes)). Selectors
    are combined with OR; a call that selects by nothing is an error, never "every process".
  - Descendants of selected processes are selected too (O(descendants)).
  - The selected processes are stopped as O(kill_mode) says, polling C(/proc) every 20 ms, and returns as
    soon as every target is gone. C(/proc) is scanned again before SIGKILL, so children spawned meanwhile are
    caught. Device holders (O(device_holders)) are handled after the selected processes, with the same escalation.
  - Before every signal the process identity is confirmed (start time, and a pidfd where Python and the kernel
    offer one), so a reused PID is never signalled.
  - PID 1, kernel threads, the module's own process and its ancestors (the shells and the SSH session Ansible
    runs it through) are never signalled, whatever the options say; nor are processes named in O(protect) or in
    the built-in list of O(protect_defaults).
  - Zombies (C(<defunct>)) have exited already; they are reported in RV(zombies) with their parent and do not fail
    the run. A target still alive O(kill_timeout) seconds after SIGKILL fails the run.
  - Runs on the target with the Python standard library only (C(/proc) parsing); O(nvml_processes) needs
    C(nvidia-ml-py).
author:
  - gpuops maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.host.attributes
  - gpuops.host.attributes.actiongroup_gpu
attributes:
  check_mode:
    support: full
    details:
      - Reports in RV(would_stop) exactly what a real run would select now, and signals nothing.
  diff_mode:
    support: full
    details:
      - The diff lists the selected processes before, and the ones still alive after.
  idempotent:
    support: full
    details:
      - A second run that finds nothing to stop reports no change.
options:
  patterns:
    description:
      - Regular expressions (Python C(re), searched as C(pkill -f) does) matched against the full command line,
        its arguments joined by single spaces. A process that has no command line (a zombie) is matched by its
        C(comm) name.
      - Be precise. A bare V(sglang) also selects C(grep sglang), C(tail -f /var/log/sglang/server.log) and
        C(vim /etc/sglang/serve.yaml); anchor the pattern at the first argument, or use O(presets).
    type: list
    elements: str
  presets:
    description:
      - Named sets of precise patterns, added to O(patterns).
      - V(sglang) selects C(python -m sglang.launch_server ...), C(sglang serve ...) (also run through a Python
        interpreter) and the titled children C(sglang::scheduler_TP0), C(sglang::detokenizer) and so on; the
        EXAMPLES show its patterns.
    type: list
    elements: str
    choices: [sglang]
  environ:
    description:
      - Environment variable names mapped to regular expressions for their values, read from
        C(/proc/PID/environ). A process is selected when every variable given is set and matches.
      - This finds every child of a launch, even children re-parented to PID 1 and children without the server's
        name in their command line, when the launch sets a marker variable.
      - SGLang children rename themselves with setproctitle, which overwrites the environment that
        C(/proc/PID/environ) shows unless the launch also sets C(SPT_NOENV=1).
    type: dict
  pids:
    description:
      - Process IDs to stop.
    type: list
    elements: int
  device_holders:
    description:
      - Also stop processes holding an open file descriptor on a file matching O(devices), after the other
        selected processes have been stopped.
      - The daemons of O(protect_defaults) (C(nvidia-persistenced), C(nv-hostengine), ...) hold C(/dev/nvidiactl)
        legitimately; they are left alone and listed in RV(protected).
    type: bool
    default: false
  nvml_processes:
    description:
      - Also stop the processes NVML lists on any GPU (compute and graphics processes). Needs C(nvidia-ml-py)
        on the target.
      - NVML reports host PIDs. A listed PID that does not exist in this PID namespace, or that holds no
        C(/dev/nvidia*) file here, is reported in RV(nvml_unmapped) and not signalled.
    type: bool
    default: false
  devices:
    description:
      - Shell globs of the device files O(device_holders) looks for.
    type: list
    elements: str
    default: ['/dev/nvidia[0-9]*', '/dev/nvidiactl', '/dev/nvidia-uvm', '/dev/nvidia-uvm-tools', '/dev/nvidia-modeset']
  protect:
    description:
      - Names of processes never signalled, added to the built-in list (see O(protect_defaults)).
      - A name matches the executable's basename or full path, C(argv[0]) or its basename, or C(comm).
    type: list
    elements: str
  protect_defaults:
    description:
      - Protect the built-in list as well as O(protect) - C(nvidia-persistenced), C(nv-hostengine),
        C(dcgm-exporter), C(nv-fabricmanager), C(nvidia-fabricmanager), C(nvidia-powerd), C(Xorg), C(Xwayland),
        C(nvidia-cuda-mps-control), C(nvidia-cuda-mps-server), C(sshd), C(sshd-session), C(systemd), C(init),
        C(tini), C(dumb-init), C(catatonit), C(runit), C(runsvdir), C(s6-svscan) and C(openrc-init).
      - V(false) drops that list. PID 1, kernel threads, the module and its ancestors stay protected.
    type: bool
    default: true
  descendants:
    description:
      - Also select every descendant of a selected process (children without the server's name, such as
        C(multiprocessing) resource trackers and compile workers).
    type: bool
    default: true
  kill_mode:
    description:
      - V(mixed) (as systemd's C(KillMode=mixed)) sends O(term_signal) only to the roots of the selected process
        forest (selected processes whose parent is not selected), waits until the roots have exited or
        O(term_timeout) has passed, then sends SIGKILL to every selected process still alive. An SGLang server
        drains its requests and stops its own children this way.
      - V(control-group) sends O(term_signal) to every selected process, waits until all have exited or
        O(term_timeout) has passed, then sends SIGKILL to what is left. Signalling SGLang's children directly
        bypasses the server's drain.
      - A stopped process (state C(T)) also gets SIGCONT after O(term_signal), so it can act on it.
    type: str
    choices: [mixed, control-group]
    default: mixed
  term_signal:
    description:
      - The polite signal, by name (V(SIGTERM), V(TERM), V(SIGINT)) or number.
    type: str
    default: SIGTERM
  term_timeout:
    description:
      - Seconds to wait after O(term_signal) before SIGKILL. V(0) sends SIGKILL at once.
    type: float
    default: 30
  kill_timeout:
    description:
      - Seconds to wait after SIGKILL before the run fails with the processes still alive.
    type: float
    default: 10
notes:
  - In V(mixed) mode, once the roots have exited, the other selected processes get up to one more second to
    follow them before SIGKILL.
  - Without pidfds (Python 3.8, or Linux before 5.3) the start time is checked just before C(kill()), which leaves
    a window of microseconds in which a PID could be reused.
seealso:
  - module: gpuops.host.gpu_verify
  - name: systemd.kill(5)
    description: The KillMode= semantics that O(kill_mode) follows.
    link: https://www.freedesktop.org/software/systemd/man/latest/systemd.kill.html
"""

EXAMPLES = r"""
- name: Stop the SGLang server and all its children, letting it drain first
  gpuops.host.gpu_reap:
    presets: [sglang]
    term_timeout: 120

# The sglang preset is these patterns. A bare "sglang" would also select
# `grep sglang`, `tail -f /var/log/sglang/server.log` and `vim /etc/sglang/serve.yaml`.
- name: Stop SGLang by explicit patterns
  gpuops.host.gpu_reap:
    patterns:
      - '^\S*python[0-9.]*\s+(-\S+\s+)*-m\s+sglang\.launch_server(\s|$)'
      - '^(\S*python[0-9.]*\s+(-\S+\s+)*)?(\S*/)?sglang\s+serve(\s|$)'
      - '^sglang::'

- name: Stop every process of one launch, even orphans re-parented to PID 1
  # launched with GPUOPS_RUN=extract-42 and SPT_NOENV=1 in its environment
  gpuops.host.gpu_reap:
    environ:
      GPUOPS_RUN: '^extract-42$'

- name: Then stop whatever still holds a GPU, leaving the NVIDIA daemons alone
  gpuops.host.gpu_reap:
    presets: [sglang]
    device_holders: true
    nvml_processes: true
    protect: [my-gpu-exporter]
  register: reap

- name: Show what was stopped
  ansible.builtin.debug:
    msg: "{{ reap.stopped | map(attribute='cmdline') }}"

- name: Stop a training job right away, every process at once
  gpuops.host.gpu_reap:
    pids: [4242]
    kill_mode: control-group
    term_signal: SIGINT
    term_timeout: 5

- name: Preview what would be stopped
  gpuops.host.gpu_reap:
    presets: [sglang]
    device_holders: true
  check_mode: true
  register: preview
"""

RETURN = r"""
stopped:
  description:
    - The selected processes and what was done to them. Empty in check mode.
    - Processes that exited on their own after their root was signalled have no O(term_signal) in RV(stopped[].signals).
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: Process ID.
      type: int
      sample: 4242
    ppid:
      description: Parent process ID when selected.
      type: int
      sample: 4200
    name:
      description: Process name (C(comm), or the untruncated title of a renamed process).
      type: str
      sample: sglang::scheduler_TP3
    cmdline:
      description: Full command line.
      type: str
      sample: sglang::scheduler_TP3
    matched_by:
      description: Why it was selected.
      type: list
      elements: str
      sample: ['pattern ^sglang::', 'descendant of 4200']
    signals:
      description: Signals sent to it, in order.
      type: list
      elements: str
      sample: [SIGTERM]
    seconds:
      description: Seconds from the first signal of its phase until its exit was noticed; null while alive.
      type: float
      sample: 1.42
  sample:
    - pid: 4200
      ppid: 1
      name: python
      cmdline: python -m sglang.launch_server --model-path /models/qwen --tp-size 4
      matched_by: ['pattern ^\S*python[0-9.]*\s+(-\S+\s+)*-m\s+sglang\.launch_server(\s|$)']
      signals: [SIGTERM]
      seconds: 5.12
would_stop:
  description: In check mode, the processes a real run would select now (without RV(stopped[].signals) and RV(stopped[].seconds)).
  returned: check mode
  type: list
  elements: dict
  sample:
    - pid: 4200
      ppid: 1
      name: python
      cmdline: python -m sglang.launch_server --model-path /models/qwen --tp-size 4
      matched_by: ['pattern ^\S*python[0-9.]*\s+(-\S+\s+)*-m\s+sglang\.launch_server(\s|$)']
zombies:
  description: Selected processes, or children of selected processes, that had exited already but were not yet collected by their parent.
  returned: always
  type: list
  elements: dict
  sample:
    - pid: 4310
      ppid: 4200
      name: sglang::schedul
      cmdline: '[sglang::schedul]'
      parent_name: python
      parent_cmdline: python -m sglang.launch_server --model-path /models/qwen --tp-size 4
protected:
  description:
    - Processes that matched a selector, descended from a selected process, or held a device with O(device_holders),
      but were left alone, with the reason.
  returned: always
  type: list
  elements: dict
  sample:
    - pid: 812
      ppid: 1
      name: nvidia-persiste
      cmdline: /usr/bin/nvidia-persistenced --user nvidia-persistenced
      matched_by: [device /dev/nvidiactl]
      reason: protected name nvidia-persistenced
remaining:
  description: Targets still alive O(kill_timeout) seconds after SIGKILL, with their state (C(D) is uninterruptible sleep). Only a failed run has any.
  returned: always
  type: list
  elements: dict
  sample:
    - pid: 4313
      ppid: 1
      name: sglang::scheduler_TP3
      cmdline: sglang::scheduler_TP3
      matched_by: ['pattern ^sglang::']
      state: D
      signals: [SIGKILL]
nvml_unmapped:
  description: GPU processes NVML listed that are not processes of this PID namespace; not signalled.
  returned: always
  type: list
  elements: dict
  sample:
    - gpu_uuid: GPU-5e3c1a52-8f0e-4b1e-9d61-3c1f0a1b2c3d
      gpu_index: 0
      pid: 912345
      used_mib: 101234
      reason: no such process here (NVML reports host PIDs)
elapsed:
  description: Seconds the run took.
  returned: always
  type: float
  sample: 5.31
"""

import os

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuops.host.plugins.module_utils._nvml import (
    HAS_PYNVML, PYNVML_IMPORT_ERROR, NvmlError, gpu_process_pids, pynvml,
)
from ansible_collections.gpuops.host.plugins.module_utils._procs import ProcFS
from ansible_collections.gpuops.host.plugins.module_utils._reap import (
    DEFAULT_DEVICES, PRESETS, Reaper, ReapError, ReapFailure, parse_options,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            patterns=dict(type='list', elements='str'),
            presets=dict(type='list', elements='str', choices=sorted(PRESETS)),
            environ=dict(type='dict'),
            pids=dict(type='list', elements='int'),
            device_holders=dict(type='bool', default=False),
            nvml_processes=dict(type='bool', default=False),
            devices=dict(type='list', elements='str', default=list(DEFAULT_DEVICES)),
            protect=dict(type='list', elements='str'),
            protect_defaults=dict(type='bool', default=True),
            descendants=dict(type='bool', default=True),
            kill_mode=dict(type='str', default='mixed', choices=['mixed', 'control-group']),
            term_signal=dict(type='str', default='SIGTERM'),
            term_timeout=dict(type='float', default=30),
            kill_timeout=dict(type='float', default=10),
        ),
        supports_check_mode=True,
    )
    try:
        options = parse_options(module.params)
    except ReapError as e:
        module.fail_json(msg=str(e))

    listing = []
    if options.nvml_processes:
        if not HAS_PYNVML:
            module.fail_json(msg=missing_required_lib('nvidia-ml-py', reason='for nvml_processes'),
                             exception=PYNVML_IMPORT_ERROR)
        try:
            listing = gpu_process_pids(pynvml)
        except NvmlError as e:
            module.fail_json(msg='nvml_processes: cannot list GPU processes: %s' % e)

    reaper = Reaper(options, ProcFS(), os.getpid(), nvml_listing=listing)
    try:
        if module.check_mode:
            reaper.plan()
        else:
            reaper.run()
        result = reaper.result(check_mode=module.check_mode)
    except ReapFailure as e:
        module.fail_json(msg=str(e), **e.result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()

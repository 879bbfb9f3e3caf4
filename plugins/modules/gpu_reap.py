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
  - Roots are selected by command line (O(patterns), O(presets)), environment (O(environ)), PID (O(pids)) or the
    GPU process list of NVML (O(nvml_processes)); selectors are combined with OR. What belongs to a root is selected
    with it - its descendants (O(descendants)), the rest of the session it leads, and orphans of its session and
    process group re-parented to PID 1 after the session leader exited (O(sessions)).
  - Other holders of NVIDIA devices (a colleague's training job, a monitor, a process in a container) are not
    signalled. They are reported in RV(foreign) with their user, command line and GPUs, so that the verification
    that follows (M(gpuops.host.gpu_verify)) can name them. Stopping them is an opt-in limited to named GPUs
    (O(device_holders) with O(devices)).
  - Processes in another PID namespace or in a container's cgroup are not selected unless O(other_namespaces) is
    set; they are listed in RV(other_namespaces).
  - The selected processes are stopped as O(kill_mode) says, polling C(/proc) every 20 ms, and returns as soon as
    every target is gone. C(/proc) is scanned again every 250 ms and before SIGKILL, so children spawned meanwhile
    are caught; one found that way gets O(term_signal) and its own O(term_timeout) when it is a root of the
    selection (or in V(control-group) mode), never SIGKILL without warning.
  - Before every signal the process identity is confirmed (start time, and a pidfd where Python and the kernel
    offer one), so a reused PID is never signalled.
  - PID 1, kernel threads, the module's own process and its ancestors (the shells and the SSH session Ansible
    runs it through) are never signalled, whatever the options say; nor are processes named in O(protect) or in
    the built-in list of O(protect_defaults).
  - The SGLang Model Gateway (PyPI C(sglang-router)), which routes to the servers, is never stopped by default
    (O(protect_gateways)), nor is anything it started - it is reported in RV(protected) instead.
  - The run is refused before anything is signalled, in check mode too, when a pattern or environment expression
    matches the empty string (and so every process), when O(devices) names files other than per-GPU device files,
    when the selection has more than O(max_processes) processes, when a timeout is not a finite number, and when
    C(/proc) hides other users' processes (C(hidepid)) or their environment or open files cannot be read while a
    selector needs them (run as root).
  - A process that cannot be signalled (C(EPERM) from an LSM or without root) fails the run, with what was stopped
    and what could not be signalled, and why, in RV(stopped) and RV(unsignalled).
  - Zombies (C(<defunct>)) have exited already; they are reported in RV(zombies) with their parent and do not fail
    the run. A target still alive O(kill_timeout) seconds after SIGKILL fails the run.
  - With O(verify), the same call then waits until every GPU is clean, as M(gpuops.host.gpu_verify) does, reading
    NVML from the moment the last target is gone; the GPUs named there are looked up, and NVML opened, before
    anything is signalled. One call instead of two saves a round trip between the old workload's exit and
    whatever starts next.
  - Runs on the target with the Python standard library only (C(/proc) parsing). Where C(nvidia-ml-py) is
    installed, NVML adds GPU indices, UUIDs and memory to RV(foreign); O(nvml_processes) and O(verify) need it.
author:
  - gpuops maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.host.attributes
  - gpuops.host.attributes.actiongroup_gpu
  - gpuops.host.verify_wait
attributes:
  check_mode:
    support: full
    details:
      - Reports in RV(would_stop) exactly what a real run would select now, and signals nothing.
      - With O(verify), opens NVML and looks up the GPUs named in O(verify.gpus), as a real run does first, but does
        not wait for the GPUs, which still hold the memory of what would be stopped.
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
      - An expression that matches the empty string (V(.*), V(|), V(x?)) is refused.
    type: list
    elements: str
  presets:
    description:
      - Named sets of precise patterns, added to O(patterns).
      - V(sglang) selects C(python -m sglang.launch_server ...) with any interpreter options
        (C(python3 -X faulthandler -W ignore -u -m sglang.launch_server)) and any interpreter path
        (C(/opt/venv/bin/python3.11)), C(sglang serve ...) (also by path, or run through a Python interpreter),
        and the titled children of a server, each title named as SGLang 0.5.14 and 0.5.23 set it -
        C(sglang::scheduler) with its suffix (C(sglang::scheduler_TP3), C(sglang::scheduler_DP0_PP1_TP0_EP0)),
        C(sglang::detokenizer), C(sglang::data_parallel_controller), C(sglang::detokenizer_router),
        C(sglang::tokenizer_worker:PID) - and C(sglang::server), a server that the SGLang Model Gateway's
        co-launcher (C(python -m sglang_router.launch_server)) started.
      - Not every C(sglang::) title - the gateway titles itself C(sglang::router); see O(protect_gateways).
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
      - An expression that matches the empty string (V(''), V(.*)) is refused.
    type: dict
  pids:
    description:
      - Process IDs to stop, meaning the processes that have these PIDs when the module starts.
    type: list
    elements: int
  descendants:
    description:
      - Also select every descendant of a selected process (children without the server's name, such as
        C(multiprocessing) resource trackers and compile workers).
    type: bool
    default: true
  sessions:
    description:
      - Also select the other processes of a session that a selected process leads (a server started with
        C(setsid)), and the processes of a selected process's session and process group that were re-parented
        to PID 1 after the session leader exited (orphaned schedulers and helpers).
      - A session led by a process that is not selected (a login shell) is not selected, and jobs that a closed
        login shell left behind stay apart, since job control gives each its own process group.
    type: bool
    default: true
  other_namespaces:
    description:
      - Also select processes that run in another PID namespace than the module, or in another container's cgroup
        (Docker, Podman, CRI-O, containerd, Kubernetes pods, LXC, systemd-nspawn).
      - By default they are listed in RV(other_namespaces) and not touched. A server in a container is stopped
        through its container; its drain cannot be reached from the host's network namespace.
    type: bool
    default: false
  nvml_processes:
    description:
      - Also stop the processes NVML lists on any GPU (compute and graphics processes). Needs C(nvidia-ml-py)
        on the target.
      - NVML lists the PIDs of the host's PID namespace. The module refuses this option where it runs in another PID
        namespace. A listed PID that does not exist, or that holds no C(/dev/nvidia*) file, is reported in
        RV(nvml_unmapped) and not signalled.
    type: bool
    default: false
  device_holders:
    description:
      - Also stop the unprotected processes holding an open file descriptor on a file matching O(devices), after
        the other selected processes have been stopped, with the same escalation (O(term_signal) first).
      - An explicit opt-in for GPUs that must be freed whoever uses them. O(devices) names the GPUs.
    type: bool
    default: false
  devices:
    description:
      - Shell globs of the per-GPU device files whose holders O(device_holders) stops, such as V(/dev/nvidia5) or
        V(/dev/nvidia[45]). Required with O(device_holders).
      - Only C(/dev/nvidiaN) and C(/dev/dri/*) files are accepted. Globs that match C(/dev/nvidiactl),
        C(/dev/nvidia-uvm) or C(/dev/nvidia-modeset), which every CUDA process and the NVIDIA daemons hold, are
        refused.
      - C(/dev/nvidiaN) is numbered by the device minor number, which can differ from the NVML index; RV(foreign)
        gives both.
    type: list
    elements: str
  max_processes:
    description:
      - The most processes one selection may hold. A larger selection is refused before any signal, since it
        means a selector is too broad.
      - An SGLang server's tree is a main process, one scheduler per GPU, a detokenizer and helpers (tens of
        processes, more with compile workers); the default leaves room for that.
    type: int
    default: 512
  protect:
    description:
      - Names of processes never signalled, added to the built-in list (see O(protect_defaults)).
      - A name matches the executable's basename or full path, C(argv[0]) or its basename, or C(comm).
    type: list
    elements: str
  protect_defaults:
    description:
      - Protect the built-in list as well as O(protect).
      - NVIDIA driver and fabric daemons - C(nvidia-persistenced) (keeps the driver initialised),
        C(nv-fabricmanager) and C(nvidia-fabricmanager) (NVSwitch fabric; CUDA fails with error 802 without it),
        C(nvidia-imex) (memory export across an NVLink domain), C(nvidia-powerd) (Dynamic Boost),
        C(nvidia-vgpu-mgr), C(nvidia-vgpud) and C(nvidia-gridd) (vGPU manager, configuration and licensing),
        C(nvidia-cuda-mps-control) and C(nvidia-cuda-mps-server) (MPS, shared by all its clients).
      - Monitoring and management - C(nv-hostengine) (DCGM), C(dcgm-exporter) (a SIGKILL of it has frozen GPUs
        until reboot), C(nvsm) and C(nvsm-core) (DGX system management), C(nvidia-smi) and C(nvtop) (monitors).
      - Kubernetes GPU operator - C(nvidia-device-plugin) (advertises the GPUs to the kubelet),
        C(gpu-feature-discovery) (labels the node), C(nvidia-mig-parted) (MIG partitions).
      - Display servers C(Xorg) and C(Xwayland).
      - What keeps the host and its containers running - C(sshd), C(sshd-session), C(systemd), C(init), C(tini),
        C(dumb-init), C(catatonit), C(runit), C(runsvdir), C(s6-svscan), C(openrc-init), C(containerd),
        C(containerd-shim-runc-v2), C(dockerd), C(conmon) and C(kubelet).
      - V(false) drops that list. PID 1, kernel threads, the module and its ancestors stay protected.
    type: bool
    default: true
  users:
    description:
      - Select only processes of these users (names, or UIDs where a process's user has no name); the others are
        spared, listed in RV(protected) with the reason, unless O(pids) names them. Unset, the processes of every
        user may be selected.
      - On a shared host, the owner of the server and V(root) - a colleague's server matches the same patterns.
    type: list
    elements: str
  protect_gateways:
    description:
      - Never signal the SGLang Model Gateway (PyPI C(sglang-router)) nor anything below it in the process tree,
        whatever selected it (a pattern, a session it shares with a server, a held device).
      - A gateway is C(python -m sglang_router.launch_router ...), which titles itself C(sglang::router); the
        co-launcher C(python -m sglang_router.launch_server ...), which starts its own servers (titled
        C(sglang::server)) and then titles itself C(sglang::router); and the wheel's console scripts C(smg),
        C(amg) and C(sglang-router) with the subcommand C(launch) or C(server).
      - A server that a co-launcher started, and its schedulers, are stopped through their launcher. Named in
        O(pids), such a server is selected all the same, with its tree; a gateway named in O(pids) is selected
        too.
      - Spared processes are listed in RV(protected), with the reason.
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
      - Seconds to wait after O(term_signal) before SIGKILL. V(0) sends SIGKILL at once. Must be finite.
    type: float
    default: 30
  kill_timeout:
    description:
      - Seconds to wait after SIGKILL before the run fails with the processes still alive. Must be finite.
    type: float
    default: 10
notes:
  - In V(mixed) mode, once the roots have exited, the other selected processes get up to one more second to
    follow them before SIGKILL.
  - Without pidfds (Python 3.8, or Linux before 5.3) the start time is checked just before C(kill()), which leaves
    a window of microseconds in which a PID could be reused.
  - NVML's PIDs are taken as this namespace's where the module runs in the kernel's initial PID namespace, or in
    the one the environment variable C(GPUOPS_HOST_PIDNS) names (C(pid:[INODE]), or C(own) for the module's own),
    as a simulated GPU node sets it.
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
      - '^\S*python[0-9.]*(?:\s+(?:-[XW]\s*\S+|-[A-Za-z]+))*?\s+-[A-Za-z]*m\s*sglang\.launch_server(?:\s|$)'
      - '^(?:\S*python[0-9.]*(?:\s+(?:-[XW]\s*\S+|-[A-Za-z]+))*?\s+)?(?:\S*/)?sglang\s+serve(?:\s|$)'
      - '^sglang::(?:scheduler(?:_[A-Za-z0-9_]+)?|detokenizer|data_parallel_controller|detokenizer_router|tokenizer_worker:[0-9]+|server)(?:\s|$)'

- name: Stop the SGLang server, then wait in the same call until its 8 GPUs are back at zero memory
  gpuops.host.gpu_reap:
    presets: [sglang]
    term_timeout: 60
    verify:
      expected_count: 8
      timeout: 60
  register: clean

- name: Show how long the GPUs took to read clean after the server's exit
  ansible.builtin.debug:
    msg: "{{ clean.verify.elapsed }} s, {{ clean.verify.polls }} readings"

- name: Stop every process of one launch, even orphans re-parented to PID 1
  # launched with GPUOPS_RUN=extract-42 and SPT_NOENV=1 in its environment
  gpuops.host.gpu_reap:
    environ:
      GPUOPS_RUN: '^extract-42$'

- name: Then free GPUs 4 and 5 whoever holds them, leaving the NVIDIA daemons alone
  gpuops.host.gpu_reap:
    presets: [sglang]
    device_holders: true
    devices: [/dev/nvidia4, /dev/nvidia5]
    protect: [my-gpu-exporter]
  register: reap

- name: Name the GPU holders that were left running
  ansible.builtin.debug:
    msg: "{{ reap.foreign | map(attribute='cmdline') }}"

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
  description:
    - Selected processes, or children of selected processes, that had exited already but were not yet collected by their parent.
    - Each as first found, with the parent that left it uncollected, even where that parent exited during the run and the
      zombie passed to init.
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
    - pid: 2210
      ppid: 1
      name: sglang::router
      cmdline: sglang::router
      matched_by: [session 2100]
      reason: SGLang Model Gateway
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
  description: GPU processes NVML listed that are not processes here holding a C(/dev/nvidia*) file; not signalled.
  returned: always
  type: list
  elements: dict
  sample:
    - gpu_uuid: GPU-5e3c1a52-8f0e-4b1e-9d61-3c1f0a1b2c3d
      gpu_index: 0
      pid: 912345
      used_mib: 101234
      reason: no such process here
other_namespaces:
  description:
    - Processes that matched a selector or belonged to a selected process, but run in another PID namespace or
      container than the module; seen, and not touched (see O(other_namespaces)).
  returned: always
  type: list
  elements: dict
  sample:
    - pid: 5120
      ppid: 5101
      pgid: 5101
      sid: 5101
      name: python3
      cmdline: python3 -m sglang.launch_server --model-path /models/qwen --port 30001
      matched_by: ['pattern ^sglang::']
      reason: 'in another PID namespace (pid:[4026532871])'
foreign:
  description:
    - Unprotected processes holding an NVIDIA device (or listed by NVML) that were not selected, after the run; not
      signalled. Each with its user, command line, the device files it holds and its GPUs (device, NVML index,
      UUID and memory where NVML is available), and C(where) it runs when that is another PID namespace or
      container.
  returned: always
  type: list
  elements: dict
  sample:
    - pid: 7310
      ppid: 1
      pgid: 7310
      sid: 7310
      name: python3
      cmdline: python3 train.py --epochs 3
      user: alice
      devices: [/dev/nvidia5, /dev/nvidiactl, /dev/nvidia-uvm]
      gpus:
        - device: /dev/nvidia5
          index: 5
          uuid: GPU-5b1f3c2e-0b6a-4a5e-9e53-0f6a1d2c3b4a
          used_mib: 20480
      where: null
unsignalled:
  description: Selected processes that could not be signalled, with the error (C(EPERM) without root or under an LSM). Only a failed run has any.
  returned: always
  type: list
  elements: dict
  sample:
    - pid: 4400
      ppid: 1
      pgid: 4400
      sid: 4400
      name: python3
      cmdline: python3 -m sglang.launch_server --port 30000
      matched_by: ['pattern ^\S*python...']
      error: 'EPERM sending SIGTERM: Operation not permitted'
      signals: []
elapsed:
  description: Seconds the run took, the wait of O(verify) included.
  returned: always
  type: float
  sample: 5.31
verify:
  description:
    - With O(verify), what M(gpuops.host.gpu_verify) returns for the wait after the stop - C(clean), C(dirty), C(gpus),
      C(problems), C(count), C(expected_count), C(driver_version), C(memory_api), C(elapsed) (seconds from the
      first reading, taken once every target was gone, until every GPU was clean) and C(polls); see that module's
      return values.
  returned: when O(verify) is set, not in check mode, and every target was stopped
  type: dict
  sample:
    clean: true
    dirty: []
    problems: []
    count: 8
    expected_count: 8
    driver_version: "570.133.20"
    memory_api: v2
    elapsed: 0.0
    polls: 1
    gpus:
      GPU-5b1f3c2e-0b6a-4a5e-9e53-0f6a1d2c3b4a:
        index: 0
        used_mib: 0
        clean: true
        problem: null
nvml_error:
  description: Name of the NVML error that kept the O(verify) wait from reading the GPUs.
  returned: when NVML could not be read for O(verify)
  type: str
  sample: NVML_ERROR_DRIVER_NOT_LOADED
"""

import os

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuops.host.plugins.module_utils._nvml import PYNVML_IMPORT_ERROR, NvmlError
from ansible_collections.gpuops.host.plugins.module_utils._procs import ProcFS
from ansible_collections.gpuops.host.plugins.module_utils._reap import MissingLibrary, ReapFailure, Run
from ansible_collections.gpuops.host.plugins.module_utils._reap_options import ReapError, argument_spec
from ansible_collections.gpuops.host.plugins.module_utils._sglang_args import masking
from ansible_collections.gpuops.host.plugins.module_utils._verify import SelectionError, wait_argument_spec


def main():
    module = AnsibleModule(
        argument_spec=dict(argument_spec(), verify=dict(type='dict', options=wait_argument_spec())),
        required_if=[('device_holders', True, ['devices'])],
        supports_check_mode=True,
    )
    # Command lines typed by hand can carry a secret (--api-key X): masked in every result and message.
    module.exit_json, module.fail_json = masking(module.exit_json), masking(module.fail_json)
    try:
        run = Run(module.params, ProcFS(), os.getpid())
        with run:
            result = run(module.check_mode)
    except MissingLibrary as e:
        module.fail_json(msg=missing_required_lib('nvidia-ml-py', reason=e.reason), exception=PYNVML_IMPORT_ERROR)
    except (ReapError, ValueError, SelectionError) as e:
        module.fail_json(msg=str(e), changed=False)
    except NvmlError as e:
        module.fail_json(msg='verify: %s; nothing was signalled' % e, nvml_error=e.code, changed=False)
    except ReapFailure as e:
        module.fail_json(msg=str(e), **e.result)
    for warning in run.warnings:
        module.warn(warning)
    module.exit_json(**result)


if __name__ == '__main__':
    main()

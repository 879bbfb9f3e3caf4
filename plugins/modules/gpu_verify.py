#!/usr/bin/python
# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_verify
short_description: Assert through NVML that the GPUs of a host are clean, waiting until they are
version_added: 0.1.0
description:
  - Reads every GPU (or those in O(gpus)) through NVML and fails unless each one is clean, polling until
    all are clean or O(timeout) passes. It returns the moment all are clean.
  - A GPU is clean when NVML lists no process on it (unless O(allow_processes)) and its memory in use,
    read with the v2 memory call, is at most O(max_used_mib). The v1 call is not used for this where v2
    exists because it counts driver-reserved memory as used, so an idle H200 never reads zero there.
  - Where the driver lacks the v2 call, the module falls back to the v1 call with a warning and reports
    RV(memory_api=v1). A GPU is then clean only with no process listed and its used memory at most
    O(v1_reserved_mib) (its idle value, measured on this host) plus O(max_used_mib); without O(v1_reserved_mib)
    zero cannot be proven and the GPU is not clean.
  - Every process NVML lists is named with its PID, user and command line. One that runs in another PID namespace
    or container is named as such; a PID that this PID namespace cannot see is reported as not visible from here
    (NVML lists the host's PIDs), not as gone.
  - Memory is freed some time after the process that held it has exited, sometimes seconds later, which is
    why the module polls. M(gpuops.host.gpu_reap) runs this same wait right after its stop, in the same call,
    with its O(gpuops.host.gpu_reap#module:verify) option.
  - A GPU lost to NVML (C(NVML_ERROR_GPU_IS_LOST)) or a GPU count other than expected (O(expected_count), or the
    NVIDIA GPUs on the PCI bus) ends the wait at once, since waiting cannot fix either.
  - Use M(gpuops.host.gpu_info) to read the same facts without asserting.
author:
  - gpuops maintainers (@gpuops)
requirements:
  - nvidia-ml-py (C(import pynvml)) on the target, and the NVIDIA driver's C(libnvidia-ml.so.1).
extends_documentation_fragment:
  - gpuops.host.nvml
  - gpuops.host.attributes
  - gpuops.host.attributes.INFO_MODULE
  - gpuops.host.attributes.ACTIONGROUP_GPU
options:
  expected_count:
    description:
      - Number of GPUs the host must show. Any other number fails, since a GPU fallen off the bus is a
        fault, not a smaller fleet.
      - When omitted, NVML's count is checked against the NVIDIA display controllers on the PCI bus (vendor
        C(0x10de), class C(0x03xxxx) in C(/sys/bus/pci/devices); NVSwitches are bridges and do not count). Where
        sysfs shows no NVIDIA GPU at all (some containers), the count is not checked and a warning says so.
    type: int
  timeout:
    description:
      - Seconds to wait for every GPU to be clean. V(0) checks once. Must be finite.
    type: float
    default: 60
  poll_interval:
    description:
      - Seconds between two readings while waiting; the delay with which a release is noticed is at most this.
        More than 0, and finite.
      - A reading takes a few NVML calls per GPU and a C(/proc) lookup per process listed, milliseconds in all, so
        the default keeps the wait within a tenth of a second of the release at little cost.
    type: float
    default: 0.1
"""

EXAMPLES = r"""
- name: Stop the SGLang server and whatever else NVML lists on the GPUs
  gpuops.host.gpu_reap:
    presets: [sglang]
    nvml_processes: true

- name: Wait until every GPU is back at zero memory
  gpuops.host.gpu_verify:
    expected_count: 8
    timeout: 60

- name: Check two GPUs by UUID and index, once, tolerating a monitoring context
  gpuops.host.gpu_verify:
    gpus:
      - GPU-5b1f3c2e-0b6a-4a5e-9e53-0f6a1d2c3b4a
      - "3"
    allow_processes: true
    timeout: 0

- name: Record the state without failing the play
  gpuops.host.gpu_verify:
  register: gpu_check
  failed_when: false

- name: Show what holds each dirty GPU
  ansible.builtin.debug:
    msg: "{{ gpu_check.gpus[item].problem }}"
  loop: "{{ gpu_check.dirty | default([]) }}"
"""

RETURN = r"""
clean:
  description: Whether every checked GPU is clean (and, with O(expected_count), the count matched).
  returned: when NVML could be read
  type: bool
  sample: true
dirty:
  description: Keys in RV(gpus) of the GPUs that are not clean.
  returned: when NVML could be read
  type: list
  elements: str
  sample: ["GPU-5b1f3c2e-0b6a-4a5e-9e53-0f6a1d2c3b4a"]
elapsed:
  description: Seconds from the first reading until all GPUs were clean, or until the module gave up.
  returned: when NVML could be read
  type: float
  sample: 3.02
polls:
  description: Number of readings taken.
  returned: when NVML could be read
  type: int
  sample: 4
count:
  description: Number of GPUs the host shows.
  returned: when NVML could be read
  type: int
  sample: 8
expected_count:
  description: The GPU count checked against, O(expected_count) or the NVIDIA GPUs on the PCI bus; V(null) when none.
  returned: when NVML could be read
  type: int
  sample: 8
problems:
  description: Host-wide problems, such as a GPU count other than expected.
  returned: when NVML could be read
  type: list
  elements: str
  sample: ["the host shows 7 GPUs, expected 8"]
driver_version:
  description: NVIDIA driver version as NVML reports it.
  returned: when NVML could be read
  type: str
  sample: "570.133.20"
memory_api:
  description:
    - Which NVML memory call the readings come from, V(v2) or V(v1) (a driver without the v2 call).
    - V(null) when no GPU could be read at all.
  returned: when NVML could be read
  type: str
  sample: v2
nvml_error:
  description: Name of the NVML error that kept the module from reading NVML at all.
  returned: when NVML could not be initialised or queried
  type: str
  sample: NVML_ERROR_DRIVER_NOT_LOADED
gpus:
  description: Facts of every checked GPU, keyed by UUID (V(index-N) for a GPU whose UUID NVML cannot give).
  returned: when NVML could be read
  type: dict
  sample:
    GPU-5b1f3c2e-0b6a-4a5e-9e53-0f6a1d2c3b4a:
      index: 3
      uuid: GPU-5b1f3c2e-0b6a-4a5e-9e53-0f6a1d2c3b4a
      name: NVIDIA H200
      pci_bus_id: "00000000:1B:00.0"
      total_mib: 143771
      used_mib: 8123
      reserved_mib: 700
      free_mib: 134948
      v1_used_mib: 8823
      processes:
        - pid: 4242
          used_mib: 8123
          exists: true
          name: "sglang::scheduler_TP3"
          cmdline: "sglang::scheduler_TP3"
          user: sglang
          where: null
      clean: false
      problem: "8123 MiB used by pid 4242 (user sglang: sglang::scheduler_TP3)"
  contains:
    index:
      description: NVML index.
      type: int
    uuid:
      description: GPU UUID; V(null) when NVML cannot give it.
      type: str
    name:
      description: Product name.
      type: str
    pci_bus_id:
      description: PCI bus id; V(null) where the driver cannot give it.
      type: str
    total_mib:
      description: Memory size in MiB.
      type: int
    used_mib:
      description: Memory in use in MiB (v2 C(used); with the v1 call it includes reserved memory).
      type: int
    reserved_mib:
      description: Memory the driver and firmware reserve, in MiB; V(null) with the v1 call.
      type: int
    free_mib:
      description: Free memory in MiB.
      type: int
    v1_used_mib:
      description: C(used) as the v1 call reports it, reserved memory included, for reference.
      type: int
    processes:
      description:
        - Processes NVML lists on the GPU, with C(pid), C(used_mib), C(exists) (whether the process exists),
          where it exists its C(name) (untruncated title), C(cmdline) and C(user), and C(where) - another PID
          namespace or container the process runs in, or V(outside this PID namespace) where the module runs
          outside the host PID namespace, so that NVML's PIDs cannot be looked up (C(exists) is then V(false)).
      type: list
      elements: dict
    clean:
      description: Whether this GPU is clean.
      type: bool
    problem:
      description: What keeps the GPU from being clean, in words; V(null) when clean.
      type: str
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuops.host.plugins.module_utils._nvml import HAS_PYNVML, PYNVML_IMPORT_ERROR, Nvml, NvmlError
from ansible_collections.gpuops.host.plugins.module_utils._sglang_args import masking
from ansible_collections.gpuops.host.plugins.module_utils._verify import SelectionError, Verification, wait_argument_spec

SYSFS_ROOT = '/sys'


def main():
    module = AnsibleModule(argument_spec=wait_argument_spec(), supports_check_mode=True)
    # Command lines typed by hand can carry a secret (--api-key X): masked in every result and message.
    module.exit_json, module.fail_json = masking(module.exit_json), masking(module.fail_json)
    try:
        verification = Verification(module.params, SYSFS_ROOT)
    except ValueError as e:
        module.fail_json(msg=str(e))
    if not HAS_PYNVML:
        module.fail_json(msg=missing_required_lib('nvidia-ml-py'), exception=PYNVML_IMPORT_ERROR)
    for warning in verification.warnings:
        module.warn(warning)
    try:
        with Nvml() as nvml:
            report = verification.wait(nvml.snapshot)
    except NvmlError as e:
        module.fail_json(msg=str(e), nvml_error=e.code)
    except SelectionError as e:
        module.fail_json(msg=str(e))
    for warning in verification.report_warnings(report):
        module.warn(warning)
    if not report['clean']:
        module.fail_json(msg=verification.failure(report), **report)
    module.exit_json(changed=False, **report)


if __name__ == '__main__':
    main()

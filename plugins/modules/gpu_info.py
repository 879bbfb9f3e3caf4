#!/usr/bin/python
# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_info
short_description: Report the memory and processes of a host's GPUs through NVML
version_added: 0.1.0
description:
  - Reads every GPU (or those in O(gpus)) once through NVML and returns its memory, the processes NVML
    lists on it, and whether it is clean by the same rule as M(gpuops.host.gpu_verify), with the problem in
    words. It never fails because a GPU is dirty or lost.
  - Memory comes from the v2 call, which reports driver-reserved memory apart; the v1 C(used) figure is
    returned as well for reference. Where the driver lacks the v2 call, the v1 call is used with a warning.
author:
  - gpuops maintainers (@gpuops)
requirements:
  - nvidia-ml-py (C(import pynvml)) on the target, and the NVIDIA driver's C(libnvidia-ml.so.1).
extends_documentation_fragment:
  - gpuops.host.nvml
  - gpuops.host.attributes
  - gpuops.host.attributes.INFO_MODULE
  - gpuops.host.attributes.ACTIONGROUP_GPU
"""

EXAMPLES = r"""
- name: Read the GPUs before stopping anything
  gpuops.host.gpu_info:
  register: before

- name: Stop the processes NVML lists on the GPUs
  gpuops.host.gpu_reap:
    pids: "{{ before.gpus.values() | map(attribute='processes') | flatten | selectattr('exists') | map(attribute='pid') | list }}"
  when: before.dirty | length > 0

- name: Wait until the GPUs are clean
  gpuops.host.gpu_verify:
    timeout: 30

- name: Record v1 against v2 used memory of GPU 0
  gpuops.host.gpu_info:
    gpus:
      - "0"
  register: gpu0

- name: Show both figures
  ansible.builtin.debug:
    msg: "{{ item.value.v1_used_mib }} MiB (v1) against {{ item.value.used_mib }} MiB (v2)"
  loop: "{{ gpu0.gpus | dict2items }}"
"""

RETURN = r"""
count:
  description: Number of GPUs the host shows.
  returned: success
  type: int
  sample: 8
driver_version:
  description: NVIDIA driver version as NVML reports it.
  returned: success
  type: str
  sample: "570.133.20"
memory_api:
  description:
    - Which NVML memory call the C(used_mib) figures in RV(gpus) come from, V(v2) or V(v1) (a driver without the v2 call).
    - V(null) when no GPU could be read at all.
  returned: success
  type: str
  sample: v2
dirty:
  description: Keys in RV(gpus) of the GPUs that are not clean.
  returned: success
  type: list
  elements: str
  sample: []
nvml_error:
  description: Name of the NVML error that kept the module from reading NVML at all.
  returned: when NVML could not be initialised or queried
  type: str
  sample: NVML_ERROR_LIBRARY_NOT_FOUND
gpus:
  description:
    - Facts of every GPU read, keyed by UUID (V(index-N) for a GPU whose UUID NVML cannot give); see
      M(gpuops.host.gpu_verify) for every field.
  returned: success
  type: dict
  sample:
    GPU-5b1f3c2e-0b6a-4a5e-9e53-0f6a1d2c3b4a:
      index: 0
      uuid: GPU-5b1f3c2e-0b6a-4a5e-9e53-0f6a1d2c3b4a
      name: NVIDIA H200
      pci_bus_id: "00000000:1B:00.0"
      total_mib: 143771
      used_mib: 0
      reserved_mib: 700
      free_mib: 143071
      v1_used_mib: 700
      processes: []
      clean: true
      problem: null
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuops.host.plugins.module_utils._nvml import HAS_PYNVML, PYNVML_IMPORT_ERROR, Nvml, NvmlError
from ansible_collections.gpuops.host.plugins.module_utils._verify import Limits, SelectionError, argument_spec, assess, v1_warning


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    if not HAS_PYNVML:
        module.fail_json(msg=missing_required_lib('nvidia-ml-py'), exception=PYNVML_IMPORT_ERROR)
    p = module.params
    limits = Limits(p['max_used_mib'], p['allow_processes'], p['v1_reserved_mib'])
    try:
        with Nvml() as nvml:
            report = assess(nvml.snapshot(), limits, p['gpus'])
    except NvmlError as e:
        module.fail_json(msg=str(e), nvml_error=e.code)
    except SelectionError as e:
        module.fail_json(msg=str(e))
    if report['memory_api'] == 'v1':
        module.warn(v1_warning(limits))
    module.exit_json(changed=False, **dict((k, report[k]) for k in ('gpus', 'dirty', 'count', 'driver_version', 'memory_api')))


if __name__ == '__main__':
    main()

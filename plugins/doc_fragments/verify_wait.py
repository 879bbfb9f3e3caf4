# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:

    # The verify option of the modules that stop processes and then wait for clean GPUs (gpu_reap, sglang_server's
    # stop): _verify.wait_argument_spec.
    DOCUMENTATION = r"""
options:
  verify:
    description:
      - After the stop, wait until every GPU (or those in O(verify.gpus)) is clean, and fail the run when they are not
        within O(verify.timeout); the suboptions are those of M(gpuops.host.gpu_verify), with the same defaults.
      - The wait starts the moment the last target is gone. It is not run when a target survived SIGKILL or could not
        be signalled (the run fails then anyway), nor in check mode.
      - Needs C(nvidia-ml-py) on the target.
    type: dict
    suboptions:
      gpus:
        description:
          - GPUs to check, each an NVML index (V(0)) or a UUID (the C(GPU-) prefix may be left out); every GPU when
            empty. A GPU the host does not show fails the run before anything is signalled.
        type: list
        elements: str
        default: []
      max_used_mib:
        description: The most memory, in MiB, a clean GPU may show in use, read through the v2 memory call.
        type: int
        default: 32
      allow_processes:
        description: Whether processes NVML lists may remain on a clean GPU (its memory still within O(verify.max_used_mib)).
        type: bool
        default: false
      v1_reserved_mib:
        description:
          - Drivers without the v2 memory call only, the v1 used memory of this host's GPUs when idle (see
            M(gpuops.host.gpu_verify)); without it a v1 reading never counts as clean.
        type: int
      expected_count:
        description:
          - Number of GPUs the host must show; when omitted, the NVIDIA GPUs on the PCI bus.
        type: int
      timeout:
        description: Seconds to wait, from the last target's exit, for every GPU to be clean. V(0) checks once.
        type: float
        default: 60
      poll_interval:
        description:
          - Seconds between two NVML readings; a release is noticed at most this late. More than 0.
        type: float
        default: 0.1
"""

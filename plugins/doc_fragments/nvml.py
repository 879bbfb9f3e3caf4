# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:

    # Options shared by the modules that read GPUs through NVML, and the rule they use for "clean".
    DOCUMENTATION = r"""
options:
  gpus:
    description:
      - GPUs to look at, each an NVML index (V(0)) or a UUID (V(GPU-5b1f...), the C(GPU-) prefix may be left out).
      - NVML indices can differ from CUDA indices and C(/dev/nvidiaN) minor numbers; UUIDs cannot.
      - The default is every GPU of the host. A GPU listed here that the host does not show is an error.
    type: list
    elements: str
    default: []
  max_used_mib:
    description:
      - The most memory, in MiB, that a GPU may show in use and still count as clean.
      - Read through the v2 memory call, which reports driver-reserved memory apart. An idle H100 or
        H200 shows 0 to 2 MiB there, sometimes up to about 14 MiB; the default V(32) leaves room for
        that while any CUDA context, which takes hundreds of MiB, is far above it.
      - With the v1 call (drivers without v2), see O(v1_reserved_mib).
    type: int
    default: 32
  allow_processes:
    description:
      - Whether processes that NVML lists on a GPU (compute or graphics contexts) may be present on a clean GPU.
      - When V(true), a GPU with processes is still clean while its memory stays within O(max_used_mib).
      - A process NVML lists but which no longer exists on the host always makes a GPU dirty, as its memory
        is only freed by a GPU reset.
    type: bool
    default: false
  v1_reserved_mib:
    description:
      - Used only where the driver lacks the v2 memory call and the v1 call is read instead.
      - The v1 call counts the memory that the driver and firmware reserve as used (about 330 to 550 MiB on an
        idle H100, about 700 MiB on an idle H200), so zero cannot be read from it. Set this to the v1 used memory
        of the host's GPUs when idle (the C(v1_used_mib) that M(gpuops.host.gpu_info) returns for a GPU with no
        process, recorded on that host); a GPU is then clean when no process is listed and v1 used minus this value is at
        most O(max_used_mib).
      - Without it, a v1 reading never counts as clean, and the problem says that zero cannot be proven.
    type: int
notes:
  - NVML lists the PIDs of the host's PID namespace. In another PID namespace (a container without the host's PID
    namespace) they do not name this namespace's processes; a listed PID that is not visible here is reported as
    outside this PID namespace, never as gone.
  - The host's PID namespace is the kernel's initial one, or the one the environment variable C(GPUOPS_HOST_PIDNS)
    names (C(pid:[INODE]), or C(own) for the module's own), as a simulated GPU node sets it.
"""

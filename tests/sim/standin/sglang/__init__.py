# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Stand-in for the SGLang server on simulated GPU nodes.

It plays one real release (GPUSIM_SGLANG_RELEASE, default 0.5.23): that release's parser,
/server_info keys, endpoints and shutdown sequence, taken from its contract (see
sglang/srt/contract.py). GPU memory is registered with the NVML test double (gpusim.nvml)
instead of CUDA. Installed only on simulated nodes, never into the project's own environment.
"""

from sglang.version import __version__  # noqa: F401

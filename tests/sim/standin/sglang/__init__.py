# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Stand-in for the SGLang server on simulated GPU nodes.

Same entry points, flags, process tree, endpoints and shutdown semantics as SGLang 0.5.x;
GPU memory is registered with the NVML test double (gpusim.nvml) instead of CUDA.
Installed only on simulated nodes, never into the project's own environment.
"""

__version__ = "0.5.23"

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Launch the server: python -m sglang.launch_server --model-path PATH [flags]."""

import sys

from sglang.srt.entrypoints.http_server import run_server

if __name__ == "__main__":
    run_server(sys.argv[1:])

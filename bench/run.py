#!/usr/bin/env python
# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""make bench: time gpuops against the hand procedures it replaces, on simulated GPU nodes.

Writes bench/results/latest.json and latest.md. Needs root (namespaces), the project venv
and the simulator (make sim). See bench/README.md.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpuops_bench.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())

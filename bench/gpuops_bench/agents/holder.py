# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The last GPU process of a node, for the detection-latency measurement.

Usage: holder.py MIB EXIT_AT. Registers MIB on every GPU of the node in GPUSIM_STATE,
prints ``ready``, and exits at time.monotonic() == EXIT_AT, printing that instant first.
Its memory is released when it exits (the simulated driver's release lag is 0).
"""

from __future__ import annotations

import os
import sys
import time

from gpusim.nvml import Node


def main(argv):
    mib, exit_at = int(argv[1]), float(argv[2])
    node = Node(os.environ["GPUSIM_STATE"])
    for gpu in range(node.count):
        node.allocate(gpu, mib)
    print("ready", flush=True)
    while time.monotonic() < exit_at - 0.002:
        time.sleep(min(0.05, exit_at - 0.002 - time.monotonic()))
    while time.monotonic() < exit_at:
        pass
    print("exit %.6f" % time.monotonic(), flush=True)
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))

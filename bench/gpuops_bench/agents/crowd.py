# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A crowded node for make bench, run inside a simulated node: COUNT idle processes holding FILES open files each
(agents/scan.py's, none of them a GPU device file), until stdin closes. Prints "ready" once they all run.

    python crowd.py COUNT FILES
"""

from __future__ import annotations

import os
import sys

from scan import spawn  # this directory is the script's: the first entry of sys.path


def main(argv):
    w = spawn(int(argv[1]), int(argv[2]), gpu_holders=False)[0]
    print("ready", flush=True)
    sys.stdin.read()
    os.close(w)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A process with /dev/nvidiactl open and no CUDA context, like a monitoring daemon.

NVML does not list it, ``fuser /dev/nvidia*`` does. The GPU check asserts that reaping
by pattern leaves it alive and that gpu_verify does not count it against a clean GPU.
Prints ``ready <pid>`` once the device file is open, then sleeps until killed.
"""

from __future__ import annotations

import os
import sys
import time


def main():
    device = os.open(sys.argv[1] if len(sys.argv) > 1 else '/dev/nvidiactl', os.O_RDWR)
    sys.stdout.write('ready %d\n' % os.getpid())
    sys.stdout.flush()
    while device >= 0:
        time.sleep(3600)


if __name__ == '__main__':
    main()

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A crowded node for make bench, run inside a simulated node: COUNT idle processes holding FILES open files each
(half tmp files, half /dev/null, as agents/scan.py's), until stdin closes. Prints "ready" once they all run.

    python crowd.py COUNT FILES
"""

from __future__ import annotations

import os
import sys
import tempfile


def main(argv):
    count, files = int(argv[1]), int(argv[2])
    tmp = tempfile.mkdtemp(prefix="crowd-")
    fds = [os.open(os.path.join(tmp, "f%d" % i), os.O_RDWR | os.O_CREAT, 0o600) for i in range(files // 2)]
    fds += [os.open("/dev/null", os.O_RDONLY) for dummy in range(files - len(fds))]
    r, w = os.pipe()
    for dummy in range(count):
        if os.fork() == 0:
            os.close(w)
            os.read(r, 1)   # until the parent exits
            os._exit(0)
    for fd in fds + [r]:
        os.close(fd)
    print("ready", flush=True)
    sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

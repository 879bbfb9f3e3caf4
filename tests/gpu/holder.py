# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Stand-in for an SGLang scheduler: takes GPU memory and holds it until killed.

It titles itself ``sglang::scheduler_TP0`` (the title lives here, never on a command line,
so no other process of the check matches the reaping pattern), allocates ``--mib`` MiB on
GPU 0 with torch (or, with ``--sim``, registers the allocation with the simulated node),
prints ``ready <pid> <mib>`` and sleeps. Each SIGTERM it receives is noted, as a wall-clock
and a monotonic time, in ``--signal-log``; it then dies of the signal, or with
``--ignore-sigterm`` keeps holding until SIGKILL.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

import setproctitle

TITLE = 'sglang::scheduler_TP0'


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--mib', type=int, required=True)
    parser.add_argument('--signal-log', required=True)
    parser.add_argument('--ignore-sigterm', action='store_true')
    parser.add_argument('--sim', action='store_true', help='register with gpusim instead of allocating with torch')
    args = parser.parse_args()
    setproctitle.setproctitle(TITLE)

    def on_term(signum, frame):
        with open(args.signal_log, 'a') as f:
            f.write(json.dumps({'signal': 'SIGTERM', 'wall': time.time(), 'mono': time.monotonic()}) + '\n')
        if not args.ignore_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)

    if args.sim:
        from gpusim.nvml import Node
        Node(os.environ['GPUSIM_STATE']).allocate(0, args.mib)
        device = os.open('/dev/nvidia0', os.O_RDWR)     # what a CUDA process holds open
        held = [device]
    else:
        import torch
        held = [torch.zeros(args.mib * 1024 * 1024, dtype=torch.uint8, device='cuda:0')]
        torch.cuda.synchronize()

    sys.stdout.write('ready %d %d\n' % (os.getpid(), args.mib))
    sys.stdout.flush()
    while held:
        time.sleep(3600)


if __name__ == '__main__':
    main()

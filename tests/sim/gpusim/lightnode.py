# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A light SGLang server for fleet benchmarks: the stand-in in one process.

The stand-in (tests/sim/standin) starts a scheduler process per GPU and a detokenizer, about
eleven Python processes for TP=8; 32 such nodes do not fit on two cores. The light server runs
the same parts of the stand-in in one process: its parser (the played release's contract), its
HTTP server and tokenizer manager, its schedulers (one thread per TP rank: devices opened,
memory registered with the NVML double under this process's PID, the model load, the batch
loop, the memory release) and its shutdown watchdog. What the roles see is the same: the
command line `python -m sglang.launch_server ...`, the endpoints and their keys, 503 while
starting and shutting down, the drain, the release after ShutdownReq and exit status 0, the
hidden-state dumps. What differs: no `sglang::scheduler*`/`sglang::detokenizer` children (the
GPU memory belongs to the main process), and no faults.

    path = install(dest)     # a stand-in copy whose `python -m sglang.launch_server` is light
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import sys
import threading
import time

from gpusim import standin

SHIM = '''\
# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Launch the light server (gpusim.lightnode): python -m sglang.launch_server --model-path PATH [flags]."""

import sys

from gpusim.lightnode import run_server

if __name__ == "__main__":
    run_server(sys.argv[1:])
'''


def install(dest: str, patched: bool = True) -> str:
    """A stand-in copy (standin.install) whose `python -m sglang.launch_server` runs the light server."""
    standin.install(dest, patched=patched)
    with open(os.path.join(dest, "sglang", "launch_server.py"), "w") as f:
        f.write(SHIM)
    return dest


class ShutdownReq:
    """The ShutdownReq the watchdog sends: set() wakes every rank thread and returns once they have
    released their memory (or the release cap has passed), as the real watchdog waits for its
    schedulers (managers/tokenizer_manager.py sigterm_watchdog, cap _SCHEDULER_EXIT_TIMEOUT_SECS)."""

    def __init__(self, cap: float):
        self.event = threading.Event()
        self.ranks = []
        self.cap = cap

    def is_set(self) -> bool:
        return self.event.is_set()

    def wait(self, timeout=None) -> bool:
        return self.event.wait(timeout)

    def set(self) -> None:
        self.event.set()
        for thread in self.ranks:
            thread.join(self.cap)


def _rank(server_args, rank, barrier, req_reader, out_writer, shutdown, ready, errors):
    from sglang.srt.managers.scheduler import Scheduler

    try:
        scheduler = Scheduler(server_args, rank, barrier, out_writer, set(), shutdown)
        ready[rank] = scheduler.info()
    except Exception as e:  # pylint: disable=broad-except
        errors.append("rank %d: %s" % (rank, e))
        barrier.abort()
        return
    if rank == 0:
        scheduler.event_loop(req_reader)
    scheduler.idle()
    scheduler.release()


def _detokenize(reader, writer) -> None:
    """managers/detokenizer_manager.py run_detokenizer_process, as a thread."""
    from sglang.srt import tokenizer

    while True:
        try:
            kind, payload = reader.recv()
        except (EOFError, OSError):
            return
        if kind == "finished":
            payload["text"] = tokenizer.decode(payload["output_ids"])
        writer.send((kind, payload))


def launch_server(server_args) -> None:
    """entrypoints/http_server.py launch_server of the stand-in, with threads for processes."""
    from sglang.srt import contract
    from sglang.srt.entrypoints import http_server

    logger = http_server.logger
    server_args.resolve()
    http_server._check_supported(server_args)  # pylint: disable=protected-access
    logger.info("server_args=%r", server_args)
    spec = contract.load()["shutdown"]
    shutdown = ShutdownReq(spec["release"]["cap_s"])
    barrier = threading.Barrier(server_args.tp_size)
    req_reader, req_writer = mp.Pipe(duplex=False)
    det_reader, det_writer = mp.Pipe(duplex=False)
    out_reader, out_writer = mp.Pipe(duplex=False)
    ready, errors = {}, []
    for rank in range(server_args.tp_size):
        thread = threading.Thread(target=_rank, name="scheduler-TP%d" % rank, daemon=True,
                                  args=(server_args, rank, barrier, req_reader if rank == 0 else None,
                                        det_writer if rank == 0 else None, shutdown, ready, errors))
        thread.start()
        shutdown.ranks.append(thread)
    threading.Thread(target=_detokenize, name="detokenizer", daemon=True, args=(det_reader, out_writer)).start()
    while len(ready) < server_args.tp_size and not errors:
        time.sleep(0.05)
    if errors:
        logger.error("Scheduler hit an exception: %s", "; ".join(errors))
        raise SystemExit(1)

    tm = http_server.TokenizerManager(server_args, req_writer, out_reader, ready[0])
    http_server.serve(server_args, tm, shutdown)


def run_server(argv: list) -> None:
    """Parse ARGV with the played release's parser and run the light server until it shuts down."""
    from sglang.srt.server_args import prepare_server_args

    server_args = prepare_server_args(argv)
    try:
        launch_server(server_args)
    finally:
        logging.shutdown()


if __name__ == "__main__":
    sys.exit("start it as SGLang is started: python -m sglang.launch_server, from a copy made by install()")

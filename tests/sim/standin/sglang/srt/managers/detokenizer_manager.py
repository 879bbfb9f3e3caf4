# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The detokenizer process: turns the scheduler's token ids into text for the HTTP server."""

from __future__ import annotations

import logging
import os
import signal
import time
import traceback

import setproctitle

from sglang.srt import tokenizer
from sglang.srt.utils import configure_logger, faults, kill_itself_when_parent_died

logger = logging.getLogger(__name__)


def run_detokenizer_process(server_args, in_reader, out_writer) -> None:
    if "orphan" not in faults():
        kill_itself_when_parent_died()
    configure_logger(server_args.log_level)
    setproctitle.setproctitle("sglang::detokenizer")
    parent = os.getppid()
    try:
        while True:
            try:
                kind, payload = in_reader.recv()
            except EOFError:  # the scheduler is gone; like a ZMQ socket, wait forever
                while True:
                    time.sleep(3600)
            if kind == "finished":
                payload["text"] = tokenizer.decode(payload["output_ids"])
            try:
                out_writer.send((kind, payload))
            except OSError:
                pass
    except Exception:
        logger.error("DetokenizerManager hit an exception: %s", traceback.format_exc())
        os.kill(parent, signal.SIGQUIT)

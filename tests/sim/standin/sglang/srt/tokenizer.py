# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A deterministic toy tokenizer and "model": same prompt, same output, on every node."""

from __future__ import annotations

import hashlib

VOCAB_SIZE = 32000
WORDS = ("the", "a", "GPU", "memory", "is", "of", "and", "node", "server", "request", "token", "graph",
         "cache", "batch", "model", "weights", "kernel", "stream", "tensor", "parallel", "rank", "prefill",
         "decode", "draft", "hidden", "state", "layer", "attention", "scheduler", "ready", "Paris", "France")


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")


def encode(text: str) -> list:
    return [_hash(word) % VOCAB_SIZE for word in text.split()]


def decode(ids: list) -> str:
    return "".join(" " + WORDS[i % len(WORDS)] for i in ids)


def next_token(input_ids: list, output_ids: list) -> int:
    """The greedy next token: a function of the prompt and what was generated so far."""
    seed = "%s|%d|%s" % (",".join(map(str, input_ids[-16:])), len(output_ids), output_ids[-1:] or "")
    return _hash(seed) % VOCAB_SIZE

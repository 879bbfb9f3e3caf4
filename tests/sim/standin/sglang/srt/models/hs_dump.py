# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Hidden-state capture for EAGLE-3 drafter training: the patched model's prefill hook.

Active only when SGLANG_HS_DUMP_DIR is set in the server's environment: every prefill writes
hs_<rid>.pt (the captured hidden states of the auxiliary layers) and hs_<rid>.json (what they
are) into that directory. An unpatched install lacks this module and dumps nothing.
"""

from __future__ import annotations

import hashlib
import json
import os

DUMP_DIR_ENV = "SGLANG_HS_DUMP_DIR"
BYTES_PER_TOKEN = 32  # a stand-in for hidden_size x len(layers) x 2 bytes


def aux_layers(num_layers: int) -> list:
    """The layers EAGLE-3 taps: early, middle and late."""
    return [1, num_layers // 2 - 1, num_layers - 4]


def maybe_dump(rid: str, input_ids: list, hidden_size: int, num_layers: int):
    """Write the dump of one prefill; return its path, or None when dumping is off."""
    dump_dir = os.environ.get(DUMP_DIR_ENV)
    if not dump_dir:
        return None
    os.makedirs(dump_dir, exist_ok=True)
    path = os.path.join(dump_dir, "hs_%s.pt" % rid)
    data = b"".join(hashlib.sha256(("%s:%d:%d" % (rid, i, t)).encode()).digest()[:BYTES_PER_TOKEN]
                    for i, t in enumerate(input_ids))
    meta = {"rid": rid, "num_tokens": len(input_ids), "hidden_size": hidden_size,
            "layers": aux_layers(num_layers), "dtype": "bfloat16", "bytes": len(data)}
    for target, payload in ((path, data), (path[:-3] + ".json", json.dumps(meta).encode())):
        with open(target + ".tmp", "wb") as f:
            f.write(payload)
        os.replace(target + ".tmp", target)
    return path

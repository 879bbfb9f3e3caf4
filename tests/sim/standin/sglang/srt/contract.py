# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The release the stand-in plays, and that release's contract (not a module of real SGLang).

GPUSIM_SGLANG_RELEASE picks the release (default 0.5.23). Its contract, generated from the
real wheel by contracts/generate.py, lies in contracts/sglang-<release>.json next to the
`sglang` package. An unknown release is refused with exit status 2.
"""

from __future__ import annotations

import functools
import json
import os
import sys

RELEASE_ENV = "GPUSIM_SGLANG_RELEASE"
DEFAULT_RELEASE = "0.5.23"
CONTRACTS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                             "contracts")


def known_releases() -> list:
    try:
        names = os.listdir(CONTRACTS_DIR)
    except FileNotFoundError:
        return []
    return sorted(n[len("sglang-"):-len(".json")] for n in names if n.startswith("sglang-") and n.endswith(".json"))


def release() -> str:
    """The release named by GPUSIM_SGLANG_RELEASE; exit status 2 when there is no contract for it."""
    name = os.environ.get(RELEASE_ENV, "").strip() or DEFAULT_RELEASE
    if name not in known_releases():
        sys.stderr.write("%s=%s: the SGLang stand-in has no contract for this release (known: %s, in %s)\n"
                         % (RELEASE_ENV, name, ", ".join(known_releases()) or "none", CONTRACTS_DIR))
        raise SystemExit(2)
    return name


@functools.lru_cache(maxsize=None)
def load(name: str = None) -> dict:
    """The contract of release NAME (default: the one played)."""
    name = name or release()
    with open(os.path.join(CONTRACTS_DIR, "sglang-%s.json" % name)) as f:
        return json.load(f)


def at_least(version: str, name: str = None) -> bool:
    """Whether the played release (or NAME) is VERSION or newer."""
    def parts(v):
        return tuple(int(p) for p in v.split(".")[:3])
    return parts(name or release()) >= parts(version)

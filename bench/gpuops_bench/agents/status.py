# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The status of an extraction run, timed inside a simulated node.

Usage: status.py RECORD MODULE_ARGS_FILE ROUNDS. Times, alternating which goes first, the status of the run that
the record RECORD names as gpuops.host.sglang_server_info reads it with extraction: true - its extraction part in
this process (_server_info.extraction_status: one pass over the run directory, statvfs, the manifest; no server
runs, so nothing is asked over HTTP) - and the whole module as a process (Python start-up, imports, the process
table and the record included). Round 0 warms the page cache and is not counted. Prints one JSON object.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time


def main(argv):
    record_path, module_args, rounds = argv[1], argv[2], int(argv[3])
    from ansible_collections.gpuops.host.plugins.module_utils import _server_info as server_info
    from ansible_collections.gpuops.host.plugins.module_utils._sglang import Deps

    with open(record_path) as f:
        record = json.load(f)
    deps = Deps(procfs=None, run=None)
    params = {"rate_window": 600.0, "request_timeout": 5.0, "dump_patterns": ["*"]}

    def in_process():
        t = time.monotonic()
        found = server_info.extraction_status(record, None, params, deps)
        return time.monotonic() - t, found

    def module():
        t = time.monotonic()
        out = subprocess.run([sys.executable, "-m", "ansible_collections.gpuops.host.plugins.modules.sglang_server_info",
                              module_args], capture_output=True, text=True, check=False)
        dt = time.monotonic() - t
        result = json.loads(out.stdout)
        if result.get("failed"):
            raise RuntimeError("sglang_server_info failed: %s" % result.get("msg"))
        return dt, result["extraction"]

    methods = {"status_in_process": in_process, "module_process": module}
    times = dict((name, []) for name in methods)
    found = {}
    for n in range(rounds + 1):
        order = list(methods) if n % 2 else list(reversed(list(methods)))
        for name in order:
            dt, found[name] = methods[name]()
            if n:
                times[name].append(dt)
    print(json.dumps({"times": times, "found": found}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

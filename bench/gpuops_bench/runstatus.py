# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Measurement: the cost of an extraction run's status (playbooks/extraction_status.yml's one module call per node)
with 100,000 dump files in the run directory."""

from __future__ import annotations

import datetime
import json
import os
import time

from .common import AGENTS, VENV_PYTHON, WORK, collections_path, log, summary

from gpusim.sandbox import Sandbox  # noqa: E402  (tests/sim is on sys.path through .common)

GOAL_S = 0.5
DEFINITION = (
    "inside one node, a run directory that the bench makes with FILES dump files (64 bytes each, their mtimes spread "
    "over the last two hours, so that the rate window of 600 s holds about a twelfth of them) and a record naming "
    "it, alternating which goes first: the extraction part of gpuops.host.sglang_server_info with extraction: true "
    "called in-process (_server_info.extraction_status: one pass over the run directory, links not followed and no "
    "file opened, the rate by mtimes, statvfs of the dump root, the manifest read back; no server runs, so no "
    "HTTP), and the whole module as a process (Python start-up, imports, the node's process table and the record "
    "included). Round 0 warms the page cache and is not counted. Goal: the status <= %.1f s." % GOAL_S)


def make_run(root, files):
    """The run directory of FILES dumps under ROOT and the record of its server; reused when already complete."""
    marker = "extraction-bench-%d" % files
    run_dir = os.path.join(root, "dumps", marker)
    os.makedirs(run_dir, exist_ok=True)
    now = time.time()
    names = set(os.listdir(run_dir))
    for i in range(files):
        name = "hs_rec-%06d.pt" % i
        if name in names:
            continue
        path = os.path.join(run_dir, name)
        with open(path, "wb") as f:
            f.write(b"\0" * 64)
        age = 7200.0 * (files - i) / files
        os.utime(path, (now - age, now - age))
    ready = datetime.datetime.fromtimestamp(now - 7300, datetime.timezone.utc).isoformat(timespec="seconds")
    record = {"status": "ok", "marker": marker, "mode": "extraction", "pid": 0, "start": 0, "owner": "root",
              "url": "http://127.0.0.1:9", "dump_dir": run_dir, "started": int(now - 7400), "checked": ready,
              "identity": {"user": "root", "dumps": [os.path.dirname(run_dir), 0]}}
    os.makedirs(os.path.join(root, "state"), exist_ok=True)
    record_path = os.path.join(root, "state", "server.json")
    with open(record_path, "w") as f:
        json.dump(record, f)
    return record_path


def run(rounds, files=100000):
    workdir = os.path.join(WORK, "nodes", "status")
    os.makedirs(workdir, exist_ok=True)
    started = time.monotonic()
    record_path = make_run(workdir, files)
    log("status: %d dump files ready in %.1f s" % (files, time.monotonic() - started))
    argsfile = os.path.join(workdir, "status-args.json")
    with open(argsfile, "w") as f:
        json.dump({"ANSIBLE_MODULE_ARGS": {"record_path": record_path, "presets": [], "extraction": True}}, f)
    with Sandbox(os.path.join(workdir, "sandbox"), gpus=1, decoys=False) as sb:
        out = sb.run([VENV_PYTHON, os.path.join(AGENTS, "status.py"), record_path, argsfile, str(rounds)],
                     env=dict(os.environ, PYTHONPATH=collections_path()), capture_output=True, text=True,
                     timeout=600, cwd="/")
    if out.returncode:
        raise RuntimeError("status agent failed: %s" % out.stderr[-2000:])
    data = json.loads(out.stdout)
    times = dict((k, summary(v)) for k, v in data["times"].items())
    found = data["found"]["status_in_process"]
    if found["files"] != files:
        raise RuntimeError("the status counted %s dump files, not %d" % (found["files"], files))
    median = times["status_in_process"]["median"]
    log("status: %d files, in-process %.3f s, module process %.3f s" % (
        files, median, times["module_process"]["median"]))
    return {"definition": DEFINITION, "files": files, "rounds": rounds, "seconds": times,
            "counted": {k: found[k] for k in ("files", "recent", "rate_files_per_min", "free_gb", "hours_to_full")},
            "goal_s": GOAL_S, "met": median is not None and median <= GOAL_S}


def goals(result):
    median = result["seconds"]["status_in_process"]["median"]
    return [("status of an extraction run with %d dump files (sglang_server_info extraction, on the node)"
             % result["files"], "<= %.1f s" % result["goal_s"],
             "%.3f s (module process %.3f s)" % (median, result["seconds"]["module_process"]["median"]),
             "yes" if result["met"] else "**no** (+%.3f s)" % (median - result["goal_s"]))]


def markdown(result):
    out = ["## Status of an extraction run", "", result["definition"].replace("FILES", str(result["files"])), "",
           "| Method | Median (s) | Min-max (s) |", "|---|---|---|"]
    labels = {"status_in_process": "the status (in-process)", "module_process": "sglang_server_info as a process"}
    for k, s in result["seconds"].items():
        out.append("| %s | %.3f | %.3f-%.3f |" % (labels.get(k, k), s["median"], s["min"], s["max"]))
    return out

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""make demo: restart a simulated 8-GPU H200 node from serving to extraction mode.

Starts a local sandbox (own PID and mount namespaces: nothing outside it can be
signalled) with a simulated 8 x H200 node, the SGLang stand-in serving at TP=8 and a
request in flight, then runs playbooks/restart_extraction.yml against it: drain, stop,
reap, zero-memory check, extraction launch, ready, dump verified, summary.

    .venv/bin/python demo/run.py [--workdir build/demo] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "sim"))

from gpusim.fleet import Fleet, Request, SimNode  # noqa: E402

# Closer to a real server than the test timings, still quick: 3 s to load, a 1 s shutdown watchdog.
SERVER_ENV = {"GPUSIM_SGLANG_LOAD_SECONDS": "3", "GPUSIM_SGLANG_WARMUP_SECONDS": "0.5",
              "GPUSIM_SGLANG_TOKEN_DELAY": "0.01", "GPUSIM_SGLANG_WATCHDOG_INTERVAL": "1"}


def step(text: str) -> None:
    print("\n==> " + text, flush=True)


def show_node(node: SimNode) -> None:
    procs = [p for p in node.sandbox.procs() if p["state"] != "Z"]
    for p in sorted(procs, key=lambda p: p["pid"]):
        print("    %5d %5d  %s" % (p["pid"], p["ppid"], " ".join(p["cmdline"]).strip()[:110] or "[%s]" % p["comm"]))
    print("    GPU memory in use (MiB, NVML v2): %s" % " ".join(str(m) for m in node.used_mib()))


class Condensed:
    """Ansible's default output, one line per task and host; the full output goes to a log."""

    STATUS = re.compile(r"^(ok|changed|fatal|failed|skipping|included): \[([^\]]+)\]( => (.*))?")

    def __init__(self, log):
        self.log = log
        self.task = None
        self.table = False
        self.recap = False

    def feed(self, line: str) -> None:
        self.log.write(line)
        text = line.rstrip("\n")
        if text.startswith("PLAY RECAP"):
            self.table, self.recap = False, True
            print("\n" + text.rstrip(" *"))
        elif self.recap:
            if text.strip():
                print("  " + " ".join(text.split()))
        elif text.startswith("PLAY ["):
            print("\n" + text.rstrip(" *"))
        elif text.startswith("TASK ["):
            self.task = text[6:text.rindex("]")]
            self.table = False
        elif self.table and text.strip().startswith('"') and not text.strip().startswith('"msg"'):
            print("    " + json.loads(text.strip().rstrip(",")))
        elif self.STATUS.match(text):
            status, host, dummy, detail = self.STATUS.match(text).groups()
            if status == "included" or "Validating arguments" in self.task:
                return
            print("  %-8s %-12s %s" % (status, host, self.task.replace("gpuops.host.", "")))
            if status in ("fatal", "failed") and detail:
                print("           " + json.loads(detail).get("msg", detail) if detail.startswith("{") else detail)
            self.table = "summary of the run" in self.task
        elif text.startswith(("[ERROR]", "[WARNING]")):
            print(text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default=os.path.join(REPO, "build", "demo"))
    parser.add_argument("--keep", action="store_true", help="leave the work directory for inspection")
    parser.add_argument("--full", action="store_true", help="show ansible-playbook's whole output")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("the demo's sandbox needs root (PID and mount namespaces)")
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    start = time.monotonic()
    os.environ["ANSIBLE_DISPLAY_SKIPPED_HOSTS"] = "false"

    step("Starting a simulated 8 x NVIDIA H200 node (a sandbox with its own PID namespace)")
    with SimNode(os.path.join(args.workdir, "gpu-node-01"), gpus=8, server_env=SERVER_ENV) as node:
        fleet = Fleet(args.workdir, [node],
                      sglang_launch_server_args={"tp_size": 8, "enable_metrics": True},
                      sglang_launch_ready_interval=0.5, sglang_stop_term_timeout=15,
                      gpu_clean_verify_timeout=30)
        step("Starting SGLang by hand, serving at TP=8 on port %d" % node.port)
        node.start_server(["--tp-size", "8", "--enable-metrics"])
        show_node(node)

        step("Sending a request that takes a few seconds to decode")
        request = Request(node.url, max_new_tokens=400)
        request.start()
        time.sleep(1)

        step("ansible-playbook -i %s playbooks/restart_extraction.yml" % os.path.relpath(fleet.inventory, REPO))
        proc = fleet.popen("restart_extraction.yml")
        log_path = os.path.join(REPO, "build", "demo-ansible.log")
        with open(log_path, "w") as log:
            view = Condensed(log)
            for line in proc.stdout:
                if args.full:
                    sys.stdout.write(line)
                else:
                    view.feed(line)
                sys.stdout.flush()
        rc = proc.wait()
        if not args.full:
            print("(the whole ansible-playbook output: %s)" % os.path.relpath(log_path, REPO))

        step("After the run")
        request.join(60)
        status, body = request.result or (None, None)
        if status == 200:
            print("    the request in flight completed: %d tokens" % body["meta_info"]["completion_tokens"])
        else:
            print("    the request in flight did NOT complete: %s %s" % (status, str(body)[:200]))
        show_node(node)
        if rc == 0:
            record = node.record()
            note = "" if args.keep else " (removed on exit; --keep keeps it)"
            print("    run %s dumps into %s%s:" % (record["marker"], os.path.relpath(record["dump_dir"], REPO), note))
            for name in sorted(os.listdir(record["dump_dir"])):
                print("      " + name)
    if not args.keep:
        shutil.rmtree(args.workdir, ignore_errors=True)
    print("\n%s in %.0f s" % ("Done" if rc == 0 and status == 200 else "FAILED", time.monotonic() - start))
    return 0 if rc == 0 and status == 200 else 1


if __name__ == "__main__":
    sys.exit(main())

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""make playground: a simulated 8-GPU node that stays up, to run any playbook against by hand.

    start  a sandbox (own PID and mount namespaces: nothing outside it can be signalled) with
           8 simulated H200s, the decoy GPU daemons and the SGLang stand-in serving at TP=8,
           started by hand in its own session; an inventory and an ansible.cfg in WORKDIR.
           The sandbox runs detached, so it outlives make.
    stop   kill the sandbox's init, found by the PID and start time recorded at start (the
           kernel then ends everything inside); nothing else is signalled.

    .venv/bin/python demo/playground.py start|stop [--workdir build/playground]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "sim"))

from gpusim.fleet import Fleet, SimNode, collections_path  # noqa: E402
from gpusim.sandbox import INFO_FILE, Sandbox  # noqa: E402

NAME = "node1"
GPUS = 8
# The demo's timings: a 3 s load and a shutdown watchdog that wakes every second.
SERVER_ENV = {"GPUSIM_SGLANG_LOAD_SECONDS": "3", "GPUSIM_SGLANG_WARMUP_SECONDS": "0.5",
              "GPUSIM_SGLANG_TOKEN_DELAY": "0.01", "GPUSIM_SGLANG_WATCHDOG_INTERVAL": "1"}
STATE_FILE = "playground.json"


def write_config(workdir: str, inventory: str) -> str:
    """ansible.cfg for runs by hand: the inventory, this tree as gpuops.host, temp dirs in WORKDIR."""
    path = os.path.join(workdir, "ansible.cfg")
    os.makedirs(os.path.join(workdir, "ansible-remote"), mode=0o700, exist_ok=True)  # else a module warns, making it
    with open(path, "w") as f:
        f.write("# Written by make playground: ANSIBLE_CONFIG=%s ansible-playbook ...\n" % path)
        f.write("[defaults]\ninventory = %s\ncollections_path = %s\nlocal_tmp = %s\nremote_tmp = %s\n"
                "retry_files_enabled = false\n\n[connection]\npipelining = true\n" % (
                    inventory, collections_path(), os.path.join(workdir, "ansible-local"),
                    os.path.join(workdir, "ansible-remote")))
    return path


def instructions(state: dict) -> str:
    config = os.path.relpath(state["ansible_cfg"])
    playbook = "ANSIBLE_CONFIG=%s %s" % (config, os.path.relpath(os.path.join(REPO, ".venv", "bin", "ansible-playbook")))
    return "\n".join([
        "playground: %s, %d simulated H200s, SGLang at TP=%d on %s (inventory %s); make playground-stop ends it"
        % (state["host"], state["gpus"], state["gpus"], state["url"], os.path.relpath(state["inventory"])),
        "preview a restart: %s %s --check --diff" % (
            playbook, os.path.relpath(os.path.join(REPO, "playbooks", "restart_tuning.yml"))),
        "run any playbook:  %s %s   (then verify_gpus.yml passes)" % (
            playbook, os.path.relpath(os.path.join(REPO, "playbooks", "stop_sglang.yml"))),
    ])


def running(workdir: str):
    """The playground's state when its sandbox still runs, else None."""
    try:
        with open(os.path.join(workdir, STATE_FILE)) as f:
            state = json.load(f)
        sandbox = Sandbox.attach(state["sandbox"])
    except (OSError, ValueError, KeyError):
        return None
    return state if sandbox.alive else None


def start(workdir: str) -> int:
    state = running(workdir)
    if state:
        print(instructions(state))
        return 0
    shutil.rmtree(workdir, ignore_errors=True)
    node = SimNode(workdir, gpus=GPUS, name=NAME, server_env=SERVER_ENV, detach=True)
    node.sandbox.start()
    try:
        server = node.start_server(["--tp-size", str(GPUS)])
        fleet = Fleet(workdir, [node], fast=False,     # the roles' default timings
                      sglang_launch_server_args={"tp_size": GPUS, "enable_metrics": True})
        state = {"host": NAME, "gpus": GPUS, "url": node.url, "inventory": fleet.inventory,
                 "ansible_cfg": write_config(node.workdir, fleet.inventory),
                 "sandbox": node.sandbox.workdir, "init_pid": node.sandbox.init_pid,
                 "server_pid_in_node": server.pid, "server_log": server.log_path}
        with open(os.path.join(node.workdir, STATE_FILE), "w") as f:
            json.dump(state, f, indent=2)
    except BaseException:
        node.sandbox.close()
        raise
    print(instructions(state))
    return 0


def stop(workdir: str) -> int:
    info = os.path.join(workdir, "sandbox", INFO_FILE)
    if not os.path.exists(info):
        print("no playground running in %s" % os.path.relpath(workdir))
        return 0
    sandbox = Sandbox.attach(os.path.dirname(info))
    pid = sandbox.init_pid
    was_alive = sandbox.alive        # the recorded PID still has the recorded start time
    sandbox.close()
    state = os.path.join(workdir, STATE_FILE)
    if os.path.exists(state):
        os.unlink(state)
    print("playground stopped (sandbox init PID %d)" % pid if was_alive else
          "playground in %s had stopped already" % os.path.relpath(workdir))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["start", "stop"])
    parser.add_argument("--workdir", default=os.path.join(REPO, "build", "playground"))
    args = parser.parse_args(argv)
    workdir = os.path.abspath(args.workdir)
    return start(workdir) if args.command == "start" else stop(workdir)


if __name__ == "__main__":
    sys.exit(main())

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A launch that fails after the old server was stopped: recorded as failed, never passing on a rerun, the node's
state said even when the stop of the failed server fails too, and the opt-in rollback to the previous launch as it
ran. Real ansible-playbook runs against a simulated GPU node."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from gpusim.fleet import Run, http_get
from gpusim.tenants import Tenant

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")]


def test_a_launch_that_fails_its_checks_is_recorded_as_failed_and_never_passes_on_a_rerun(node, fleet):
    old = node.serving()
    wrong_gpus = ["-e", json.dumps({"sglang_launch_gpus": [2, 3]})]  # the server comes up on GPUs 0 and 1

    run = fleet.playbook("restart_serving.yml", *wrong_gpus)

    assert run.rc != 0
    assert "it came up on the wrong GPUs" in run.words(), run.output
    assert "This node now runs NO SGLang server: its old server was stopped and the new one" in run.words()
    assert "node1 now runs NO SGLang server" in run.summary()
    record = node.record()
    assert record["status"] == "failed" and "wrong GPUs" in record["error"]
    assert node.main_pids() == [] and old not in node.main_pids(), "the server that failed its checks is stopped"

    again = fleet.playbook("restart_serving.yml", *wrong_gpus)

    assert again.rc != 0, again.output
    assert "unchanged" not in again.summary()
    assert node.record()["status"] == "failed" and node.record()["marker"] != record["marker"]


def test_a_failed_launch_whose_stop_fails_too_still_says_what_the_node_runs(node, fleet):
    old = node.serving()
    # The new server comes up on GPUs 0 and 1 and fails its check; while it loads, another tenant takes GPU 3, so
    # the stop of the failed server cannot verify the GPUs clean.
    proc = fleet.popen("restart_serving.yml", "-e", json.dumps({"sglang_launch_gpus": [2, 3],
                                                                "sglang_launch_rollback": True,
                                                                "gpu_clean_verify_timeout": 5}))
    job = None
    try:
        deadline = time.monotonic() + 240
        while not [pid for pid in node.main_pids() if pid != old]:
            assert proc.poll() is None and time.monotonic() < deadline, "no new server was started"
            time.sleep(0.1)
        job = Tenant(node.sandbox, "train.py", ["--epochs", "1"], devices=["/dev/nvidia3"], gpu=3, mib=4096)
        output = proc.communicate(timeout=400)[0]
        run = Run(subprocess.CompletedProcess(proc.args, proc.returncode, output))

        assert run.rc != 0
        words = run.words()
        assert "it came up on the wrong GPUs" in words, run.output
        assert "This node now runs NO SGLang server" in words
        stop_failure = words[words.index("Stopping the failed launch failed too, so the previous configuration was not "
                                         "relaunched:"):]
        assert "train.py" in stop_failure
        assert "node1 now runs NO SGLang server" in run.summary()
        assert node.main_pids() == [] and node.record()["status"] == "failed"
        assert job.alive(), "the other tenant's job was stopped"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        if job is not None:
            job.close()


def test_opt_in_rollback_relaunches_the_previous_configuration_and_reports_both(node, fleet):
    node.serving()
    good = fleet.playbook("restart_serving.yml")
    assert good.rc == 0, good.output
    previous = node.record()

    changed = dict(node.server_env, GPUOPS_TEST="a new configuration")  # else it is the same one, unchanged
    run = fleet.playbook("restart_serving.yml", "-e", json.dumps({"sglang_launch_environment": changed,
                                                                  "sglang_launch_gpus": [2, 3],
                                                                  "sglang_launch_rollback": True}))

    assert run.rc != 0
    words = run.words()
    assert "it came up on the wrong GPUs" in words, run.output
    assert "The previous configuration (%s) was relaunched and passed its checks" % previous["marker"] in words
    assert "rollback" in run.summary()
    record = node.record()
    assert record["status"] == "ok" and record["marker"] == previous["marker"] and record["pid"] != previous["pid"]
    assert node.main_pids() == [record["pid"]] and node.healthy()


def test_a_rollback_to_an_extraction_run_dumps_into_a_fresh_directory_and_is_checked_in_full(node, fleet):
    node.serving()
    good = fleet.playbook("restart_extraction.yml")
    assert good.rc == 0, good.output
    previous = node.record()
    # the run's manifest aside: the stop completes it (how the run ended), as it should
    earlier = dict((name, os.stat(os.path.join(previous["dump_dir"], name)).st_mtime_ns)
                   for name in os.listdir(previous["dump_dir"]) if name != "gpuops-manifest.json")
    assert earlier

    changed = dict(node.server_env, GPUOPS_TEST="a new configuration")
    run = fleet.playbook("restart_extraction.yml", "-e", json.dumps({"sglang_launch_environment": changed,
                                                                     "sglang_launch_gpus": [2, 3],
                                                                     "sglang_launch_rollback": True}))

    assert run.rc != 0
    assert "The previous configuration (%s) was relaunched and passed its checks" % previous["marker"] in run.words(), \
        run.output
    record = node.record()
    assert record["marker"] == previous["marker"] and record["pid"] != previous["pid"]
    fresh = record["dump_dir"]
    assert fresh.startswith(previous["dump_dir"] + "-rollback-") and os.path.isdir(fresh), fresh
    # its checks ran again: every scheduler sees the fresh directory, and the probe's dump is there
    assert node.environ(record["pid"])["SGLANG_HS_DUMP_DIR"] == fresh
    assert any(name.startswith("hs_gpuops-probe-") for name in os.listdir(fresh)), os.listdir(fresh)
    assert dict((name, os.stat(os.path.join(previous["dump_dir"], name)).st_mtime_ns)
                for name in os.listdir(previous["dump_dir"])
                if name != "gpuops-manifest.json") == earlier, "the previous run's dumps were written to"


def test_a_rollback_checks_the_previous_configuration_with_its_own_api_key(node, fleet):
    node.serving()
    old_key, new_key = "sk-old-" + os.urandom(6).hex(), "sk-new-" + os.urandom(6).hex()
    good = fleet.playbook("restart_extraction.yml", "-e", json.dumps(
        {"sglang_launch_server_args": {"tp_size": 2, "enable_metrics": True, "api_key": old_key}}))
    assert good.rc == 0, good.output
    previous = node.record()

    run = fleet.playbook("restart_extraction.yml", "-e", json.dumps(
        {"sglang_launch_server_args": {"tp_size": 2, "enable_metrics": True, "api_key": new_key},
         "sglang_launch_gpus": [2, 3], "sglang_launch_rollback": True}))

    assert run.rc != 0
    assert "The previous configuration (%s) was relaunched and passed its checks" % previous["marker"] in run.words(), \
        run.output
    record = node.record()
    assert any(name.startswith("hs_gpuops-probe-") for name in os.listdir(record["dump_dir"]))
    assert http_get(node.url + "/v1/models", api_key=old_key)[0] == 200
    assert old_key not in run.output and new_key not in run.output


def test_a_rollback_starts_the_previous_launch_with_its_own_config_file(node, fleet):
    pid = node.serving()
    # As an earlier release left it: the --config file beside the record, named by the record's command line.
    legacy = os.path.join(node.state_dir, "server-args.yaml")
    os.makedirs(node.state_dir, exist_ok=True)
    with open(legacy, "w") as f:
        f.write("api-key: an-old-secret\n")
    os.chmod(legacy, 0o600)
    with open(os.path.join(node.state_dir, "server.json"), "w") as f:
        json.dump({"status": "ok", "marker": "serving-20260101T000000Z", "mode": "serving", "pid": pid,
                   "url": node.url, "config_hash": "", "argv": ["python3", "-m", "sglang.launch_server", "--config",
                                                                legacy]}, f)
    # That record names the running server without its start time: the stop cannot tell the warm-up dump of an
    # extraction server that an earlier test left from a run's record, and this test is about the legacy file.
    good = fleet.playbook("restart_serving.yml", "-e", json.dumps({
        "sglang_launch_config_file": True, "sglang_launch_server_args": {"tp_size": 2, "mem_fraction_static": 0.8},
        "sglang_stop_active_window": 0}))
    assert good.rc == 0, good.output
    previous = node.record()
    with open(previous["argv"][-1]) as f:
        previous_file = f.read()
    assert not os.path.exists(legacy), "the earlier release's --config file, with its secret, is left behind"

    run = fleet.playbook("restart_serving.yml", "-e", json.dumps({
        "sglang_launch_config_file": True, "sglang_launch_server_args": {"tp_size": 2, "mem_fraction_static": 0.7},
        "sglang_launch_gpus": [2, 3], "sglang_launch_rollback": True}))

    assert run.rc != 0
    assert "The previous configuration (%s) was relaunched and passed its checks" % previous["marker"] in run.words(), \
        run.output
    record = node.record()
    assert record["marker"] == previous["marker"] and record["argv"] == previous["argv"]
    assert http_get(node.url + "/server_info")[1]["mem_fraction_static"] == 0.8, \
        "the rollback started the failed launch's arguments"
    with open(previous["argv"][-1]) as f:
        assert f.read() == previous_file
    with open(os.path.join(node.state_dir, "runs.jsonl")) as f:
        failed = json.loads(f.readlines()[-1])
    assert failed["status"] == "failed" and failed["marker"] != previous["marker"]
    assert not os.path.exists(os.path.join(node.state_dir, "runs", failed["marker"])), \
        "the failed launch's secret files are left behind"

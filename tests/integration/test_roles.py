# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The roles and playbooks, run for real: ansible-playbook against simulated GPU nodes.

Every node is a local sandbox with its own PID namespace, simulated NVML and the SGLang
stand-in; nothing outside it can be signalled. Servers "started by hand" are launched
directly in the sandbox, the way an operator would, and found by the roles through
SGLang's process patterns.
"""

from __future__ import annotations

import json
import os
import stat
import time

import pytest

from gpusim import standin
from gpusim.fleet import Fleet, Request, SimNode, http_get

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")]


def assert_untouched(node: SimNode, pid: int):
    assert node.main_pids() == [pid]
    assert http_get(node.url + "/health")[0] == 200
    used = node.used_mib()
    assert used[0] > 1024 and used[1] > 1024, used


def test_restart_to_extraction_drains_then_converges_with_no_change(node, fleet):
    old = node.serving()
    request = Request(node.url, max_new_tokens=600)  # about 3 s of decoding
    request.start()
    time.sleep(0.3)

    run = fleet.playbook("restart_extraction.yml")

    assert run.rc == 0, run.output
    request.join(30)
    assert request.result[0] == 200 and request.result[1]["meta_info"]["completion_tokens"] == 600, request.result
    record = node.record()
    assert record["mode"] == "extraction" and record["marker"].startswith("extraction-")
    pids = node.main_pids()
    assert pids == [record["pid"]] and old not in pids
    # the marker and the dump directory reach the main process and every scheduler
    dump_dir = os.path.join(node.dump_root, record["marker"])
    assert record["dump_dir"] == dump_dir
    for proc in node.sglang_procs():
        if proc["pid"] == record["pid"] or proc["cmdline"][0].startswith("sglang::scheduler"):
            env = node.environ(proc["pid"])
            assert env["GPUOPS_RUN"] == record["marker"] and env["SGLANG_HS_DUMP_DIR"] == dump_dir, proc
    assert any(name.endswith(".pt") for name in os.listdir(dump_dir))
    used = node.used_mib()
    assert used[0] > 1024 and used[1] > 1024 and used[2] == 0 and used[3] == 0, used
    summary = run.output[run.output.index("summary of the run"):]
    assert "node1  ok      extraction  " + record["marker"] in summary, summary

    again = fleet.playbook("restart_extraction.yml")

    assert again.rc == 0, again.output
    assert again.recap()["node1"]["changed"] == 0, again.output
    assert node.main_pids() == [record["pid"]] and node.record() == record
    assert "unchanged" in again.output[again.output.index("summary of the run"):]


def test_a_stop_that_removes_takes_the_record_and_the_secret_files_and_keeps_the_dumps_and_the_history(node, fleet):
    run = fleet.playbook("restart_extraction.yml")
    assert run.rc == 0, run.output
    record = node.record()
    dumps = os.listdir(record["dump_dir"])
    assert dumps and os.path.isdir(record["run_dir"])

    check = fleet.playbook("stop_sglang.yml", "-e", "sglang_stop_remove=true", "--check")
    assert check.rc == 0 and "Would remove what ran the recorded server: " in check.output, check.output
    assert node.main_pids() == [record["pid"]] and node.record() == record

    stop = fleet.playbook("stop_sglang.yml", "-e", "sglang_stop_remove=true")

    assert stop.rc == 0, stop.output
    assert node.main_pids() == []
    assert "Removed what ran the recorded server: %s" % os.path.dirname(record["run_dir"]) in stop.output
    # the stop's own call released the host lock, and said so: the play's release of it did not run
    assert not os.path.exists(os.path.join(node.lock_path, "lock.json"))
    release = stop.output.index("TASK [Release the host lock held by this run]")
    assert stop.output[release:].split("\n", 2)[1].startswith("skipping: [node1]"), stop.output[release:]
    # the record, the PID file and every run's secret files are gone; the run history, the log and the dumps stay
    assert sorted(os.listdir(node.state_dir)) == ["runs.jsonl"]
    assert sorted(os.listdir(record["dump_dir"])) == sorted(dumps) and os.path.exists(record["log"])

    again = fleet.playbook("stop_sglang.yml", "-e", "sglang_stop_remove=true")
    assert again.rc == 0 and again.recap()["node1"]["changed"] == 0, again.output


def test_restart_to_tuning_reports_the_requested_values(node, fleet):
    old = node.serving()

    preview = fleet.playbook("restart_tuning.yml", "--check")

    assert preview.rc == 0, preview.output
    assert_untouched(node, old)

    run = fleet.playbook("restart_tuning.yml", "-e", json.dumps({"sglang_launch_config_file": True,
                                                                 "sglang_launch_server_args": {
                                                                     "tp_size": 2, "enable_metrics": True,
                                                                     "cuda_graph_bs_decode": [1, 2, 4, 8]}}))

    assert run.rc == 0, run.output
    record = node.record()
    assert record["mode"] == "tuning" and node.main_pids() == [record["pid"]] != [old]
    assert record["argv"][-2:] == ["--config", os.path.join(record["run_dir"], "server-args.yaml")]
    assert record["run_dir"] == os.path.join(node.state_dir, "runs", record["marker"])
    assert stat.S_IMODE(os.stat(record["argv"][-1]).st_mode) == 0o600
    status, info = http_get(node.url + "/server_info")
    assert status == 200
    assert info["mem_fraction_static"] == 0.92 and info["cuda_graph_max_bs_decode"] == 160
    assert info["cuda_graph_bs_decode"] == [1, 2, 4, 8] and info["tp_size"] == 2
    assert "SGLANG_HS_DUMP_DIR" not in node.environ(record["pid"])
    with open(os.path.join(node.state_dir, "runs.jsonl")) as f:
        history = [json.loads(line) for line in f]
    assert history[-1]["marker"] == record["marker"] and history[-1]["gpus_verified"] == 4


REFUSALS = {
    "bad flag": (["-e", json.dumps({"sglang_launch_server_args": {"tp_size": 2, "enable_cuda_graph": True}})],
                 "error: unrecognized arguments: --enable-cuda-graph"),
    "missing patch": ([], "does not carry the hidden-state dump patch"),
    "removed variable": (["-e", "sglang_stop_kill_timeout=5"],
                         "sglang_stop_kill_timeout was removed: the wait after SIGKILL is gpuops.host.gpu_clean's, set "
                         "gpu_clean_kill_timeout instead"),
    "existing run directory": (["-e", "sglang_launch_run_name=earlier-run"],
                               "/earlier-run already exists (a directory owned by UID 0, mode 0755); earlier dumps "
                               "are never overwritten or deleted, and no link is followed"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_bad_request_is_refused_before_the_server_is_touched(node, fleet, case, tmp_path):
    args, message = REFUSALS[case]
    pid = node.serving()
    earlier = os.path.join(node.dump_root, "earlier-run")
    os.makedirs(earlier, exist_ok=True)
    with open(os.path.join(earlier, "hs_0.pt"), "wb") as f:
        f.write(b"earlier dump")
    if case == "missing patch":
        unpatched = standin.install(str(tmp_path / "sglang-stock"), patched=False)
        args = ["-e", json.dumps({"sglang_launch_pythonpath": [unpatched]})]

    run = fleet.playbook("restart_extraction.yml", *args)

    assert run.rc != 0
    assert message in " ".join(run.output.split()), run.output
    assert_untouched(node, pid)
    with open(os.path.join(earlier, "hs_0.pt"), "rb") as f:
        assert f.read() == b"earlier dump"
    assert not os.path.exists(os.path.join(node.lock_path, "lock.json")), "the lock must be released after a failure"


def test_a_stop_with_a_removed_variable_is_refused_before_the_server_is_touched(node, fleet):
    pid = node.serving()

    run = fleet.playbook("stop_sglang.yml", "-e", "sglang_stop_kill_timeout=5")

    assert run.rc != 0
    assert "set gpu_clean_kill_timeout instead" in " ".join(run.output.split()), run.output
    assert_untouched(node, pid)
    assert not os.path.exists(os.path.join(node.lock_path, "lock.json")), "the lock must be released after a failure"


def test_full_disk_on_a_small_tmpfs_is_refused(node, fleet):
    """A dump root on a 16 MiB tmpfs mounted inside the node's own mount namespace."""
    pid = node.serving()
    small = os.path.join(node.workdir, "small-dumps")
    os.makedirs(small, exist_ok=True)
    node.sandbox.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0755", "tmpfs", small], check=True)
    try:
        run = fleet.playbook("restart_extraction.yml", "-e", json.dumps(
            {"sglang_launch_dump_root": small, "sglang_launch_dump_min_free_gb": 1}))
    finally:
        node.sandbox.run(["umount", small])

    assert run.rc != 0
    assert "has 0.0 GB free, less than the 1 GB" in " ".join(run.output.split()), run.output
    assert_untouched(node, pid)


def test_drain_refuses_while_requests_run_unless_forced(node, fleet):
    pid = node.serving()
    request = Request(node.url, max_new_tokens=4000)  # about 20 s of decoding
    request.start()
    time.sleep(0.5)

    refused = fleet.playbook("stop_sglang.yml", "-e", "sglang_stop_drain_timeout=2")

    assert refused.rc != 0
    text = " ".join(refused.output.split())
    assert "1 request(s) still in flight on the SGLang server %d" % pid in text, refused.output
    assert "after waiting 2 s" in text and "the server is left running" in text
    assert_untouched(node, pid)
    request.join(120)
    assert request.result[0] == 200 and request.result[1]["meta_info"]["completion_tokens"] == 4000

    cut = Request(node.url, max_new_tokens=6000)
    cut.start()
    time.sleep(0.5)

    forced = fleet.playbook("stop_sglang.yml", "-e", "sglang_stop_drain_timeout=1", "-e", "sglang_stop_force=true")

    assert forced.rc == 0, forced.output
    text = " ".join(forced.output.split())
    assert "1 request(s) still in flight on the SGLang server %d" % pid in text and "force is set" in text, forced.output
    cut.join(30)
    assert cut.result[0] != 200, cut.result
    assert node.main_pids() == [] and node.used_mib() == [0, 0, 0, 0]


def test_a_restart_that_rotates_the_api_key_drains_the_old_server_with_its_own(node, fleet):
    """Without --enable-metrics the drain reads /v1/loads, which needs the key: the old server's own (from its
    --config file), not the new configuration's."""
    node.serving()
    old_key, new_key = "sk-old-" + os.urandom(6).hex(), "sk-new-" + os.urandom(6).hex()
    first = fleet.playbook("restart_serving.yml", "-e", json.dumps(
        {"sglang_launch_server_args": {"tp_size": 2, "api_key": old_key}}))
    assert first.rc == 0, first.output
    old = node.record()
    request = Request(node.url, max_new_tokens=1500, api_key=old_key)    # about 8 s of decoding
    request.start()
    time.sleep(0.5)

    run = fleet.playbook("restart_serving.yml", "-e", json.dumps(
        {"sglang_launch_server_args": {"tp_size": 2, "api_key": new_key}}))

    request.join(60)
    assert run.rc == 0, run.output
    assert request.result[0] == 200, request.result
    record = node.record()
    assert node.main_pids() == [record["pid"]] != [old["pid"]]
    assert http_get(node.url + "/v1/models", api_key=new_key)[0] == 200
    assert http_get(node.url + "/v1/models", api_key=old_key)[0] == 401
    assert old_key not in run.output and new_key not in run.output
    # the next tests send their requests without a key
    stop = fleet.playbook("stop_sglang.yml")
    assert stop.rc == 0, stop.output


def test_a_run_name_whose_attempt_ended_at_the_drain_can_be_tried_again(node, fleet):
    pid = node.serving()
    request = Request(node.url, max_new_tokens=40000)  # about 200 s of decoding: longer than the preflight
    request.start()
    time.sleep(0.5)
    named = ("-e", "sglang_launch_run_name=retry-run")

    refused = fleet.playbook("restart_extraction.yml", *named, "-e", "sglang_stop_drain_timeout=2")

    assert refused.rc != 0
    assert "1 request(s) still in flight on the SGLang server %d" % pid in " ".join(refused.output.split()), \
        refused.output
    assert_untouched(node, pid)
    run_dir = os.path.join(node.dump_root, "retry-run")
    assert not os.path.lexists(run_dir), "made before the stop, empty, and removed again"

    again = fleet.playbook("restart_extraction.yml", *named, "-e", "sglang_stop_drain_timeout=1",
                           "-e", "sglang_stop_force=true")

    assert again.rc == 0, again.output
    request.join(60)
    record = node.record()
    assert record["dump_dir"] == run_dir and node.main_pids() == [record["pid"]] != [pid]
    assert any(name.endswith(".pt") for name in os.listdir(run_dir))


def test_crash_during_load_fails_fast_with_the_log_tail(node, fleet):
    node.serving()
    env = dict(node.server_env, GPUSIM_SGLANG_FAULTS="crash_on_load")
    start = time.monotonic()

    run = fleet.playbook("restart_serving.yml", "-e", json.dumps({"sglang_launch_environment": env,
                                                                  "sglang_launch_ready_timeout": 600}))

    assert run.rc != 0
    assert time.monotonic() - start < 300
    text = " ".join(run.output.split())
    assert "exited while loading" in text and "CUDA error: out of memory" in text, run.output
    assert "node1  FAILED  serving  serving-" in run.output
    assert node.main_pids() == []


def test_a_request_that_no_playbook_makes_is_refused_before_any_host_is_touched(node, fleet):
    pid = node.serving()

    run = fleet.playbook("fleet_run.yml", "-e", "gpuops_action=reboot")

    assert run.rc != 0
    assert ("Run one of the playbooks restart_extraction, restart_tuning, restart_serving, stop_sglang or verify_gpus: "
            "gpuops_action must be one of restart, stop, verify (got 'reboot')") in " ".join(run.output.split()), run.output
    assert "TASK [Take the host lock]" not in run.output
    assert_untouched(node, pid)
    assert not os.path.exists(os.path.join(node.lock_path, "lock.json"))


def test_lock_held_by_another_run_is_refused_and_a_stale_one_taken_over(node, fleet):
    pid = node.serving()
    lock = os.path.join(node.lock_path, "lock.json")
    owner = {"run": "20260101T000000Z-42", "playbook": "Restart SGLang in tuning mode", "user": "alice",
             "controller": "bastion", "taken": time.time()}
    os.makedirs(node.lock_path, mode=0o700, exist_ok=True)
    with open(lock, "w") as f:
        json.dump(owner, f)

    run = fleet.playbook("restart_extraction.yml")

    assert run.rc != 0
    text = " ".join(run.output.split())
    assert ("Another gpuops run holds the lock %s on this host: run 20260101T000000Z-42 (Restart SGLang in tuning "
            "mode) by alice, from bastion, taken " % lock) in text, run.output
    assert os.path.exists(lock), "another run's lock must stay"
    assert "node1  FAILED  extraction  -" in run.output
    assert_untouched(node, pid)

    # The stop takes the lock in its own call: refused there, before anything is drained or signalled.
    refused = fleet.playbook("stop_sglang.yml")

    assert refused.rc != 0
    text = " ".join(refused.output.split())
    assert ("Another gpuops run holds the lock %s on this host: run 20260101T000000Z-42 (Restart SGLang in tuning "
            "mode) by alice, from bastion, taken " % lock) in text, refused.output
    assert "Nothing was drained or signalled." in text
    assert "node1  FAILED  stop" in refused.output
    assert_untouched(node, pid)
    with open(lock) as f:
        assert json.load(f) == owner

    with open(lock, "w") as f:
        json.dump(dict(owner, taken=time.time() - 7200), f)  # the age is the host's clock minus this
    stop = fleet.playbook("stop_sglang.yml", "-e", "gpuops_lock_max_age=3600")

    assert stop.rc == 0, stop.output
    assert not os.path.exists(lock)
    assert node.main_pids() == [] and node.used_mib() == [0, 0, 0, 0]

    verify = fleet.playbook("verify_gpus.yml")

    assert verify.rc == 0, verify.output
    assert "node1  ok      verify" in verify.output


def test_limit_leaves_other_hosts_alone(tmp_path):
    with SimNode(str(tmp_path / "node1"), gpus=2) as one, SimNode(str(tmp_path / "node2"), gpus=2) as two:
        first, second = one.serving(), two.serving()
        fleet = Fleet(str(tmp_path), [one, two])

        run = fleet.playbook("restart_serving.yml", "-l", "node2")

        assert run.rc == 0, run.output
        assert set(run.recap()) == {"node2"}
        assert_untouched(one, first)
        assert two.main_pids() == [two.record()["pid"]] != [second]
        assert not os.path.exists(one.state_dir)

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A restart converges a node: a rerun that changes nothing leaves the server and its registration in the real
SGLang Model Gateway alone; what makes a running server stale (SGLang upgraded in place, a new weight file) restarts
it, with the reason in the summary; gpuops_force_restart bounces an unchanged server; and --check --diff shows the
running and the desired command line, secrets left out, without touching the node."""

from __future__ import annotations

import os
import re

import pytest

from gpusim import gateway as gpusim_gateway
from gpusim.fleet import Fleet, SimNode

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")]

SECRET = "hf_converge_secret_4d1f"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    # A secret in the server's environment: no diff, summary or record may show it. Its sysfs shows no GPU on the PCI
    # bus, as in some containers: every read of the GPUs needs gpu_clean_expected_count to check their count.
    with SimNode(str(tmp_path_factory.mktemp("converge") / "node1"), gpus=4, pci_gpus=0,
                 server_env={"HF_TOKEN": SECRET}) as n:
        yield n


@pytest.fixture(scope="module")
def fleet(node):
    return Fleet(os.path.dirname(node.workdir), [node])


def lines_after(run, marker):
    text = run.output
    return text[text.index(marker):] if marker in text else ""


def restarted(run, host="node1"):
    """The summary's reasons line of HOST, or None."""
    found = re.search(r"%s (restarted|would restart|restart failed): ([^\"\n]*)" % host, run.output)
    return found.group(2) if found else None


def test_check_diff_shows_the_running_and_the_desired_command_line_and_touches_nothing(node, fleet):
    # no server of the record runs yet: the whole configuration is new
    fresh = fleet.playbook("restart_serving.yml", "--check", "--diff")
    assert fresh.rc == 0, fresh.output
    diff = lines_after(fresh, "sglang_launch : Converge SGLang on this host to mode serving")
    assert "--- before: %s/server.json (not running)" % node.state_dir in diff, diff[:3000]
    assert "+mode: serving" in diff and "-mode:" not in diff, diff[:3000]

    first = fleet.playbook("restart_serving.yml")
    assert first.rc == 0, first.output
    record = node.record()
    pids = node.main_pids()

    run = fleet.playbook("restart_tuning.yml", "--check", "--diff")

    assert run.rc == 0, run.output
    assert node.main_pids() == pids and node.record() == record and node.healthy()
    diff = lines_after(run, "sglang_launch : Converge SGLang on this host to mode tuning")
    assert "--- before: %s/server.json (running)" % node.state_dir in diff, diff[:3000]
    assert "+++ after: desired" in diff
    assert "-mode: serving" in diff and "+mode: tuning" in diff
    assert "+  --mem-fraction-static 0.92" in diff and "+  --cuda-graph-max-bs-decode 160" in diff
    assert restarted(run) == ("mode: serving -> tuning; command line: --cuda-graph-max-bs-decode added (160), "
                              "--mem-fraction-static added (0.92)"), run.output
    assert "node1 would restart:" in run.output
    assert SECRET not in run.output


def test_a_rerun_with_nothing_changed_keeps_the_gateway_s_worker_and_changes_nothing(node, tmp_path):
    if not gpusim_gateway.installed():
        pytest.skip("make gateway installs the real gateway")
    gw = gpusim_gateway.Gateway(node.sandbox, worker_urls=[node.url], args=["--disable-retries"])
    try:
        gw.start().wait_up(healthy=1)
        fleet = Fleet(str(tmp_path), [node], sglang_gateway_urls=[gw.url], sglang_gateway_interval=0.1,
                      sglang_gateway_worker_url="http://127.0.0.1:{{ sglang_launch_port }}")
        # serving, as the first test left it; the rerun is the same configuration
        before = gw.workers()
        record = node.record()

        run = fleet.playbook("restart_serving.yml")

        assert run.rc == 0, run.output
        assert run.recap()["node1"]["changed"] == 0, run.output
        assert gw.workers() and [w["id"] for w in gw.workers()] == [w["id"] for w in before], (before, gw.workers())
        assert node.record() == record and node.main_pids() == [record["pid"]]
        summary = lines_after(run, "summary of the run")
        assert "unchanged" in summary and "untouched" in summary and restarted(run) is None, summary
    finally:
        gw.stop()


def test_force_restart_bounces_an_unchanged_server(node, fleet):
    record = node.record()

    # gpu_clean's expected GPU count reaches every read of the GPUs, the launch's post-check's too: where it is set,
    # nothing warns that the count could not be checked against the PCI bus.
    run = fleet.playbook("restart_serving.yml", "-e", "gpuops_force_restart=true", "-e", "gpu_clean_expected_count=4")

    assert run.rc == 0, run.output
    assert "sysfs shows no NVIDIA GPU" not in run.output, run.output
    assert node.record()["pid"] != record["pid"] and node.main_pids() == [node.record()["pid"]]
    assert restarted(run) == "a restart was asked for (restart)", run.output


def test_a_new_weight_file_restarts_the_server_and_says_so(node, fleet):
    record = node.record()
    with open(os.path.join(node.model, "model-00005-of-00005.safetensors"), "wb") as f:
        f.write(b"\0" * 4096)

    run = fleet.playbook("restart_serving.yml")

    assert run.rc == 0, run.output
    assert node.record()["pid"] != record["pid"]
    assert restarted(run) == "model files: model-00005-of-00005.safetensors added", run.output
    again = fleet.playbook("restart_serving.yml")
    assert again.rc == 0 and again.recap()["node1"]["changed"] == 0, again.output


def test_sglang_upgraded_in_place_restarts_the_server_and_says_so(node, fleet):
    # The installed SGLang's files change under the same interpreter, as `pip install -U sglang` changes them: the
    # stand-in's copy plays the release its contract module names (sglang/srt/contract.py DEFAULT_RELEASE).
    contract = os.path.join(node.sglang, "sglang", "srt", "contract.py")
    with open(contract) as f:
        text = f.read()
    assert 'DEFAULT_RELEASE = "0.5.23"' in text
    with open(contract, "w") as f:
        f.write(text.replace('DEFAULT_RELEASE = "0.5.23"', 'DEFAULT_RELEASE = "0.5.14"'))
    try:
        downgraded = fleet.playbook("restart_serving.yml")
        assert downgraded.rc == 0, downgraded.output
        assert restarted(downgraded) == "SGLang release: 0.5.23 -> 0.5.14", downgraded.output
        record = node.record()
    finally:
        with open(contract, "w") as f:
            f.write(text)

    run = fleet.playbook("restart_serving.yml")

    assert run.rc == 0, run.output
    assert node.record()["pid"] != record["pid"] and node.record()["identity"]["sglang"] == "0.5.23"
    assert restarted(run) == "SGLang release: 0.5.14 -> 0.5.23", run.output

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""An extraction run that a driver feeds, as a team's script feeds a training set: one request after another, with
pauses longer than the drain's poll, so that the drain reads zero requests between two of them. A restart of the
node in the middle of it is refused with the run named; an explicit variable cuts it; a run that went quiet is
stopped as any server. Real ansible-playbook runs against a simulated node in extraction mode."""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request

import pytest

from gpusim import standin

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")]


class Driver(threading.Thread):
    """Sends /generate with its own request ids, one after the other, PAUSE seconds apart, until stopped."""

    def __init__(self, url: str, pause: float = 1.5):
        super().__init__(daemon=True)
        self.url, self.pause = url, pause
        self.results = []       # (rid, status or None, error)
        self.done = threading.Event()

    def run(self):
        n = 0
        while not self.done.is_set():
            rid = "driver-%d-%d" % (os.getpid(), n)
            body = {"rid": rid, "text": "Record %d of the training set." % n, "sampling_params": {"max_new_tokens": 4}}
            req = urllib.request.Request(self.url + "/generate", json.dumps(body).encode(),
                                         {"content-type": "application/json"})
            try:
                with standin.OPENER.open(req, timeout=60) as res:
                    self.results.append((rid, res.status, None))
            except urllib.error.HTTPError as e:
                self.results.append((rid, e.code, e.reason))
            except OSError as e:
                self.results.append((rid, None, str(e)))
            n += 1
            self.done.wait(self.pause)

    def stop(self) -> list:
        self.done.set()
        self.join(120)
        return self.results


@pytest.fixture
def extracting(node, fleet):
    """The node in extraction mode, started by the collection (so its record names the run and its dump directory)."""
    node.serving()
    run = fleet.playbook("restart_extraction.yml")
    assert run.rc == 0, run.output
    return node.record()


def test_a_restart_in_the_middle_of_an_extraction_run_is_refused_naming_the_run_and_loses_no_request(
        node, fleet, extracting):
    driver = Driver(node.url)
    driver.start()
    try:
        time.sleep(4)       # a few records dumped; the drain would read zero between two of them
        run = fleet.playbook("restart_serving.yml", "-e", "sglang_stop_active_window=30")
        time.sleep(2)
    finally:
        results = driver.stop()

    assert run.rc != 0
    words = run.words()
    assert ("the SGLang server %d is in an active extraction run (%s): its dump directory %s holds"
            % (extracting["pid"], extracting["marker"], extracting["dump_dir"])) in words, run.output
    assert ("within the 30 s window of an active run. Nothing was drained or signalled" in words
            and "set cut_active_run (sglang_stop_cut_active_run) to stop it anyway" in words), run.output
    # the run goes on: the same server, every request of the driver answered and dumped
    assert node.record()["pid"] == extracting["pid"] and node.main_pids() == [extracting["pid"]]
    assert len(results) >= 4 and all(status == 200 for dummy, status, dummy in results), results
    dumped = set(os.listdir(extracting["dump_dir"]))
    assert all("hs_%s.pt" % rid in dumped for rid, dummy, dummy in results), (results, sorted(dumped))


def test_the_explicit_variable_cuts_the_run_and_says_so(node, fleet, extracting):
    driver = Driver(node.url)
    driver.start()
    try:
        time.sleep(3)
        run = fleet.playbook("restart_serving.yml", "-e", "sglang_stop_cut_active_run=true")
    finally:
        driver.stop()

    assert run.rc == 0, run.output
    assert ("Cut the active extraction run %s of the SGLang server %d (sglang_stop_cut_active_run): %s holds"
            % (extracting["marker"], extracting["pid"], extracting["dump_dir"])) in run.words(), run.output
    assert node.record()["mode"] == "serving" and node.healthy()


def test_a_run_that_went_quiet_is_stopped_as_any_server(node, fleet, extracting):
    time.sleep(4)           # the window below has passed since the probe's dump, which does not count anyway

    run = fleet.playbook("restart_serving.yml", "-e", "sglang_stop_active_window=3")

    assert run.rc == 0, run.output
    assert "active extraction run" not in run.words()
    assert node.record()["mode"] == "serving" and node.main_pids() != [extracting["pid"]]

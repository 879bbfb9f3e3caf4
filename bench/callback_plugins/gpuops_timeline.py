# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Ansible callback for make bench: one JSON line per task start and per host result, with the
controller's monotonic clock, into the file named by GPUOPS_TIMELINE_FILE."""

from __future__ import annotations

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: gpuops_timeline
type: aggregate
short_description: task and result times for make bench
description:
  - Writes one JSON line per task start and per host result (items of loops included) to the file named by the
    environment variable GPUOPS_TIMELINE_FILE, with the controller's monotonic clock.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpuops_timeline"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        path = os.environ.get("GPUOPS_TIMELINE_FILE")
        self._out = open(path, "a", buffering=1) if path else None  # pylint: disable=consider-using-with

    def _write(self, event, task, host=None, **extra):
        if self._out is None:
            return
        record = {"t": time.monotonic(), "ev": event, "task": task.get_name(), "action": task.action,
                  "host": host, "delegate_to": task.delegate_to, "loop": bool(task.loop)}
        record.update(extra)
        self._out.write(json.dumps(record) + "\n")

    def v2_runner_on_start(self, host, task):
        self._write("start", task, host.get_name())

    def _result(self, event, result, item=False):
        self._write(event, result._task, result._host.get_name(), item=item,  # pylint: disable=protected-access
                    changed=bool(result._result.get("changed")))  # pylint: disable=protected-access

    def v2_runner_on_ok(self, result):
        self._result("ok", result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._result("failed", result)

    def v2_runner_on_skipped(self, result):
        self._result("skipped", result)

    def v2_runner_on_unreachable(self, result):
        self._result("unreachable", result)

    def v2_runner_item_on_ok(self, result):
        self._result("ok", result, item=True)

    def v2_runner_item_on_failed(self, result):
        self._result("failed", result, item=True)

    def v2_runner_item_on_skipped(self, result):
        self._result("skipped", result, item=True)

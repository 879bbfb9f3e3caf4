# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A shared GPU node, where other local users read the system log and run their own processes: the secrets of a
restart reach no log, the API key goes to no process but the server's own, and a port taken by another user fails
the launch. Real ansible-playbook runs against a simulated node; the system log is a real receiver at the node's
/dev/log (gpusim.syslog)."""

from __future__ import annotations

import json
import os
import secrets

import pytest

from gpusim.syslog import SyslogReceiver

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")]


def vars_file(path, values: dict) -> str:
    fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(values, f)
    return "@" + str(path)


# -- no secret in any log --

@pytest.mark.parametrize("mode", ["extraction", "tuning", "serving"])
def test_no_secret_reaches_the_system_log_or_the_output_at_vvv(node, fleet, tmp_path, mode):
    node.serving()
    token, api_key = "hf_" + secrets.token_hex(12), "sk-" + secrets.token_hex(12)
    # a variable not named like a secret (every value of sglang_launch_environment is one), and an argument made
    # secret by sglang_launch_secret_args
    private, listed = "private-" + secrets.token_hex(8), "model-" + secrets.token_hex(8)
    needles = [token, api_key, private, listed]
    extra = vars_file(tmp_path / "secrets.json", {
        "sglang_launch_environment": dict(node.server_env, HF_TOKEN=token, TEAM_SETTING=private),
        "sglang_launch_server_args": {"tp_size": 2, "enable_metrics": True, "api_key": api_key,
                                      "served_model_name": listed},
        "sglang_launch_secret_args": ["served_model_name"]})

    with SyslogReceiver(node.sandbox, tmp_path / "syslog") as syslog:
        run = fleet.playbook("restart_%s.yml" % mode, "-vvv", "-e", extra)
        logged = syslog.lines()

    assert run.rc == 0, run.output[-5000:]
    assert node.record()["mode"] == mode
    invocations = [line for line in logged if "ansible-gpuops.host.sglang_server" in line]
    # the receiver hears the module: render, check_args and ready log their invocation at least
    assert len(invocations) >= 3, logged[:5]
    for needle in needles:
        assert needle not in "\n".join(logged), [line for line in logged if needle in line][:2]
        assert needle not in run.output, needle
    assert any("secret_server_args=NOT_LOGGING_PARAMETER" in line for line in invocations)

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How the parser check runs SGLang's interpreter: on the host, or in a throwaway container of the server's image
whose shell reads the environment from a 0600 file (the engine itself is not run here: tests/integration/
test_containers.py runs the check in a real Docker daemon)."""

from __future__ import annotations

import os
import stat
import subprocess

from ansible_collections.gpuops.host.plugins.module_utils import _sglang
from ansible_collections.gpuops.host.plugins.module_utils._sglang import Deps

SECRET = "hf_" + "s3cr3t'value with spaces"


class Recorder:
    """deps.run that records each argv, the environment it was given, and the files the argv names, as they are
    while the command would run."""

    def __init__(self, tmpdir):
        self.tmpdir, self.calls = str(tmpdir), []

    def __call__(self, argv, env):
        files = {}
        for a in argv:
            if a.startswith(self.tmpdir + os.sep) and os.path.isfile(a):
                with open(a) as f:
                    files[a] = (stat.S_IMODE(os.stat(a).st_mode), f.read())
        self.calls.append((list(argv), env, files))
        return 0, '{"release": "0.5.23"}\n', ''


def params(**extra):
    return dict({"python": "/opt/sglang/bin/python", "pythonpath": ["/opt/patch"],
                 "environment": {"CUDA_VISIBLE_DEVICES": "0,1", "HF_TOKEN": SECRET}}, **extra)


def test_on_the_host_the_interpreter_gets_the_environment_directly(tmp_path):
    run = Recorder(tmp_path)

    _sglang._run_python(params(), Deps(None, run, tmpdir=str(tmp_path)), ["-c", "pass"])

    ((argv, env, dummy),) = run.calls
    assert argv == ["/opt/sglang/bin/python", "-c", "pass"]
    assert env == {"CUDA_VISIBLE_DEVICES": "0,1", "HF_TOKEN": SECRET, "PYTHONPATH": "/opt/patch"}


def test_in_a_container_no_value_of_the_environment_is_on_the_engine_s_command_line(tmp_path):
    run = Recorder(tmp_path)
    container = {"engine": "podman", "image": "lmsysorg/sglang:v0.5.23", "options": ["--volume=/models:/models:ro"]}

    _sglang._run_python(params(container=container), Deps(None, run, tmpdir=str(tmp_path)), ["-c", "pass"])

    ((argv, env, files),) = run.calls
    env_file = argv[argv.index("-c") + 2]
    assert argv == ["podman", "run", "--rm", "--network", "none", "--volume", "%s:%s:ro" % (tmp_path, tmp_path),
                    "--volume=/models:/models:ro", "--entrypoint", "/bin/sh", "lmsysorg/sglang:v0.5.23",
                    "-c", 'set -a; . "$0"; set +a; exec "$@"', env_file, "/opt/sglang/bin/python", "-c", "pass"]
    assert env is None and "--env-file" not in argv and not any(SECRET in a for a in argv)
    assert os.path.dirname(env_file) == str(tmp_path) and files[env_file][0] == 0o600
    assert not os.path.exists(env_file), "the environment file outlives the check"
    # what the container's shell makes of the file: every value as it was
    script = 'set -a; . "$0"; set +a; exec "$@"'
    with open(tmp_path / "env", "w") as f:
        f.write(files[env_file][1])
    out = subprocess.run(["/bin/sh", "-c", script, str(tmp_path / "env"), "/usr/bin/env"], capture_output=True,
                         text=True, env={}, check=True).stdout.splitlines()
    assert {"CUDA_VISIBLE_DEVICES=0,1", "HF_TOKEN=" + SECRET, "PYTHONPATH=/opt/patch"} <= set(out)

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

import pytest

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


def test_on_the_host_the_interpreter_runs_isolated_with_the_environment_and_the_path_first(tmp_path):
    run = Recorder(tmp_path)

    _sglang._run_python(params(), Deps(None, run, tmpdir=str(tmp_path)), "pass", [])

    ((argv, env, dummy),) = run.calls
    assert argv == ["/opt/sglang/bin/python", "-I", "-c", "import sys\nsys.path[0:0] = ['/opt/patch']\npass"]
    assert env == {"CUDA_VISIBLE_DEVICES": "0,1", "HF_TOKEN": SECRET}


def test_the_server_s_user_runs_it_through_setpriv_by_absolute_path(tmp_path):
    run = Recorder(tmp_path)

    _sglang._run_python(params(run_as={"uid": 1234, "gid": 1235}), Deps(None, run, tmpdir=str(tmp_path)), "pass", ["x"])

    ((argv, dummy, dummy),) = run.calls
    assert argv[:5] == ["/usr/bin/setpriv", "--reuid=1234", "--regid=1235", "--init-groups", "--"]
    assert argv[5:7] == ["/opt/sglang/bin/python", "-I"] and argv[-1] == "x"


def real_run(argv, env):
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.skipif(not os.path.exists("/usr/bin/python3"), reason="needs the system's Python")
def test_no_pth_file_of_the_user_s_home_runs(tmp_path):
    """A system Python started with a user's HOME runs that user's ~/.local/.../site-packages/*.pth: under -I it
    does not (real interpreter, real HOME)."""
    home = tmp_path / "home"
    proof = tmp_path / "ran"
    out = subprocess.run(["/usr/bin/python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    site = home / ".local" / "lib" / ("python" + out) / "site-packages"
    site.mkdir(parents=True)
    (site / "evil.pth").write_text("import os; open(%r, 'w').close()\n" % str(proof))
    p = {"python": "/usr/bin/python3", "environment": {"HOME": str(home)}}
    # the trap is real: without -I, this Python runs it
    subprocess.run(["/usr/bin/python3", "-c", "pass"], env={"HOME": str(home)}, check=True)
    assert proof.exists()
    proof.unlink()

    rc, dummy, dummy = _sglang._run_python(p, Deps(None, real_run, tmpdir=str(tmp_path)), "pass", [])

    assert rc == 0 and not proof.exists()


def test_an_interpreter_that_another_user_can_change_is_refused_before_it_runs(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (venv / "bin" / "python").symlink_to("/usr/bin/python3")
    os.chmod(str(venv / "bin"), 0o777)      # anyone can put another python there
    run = Recorder(tmp_path / "none")

    with pytest.raises(_sglang.ActionFailed) as e:
        _sglang._run_python({"python": str(venv / "bin" / "python")}, Deps(None, run, tmpdir=str(tmp_path)), "pass", [])

    assert e.value.msg == ("refusing to run %s: %s is writable by every user (mode 0777), which a user other than root "
                           "can change; nothing was run" % (venv / "bin" / "python", venv / "bin"))
    assert run.calls == []
    os.chmod(str(venv / "bin"), 0o755)
    os.chown(str(venv), 4242, 4242)         # the server's user's venv: its code runs as that user
    with pytest.raises(_sglang.ActionFailed):
        _sglang._run_python({"python": str(venv / "bin" / "python")}, Deps(None, run, tmpdir=str(tmp_path)), "pass", [])
    _sglang._run_python({"python": str(venv / "bin" / "python"), "run_as": {"uid": 4242, "gid": 4242}},
                        Deps(None, run, tmpdir=str(tmp_path)), "pass", [])
    assert len(run.calls) == 1


def test_in_a_container_no_value_of_the_environment_is_on_the_engine_s_command_line(tmp_path):
    run = Recorder(tmp_path)
    container = {"engine": "podman", "image": "lmsysorg/sglang:v0.5.23", "options": ["--volume=/models:/models:ro"]}

    _sglang._run_python(params(container=container), Deps(None, run, tmpdir=str(tmp_path)), "pass", [])

    ((argv, env, files),) = run.calls
    env_file = argv[argv.index("-c") + 2]
    assert argv == ["podman", "run", "--rm", "--network", "none", "--log-driver", "none",
                    "--volume", "%s:%s:ro" % (tmp_path, tmp_path),
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

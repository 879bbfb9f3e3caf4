# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The server's environment file, as systemd and a POSIX shell read it: every value comes back as written."""

from __future__ import annotations

import subprocess

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.host.plugins.filter.env_lines import env_lines
from ansible_collections.gpuops.host.plugins.module_utils._server_config import env_lines as lines_of

NASTY = {'b_QUOTES': 'it\'s "quoted"', 'A_DOLLAR': '$HOME and `id` and $(id)', 'c_BACKSLASH': 'a\\b\\\\c',
         'PATH': '/opt/venv/bin:/usr/bin', 'N': 42, 'EMPTY': ''}


def test_systemd_lines_escape_what_environmentfile_reads_as_special():
    assert lines_of(NASTY, 'systemd') == [
        'A_DOLLAR="\\$HOME and \\`id\\` and \\$(id)"',
        'b_QUOTES="it\'s \\"quoted\\""',
        'c_BACKSLASH="a\\\\b\\\\\\\\c"',
        'EMPTY=""',
        'N="42"',
        'PATH="/opt/venv/bin:/usr/bin"',
    ]


def test_shell_lines_give_back_every_value_as_written(tmp_path):
    env_file = tmp_path / 'server.env'
    env_file.write_text('\n'.join(lines_of(NASTY, 'shell')) + '\n')
    names = sorted(NASTY)
    script = 'set -a; . "$1"; set +a; ' + '; '.join('printf "%%s\\0" "$%s"' % n for n in names)
    out = subprocess.run(['/bin/sh', '-c', script, 'sh', str(env_file)], capture_output=True, check=True,
                         env={'PATH': '/usr/bin:/bin'}).stdout
    assert out.split(b'\0')[:-1] == [str(NASTY[n]).encode() for n in names]


def test_the_filter_refuses_what_it_cannot_write():
    assert env_lines({'A': 'x'}, 'shell') == ['A=x']
    with pytest.raises(AnsibleFilterError, match='systemd or shell'):
        env_lines({'A': 'x'}, 'toml')
    with pytest.raises(AnsibleFilterError, match='dict'):
        env_lines(['A=x'], 'shell')

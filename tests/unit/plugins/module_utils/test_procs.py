# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from ansible_collections.gpuops.host.plugins.module_utils import _procs
from ansible_collections.gpuops.host.plugins.module_utils._procs import Proc, ProcFS


def stat_line(pid, comm, state='S', ppid=1, pgid=None, sid=None, flags=4194560, start=12345):
    fields = [state, ppid, pgid or pid, sid or pid, 0, -1, flags] + [0] * 12 + [start] + [0] * 30
    return '%d (%s) %s\n' % (pid, comm, ' '.join(str(f) for f in fields))


def fake_proc(root, pid, comm, cmdline=b'', environ=b'', fds=(), exe=None, **stat):
    d = root / str(pid)
    (d / 'fd').mkdir(parents=True)
    (d / 'stat').write_text(stat_line(pid, comm, **stat))
    (d / 'cmdline').write_bytes(cmdline)
    (d / 'environ').write_bytes(environ)
    for i, target in enumerate(fds):
        os.symlink(target, str(d / 'fd' / str(i)))
    if exe:
        os.symlink(exe, str(d / 'exe'))


@pytest.mark.parametrize('comm', ['python3', 'a) b (c', 'sglang::schedul', ''])
def test_parse_stat_handles_any_comm(comm):
    s = _procs.parse_stat(stat_line(42, comm, state='D', ppid=7, pgid=40, sid=30, start=999).encode())
    assert s == {'pid': 42, 'comm': comm, 'state': 'D', 'ppid': 7, 'pgid': 40, 'sid': 30, 'flags': 4194560,
                 'start': 999}


@pytest.mark.parametrize('raw, expected', [
    (b'python3\0-m\0sglang.launch_server\0--name\0\0x\0', ['python3', '-m', 'sglang.launch_server', '--name', '', 'x']),
    (b'sglang::scheduler_TP3\0\0\0\0\0', ['sglang::scheduler_TP3']),
    (b'sglang::scheduler_TP3   ', ['sglang::scheduler_TP3']),
    (b'', []),
    (b'caf\xe9\0', ['caf\ufffd']),
])
def test_parse_cmdline(raw, expected):
    assert _procs.parse_cmdline(raw) == expected


def test_parse_environ_skips_overwritten_entries():
    raw = b'GPUOPS_RUN=extract-42\0SPT_NOENV=1\0sglang::scheduler_TP0\0EMPTY=\0A=b=c\0'
    assert _procs.parse_environ(raw) == {'GPUOPS_RUN': 'extract-42', 'SPT_NOENV': '1', 'EMPTY': '', 'A': 'b=c'}


def test_procfs_reads_a_fake_tree(tmp_path):
    fake_proc(tmp_path, 1, 'systemd', b'/sbin/init\0', exe='/usr/lib/systemd/systemd')
    fake_proc(tmp_path, 2, 'kthreadd', ppid=0, flags=0x00208040)
    fake_proc(tmp_path, 100, 'python3', b'python3\0-m\0sglang.launch_server\0', b'RUN=a\0', exe='/usr/bin/python3.11')
    fake_proc(tmp_path, 101, 'sglang::schedul', b'sglang::scheduler_TP0\0\0\0', ppid=100,
              fds=['/dev/nvidia0', '/dev/nvidiactl', 'socket:[1234]'], exe='/usr/bin/python3.11 (deleted)')
    fake_proc(tmp_path, 102, 'sglang::schedul', state='Z', ppid=100)
    (tmp_path / 'self').mkdir()
    fs = ProcFS(str(tmp_path))
    table = fs.snapshot()
    assert sorted(table) == [1, 2, 100, 101, 102]
    assert table[2].kernel_thread and not table[1].kernel_thread
    assert table[101].name == 'sglang::scheduler_TP0'
    assert table[101].command == 'sglang::scheduler_TP0'
    assert table[101].exe == '/usr/bin/python3.11'
    assert table[102].zombie and table[102].command == '[sglang::schedul]'
    assert table[100].names() == {'python3', 'python3.11', '/usr/bin/python3.11'}
    assert fs.environ(100) == {'RUN': 'a'}
    assert sorted(fs.open_files(101)) == ['/dev/nvidia0', '/dev/nvidiactl', 'socket:[1234]']
    assert fs.open_files(999) == [] and fs.environ(999) is None and fs.read(999) is None
    assert fs.ancestry(101) == [101, 100, 1]
    assert fs.alive(table[100]) and not fs.alive(table[102])


def test_current_refuses_a_reused_pid(tmp_path):
    fake_proc(tmp_path, 100, 'python3', start=500)
    fs = ProcFS(str(tmp_path))
    old = Proc(100, 1, 'S', 'python3', 499)
    assert fs.current(old) is None and not fs.alive(old)
    assert fs.send_signal(old, 0) is False


@pytest.fixture
def child():
    proc = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_real_proc_reads_this_process():
    fs = ProcFS()
    me = fs.read(os.getpid())
    assert me.pid == os.getpid() and me.ppid == os.getppid()
    assert fs.ancestry(os.getpid())[:2] == [os.getpid(), os.getppid()]
    assert fs.environ(os.getpid()).get('PATH') == os.environ.get('PATH')
    assert os.getpid() in fs.snapshot()


def test_send_signal_reaches_the_same_process_only(child):
    fs = ProcFS()
    proc = fs.read(child.pid)
    assert proc.cmdline[1:] == ['-c', 'import time; time.sleep(60)']
    stale = Proc(proc.pid, proc.ppid, 'S', proc.comm, proc.start - 1)
    assert fs.send_signal(stale, signal.SIGTERM) is False
    assert child.poll() is None
    assert fs.send_signal(proc, signal.SIGTERM) is True
    assert child.wait(10) == -signal.SIGTERM
    assert fs.send_signal(proc, signal.SIGTERM) is False


def test_a_zombie_is_not_alive(child):
    fs = ProcFS()
    proc = fs.read(child.pid)
    os.kill(child.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while fs.stat(child.pid).state != 'Z' and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fs.stat(child.pid).zombie
    assert not fs.alive(proc)
    assert fs.send_signal(proc, signal.SIGKILL) is False


def test_session_and_group_leaders(tmp_path):
    fake_proc(tmp_path, 40, 'python3', pgid=40, sid=40)
    fake_proc(tmp_path, 41, 'sglang::schedul', ppid=40, pgid=40, sid=40)
    procs = ProcFS(str(tmp_path))
    leader, child = procs.stat(40), procs.stat(41)
    assert leader.session_leader and leader.group_leader
    assert not child.session_leader and not child.group_leader and child.sid == 40 and child.pgid == 40


@pytest.mark.parametrize('options, hidden', [
    ('rw,hidepid=2', 'hidepid=2'),
    ('rw,hidepid=invisible,gid=50', 'hidepid=invisible'),
    ('rw,subset=pid', 'subset=pid'),
    ('rw,hidepid=0', None),
    ('rw', None),
])
def test_hidden_reads_the_proc_mount_options(tmp_path, options, hidden):
    (tmp_path / 'self').mkdir()
    (tmp_path / 'self' / 'mountinfo').write_text(
        '22 27 0:21 / /sys rw,relatime - sysfs sysfs rw\n'
        '23 27 0:22 / %s rw,nosuid - proc proc %s\n' % (tmp_path, options))
    assert ProcFS(str(tmp_path)).hidden() == hidden


def test_unreadable_environ_and_fds_are_collected(tmp_path):
    fake_proc(tmp_path, 42, 'python3', environ=b'A=1\0')
    procs = ProcFS(str(tmp_path))
    denied = set()
    assert procs.environ(42, denied) == {'A': '1'} and denied == set()
    os.chmod(str(tmp_path / '42' / 'environ'), 0)
    if os.geteuid() == 0:
        pytest.skip('root reads files whatever their mode')
    assert procs.environ(42, denied) is None and denied == {42}


def test_real_namespace_cgroup_and_owner_of_this_process():
    procs = ProcFS()
    assert procs.pid_namespace(os.getpid()).startswith('pid:[')
    assert procs.pid_namespace(os.getpid()) == os.readlink('/proc/self/ns/pid')
    assert procs.cgroup(os.getpid()) != ''
    assert procs.owner(os.getpid()) == __import__('pwd').getpwuid(os.geteuid()).pw_name
    assert procs.owner(2 ** 22 + 1) is None and procs.pid_namespace(2 ** 22 + 1) is None

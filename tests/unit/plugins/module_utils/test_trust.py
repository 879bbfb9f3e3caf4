# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Who root trusts: the user who really runs a process (not the effective UID of a setuid program's image), where
an API key may be sent (the server's own listener, checked before each keyed request; never across a redirect),
and whose gateway or new server counts for a stop. Real processes, real /proc and real HTTP where this host allows;
a fake /proc tree where the test needs PIDs and sockets it cannot make."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest

from ansible_collections.gpuops.host.plugins.module_utils import _procs
from ansible_collections.gpuops.host.plugins.module_utils import _sglang as sglang
from ansible_collections.gpuops.host.plugins.module_utils import _sglang_http as shttp
from ansible_collections.gpuops.host.plugins.module_utils import _sglang_procs as sprocs
from ansible_collections.gpuops.host.plugins.module_utils._procs import ProcFS

NOBODY = ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups']
as_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which('setpriv'), reason='needs root and setpriv')


# -- who runs a process --

def test_parse_status_uids():
    raw = b'Name:\tsu\nUmask:\t0022\nState:\tS (sleeping)\nUid:\t65534\t0\t0\t0\nGid:\t65534\t65534\t65534\t65534\n'
    assert _procs.parse_status_uids(raw) == (65534, 0, 0, 0)
    assert _procs.parse_status_uids(b'Name:\tx\n') is None


def auxv(*pairs):
    width = 8 if sys.maxsize > 2 ** 32 else 4
    return b''.join(k.to_bytes(width, sys.byteorder) + v.to_bytes(width, sys.byteorder) for k, v in pairs + ((0, 0),))


# AT_SECURE is 23 (getauxval(3), <elf.h>)
@pytest.mark.parametrize('raw, secure', [
    (auxv((33, 0x7ffd), (23, 1), (25, 0x7ffe)), True),
    (auxv((23, 0)), False),
    (auxv((6, 4096)), False),
    (b'', False),
])
def test_parse_auxv_secure(raw, secure):
    assert _procs.parse_auxv_secure(raw) is secure


def test_this_process_is_root_itself_where_the_tests_run_as_root():
    fs = ProcFS()
    assert fs.uids(os.getpid()) == (os.getuid(), os.geteuid()) + os.getresuid()[2:] + (os.geteuid(),)
    assert fs.secure_exec(os.getpid()) is False
    assert fs.trusted_root(os.getpid()) is (os.getuid() == 0)


MASQUERADE = r'''
import os, socket, sys
# The child forked before the exec: the user's, holding a port in the tree of the "root" process.
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(1)
sys.stdout.write("%d\n" % listener.getsockname()[1])
sys.stdout.flush()
if os.fork() == 0:
    while True:
        listener.accept()[0].close()
os.execv("/bin/su", ["python", "-msglang.launch_server", "--", "root", "--port", str(listener.getsockname()[1])])
'''


@pytest.fixture
def masquerade():
    """A process that /proc and ps show as root's and that matches the sglang preset: another user exec'd the
    setuid ``su`` with a server's argv, and it waits at its password prompt for ever (util-linux su 2.38)."""
    proc = subprocess.Popen(NOBODY + [sys.executable, '-c', MASQUERADE], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    port = int(proc.stdout.readline())
    deadline = time.monotonic() + 10
    while ProcFS().read(proc.pid).cmdline[:2] != ['python', '-msglang.launch_server']:
        assert time.monotonic() < deadline and proc.poll() is None, 'su did not start'
        time.sleep(0.02)
    yield proc.pid, port
    for pid in [proc.pid] + [p for p in ProcFS().pids() if (ProcFS().stat(p) or _procs.Proc(0, 0, '', '', 0)).ppid == proc.pid]:
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    proc.wait(10)


@as_root
def test_a_setuid_program_s_image_looks_root_s_but_is_not(masquerade):
    pid, dummy = masquerade
    fs = ProcFS()
    assert os.stat('/proc/%d' % pid).st_uid == 0           # what /proc shows, and ps with it
    assert fs.uids(pid) == (65534, 0, 0, 0)
    assert fs.secure_exec(pid) is True
    assert fs.trusted_root(pid) is False
    assert fs.owner(pid) == 'nobody' and fs.uid(pid) == 65534


@as_root
def test_the_masquerade_is_not_trusted_with_the_api_key(masquerade):
    pid, dummy = masquerade
    deps = sglang.Deps(ProcFS(), run=None)
    server = {'pid': pid, 'start': ProcFS().stat(pid).start}
    assert sglang.key_trust({}, deps, server, {}) == (
        'it runs as nobody (its effective UID is 0: a setuid program\'s image), who is not trusted with the API key '
        '(root)')
    # the run marker of the record in its environment is no identity; the record's PID and start time are
    assert sglang.key_trust({}, deps, server, {'marker': 'm', 'pid': pid, 'start': server['start'] + 1}) is not None
    assert sglang.key_trust({}, deps, server, {'marker': 'm', 'pid': pid, 'start': server['start']}) is None


@as_root
def test_a_stop_sends_the_masquerade_nothing_and_counts_it_as_its_real_user_s(masquerade):
    pid, port = masquerade
    deps = sglang.Deps(ProcFS(), run=None, self_pids=(os.getpid(),))
    # the masquerade alone, whatever else runs on this host: its command line, as the sglang preset matches it
    params = {'presets': [], 'default_url': 'http://127.0.0.1:%d' % port, 'owners': ['root'],
              'patterns': [r'^python -msglang\.launch_server -- root --port %d$' % port], 'api_key': 'sk-stop'}
    found = sglang.find(sglang.merged(params), deps)
    assert [s['pid'] for s in found['servers']] == []
    assert [(o['pid'], o['user']) for o in found['others']] == [(pid, 'nobody')]


# -- where a key goes --

class Recorder:
    """A real HTTP server that records each request's path and Authorization header; REDIRECT sends every request
    to another URL with 307."""

    def __init__(self, redirect=None):
        self.seen = []
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                recorder.seen.append((self.path, self.headers.get('Authorization')))
                if redirect:
                    self.send_response(307)
                    self.send_header('Location', redirect + self.path)
                    self.send_header('Content-Length', '0')
                    self.end_headers()
                    return
                body = json.dumps({'loads': [{'dp_rank': 0, 'num_running_reqs': 0, 'num_waiting_reqs': 0}]}).encode()
                self.send_response(200)
                self.send_header('Content-Length', str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.url = 'http://127.0.0.1:%d' % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_no_key_follows_a_redirect():
    elsewhere = Recorder()
    server = Recorder(redirect=elsewhere.url)
    try:
        answer = shttp.Client(server.url, api_key='sk-secret').request('/v1/loads', 5)
    finally:
        server.close()
        elsewhere.close()
    assert answer.status == 307
    assert server.seen == [('/v1/loads', 'Bearer sk-secret')] and elsewhere.seen == []


def test_the_key_goes_only_where_sglang_asks_for_it_and_after_the_guard():
    server = Recorder()
    guarded = []
    try:
        client = shttp.Client(server.url, api_key='sk-secret', guard=lambda: guarded.append(True))
        for path in ('/metrics', '/health', '/health_generate', '/v1/loads'):
            client.request(path, 5)
    finally:
        server.close()
    assert server.seen == [('/metrics', None), ('/health', None), ('/health_generate', None),
                           ('/v1/loads', 'Bearer sk-secret')]
    assert guarded == [True]


def test_a_guard_that_refuses_stops_the_request_before_it_is_sent():
    server = Recorder()

    def moved():
        raise sprocs.Moved('gone')
    try:
        with pytest.raises(sprocs.Moved):
            shttp.Client(server.url, api_key='sk-secret', guard=moved).request('/v1/loads', 5)
    finally:
        server.close()
    assert server.seen == []


# -- the listener, by address, and again before each keyed request (a fake /proc with real sockets' numbers) --

TCP_HEADER = '  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n'


def tcp_line(local, inode):
    return ('   0: %s 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 %d 1 0000000000000000 '
            '100 0 0 10 0\n' % (local, inode))


def stat_line(pid, comm, ppid=1, sid=None, start=12345):
    fields = ['S', ppid, pid, sid or pid, 0, -1, 4194560] + [0] * 12 + [start] + [0] * 30
    return '%d (%s) %s\n' % (pid, comm, ' '.join(str(f) for f in fields))


def fake(root, pid, argv, inodes=(), uid=None, **stat):
    d = root / str(pid)
    (d / 'fd').mkdir(parents=True)
    (d / 'stat').write_text(stat_line(pid, argv[0][:15], **stat))
    (d / 'cmdline').write_bytes(b'\0'.join(a.encode() for a in argv) + b'\0')
    (d / 'environ').write_bytes(b'')
    for n, inode in enumerate(inodes, 3):
        (d / 'fd' / str(n)).symlink_to('socket:[%d]' % inode)
    if uid is not None:
        os.chown(str(d), uid, uid)


def tcp(root, *lines):
    (root / 'net').mkdir(exist_ok=True)
    (root / 'net' / 'tcp').write_text(TCP_HEADER + ''.join(lines))


SERVE = ['python3', '-m', 'sglang.launch_server', '--port', '30000']


def test_another_users_listener_on_another_address_of_the_port_does_not_count(tmp_path):
    fake(tmp_path, 100, SERVE, inodes=[5001])
    fake(tmp_path, 200, ['python3', 'squat.py'], inodes=[5002], uid=65534)
    # 30000 = 0x7530: the server on 127.0.0.1, the squatter on 127.0.0.2
    tcp(tmp_path, tcp_line('0100007F:7530', 5001), tcp_line('0200007F:7530', 5002))
    fs = ProcFS(str(tmp_path))
    table = fs.snapshot()
    tie = sprocs.own_listener(fs, table, 100, 30000, str, '127.0.0.1')
    assert tie['tied'] and tie['url'] == 'http://127.0.0.1:30000' and tie['strangers'] == []
    # the squatter's address is its own business; the wildcard would take the server's connections
    assert not sprocs.own_listener(fs, table, 100, 30000, str, '127.0.0.2')['tied']
    assert sprocs.port_holders(fs, table, 30000, str, '127.0.0.1')['holders'][0]['pid'] == 100
    assert [h['pid'] for h in sprocs.port_holders(fs, table, 30000, str)['holders']] == [100, 200]


@pytest.mark.parametrize('host, covered', [
    ('127.0.0.1', {'127.0.0.1', '0.0.0.0', '::', '::ffff:127.0.0.1'}),
    ('[::1]', {'::1', '::'}),
    ('gpu-node-01', None),
    ('0.0.0.0', None),      # a server binding every address conflicts with every listener of the port
    ('::', None),
])
def test_covering(host, covered):
    got = sprocs.covering(host)
    assert (set(got) if got is not None else None) == covered


def test_the_guard_refuses_once_a_stranger_holds_the_listener(tmp_path):
    fake(tmp_path, 100, SERVE, inodes=[5001])
    tcp(tmp_path, tcp_line('0100007F:7530', 5001))
    fs = ProcFS(str(tmp_path))
    tie = sprocs.own_listener(fs, fs.snapshot(), 100, 30000, str, '127.0.0.1')
    guard = sprocs.Guard(fs, tie)
    assert guard() is None
    # the server's socket closed, and another user's process listens on the wildcard address of the port
    fake(tmp_path, 200, ['python3', 'squat.py'], inodes=[5002], uid=65534)
    tcp(tmp_path, tcp_line('00000000:7530', 5002))
    with pytest.raises(sprocs.Moved) as e:
        guard()
    assert str(e.value) == 'a socket listening on port 30000 is no longer held by the server\'s own processes (100)'
    # nothing listens: nothing to send a key to, the request itself is refused
    tcp(tmp_path)
    assert guard() is None


def test_a_drain_sends_the_key_no_more_once_the_listener_moved(tmp_path):
    """The server's listener is tied at the start of the drain; while the drain polls, another process takes the
    port. Not one keyed request more goes there."""
    server = Recorder()
    port = int(server.url.rsplit(':', 1)[1])
    fake(tmp_path, 100, ['python3', '-m', 'sglang.launch_server', '--port', str(port)], inodes=[5001])
    tcp(tmp_path, tcp_line('0100007F:%04X' % port, 5001))
    fs = ProcFS(str(tmp_path))
    busy = {'n': 0}

    def sleep(seconds):
        busy['n'] += 1
        if busy['n'] == 2:
            fake(tmp_path, 200, ['python3', 'squat.py'], inodes=[5002], uid=65534)
            tcp(tmp_path, tcp_line('0100007F:%04X' % port, 5002))

    original = server.httpd.RequestHandlerClass.do_GET

    def still_busy(handler):
        server.seen.append((handler.path, handler.headers.get('Authorization')))
        body = json.dumps({'loads': [{'dp_rank': 0, 'num_running_reqs': 1, 'num_waiting_reqs': 0}]}).encode()
        handler.send_response(200 if handler.path == '/v1/loads' else 404)
        handler.send_header('Content-Length', str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
    server.httpd.RequestHandlerClass.do_GET = still_busy
    try:
        with pytest.raises(sglang.ActionFailed) as e:
            sglang.drain(sglang.merged({'url': server.url, 'pid': 100, 'api_key': 'sk-secret', 'timeout': 30,
                                        'interval': 0.01, 'request_timeout': 5, 'force': False}),
                         sglang.Deps(fs, run=None, sleep=sleep))
    finally:
        server.httpd.RequestHandlerClass.do_GET = original
        server.close()
    assert e.value.msg.startswith('stopped draining %s: a socket listening on port %d is no longer held by the '
                                  'server\'s own processes (100); nothing more was sent there' % (server.url, port))
    keyed = [path for path, auth in server.seen if auth]
    assert keyed == ['/v1/loads', '/v1/loads'], server.seen


# -- whose processes count --

GATEWAY = ['sglang::router']
COLAUNCHED = ['sglang::server']


def test_another_users_fake_gateway_does_not_block_the_stop(tmp_path):
    fake(tmp_path, 1, ['/sbin/init'])
    fake(tmp_path, 100, SERVE, inodes=[5001])
    fake(tmp_path, 300, GATEWAY, uid=65534)
    fake(tmp_path, 301, COLAUNCHED, ppid=300, sid=300, uid=65534)
    tcp(tmp_path, tcp_line('0100007F:7530', 5001))
    fs = ProcFS(str(tmp_path))
    params = {'presets': ['sglang'], 'default_url': 'http://127.0.0.1:30000', 'owners': ['root'],
              'drain': True, 'timeout': 0.2, 'interval': 0.1, 'request_timeout': 1, 'force': False}
    found = sglang.find(sglang.merged(params), sglang.Deps(fs, run=None))
    assert [g['pid'] for g in found['gateways']] == [300] and [s['pid'] for s in found['servers']] == [100]
    # the same co-launch run by root blocks it: the stop goes through the launcher
    os.chown(str(tmp_path / '300'), 0, 0)
    os.chown(str(tmp_path / '301'), 0, 0)
    with pytest.raises(sglang.ActionFailed) as e:
        sglang.find(sglang.merged(params), sglang.Deps(fs, run=None))
    assert e.value.msg.startswith('not stopping servers that the SGLang Model Gateway co-launched: 301')


def test_a_new_server_of_another_user_does_not_fail_the_settle(tmp_path):
    fake(tmp_path, 1, ['/sbin/init'])
    fake(tmp_path, 400, SERVE, uid=65534, start=99999)
    fs = ProcFS(str(tmp_path))
    clock = iter([0.0, 0.0, 5.0, 5.0, 5.0])
    params = {'presets': ['sglang'], 'default_url': 'http://127.0.0.1:30000', 'owners': [],
              'stopped': [{'pid': 100, 'start': 12345, 'user': 'root'}], 'timeout': 2, 'interval': 1}
    result = sglang.settle(sglang.merged(params), sglang.Deps(fs, run=None, clock=lambda: next(clock),
                                                              sleep=lambda s: None))
    assert result['respawned'] == []
    os.chown(str(tmp_path / '400'), 0, 0)
    clock = iter([0.0, 0.0, 5.0])
    with pytest.raises(sglang.ActionFailed) as e:
        sglang.settle(sglang.merged(params), sglang.Deps(fs, run=None, clock=lambda: next(clock),
                                                         sleep=lambda s: None))
    assert e.value.msg.startswith('a new SGLang server started within 2 s of the stop of the server(s) 100: pid 400')

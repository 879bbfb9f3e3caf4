# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Finding servers and checking their environment on a /proc tree laid out as a real launch leaves it:
a main process in its own session, titled children whose environ setproctitle overwrote unless
SPT_NOENV=1, an untitled resource_tracker, an orphaned scheduler re-parented to PID 1."""

from __future__ import annotations

import http.server
import json
import os
import stat
import threading

import pytest

from ansible_collections.gpuops.host.plugins.module_utils import _sglang as sglang
from ansible_collections.gpuops.host.plugins.module_utils import _sglang_procs as sprocs
from ansible_collections.gpuops.host.plugins.module_utils._procs import ProcFS
from ansible_collections.gpuops.host.plugins.module_utils._reap_options import PRESETS
from ansible_collections.gpuops.host.plugins.module_utils._sglang import ActionFailed, Deps, merged
from ansible_collections.gpuops.host.plugins.module_utils._sglang_args import Redactor


def stat_line(pid, comm, state='S', ppid=1, sid=None, start=12345):
    fields = [state, ppid, sid or pid, sid or pid, 0, -1, 4194560] + [0] * 12 + [start] + [0] * 30
    return '%d (%s) %s\n' % (pid, comm, ' '.join(str(f) for f in fields))


def proc(root, pid, argv, env=None, title=None, **stat):
    d = root / str(pid)
    d.mkdir(parents=True)
    comm = (title or argv[0].rsplit('/', 1)[-1])[:15]
    (d / 'stat').write_text(stat_line(pid, comm, **stat))
    (d / 'cmdline').write_bytes((title + '\0').encode() if title else b'\0'.join(a.encode() for a in argv) + b'\0')
    if env is None:
        environ = b'\0'.join(b'x' * 8 for dummy in range(3))  # overwritten by the title
    else:
        environ = b'\0'.join(('%s=%s' % kv).encode() for kv in sorted(env.items())) + b'\0'
    (d / 'environ').write_bytes(environ)


MAIN = ['/opt/sglang/bin/python3', '-X', 'faulthandler', '-m', 'sglang.launch_server', '--model-path', '/m',
        '--host', '0.0.0.0', '--port=31000', '--tp-size', '2', '--api-key', 'k-123456']
DUMP = {'SGLANG_HS_DUMP_DIR': '/data/run1'}


def server(root, pid=100, env=None, spt_noenv=True, dump=True):
    env = dict(env or {}, GPUOPS_RUN='extraction-1', **(DUMP if dump else {}))
    child_env = dict(env, SPT_NOENV='1') if spt_noenv else None
    proc(root, pid, MAIN, env=env, sid=pid)
    proc(root, pid + 1, ['python3'], title='sglang::scheduler_TP0', env=child_env, ppid=pid, sid=pid)
    proc(root, pid + 2, ['python3'], title='sglang::scheduler_TP1', env=child_env, ppid=pid, sid=pid)
    proc(root, pid + 3, ['python3'], title='sglang::detokenizer', env=child_env, ppid=pid, sid=pid)
    proc(root, pid + 4, ['/opt/sglang/bin/python3', '-c', 'from multiprocessing.resource_tracker import main;main(7)'],
         env=env, ppid=pid, sid=pid)


@pytest.fixture
def tree(tmp_path):
    proc(tmp_path, 1, ['/sbin/init'], env={})
    server(tmp_path)
    # an orphaned scheduler of the same session, re-parented to PID 1
    proc(tmp_path, 180, ['python3'], title='sglang::scheduler_TP3', env=dict(DUMP, SPT_NOENV='1'), ppid=1, sid=100)
    # unrelated: a shell that greps for sglang, and a training job
    proc(tmp_path, 300, ['grep', 'sglang'], env={}, sid=300)
    proc(tmp_path, 400, ['python3', 'train.py'], env={}, sid=400)
    return ProcFS(str(tmp_path))


def find(procfs, record=None, patterns=PRESETS['sglang'], elsewhere=None):
    servers, apart = sprocs.find_servers(procfs, procfs.snapshot(), patterns, record or {}, 'http://127.0.0.1:30000',
                                         Redactor(['k-123456']), elsewhere=elsewhere)
    return servers if elsewhere is None else (servers, apart)


def test_find_by_presets_gives_the_main_process_its_url_and_its_tree(tree):
    servers = find(tree)
    assert [s['pid'] for s in servers] == [100]
    s = servers[0]
    assert s['url'] == 'http://127.0.0.1:31000'
    assert s['session'] == 100 and s['schedulers'] == 3 and not s['recorded']
    assert [p['pid'] for p in s['tree']] == [100, 101, 102, 103, 104, 180]
    assert 'k-123456' not in s['cmdline'] and '--api-key ********' in s['cmdline']


def test_find_by_the_recorded_marker_alone(tree):
    record = {'marker': 'extraction-1', 'pid': 100, 'url': 'http://10.0.0.5:31000'}
    servers = find(tree, record, patterns=())
    assert [(s['pid'], s['recorded'], s['url'], s['marker']) for s in servers] == \
        [(100, True, 'http://10.0.0.5:31000', 'extraction-1')]


def test_find_nothing(tmp_path):
    proc(tmp_path, 1, ['/sbin/init'], env={})
    proc(tmp_path, 300, ['vim', '/etc/sglang/serve.yaml'], env={})
    assert find(ProcFS(str(tmp_path))) == []


def test_tree_of_a_server_not_leading_its_session_is_its_descendants(tmp_path):
    proc(tmp_path, 50, ['bash'], env={}, sid=50)
    proc(tmp_path, 100, ['python3', '-m', 'sglang.launch_server'], env={}, ppid=50, sid=50)
    proc(tmp_path, 101, ['python3'], title='sglang::scheduler', env={}, ppid=100, sid=50)
    proc(tmp_path, 60, ['vim'], env={}, ppid=50, sid=50)
    servers = find(ProcFS(str(tmp_path)))
    assert [p['pid'] for p in servers[0]['tree']] == [100, 101] and servers[0]['session'] is None
    assert servers[0]['url'] == 'http://127.0.0.1:30000'


@pytest.mark.parametrize('argv, url', [
    (['--port', '8000'], 'http://127.0.0.1:8000'),
    (['--host', '::', '--port', '8000'], 'http://127.0.0.1:8000'),
    (['--host=fe80::1', '--port=8000'], 'http://[fe80::1]:8000'),
    (['--host', '10.1.2.3', '--port', '1', '--port', '2'], 'http://10.1.2.3:2'),
    (['--config', 'x.yaml'], 'http://127.0.0.1:30000'),
])
def test_url_of(argv, url):
    assert sprocs.url_of(argv, 'http://127.0.0.1:30000/') == url


@pytest.mark.parametrize('argv, rank', [
    ([], 0),
    (['--model-path', '/m'], 0),
    (['--node-rank', '2'], 2),
    (['--node-rank=3'], 3),
    (['--node-rank', '0'], 0),
    (['--nnodes', '4', '--node-rank', '1', '--dist-init-addr', '10.0.0.1:20000'], 1),
    (['--node-rank', '1', '--node-rank=2'], 2),
    (['--node-rank=2', '--node-rank', '1'], 1),
    (['--node-rank'], 0),
    (['--node-rank', 'x'], 0),
    (['--node-rank', '-1'], 0),
    (['--node-rank=x'], 0),
    (['--node-ranks', '5', '--xnode-rank=6'], 0),
])
def test_node_rank_of(argv, rank):
    assert sprocs.node_rank_of(['python3', '-m', 'sglang.launch_server'] + argv) == rank


def test_find_gives_each_server_its_node_rank(tree, tmp_path):
    proc(tmp_path, 700, ['python3', '-m', 'sglang.launch_server', '--port', '31001', '--nnodes', '2', '--node-rank', '1',
                         '--dist-init-addr', '10.0.0.1:20000'], env={}, sid=700)
    proc(tmp_path, 701, ['python3'], title='sglang::scheduler_TP8', env={}, ppid=700, sid=700)
    proc(tmp_path, 800, ['python3', '-m', 'sglang.launch_server', '--port=31002', '--node-rank=0'], env={}, sid=800)
    assert [(s['pid'], s['node_rank'], s['schedulers']) for s in find(tree)] == [(100, 0, 3), (700, 1, 1), (800, 0, 0)]


def test_check_environ_passes_with_spt_noenv(tree):
    report = sprocs.check_environ(tree, tree.snapshot(), 100, DUMP, 2, Redactor())
    assert report['ok'] and report['schedulers'] == 3
    assert [c['pid'] for c in report['checked']] == [100, 101, 102, 180]


def test_check_environ_fails_where_setproctitle_hid_it(tmp_path):
    proc(tmp_path, 1, ['/sbin/init'], env={})
    server(tmp_path, spt_noenv=False)
    procfs = ProcFS(str(tmp_path))
    report = sprocs.check_environ(procfs, procfs.snapshot(), 100, DUMP, 1, Redactor())
    assert not report['ok'] and [c['pid'] for c in report['missing']] == [101, 102]


def test_check_environ_needs_the_schedulers(tmp_path):
    proc(tmp_path, 100, MAIN, env=DUMP, sid=100)
    procfs = ProcFS(str(tmp_path))
    report = sprocs.check_environ(procfs, procfs.snapshot(), 100, DUMP, 1, Redactor())
    assert not report['ok'] and report['schedulers'] == 0 and report['missing'] == []
    with pytest.raises(sprocs.ProcsError, match='not running'):
        sprocs.check_environ(procfs, procfs.snapshot(), 999, DUMP, 1, Redactor())


@pytest.mark.parametrize('wanted, found', [(3, 2), (8, 2)])
def test_the_schedulers_check_of_a_node_of_rank_1_or_more_names_the_count_it_found(tmp_path, wanted, found):
    """A node of rank 1 whose tree holds 2 titled schedulers where WANTED should run: its health server answers 200
    anyway, so the count is the check. Nothing after it runs (no NVML to read here)."""
    proc(tmp_path, 1, ['/sbin/init'], env={})
    server(tmp_path, dump=False)
    deps = Deps(ProcFS(str(tmp_path)), None)
    with pytest.raises(ActionFailed) as e:
        sglang.post_checks({'url': 'http://127.0.0.1:31000'}, deps, 100, {'schedulers': wanted, 'gpus': [0, 1]})
    assert e.value.msg == ('the environment of SGLang server 100 is incomplete: only %d scheduler(s) found in the tree '
                           'of 100, %d expected; those processes run without it' % (found, wanted))
    assert (e.value.result['check'], e.value.result['schedulers'], e.value.result['missing']) == ('schedulers', found, [])


def test_the_schedulers_check_passes_with_the_schedulers_whatever_their_environment(tmp_path):
    """SPT_NOENV unset: setproctitle overwrote the schedulers' environment; the check wants no variable, only them."""
    proc(tmp_path, 1, ['/sbin/init'], env={})
    server(tmp_path, spt_noenv=False, dump=False)

    def no_nvml():
        raise sglang.checks.Unreadable('no NVML here')

    deps = Deps(ProcFS(str(tmp_path)), None, open_nvml=no_nvml)
    done = sglang.post_checks({'url': 'http://127.0.0.1:31000'}, deps, 100, {'schedulers': 2, 'gpus': [], 'expected_count': 4})
    assert done['schedulers']['ok'] and done['schedulers']['schedulers'] == 2
    assert [c['pid'] for c in done['schedulers']['checked']] == [100, 101, 102]
    assert done['gpus'] == {'gpus': [], 'idle': [], 'error': 'no NVML here'}


def test_log_tail_masks_secrets(tmp_path):
    log = tmp_path / 'server.log'
    log.write_text('loading\n' * 100 + "server_args=ServerArgs(api_key='k-123456', port=1)\nTraceback: boom\n")
    assert sprocs.log_tail(str(log), 2, Redactor()) == ["server_args=ServerArgs(api_key='********', port=1)", 'Traceback: boom']
    assert sprocs.log_tail(str(tmp_path / 'none.log'), 2, Redactor())[0].startswith('(cannot read')


def test_find_dump_by_request_id(tmp_path):
    (tmp_path / 'a').mkdir()
    (tmp_path / 'a' / 'hs_probe-7_layer3.pt').write_text('')
    (tmp_path / 'hs_health-1.pt').write_text('')
    assert sprocs.find_dump(str(tmp_path), 'probe-7') == [str(tmp_path / 'a' / 'hs_probe-7_layer3.pt')]
    assert sprocs.find_dump(str(tmp_path), 'probe-8') == []


def test_servers_in_another_namespace_are_listed_apart(tree, tmp_path):
    proc(tmp_path, 700, ['python3', '-m', 'sglang.launch_server', '--port', '31001'], env={}, sid=700)
    servers, apart = find(tree, elsewhere=lambda pid: 'in another PID namespace (pid:[1])' if pid == 700 else None)
    assert [s['pid'] for s in servers] == [100]
    assert [(a['pid'], a['reason']) for a in apart] == [(700, 'in another PID namespace (pid:[1])')]


# -- find with drain: one call finds the servers and drains each -------------------------------

class Loads(http.server.BaseHTTPRequestHandler):
    """/v1/loads (srt/entrypoints/v1_loads.py) with .server.running requests on DP rank 0; no /metrics. Every
    request's Authorization header goes to .server.keys."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.server.keys.append(self.headers.get('Authorization'))
        status, body = (200, {'loads': [{'dp_rank': 0, 'num_running_reqs': self.server.running,
                                         'num_waiting_reqs': 0}]}) if self.path == '/v1/loads' else (404, {})
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def listening(root, entries):
    """/proc/net/tcp of ROOT listing a listener for each (inode, port) of ENTRIES, on 127.0.0.1."""
    (root / 'net').mkdir(exist_ok=True)
    lines = [tcp_line('0100007F:%04X' % port, '0A', inode) for inode, port in entries]
    (root / 'net' / 'tcp').write_text(TCP_HEADER + ''.join(lines))


@pytest.fixture
def two_servers(tmp_path):
    """Two servers started by hand in /proc, each answering /v1/loads on its own port and holding its listening
    socket: idle, then busy."""
    httpds = []
    proc(tmp_path, 1, ['/sbin/init'], env={})
    for pid, running in ((100, 0), (200, 1)):
        httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Loads)
        httpd.running, httpd.keys = running, []
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        httpds.append(httpd)
        proc(tmp_path, pid, ['python3', '-m', 'sglang.launch_server', '--model-path', '/m',
                             '--port', str(httpd.server_address[1])], env={}, sid=pid)
        sockets(tmp_path, pid, 8000 + pid)
    listening(tmp_path, [(8000 + pid, h.server_address[1]) for pid, h in zip((100, 200), httpds)])
    yield ProcFS(str(tmp_path)), httpds
    for httpd in httpds:
        httpd.shutdown()
        httpd.server_close()


def find_and_drain(procfs, **p):
    params = dict({'drain': True, 'presets': ['sglang'], 'default_url': 'http://127.0.0.1:30000',
                   'timeout': 0.6, 'interval': 0.1, 'request_timeout': 5, 'force': False}, **p)
    return sglang.find(merged(params), Deps(procfs, run=None))


def test_find_with_drain_drains_each_server_and_stops_at_the_first_still_busy(two_servers):
    procfs, (idle, busy) = two_servers

    with pytest.raises(ActionFailed) as e:
        find_and_drain(procfs)

    assert e.value.msg.startswith('1 request(s) still in flight on the SGLang server 200 (http://127.0.0.1:%d) '
                                  'after waiting 0.6 s' % busy.server_address[1])
    assert [s['pid'] for s in e.value.result['servers']] == [100, 200]
    assert [(d['pid'], d['drained'], d['in_flight']) for d in e.value.result['drains']] == [(100, True, 0), (200, False, 1)]

    busy.running = 0
    found = find_and_drain(procfs)

    assert [(d['pid'], d['url'], d['drained']) for d in found['drains']] == \
        [(100, 'http://127.0.0.1:%d' % idle.server_address[1], True), (200, 'http://127.0.0.1:%d' % busy.server_address[1], True)]
    assert 'drains' not in find_and_drain(procfs, drain=False)


def test_find_with_drain_sends_nothing_to_a_server_whose_port_another_process_holds(two_servers, tmp_path):
    """The command line of 200 names the port where 100 listens: its drain would read 100's count, with the key."""
    procfs, (idle, busy) = two_servers
    proc(tmp_path, 300, ['python3', '-m', 'sglang.launch_server', '--host', 'elsewhere.example',
                         '--port', str(idle.server_address[1])], env={}, sid=300)
    busy.running = 0

    found = find_and_drain(procfs, api_key='k-123456', timeout=5)

    assert [(d['pid'], d['url']) for d in found['drains']] == [(100, 'http://127.0.0.1:%d' % idle.server_address[1]),
                                                               (200, 'http://127.0.0.1:%d' % busy.server_address[1])]
    assert [(u['pid'], u['user'], [s['pid'] for s in u['strangers']]) for u in found['undrained']] == [(300, 'root', [100])]
    assert found['undrained'][0]['reason'].startswith('port %d is held by pid 100 (user root: python3 -m sglang.launch_server'
                                                      % idle.server_address[1])
    # one reading each at the address where each listens, none for 300: /metrics without the key, which it does not
    # need, then /v1/loads with it
    assert idle.keys == busy.keys == [None, 'Bearer k-123456']


def test_find_with_drain_sends_nothing_to_a_server_that_does_not_listen_itself_or_runs_as_another_user(two_servers, tmp_path):
    procfs, (idle, busy) = two_servers
    os.chown(str(tmp_path / '200'), 65534, 65534)   # the busy server runs as another user
    proc(tmp_path, 300, ['python3', '-m', 'sglang.launch_server', '--port', '1'], env={}, sid=300)   # listens nowhere

    found = find_and_drain(procfs, api_key='k-123456')

    assert [d['pid'] for d in found['drains']] == [100]
    user = procfs.owner(200)
    assert [(u['pid'], u['user'], u['reason']) for u in found['undrained']] == [
        (200, user, 'it runs as %s, who is not trusted with the API key (root)' % user),
        (300, 'root', 'nothing of the tree of 300 listens on port 1')]
    assert busy.keys == [] and idle.keys == [None, 'Bearer k-123456']
    # trusted by name: drained, with the key
    busy.running = 0
    found = find_and_drain(procfs, api_key='k-123456', api_key_users=[user])
    assert [d['pid'] for d in found['drains']] == [100, 200] and busy.keys == [None, 'Bearer k-123456']


def test_find_with_drain_sends_nothing_to_a_node_of_rank_1_or_more(two_servers, tmp_path):
    """The busy server 200 is rank 1 of a multi-node server: no requests of its own, nothing to read; 300, rank 2,
    listens nowhere. Each is listed drained, with no request sent; rank 0 (100) is drained as any server."""
    procfs, (idle, busy) = two_servers
    argv = ['python3', '-m', 'sglang.launch_server', '--model-path', '/m', '--port', str(busy.server_address[1]),
            '--nnodes', '3', '--node-rank', '1', '--dist-init-addr', '10.0.0.1:20000']
    (tmp_path / '200' / 'cmdline').write_bytes(b'\0'.join(a.encode() for a in argv) + b'\0')
    proc(tmp_path, 300, ['python3', '-m', 'sglang.launch_server', '--port', '1', '--node-rank=2'], env={}, sid=300)

    found = find_and_drain(procfs, api_key='k-123456')

    assert [(s['pid'], s['node_rank']) for s in found['servers']] == [(100, 0), (200, 1), (300, 2)]
    assert (found['drains'][0]['pid'], found['drains'][0]['drained'], found['drains'][0]['source']) == (100, True, 'loads')
    worker = {'drained': True, 'in_flight': 0, 'lost': 0, 'source': 'node_rank', 'seconds': 0.0, 'readings': 0,
              'serving': False, 'aborted': False, 'needs_api_key': False, 'error': None, 'rank0': None}
    # 200 holds no connection to its rank 0's store at 10.0.0.1:20000: rank 0 is gone, and it is stopped at once;
    # 300 names no --dist-init-addr, so there is nothing to read
    assert found['drains'][1:] == [dict(worker, pid=200, url='http://127.0.0.1:%d' % busy.server_address[1], node_rank=1,
                                        readings=1, rank0='gone'),
                                   dict(worker, pid=300, url='http://127.0.0.1:1', node_rank=2)]
    assert found['undrained'] == []
    assert busy.keys == [] and idle.keys == [None, 'Bearer k-123456']


TCP_HEADER = '  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n'


def tcp_line(local, state, inode, remote='00000000:0000'):
    return '   0: %s %s %s 00000000:00000000 00:00000000 00000000     0        0 %d 1 0000000000000000 100 0 0 10 0\n' % (
        local, remote, state, inode)


def sockets(root, pid, *inodes):
    fd = root / str(pid) / 'fd'
    fd.mkdir(exist_ok=True)
    for n, inode in enumerate(inodes, 3):
        (fd / str(n)).symlink_to('socket:[%d]' % inode)


def test_port_holders_are_the_processes_with_a_listening_socket_on_the_port(tree, tmp_path):
    net = tmp_path / 'net'
    net.mkdir()
    # 31000 = 0x7918: the server listens on IPv6 (any address); 8080 = 0x1F90: the training job on IPv4; a
    # connection to 31000 held by the grep is no listener (state 01); a listener on 9090 (0x2382) that no process
    # this namespace sees holds.
    (net / 'tcp').write_text(TCP_HEADER + tcp_line('0100007F:1F90', '0A', 7001)
                             + tcp_line('0100007F:D431', '01', 7002, remote='0100007F:7918')
                             + tcp_line('0100007F:7918', '01', 7003) + tcp_line('00000000:2382', '0A', 7004))
    (net / 'tcp6').write_text(TCP_HEADER + tcp_line('00000000000000000000000000000000:7918', '0A', 7005))
    sockets(tmp_path, 100, 7005)
    sockets(tmp_path, 300, 7002, 7003)
    sockets(tmp_path, 400, 7001)
    table, redact = tree.snapshot(), Redactor(['k-123456'])

    held = sprocs.port_holders(tree, table, 31000, redact)
    assert held['listening'] and [h['pid'] for h in held['holders']] == [100]
    assert 'k-123456' not in held['holders'][0]['cmdline']
    assert [h['pid'] for h in sprocs.port_holders(tree, table, 8080, redact)['holders']] == [400]
    assert sprocs.port_holders(tree, table, 9090, redact) == {'port': 9090, 'listening': True, 'holders': [],
                                                              'addresses': ['0.0.0.0'], 'unheld': True}
    assert sprocs.port_holders(tree, table, 9999, redact) == {'port': 9999, 'listening': False, 'holders': [],
                                                              'addresses': [], 'unheld': False}
    assert held['addresses'] == ['::'] and not held['unheld'] and held['holders'][0]['user'] == tree.owner(100)


def test_find_with_a_port_reports_its_holders_beside_the_servers(tree, tmp_path):
    (tmp_path / 'net').mkdir()
    (tmp_path / 'net' / 'tcp').write_text(TCP_HEADER + tcp_line('00000000:7918', '0A', 7005))
    sockets(tmp_path, 100, 7005)
    found = sglang.find(merged({'presets': ['sglang'], 'patterns': [], 'default_url': 'http://127.0.0.1:30000',
                                'port': 31000}), Deps(tree, None))
    assert [s['pid'] for s in found['servers']] == [100]
    assert found['port']['listening'] and [h['pid'] for h in found['port']['holders']] == [100]
    assert 'port' not in sglang.find(merged({'presets': ['sglang'], 'patterns': [],
                                             'default_url': 'http://127.0.0.1:30000'}), Deps(tree, None))


# -- the SGLang Model Gateway beside the servers -------------------------------------------------

def colaunch(root):
    """`python -m sglang_router.launch_server` (sglang-router 0.3.2 launch_server.py): the launcher, retitled
    sglang::router, listening on 8000 (0x1F40); its worker titled sglang::server in a process group of its own,
    listening on 31500 (0x7B0C), with a scheduler and a detokenizer."""
    (root / 'net').mkdir()
    (root / 'net' / 'tcp').write_text(TCP_HEADER + tcp_line('0100007F:1F40', '0A', 8101)
                                      + tcp_line('0100007F:7B0C', '0A', 8102))
    proc(root, 500, ['python3'], title='sglang::router', sid=500)
    proc(root, 501, ['python3'], title='sglang::server', ppid=500, sid=500)
    proc(root, 502, ['python3'], title='sglang::scheduler_TP0', ppid=501, sid=500)
    proc(root, 503, ['python3'], title='sglang::detokenizer', ppid=501, sid=500)
    sockets(root, 500, 8101)
    sockets(root, 501, 8102)


def find_params(**p):
    return dict({'presets': ['sglang'], 'patterns': [], 'pids': [],
                 'default_url': 'http://127.0.0.1:30000'}, **p)


def test_find_names_the_gateway_and_its_co_launched_server_apart_from_the_servers(tree, tmp_path):
    colaunch(tmp_path)
    found = sglang.find(merged(find_params()), Deps(tree, None))
    assert [s['pid'] for s in found['servers']] == [100]
    gw, = found['gateways']
    assert (gw['pid'], gw['cmdline'].strip(), gw['ports'], gw['user']) == (500, 'sglang::router', [8000], 'root')
    assert [(c['pid'], c['ports'], c['schedulers']) for c in gw['colaunched']] == [(501, [31500], 1)]


def test_a_drain_refuses_a_co_launch_naming_its_launcher_before_any_request(tree, tmp_path):
    colaunch(tmp_path)
    with pytest.raises(ActionFailed) as e:
        sglang.find(merged(find_params(drain=True, timeout=0.5, interval=0.1, request_timeout=1, force=False)),
                    Deps(tree, None))
    assert e.value.msg.startswith(
        'not stopping servers that the SGLang Model Gateway co-launched: 501 (sglang::server, port 31500) was '
        'started by the SGLang Model Gateway launcher 500 (sglang::router')
    assert 'nothing was drained or signalled' in e.value.msg and 'drains' not in e.value.result


def test_a_co_launched_server_named_in_pids_is_a_server_at_its_own_port(tree, tmp_path):
    colaunch(tmp_path)
    found = sglang.find(merged(find_params(pids=[501])), Deps(tree, None))
    assert [(s['pid'], s['url'], s['schedulers']) for s in found['servers']] == \
        [(100, 'http://127.0.0.1:31000', 3), (501, 'http://127.0.0.1:31500', 1)]
    assert [(g['pid'], g['colaunched']) for g in found['gateways']] == [(500, [])]


# -- the key a server was started with --

def keyed(tmp_path, argv, config=None, mode=0o600, uid=0):
    """A server process at PID 300 in a fake /proc whose root is TMP_PATH/fs, with CONFIG at /run/args.yaml."""
    root, fs = tmp_path / 'proc', tmp_path / 'fs'
    (fs / 'run').mkdir(parents=True)
    proc(root, 300, argv, env={})
    (root / '300' / 'root').symlink_to(fs)
    (root / '300' / 'cwd').symlink_to(fs / 'run')
    if config is not None:
        path = fs / 'run' / 'args.yaml'
        path.write_text(config)
        os.chmod(path, mode)
        os.chown(path, uid, uid)
    procfs = ProcFS(str(root))
    return procfs, procfs.read(300)


SERVE = ['python3', '-m', 'sglang.launch_server', '--model-path', '/m']


@pytest.mark.parametrize('argv, config, key', [
    (SERVE + ['--api-key', 'sk-on-argv'], 'api-key: "sk-in-file"\n', 'sk-on-argv'),     # the command line wins
    (SERVE + ['--api-key=sk-eq'], None, 'sk-eq'),
    (SERVE + ['--config', '/run/args.yaml'], 'model-path: "/m"\napi-key: "sk-\\"q\\"-1"\n', 'sk-"q"-1'),
    (SERVE + ['--config=args.yaml'], "api_key: 'it''s'\n", "it's"),                     # relative: its cwd
    (SERVE + ['--config', '/run/args.yaml'], 'api-key: plain-key  # rotated\n', 'plain-key'),
    (SERVE + ['--config', '/run/args.yaml'], 'model-path: "/m"\n', None),
    (SERVE + ['--config', '/run/missing.yaml'], None, None),
    (SERVE, None, None),
])
def test_the_key_a_server_was_started_with(tmp_path, argv, config, key):
    procfs, server_proc = keyed(tmp_path, argv, config)
    assert sprocs.api_key_of(procfs, server_proc, 0) == key


def test_a_config_file_of_another_user_is_not_read_for_a_user_s_server(tmp_path):
    procfs, server_proc = keyed(tmp_path, SERVE + ['--config', '/run/args.yaml'], 'api-key: "sk-other"\n', uid=0)
    assert sprocs.api_key_of(procfs, server_proc, 4242) is None       # root's file, named by a server of 4242
    assert sprocs.api_key_of(procfs, server_proc, 0) == 'sk-other'    # a root server reads what root may


def test_a_user_s_file_is_not_read_for_a_root_server(tmp_path):
    procfs, server_proc = keyed(tmp_path, SERVE + ['--config', '/run/args.yaml'], 'api-key: "sk-planted"\n', uid=4242)
    assert sprocs.api_key_of(procfs, server_proc, 0) is None
    assert sprocs.api_key_of(procfs, server_proc, 4242) == 'sk-planted'


def test_a_fifo_named_as_the_config_file_is_never_opened(tmp_path, fifo_writer):
    """A writer blocked in open() of a FIFO returns once a reader opens it: it stays blocked, so the FIFO was only
    looked at (O_PATH), never opened."""
    procfs, server_proc = keyed(tmp_path, SERVE + ['--config', '/run/fifo'])
    writer = fifo_writer(tmp_path / 'fs' / 'run' / 'fifo')
    assert sprocs.api_key_of(procfs, server_proc, 0) is None
    assert not writer.opened(), 'the FIFO was opened for reading'


@pytest.mark.skipif(os.geteuid() != 0, reason='mknod needs root')
def test_a_device_named_as_the_config_file_is_never_opened(tmp_path):
    """A terminal named as --config: opened without O_NOCTTY by a process with no controlling terminal, it would
    become that process's; and a watchdog arms on open. The device is looked at, never opened: its access time,
    which open() alone does not change either, is not the test; /proc/self/fd after the call is."""
    procfs, server_proc = keyed(tmp_path, SERVE + ['--config', '/run/null'])
    os.mknod(str(tmp_path / 'fs' / 'run' / 'null'), 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    seen = []
    real_open = os.open

    def spy(path, flags, *args, **kwargs):
        fd = real_open(path, flags, *args, **kwargs)
        seen.append((str(path), flags))
        return fd

    os.open = spy
    try:
        assert sprocs.api_key_of(procfs, server_proc, 0) is None
    finally:
        os.open = real_open
    assert [flags & os.O_PATH for dummy, flags in seen] == [os.O_PATH], seen


WORKER = ['python3', '-m', 'sglang.launch_server', '--model-path', '/m', '--port', '1', '--nnodes', '2', '--node-rank',
          '1', '--dist-init-addr', '10.0.0.1:20000']


@pytest.fixture
def worker(tmp_path):
    """Node rank 1 of a multi-node server (200) whose scheduler (201) holds its connection to rank 0's store at
    10.0.0.1:20000 (0x4E20), established; a stranger's connection to another port 20000 on another host, held by no
    process of the worker, is beside it. Returns the ProcFS and a function that ends the connection (rank 0 gone: the
    kernel lists it CLOSE_WAIT, 08)."""
    proc(tmp_path, 1, ['/sbin/init'], env={})
    proc(tmp_path, 200, WORKER, env={}, sid=200)
    proc(tmp_path, 201, [], title='sglang::scheduler_TP2', env={}, ppid=200, sid=200)
    sockets(tmp_path, 201, 9001)
    (tmp_path / 'net').mkdir()

    def connection(state):
        (tmp_path / 'net' / 'tcp').write_text(
            TCP_HEADER + tcp_line('0200000A:C350', state, 9001, remote='0100000A:4E20')
            + tcp_line('0200000A:C351', '01', 9002, remote='0300000A:4E20'))

    connection('01')
    return ProcFS(str(tmp_path)), lambda: connection('08')


def test_a_worker_whose_rank_0_still_runs_is_not_stopped_before_it_unless_forced(worker):
    procfs, dummy = worker
    with pytest.raises(ActionFailed) as e:
        find_and_drain(procfs, timeout=0.3)
    assert e.value.msg.startswith('the SGLang server 200 is node 1 of a multi-node server whose rank 0 (its store at '
                                  'port 20000) still runs after 0.')
    assert e.value.msg.endswith("stopped before, it would leave rank 0's requests in flight; stop rank 0 first (a stop "
                                "of the whole group does), or force the stop")
    assert (e.value.result['signalled'], e.value.result['rank0']) == (False, 'running')
    forced = find_and_drain(procfs, timeout=0.3, force=True)['drains'][0]
    assert (forced['rank0'], forced['forced'], forced['seconds'] >= 0.3) == ('running', True, True)


def test_a_worker_is_stopped_once_its_rank_0_is_gone(worker):
    procfs, gone = worker
    threading.Timer(0.3, gone).start()
    drained = find_and_drain(procfs, timeout=10)['drains'][0]
    assert (drained['rank0'], drained['drained']) == ('gone', True) and 'forced' not in drained
    assert 0.25 <= drained['seconds'] < 5 and drained['readings'] >= 2


def test_check_mode_reads_whether_rank_0_runs_and_waits_for_nothing(worker):
    procfs, dummy = worker
    params = dict({'drain': True, 'presets': ['sglang'], 'default_url': 'http://127.0.0.1:30000', 'timeout': 10,
                   'interval': 0.1, 'request_timeout': 5, 'force': False})
    drained = sglang.find(merged(params), Deps(procfs, run=None, check_mode=True))['drains'][0]
    assert (drained['rank0'], drained['readings'], drained['seconds']) == ('running', 1, 0.0)


@pytest.mark.parametrize('argv, port', [
    (WORKER, 20000),
    (['python3', '-m', 'sglang.launch_server', '--dist-init-addr=[fd00::1]:20001'], 20001),
    (['python3', '-m', 'sglang.launch_server', '--dist-init-addr', 'head-0'], None),
    (['python3', '-m', 'sglang.launch_server', '--dist-init-addr', ':20000'], None),
    (['python3', '-m', 'sglang.launch_server'], None),
])
def test_the_port_of_rank_0_s_store_is_that_of_the_dist_init_addr(argv, port):
    assert sprocs.dist_port_of(argv) == port

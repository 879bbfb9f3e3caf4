# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gateway logic against a real local HTTP server that answers with the shapes the SGLang Model Gateway
0.3.2 answers (GET/POST /workers, DELETE /workers/{id}, 404 WORKER_NOT_FOUND, 401 without the admin key), as
measured against the real gateway; tests/integration/test_sglang_gateway.py runs the real one."""

from __future__ import annotations

import http.server
import json
import os
import threading
import uuid

import pytest

from ansible_collections.gpuops.host.plugins.module_utils import _gateway as gateway
from ansible_collections.gpuops.host.plugins.modules import sglang_gateway


def entry(url, model='llama', healthy=True, labels=None, priority=50, cost=1.0, model_id=None):
    metadata = {'model_path': '/models/' + model, 'served_model_name': model, 'tp_size': '2', 'dp_size': '1',
                'model_type': 'llama', 'architectures': '["LlamaForCausalLM"]', 'load_balance_method': 'auto',
                'disaggregation_mode': 'null'}
    if labels:
        metadata.update(labels, priority=str(priority), cost=str(cost))
    return {'id': str(uuid.uuid4()), 'url': url, 'model_id': model_id or model, 'priority': priority, 'cost': cost,
            'worker_type': 'regular', 'is_healthy': healthy, 'load': 0, 'connection_mode': 'HTTP',
            'metadata': metadata, 'disable_health_check': False}


class FakeGateway:
    """Workers in a list; POST adds one (healthy after HEALTHY_AFTER listings), DELETE removes it after
    GONE_AFTER listings; ADMIN_KEY wanted as a bearer token when set; every request in .calls."""

    def __init__(self, workers=()):
        self.workers = list(workers)
        self.calls = []
        self.admin_key = None
        self.healthy_after = 1
        self.gone_after = 1
        self.never_healthy = False
        self.pending = {}     # id -> listings left until healthy
        self.leaving = {}     # id -> listings left until unlisted
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header('Content-Type', 'application/json')
                self.send_header('Content-Length', str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method):
                length = int(self.headers.get('Content-Length') or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                fake.calls.append((method, self.path, body))
                if fake.admin_key and self.headers.get('Authorization') != 'Bearer ' + fake.admin_key:
                    return self._send(401, {'error': 'Unauthorized', 'code': 'UNAUTHORIZED'})
                status, answer = fake.answer(method, self.path, body)
                self._send(status, answer)

            def do_GET(self):
                self._handle('GET')

            def do_POST(self):
                self._handle('POST')

            def do_DELETE(self):
                self._handle('DELETE')

        self.httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.url = 'http://127.0.0.1:%d' % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def writes(self):
        return [c for c in self.calls if c[0] != 'GET']

    def answer(self, method, path, body):
        if method == 'GET' and path == '/workers':
            for wid in list(self.leaving):
                self.leaving[wid] -= 1
                if self.leaving[wid] < 0:
                    self.workers = [w for w in self.workers if w['id'] != wid]
                    del self.leaving[wid]
            for w in self.workers:
                if w['id'] in self.pending and not self.never_healthy:
                    self.pending[w['id']] -= 1
                    if self.pending[w['id']] < 0:
                        w['is_healthy'] = True
                        del self.pending[w['id']]
            return 200, {'workers': self.workers, 'total': len(self.workers)}
        if method == 'GET' and path.startswith('/workers/'):
            return 200, {'id': path[9:], 'job_status': {'job_type': 'AddWorker', 'status': 'failed',
                                                        'message': 'health check failed'}}
        if method == 'DELETE' and path.startswith('/workers/'):
            wid = path[9:]
            if not any(w['id'] == wid for w in self.workers):
                return 404, {'error': 'Worker %s not found' % wid, 'code': 'WORKER_NOT_FOUND'}
            self.leaving[wid] = self.gone_after
            return 202, {'status': 'accepted', 'worker_id': wid}
        if method == 'POST' and path == '/workers':
            listed = [w for w in self.workers if w['url'] == body['url']]
            if listed:
                return 202, {'status': 'accepted', 'worker_id': listed[0]['id']}
            labels = body.get('labels') or {}
            new = entry(body['url'], healthy=False, labels=labels, priority=body.get('priority', 50),
                        cost=body.get('cost', 1.0), model_id=body.get('model_id'))
            self.workers.append(new)
            self.pending[new['id']] = self.healthy_after
            return 202, {'status': 'accepted', 'worker_id': new['id']}
        return 404, {'error': 'not found'}

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake():
    gw = FakeGateway([entry('http://node-a:30000', labels={'zone': 'a'}, priority=7, cost=2.5),
                      entry('http://node-b:30000'), entry('http://node-c:30000'),
                      entry('http://node-m:30000', model='mistral')])
    yield gw
    gw.close()


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


@pytest.mark.parametrize('a, b, same', [
    ('http://node-a:30000', 'http://node-a:30000/', True),
    ('HTTP://Node-A:30000', 'http://node-a:30000', True),
    ('http://node-a:30000', 'http://node-a:30001', False),
    ('http://node-a:30000/x', 'http://node-a:30000/X', False),
])
def test_same_url(a, b, same):
    assert gateway.same_url(a, b) is same


@pytest.mark.parametrize('minimum, total, need', [
    ('0', 3, 0), ('2', 3, 2), (2, 5, 2), ('50%', 3, 2), ('50%', 4, 2), ('100%', 3, 3), ('34%', 3, 2), ('0%', 3, 0),
])
def test_required(minimum, total, need):
    assert gateway.required(minimum, total) == need


@pytest.mark.parametrize('minimum', ['-1', 'two', '150%', '%'])
def test_required_refuses_nonsense(minimum):
    with pytest.raises(gateway.GatewayError, match='min_healthy must be a count'):
        gateway.required(minimum, 3)


def test_registration_keeps_labels_priority_cost_and_a_given_model_id():
    worker = entry('http://node-a:30000', labels={'zone': 'a', 'rack': '7'}, priority=7, cost=2.5, model_id='prod')
    assert gateway.registration(worker) == {'model_id': 'prod', 'priority': 7, 'cost': 2.5, 'worker_type': 'regular',
                                            'labels': {'zone': 'a', 'rack': '7'}}


def test_registration_leaves_out_the_model_id_the_worker_reported():
    # The new server may serve another model: a model id read from the old one must not be pinned.
    assert 'model_id' not in gateway.registration(entry('http://node-b:30000'))
    assert 'labels' not in gateway.registration(entry('http://node-b:30000'))


def test_guard_counts_the_batch_and_only_the_model():
    workers = [entry('http://a'), entry('http://b'), entry('http://c', healthy=False), entry('http://m', model='m')]
    report = gateway.guard(workers, workers[:1], '1')
    assert report == {'llama': {'total': 3, 'healthy_after': 1, 'required': 1}}
    with pytest.raises(gateway.Refusal) as e:
        gateway.guard(workers, workers[:2], '1')
    assert str(e.value) == ('Refusing to take http://a, http://b out of the gateway: model llama would keep 0 healthy '
                            'worker(s), fewer than the minimum of 1 (min_healthy 1 of 3 listed). Nothing was changed.')
    with pytest.raises(gateway.Refusal, match=r'keep 1 healthy worker\(s\) \(http://b\), fewer than the minimum of 2'):
        gateway.guard(workers, workers[:1], '50%')


def test_take_out_removes_waits_and_returns_the_registration(fake):
    clock = Clock()
    gw = gateway.Gateway(fake.url)
    result = gateway.take_out(gw, 'http://node-a:30000/', clock, clock.sleep, minimum='2')
    assert result['changed'] is True and result['registration'] == {
        'priority': 7, 'cost': 2.5, 'worker_type': 'regular', 'labels': {'zone': 'a'}}
    assert result['capacity'] == {'llama': {'total': 3, 'healthy_after': 2, 'required': 2}}
    assert [c[0] for c in fake.writes()] == ['DELETE'] and result['seconds'] > 0
    assert not any(w['url'] == 'http://node-a:30000' for w in fake.workers)
    again = gateway.take_out(gw, 'http://node-a:30000', clock, clock.sleep)
    assert again['changed'] is False and again['registration'] is None and len(fake.writes()) == 1


def test_take_out_refused_by_the_guard_touches_nothing(fake):
    clock = Clock()
    with pytest.raises(gateway.Refusal, match='would keep 1 healthy worker'):
        gateway.take_out(gateway.Gateway(fake.url), 'http://node-a:30000', clock, clock.sleep, minimum='2',
                         leaving=['http://node-b:30000'])
    assert fake.writes() == []


def test_take_out_in_check_mode_writes_nothing(fake):
    clock = Clock()
    result = gateway.take_out(gateway.Gateway(fake.url), 'http://node-a:30000', clock, clock.sleep, check=True)
    assert result['changed'] is True and result['registration']['labels'] == {'zone': 'a'} and fake.writes() == []


def test_take_out_that_the_gateway_never_completes_fails(fake):
    fake.gone_after = 10 ** 6
    clock = Clock()
    with pytest.raises(gateway.GatewayError, match=r'http://node-b:30000 is still listed by the gateway .* 5.0 s after DELETE'):
        gateway.take_out(gateway.Gateway(fake.url), 'http://node-b:30000', clock, clock.sleep, timeout=5)


def served_by_a_gateway(port):
    """key_refusal's HOLDERS where the gateway's own process holds the port (FakeGateway stands in for it)."""
    return [{'pid': 4242, 'user': 'router', 'cmdline': 'sglang::router', 'gateway': True}]


def test_put_back_registers_the_same_fields_and_waits_healthy(fake):
    clock = Clock()
    gw = gateway.Gateway(fake.url, holders=served_by_a_gateway)
    out = gateway.take_out(gw, 'http://node-a:30000', clock, clock.sleep)
    fake.healthy_after = 3
    result = gateway.put_back(gw, 'http://node-a:30000', clock, clock.sleep, fields=out['registration'],
                              worker_api_key='sk-worker')
    post = fake.writes()[-1]
    assert post == ('POST', '/workers', {'url': 'http://node-a:30000', 'priority': 7, 'cost': 2.5,
                                         'worker_type': 'regular', 'labels': {'zone': 'a'}, 'api_key': 'sk-worker'})
    assert result['changed'] is True and result['worker']['is_healthy'] is True and 'api_key' not in result['registration']
    again = gateway.put_back(gw, 'http://node-a:30000', clock, clock.sleep, fields=out['registration'])
    assert again['changed'] is False and fake.writes()[-1] == post


def test_put_back_in_check_mode_writes_nothing(fake):
    clock = Clock()
    result = gateway.put_back(gateway.Gateway(fake.url), 'http://node-new:30000', clock, clock.sleep, check=True)
    assert result['changed'] is True and fake.writes() == []


def test_put_back_of_a_worker_that_never_turns_healthy_fails_with_the_job(fake):
    fake.never_healthy = True
    clock = Clock()
    with pytest.raises(gateway.GatewayError) as e:
        gateway.put_back(gateway.Gateway(fake.url), 'http://node-new:30000', clock, clock.sleep, timeout=3)
    assert str(e.value).startswith('http://node-new:30000 did not turn healthy in the gateway %s within 3.0 s: '
                                   'listed, not healthy; registration job: ' % fake.url)
    assert e.value.data['job']['status'] == 'failed'


def test_unreachable_gateway():
    with pytest.raises(gateway.GatewayError, match=r'GET http://127.0.0.1:9/workers: the gateway is unreachable: nothing listens'):
        gateway.Gateway('http://127.0.0.1:9').workers()


def test_an_error_status_carries_the_body(fake):
    fake.admin_key = 'sk-admin'
    with pytest.raises(gateway.GatewayError) as e:
        gateway.Gateway(fake.url).workers()
    assert str(e.value) == ('GET %s/workers answered HTTP 401 (the control plane wants an admin key: set admin_key): '
                            '{"error": "Unauthorized", "code": "UNAUTHORIZED"}' % fake.url)
    assert len(gateway.Gateway(fake.url, admin_key='sk-admin', holders=served_by_a_gateway).workers()) == 4


@pytest.mark.parametrize('url, holders, refusal', [
    ('https://gw.example:8443', None, None),
    ('http://gw.example:8080', served_by_a_gateway, 'the gateway URL http://gw.example:8080 is plain http to another '
     'host: anything on the way reads the keys sent there; use https, or run the task on the gateway\'s host '
     '(sglang_gateway_delegate_to) at a loopback URL'),
    ('http://10.0.0.7:8080', served_by_a_gateway, 'plain http to another host'),
    ('http://127.0.0.1:8080', served_by_a_gateway, None),
    ('http://[::1]:8080', served_by_a_gateway, None),
    ('http://localhost:8080', lambda port: [], 'http://localhost:8080 is not listened on, not an SGLang Model Gateway'),
    ('http://127.0.0.1:8080', lambda port: [{'pid': 77, 'user': 'nobody', 'cmdline': 'python3 squat.py', 'gateway': False}],
     'http://127.0.0.1:8080 is held by pid 77 (user nobody: python3 squat.py), not an SGLang Model Gateway'),
    ('http://127.0.0.1:8080', lambda port: None, 'who listens at http://127.0.0.1:8080 cannot be read on this host'),
])
def test_keys_go_over_https_or_to_a_gateway_s_own_loopback_listener(url, holders, refusal):
    got = gateway.key_refusal(url, holders)
    assert (got is None and refusal is None) or (refusal is not None and refusal in (got or '')), got


def test_no_key_goes_to_a_loopback_port_that_another_program_holds(fake):
    """The real /proc of this host: the test's own HTTP server (no gateway) holds the port, so the admin key and the
    worker's key stay here; a request without a key still goes."""
    fake.admin_key = None
    gw = gateway.Gateway(fake.url, admin_key='sk-admin', holders=gateway.listeners(fake.url))
    with pytest.raises(gateway.GatewayError) as e:
        gw.workers()
    assert 'not sent, since it carries a key: %s is held by pid %d' % (fake.url, os.getpid()) in str(e.value)
    assert fake.calls == []
    assert len(gateway.Gateway(fake.url, holders=gateway.listeners(fake.url)).workers()) == 4
    with pytest.raises(gateway.GatewayError):
        gateway.put_back(gateway.Gateway(fake.url, holders=gateway.listeners(fake.url)), 'http://node-new:30000',
                         Clock(), Clock().sleep, worker_api_key='sk-worker')
    assert [c[0] for c in fake.calls] == ['GET', 'GET']


def test_module_check_mode_and_apply(fake, run_module):
    args = {'gateway_url': fake.url, 'url': 'http://node-a:30000', 'state': 'absent', 'min_healthy': '2',
            'interval': 0.01}
    outcome, result, dummy = run_module(sglang_gateway, dict(args, _ansible_check_mode=True))
    assert outcome == 'exit' and result['changed'] is True and result['removed'] and fake.writes() == []
    outcome, result, dummy = run_module(sglang_gateway, args)
    assert outcome == 'exit' and result['changed'] is True and [c[0] for c in fake.writes()] == ['DELETE']
    registration = result['registration']
    outcome, result, dummy = run_module(sglang_gateway, args)
    assert outcome == 'exit' and result['changed'] is False
    back = {'gateway_url': fake.url, 'url': 'http://node-a:30000', 'state': 'present', 'registration': registration,
            'interval': 0.01}
    outcome, result, dummy = run_module(sglang_gateway, dict(back, _ansible_check_mode=True))
    assert outcome == 'exit' and result['changed'] is True and len(fake.writes()) == 1
    outcome, result, dummy = run_module(sglang_gateway, back)
    assert outcome == 'exit' and result['changed'] is True and result['worker']['is_healthy'] is True
    outcome, result, dummy = run_module(sglang_gateway, back)
    assert outcome == 'exit' and result['changed'] is False and len(fake.writes()) == 2


def test_module_fails_with_the_capacity(fake, run_module):
    outcome, result, dummy = run_module(sglang_gateway, {'gateway_url': fake.url, 'url': 'http://node-m:30000',
                                                         'state': 'absent', 'min_healthy': '1'})
    assert outcome == 'fail' and result['msg'].startswith('Refusing to take http://node-m:30000 out of the gateway: '
                                                          'model mistral would keep 0 healthy worker(s)')
    assert result['capacity'] == {'mistral': {'total': 1, 'healthy_after': 0, 'required': 1}} and fake.writes() == []


# -- a worker listed under another URL that reaches this node's server (issue 32) --

NODE_IP = '10.0.0.5'
HOSTS = {'gpu-1': [NODE_IP], 'gpu-1-dual': [NODE_IP, 'fd00::5'], 'gpu-9': ['10.0.0.9'], 'gw-remote': ['10.0.0.9'],
         'gw-here': [NODE_IP], 'self-alias': ['127.0.1.1'], 'shared': [NODE_IP, '10.0.0.9']}


def resolver(hosts=None):
    """A socket.getaddrinfo over HOSTS (name -> addresses); the names it was asked in .asked."""
    table = HOSTS if hosts is None else hosts

    def getaddrinfo(host, port, family=0, kind=0):
        resolver.asked.append(host)
        if host not in table:
            raise OSError(-2, 'Name or service not known')
        return [(10 if ':' in a else 2, kind, 6, '', (a, 0)) for a in table[host]]
    resolver.asked = []
    return getaddrinfo


def node(addresses=(NODE_IP, 'fd00::5'), local=True, names=('gpu-1',)):
    return gateway.Node(addresses, local=local, names=names, resolve=resolver())


@pytest.mark.parametrize('listed, gw_url, serves', [
    # the node's own address, IPv4 or IPv6, at the server's port and scheme
    ('http://10.0.0.5:30000', 'http://gw-remote:8080', True),
    ('http://[fd00::5]:30000/', 'http://gw-remote:8080', True),
    ('http://[::ffff:10.0.0.5]:30000', 'http://gw-remote:8080', True),
    # another port, another scheme, another host: another server
    ('http://10.0.0.5:30001', 'http://gw-remote:8080', False),
    ('https://10.0.0.5:30000', 'http://gw-remote:8080', False),
    ('http://10.0.0.9:30000', 'http://gw-remote:8080', False),
    # loopback is the node's only in a gateway on the node
    ('http://127.0.0.1:30000', 'http://127.0.0.1:8080', True),
    ('http://localhost:30000', 'http://localhost:8080', True),
    ('http://[::1]:30000', 'http://127.0.0.1:8080', True),
    ('http://127.0.0.1:30000', 'http://10.0.0.5:8080', True),
    ('http://127.0.0.1:30000', 'http://gw-here:8080', True),
    ('http://127.0.0.1:30000', 'http://10.0.0.9:8080', False),
    ('http://127.0.0.1:30000', 'http://gw-remote:8080', False),
    ('http://127.0.0.1:30001', 'http://127.0.0.1:8080', False),
    # host names: resolving to the node's addresses, or the node's own name (which /etc/hosts may map to loopback)
    ('http://gpu-1-dual:30000', 'http://gw-remote:8080', True),
    ('http://GPU-1:30000', 'http://gw-remote:8080', True),
    ('http://gpu-9:30000', 'http://gw-remote:8080', False),
    ('http://nowhere:30000', 'http://gw-remote:8080', False),
    ('http://self-alias:30000', 'http://127.0.0.1:8080', True),
    ('http://self-alias:30000', 'http://gw-remote:8080', False),
])
def test_a_worker_under_another_url_is_this_node_s_where_it_reaches_its_server(listed, gw_url, serves):
    assert node().serves(listed, 'http://node1.example:30000', gw_url) is serves


def test_a_loopback_gateway_is_not_on_the_node_when_the_module_runs_elsewhere():
    delegated = node(local=False, names=())
    assert delegated.serves('http://127.0.0.1:30000', 'http://gpu-1:30000', 'http://127.0.0.1:8080') is False
    assert delegated.serves('http://127.0.0.1:30000', 'http://gpu-1:30000', 'http://10.0.0.5:8080') is True
    assert delegated.serves('http://10.0.0.5:30000', 'http://gpu-1:30000', 'http://127.0.0.1:8080') is True


def test_each_host_is_resolved_once_and_only_at_the_server_s_port():
    n = node()
    workers = [{'url': 'http://gpu-9:30000'}, {'url': 'http://gpu-9:30000/'}, {'url': 'http://elsewhere:30001'}]
    assert gateway.this_nodes(workers, 'http://node1:30000', 'http://gw-remote:8080', n) == []
    assert resolver.asked == ['gpu-9']


@pytest.mark.parametrize('n, listed, gw_url, why', [
    (node(), 'http://shared:30000', 'http://gw-remote:8080',
     "shared resolves to 10.0.0.5 (this node's), 10.0.0.9 (another host's)"),
    (node(addresses=None), 'http://10.0.0.5:30000', 'http://gw-remote:8080',
     "this host's addresses cannot be read (/proc/net/fib_trie)"),
    (node(addresses=None), 'http://127.0.0.1:30000', 'http://10.0.0.5:8080',
     "a loopback URL of the gateway's host, and whether that is this node: this host's addresses cannot be read"),
])
def test_a_worker_that_may_or_may_not_be_this_node_s_is_refused_naming_both_urls(n, listed, gw_url, why):
    workers = [{'id': 'x', 'url': listed}]
    with pytest.raises(gateway.Ambiguous) as e:
        gateway.this_nodes(workers, 'http://node1:30000', gw_url, n)
    assert str(e.value).startswith(
        'Refusing to take http://node1:30000 out of the gateway %s: it lists %s, at the same port, and whether that '
        'reaches this node\'s server cannot be told (%s' % (gw_url, listed, why)), str(e.value)
    assert str(e.value).endswith('Set sglang_gateway_worker_url (url) to the URL the gateway lists this node\'s '
                                 'server by, or sglang_gateway_node_addresses (node_addresses) to the node\'s '
                                 'addresses. Nothing was changed.')
    assert e.value.data == {'listed': listed, 'url': 'http://node1:30000'}


def test_without_readable_addresses_loopback_in_a_loopback_gateway_is_still_told():
    n = node(addresses=None)
    assert n.serves('http://127.0.0.1:30000', 'http://node1:30000', 'http://127.0.0.1:8080') is True
    assert n.serves('http://node1:30000/', 'http://node1:30000', 'http://10.0.0.9:8080') is True


FIB_TRIE = """Main:
  +-- 0.0.0.0/0 3 0 5
     +-- 127.0.0.0/8 2 0 2
        +-- 127.0.0.0/31 1 0 0
           |-- 127.0.0.0
              /8 host LOCAL
           |-- 127.0.0.1
              /32 host LOCAL
        |-- 127.255.255.255
           /32 link BROADCAST
     +-- 10.0.0.0/24 2 0 2
        |-- 10.0.0.0
           /24 link UNICAST
        |-- 10.0.0.5
           /32 host LOCAL
        |-- 10.0.0.255
           /32 link BROADCAST
Local:
  +-- 0.0.0.0/0 3 0 5
     |-- 10.0.0.5
        /32 host LOCAL
"""
IF_INET6 = """fd000000000000000000000000000005 04 40 00 82     eth0
00000000000000000000000000000001 01 80 10 80       lo
"""


def fake_proc(tmp_path, fib_trie=FIB_TRIE, if_inet6=IF_INET6):
    (tmp_path / 'net').mkdir(parents=True)
    if fib_trie is not None:
        (tmp_path / 'net' / 'fib_trie').write_text(fib_trie)
    if if_inet6 is not None:
        (tmp_path / 'net' / 'if_inet6').write_text(if_inet6)
    return str(tmp_path)


def test_local_addresses_are_the_local_host_entries_and_the_ipv6_addresses(tmp_path):
    assert gateway.local_addresses(fake_proc(tmp_path)) == ['10.0.0.5', '127.0.0.1', '::1', 'fd00::5']


def test_local_addresses_without_fib_trie_are_unknown_and_without_if_inet6_ipv4_only(tmp_path):
    assert gateway.local_addresses(fake_proc(tmp_path / 'a', fib_trie=None)) is None
    assert gateway.local_addresses(fake_proc(tmp_path / 'b', if_inet6=None)) == ['10.0.0.5', '127.0.0.1']


def test_local_addresses_of_this_host():
    assert '127.0.0.1' in gateway.local_addresses()


def test_node_here_runs_on_the_node_unless_given_addresses_that_are_not_this_host_s(tmp_path):
    proc = fake_proc(tmp_path)
    here = gateway.Node.here(None, proc=proc, hostname=lambda: 'gpu-1.example')
    assert (here.addresses, here.local, here.names) == ({'10.0.0.5', 'fd00::5'}, True, {'gpu-1.example', 'gpu-1'})
    given = gateway.Node.here(['10.0.0.5', '192.0.2.7'], proc=proc, hostname=lambda: 'gpu-1')
    assert (given.addresses, given.local, given.names) == ({'10.0.0.5', '192.0.2.7'}, True, {'gpu-1'})
    delegated = gateway.Node.here(['10.0.0.77'], proc=proc, hostname=lambda: 'bastion')
    assert (delegated.addresses, delegated.local, delegated.names) == ({'10.0.0.77'}, False, frozenset())
    with pytest.raises(gateway.GatewayError, match=r"node_addresses must be IP addresses of the node, not 'gpu-1'"):
        gateway.Node.here(['10.0.0.5', 'gpu-1'], proc=proc)


@pytest.fixture
def on_node():
    """A gateway on the node (the fake listens on loopback) that lists this node's server as http://127.0.0.1:30000,
    and another node's under its host name and under its address, at the same port."""
    gw = FakeGateway([entry('http://127.0.0.1:30000', labels={'zone': 'a'}, priority=7, cost=2.5),
                      entry('http://gpu-9:30000'), entry('http://10.0.0.9:30000')])
    yield gw
    gw.close()


WORKER = 'http://node1.example:30000'


def test_take_out_removes_a_loopback_alias_and_put_back_registers_it_again_under_its_own_url(on_node):
    clock = Clock()
    gw = gateway.Gateway(on_node.url, holders=served_by_a_gateway)
    # without the node, the old behaviour: not listed, though the gateway routes to it
    assert gateway.take_out(gw, WORKER, clock, clock.sleep, check=True)['removed'] == []
    alias = on_node.workers[0]
    out = gateway.take_out(gw, WORKER, clock, clock.sleep, minimum='1', node=node())
    fields = {'priority': 7, 'cost': 2.5, 'worker_type': 'regular', 'labels': {'zone': 'a'}}
    assert out['changed'] is True and out['removed'] == [alias['id']] and out['worker'] == alias
    assert out['registration'] == fields
    assert out['registrations'] == [{'url': 'http://127.0.0.1:30000', 'registration': fields}]
    assert out['capacity'] == {'llama': {'total': 3, 'healthy_after': 2, 'required': 1}}
    assert [w['url'] for w in on_node.workers] == ['http://gpu-9:30000', 'http://10.0.0.9:30000']
    assert gateway.take_out(gw, WORKER, clock, clock.sleep, node=node())['changed'] is False

    fake_calls = len(on_node.writes())
    back = gateway.put_back(gw, WORKER, clock, clock.sleep, given=out['registrations'], worker_api_key='sk-worker',
                            node=node())
    assert on_node.writes()[fake_calls:] == [('POST', '/workers', dict(fields, url='http://127.0.0.1:30000',
                                                                       api_key='sk-worker'))]
    assert back['changed'] is True and back['worker']['url'] == 'http://127.0.0.1:30000'
    assert back['worker']['is_healthy'] is True
    assert back['registrations'] == [{'url': 'http://127.0.0.1:30000', 'registration': fields}]
    again = gateway.put_back(gw, WORKER, clock, clock.sleep, given=out['registrations'], node=node())
    assert again['changed'] is False and len(on_node.writes()) == fake_calls + 1


def test_take_out_of_the_url_and_its_alias_gives_back_each(on_node):
    on_node.workers.append(entry('http://10.0.0.5:30000', labels={'zone': 'b'}))
    on_node.workers.append(entry(WORKER + '/'))
    clock = Clock()
    gw = gateway.Gateway(on_node.url)
    check = gateway.take_out(gw, WORKER, clock, clock.sleep, check=True, node=node())
    assert [r['url'] for r in check['registrations']] == [WORKER + '/', 'http://127.0.0.1:30000', 'http://10.0.0.5:30000']
    assert check['registration'] == {'priority': 50, 'cost': 1.0, 'worker_type': 'regular'}
    assert check['worker']['url'] == WORKER + '/' and len(check['removed']) == 3 and on_node.writes() == []
    out = gateway.take_out(gw, WORKER, clock, clock.sleep, node=node())
    assert [c[0] for c in on_node.writes()] == ['DELETE'] * 3
    assert [w['url'] for w in on_node.workers] == ['http://gpu-9:30000', 'http://10.0.0.9:30000']
    gateway.put_back(gw, WORKER, clock, clock.sleep, given=out['registrations'], node=node())
    assert sorted(c[2]['url'] for c in on_node.writes() if c[0] == 'POST') == sorted(
        [WORKER, 'http://127.0.0.1:30000', 'http://10.0.0.5:30000'])
    assert [w['metadata'].get('zone') for w in on_node.workers if w['url'] == 'http://10.0.0.5:30000'] == ['b']


def test_a_guard_refusal_counts_the_alias_and_touches_nothing(on_node):
    clock = Clock()
    with pytest.raises(gateway.Refusal, match=r'Refusing to take http://127.0.0.1:30000, http://gpu-9:30000 out of the '
                                              r'gateway: model llama would keep 1 healthy worker\(s\) \(http://10.0.0.9:30000\)'):
        gateway.take_out(gateway.Gateway(on_node.url), WORKER, clock, clock.sleep, minimum='2',
                         leaving=['http://gpu-9:30000'], node=node())
    assert on_node.writes() == []


def test_take_out_refuses_an_ambiguous_worker_before_anything_is_touched(on_node):
    on_node.workers.append(entry('http://shared:30000'))
    clock = Clock()
    with pytest.raises(gateway.Ambiguous, match='it lists http://shared:30000, at the same port'):
        gateway.take_out(gateway.Gateway(on_node.url), WORKER, clock, clock.sleep, node=node())
    assert on_node.writes() == []


def test_put_back_refuses_a_registration_that_does_not_reach_this_node_s_server(on_node):
    clock = Clock()
    given = [{'url': 'http://127.0.0.1:30000', 'registration': {}}, {'url': 'http://gpu-9:30001', 'registration': {}}]
    with pytest.raises(gateway.GatewayError) as e:
        gateway.put_back(gateway.Gateway(on_node.url), WORKER, clock, clock.sleep, given=given, node=node())
    assert str(e.value) == ('Refusing to register http://gpu-9:30001 in the gateway %s as the worker of this node\'s '
                            'server %s: it does not reach that server. Nothing was changed.' % (on_node.url, WORKER))
    assert on_node.writes() == []


def test_put_back_and_query_of_the_url_find_the_alias_listed_already(on_node):
    clock = Clock()
    gw = gateway.Gateway(on_node.url)
    back = gateway.put_back(gw, WORKER, clock, clock.sleep, fields={'priority': 3}, node=node())
    assert back['changed'] is False and on_node.writes() == [] and back['worker']['url'] == 'http://127.0.0.1:30000'
    assert back['registrations'] == [{'url': 'http://127.0.0.1:30000', 'registration': {'priority': 3}}]
    found = gateway.query(gw, WORKER, node=node())
    assert found['worker']['url'] == 'http://127.0.0.1:30000' and found['registration']['labels'] == {'zone': 'a'}
    assert [r['url'] for r in found['registrations']] == ['http://127.0.0.1:30000']


def test_module_takes_out_the_loopback_alias_and_registers_it_again(run_module):
    """The module on this host, without node_addresses: the fake gateway on loopback runs here, on the node."""
    fake = FakeGateway([entry('http://127.0.0.1:30000', labels={'zone': 'a'}), entry('http://192.0.2.250:30000')])
    try:
        args = {'gateway_url': fake.url, 'url': WORKER, 'state': 'absent', 'interval': 0.01}
        outcome, result, dummy = run_module(sglang_gateway, args)
        assert outcome == 'exit' and result['changed'] is True, result
        assert result['registrations'] == [{'url': 'http://127.0.0.1:30000', 'registration': {
            'priority': 50, 'cost': 1.0, 'worker_type': 'regular', 'labels': {'zone': 'a'}}}]
        assert [w['url'] for w in fake.workers] == ['http://192.0.2.250:30000']
        back = {'gateway_url': fake.url, 'url': WORKER, 'state': 'present', 'interval': 0.01,
                'registrations': result['registrations']}
        outcome, result, dummy = run_module(sglang_gateway, back)
        assert outcome == 'exit' and result['changed'] is True and result['worker']['is_healthy'] is True, result
        assert sorted(w['url'] for w in fake.workers) == ['http://127.0.0.1:30000', 'http://192.0.2.250:30000']
        # Delegated elsewhere (addresses that are not this host's): loopback is another host's, nothing to take out.
        outcome, result, dummy = run_module(sglang_gateway, dict(args, node_addresses=['192.0.2.251']))
        assert outcome == 'exit' and result['changed'] is False and result['registrations'] == [], result
        outcome, result, dummy = run_module(sglang_gateway, dict(args, node_addresses=['node1']))
        assert outcome == 'fail' and result['msg'] == "node_addresses must be IP addresses of the node, not 'node1'"
        outcome, result, dummy = run_module(sglang_gateway, dict(back, registration={'priority': 1}))
        assert outcome == 'fail' and 'mutually exclusive' in result['msg'], result
    finally:
        fake.close()

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

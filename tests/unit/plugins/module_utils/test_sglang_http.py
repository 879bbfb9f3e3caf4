# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The HTTP side against a real local server that answers with the shapes of SGLang's handlers:
/metrics text as prometheus_client writes SGLang's gauges (srt/observability/metrics_collector.py),
/v1/loads as srt/entrypoints/v1_loads.py ``get_loads`` returns it, 401 as srt/utils/auth.py decides."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time

import pytest

from ansible_collections.gpuops.host.plugins.module_utils import _sglang_http as shttp

METRICS = '''# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="qwen",pp_rank="0",tp_rank="0"} %(running)s
sglang:num_running_reqs{engine_type="unified",model_name="qwen",pp_rank="0",priority="1",tp_rank="0"} %(running)s
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="unified",model_name="qwen",pp_rank="0",tp_rank="0"} %(queued)s
sglang:num_queue_reqs{engine_type="unified",model_name="qwen",pp_rank="0",priority="",tp_rank="0"} 0.0
sglang:num_used_tokens{model_name="qwen"} 1234.0
'''


def loads_doc(ranks):
    return {'timestamp': '2026-01-01T00:00:00+00:00', 'version': '0.5.23', 'accelerator': 'NVIDIA H200',
            'num_accelerators': 2,
            'loads': [{'timestamp': 0.0, 'dp_rank': i, 'num_running_reqs': r, 'num_waiting_reqs': w,
                       'num_used_tokens': 0, 'token_usage': 0.0} for i, (r, w) in enumerate(ranks)]}


class Server:
    """A local HTTP server; set .ranks (per DP rank (running, waiting)), .metrics, .metrics_delay, .api_key."""

    def __init__(self):
        self.ranks = [(0, 0)]
        self.metrics = False
        self.metrics_delay = 0.0
        self.api_key = None
        self.requests = []
        self.health = 200
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status, body, ctype='application/json'):
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header('Content-Type', ctype)
                self.send_header('Content-Length', str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorized(self):
                if self.path.startswith(('/health', '/metrics')) or not server.api_key:
                    return True
                return self.headers.get('Authorization') == 'Bearer ' + server.api_key

            def do_GET(self):
                server.requests.append(('GET', self.path, self.headers.get('Authorization')))
                if not self._authorized():
                    return self._send(401, {'error': 'Unauthorized'})
                if self.path == '/metrics':
                    if not server.metrics:
                        return self._send(404, {'detail': 'Not Found'})
                    time.sleep(server.metrics_delay)
                    running = sum(r for r, w in server.ranks)
                    queued = sum(w for r, w in server.ranks)
                    return self._send(200, METRICS % {'running': float(running), 'queued': float(queued)}, 'text/plain')
                if self.path == '/v1/loads':
                    return self._send(200, loads_doc(server.ranks))
                if self.path == '/server_info':
                    return self._send(200, {'tp_size': 2, 'cuda_graph_max_bs_decode': 160, 'internal_states': [{}]})
                if self.path == '/health_generate':
                    return self._send(server.health, {})
                return self._send(404, {'detail': 'Not Found'})

            def do_POST(self):
                length = int(self.headers.get('Content-Length') or 0)
                body = json.loads(self.rfile.read(length) or b'{}')
                server.requests.append(('POST', self.path, body))
                if not self._authorized():
                    return self._send(401, {'error': 'Unauthorized'})
                if self.path == '/abort_request':
                    server.ranks = [(0, 0) for dummy in server.ranks]
                    return self._send(200, '')
                if self.path == '/generate':
                    return self._send(200, {'text': 'x', 'meta_info': {'id': body.get('rid')}})
                return self._send(404, {'detail': 'Not Found'})

        self.httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.httpd.daemon_threads = True
        self.url = 'http://127.0.0.1:%d' % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


def refused_url():
    sock = socket.socket()
    sock.bind(('127.0.0.1', 0))
    port = sock.getsockname()[1]
    sock.close()
    return 'http://127.0.0.1:%d' % port


class FakeTime:
    def __init__(self):
        self.now = 1000.0
        self.sleeps = []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


# -- counting ------------------------------------------------------------------------------

def test_count_metrics_adds_running_and_queued_totals_but_not_the_priority_breakdown():
    assert shttp.count_metrics(METRICS % {'running': '3.0', 'queued': '2.0'}) == 5
    assert shttp.count_metrics('sglang:num_used_tokens 1.0\n') is None
    assert shttp.count_metrics('sglang:num_running_reqs 1.0\nsglang:num_queue_reqs{dp_rank="1"} 2\n') == 3


def test_count_loads_adds_every_dp_rank():
    assert shttp.count_loads(loads_doc([(1, 2), (3, 4)])) == 10
    assert shttp.count_loads({'loads': []}) is None
    assert shttp.count_loads({'internal_states': [{'num_running_reqs': 0}]}) is None
    assert shttp.count_loads({'loads': [{'num_running_reqs': 1}]}) is None


@pytest.mark.parametrize('metrics', [True, False])
def test_reading_uses_metrics_when_served_else_loads(server, metrics):
    server.metrics = metrics
    server.ranks = [(2, 1), (0, 4)]
    reading = shttp.InFlight(shttp.Client(server.url)).read(5, time.monotonic)
    assert (reading.count, reading.source) == (7, 'metrics' if metrics else 'loads')


def test_reading_falls_back_to_loads_when_metrics_is_slower_than_the_request_timeout(server):
    server.metrics = True
    server.metrics_delay = 3
    server.ranks = [(1, 0)]
    counter = shttp.InFlight(shttp.Client(server.url))
    reading = counter.read(2, time.monotonic)
    # /metrics used the whole budget: this reading is unknown, never zero
    assert reading.count is None and 'no answer within' in reading.error and not reading.refused
    reading = counter.read(30, time.monotonic)
    assert (reading.count, reading.source) == (1, 'metrics')


def test_reading_with_an_api_key(server):
    server.api_key = 'k-123456'
    server.ranks = [(2, 0)]
    reading = shttp.InFlight(shttp.Client(server.url)).read(5, time.monotonic)
    assert reading.count is None and reading.auth and 'HTTP 401' in reading.error
    reading = shttp.InFlight(shttp.Client(server.url, api_key='k-123456')).read(5, time.monotonic)
    assert (reading.count, reading.source) == (2, 'loads')


def test_reading_with_an_api_key_and_metrics_needs_no_key(server):
    server.api_key = 'k-123456'
    server.metrics = True
    server.ranks = [(2, 0)]
    reading = shttp.InFlight(shttp.Client(server.url)).read(5, time.monotonic)
    assert (reading.count, reading.source) == (2, 'metrics')


def test_refused_connection_is_not_serving():
    reading = shttp.InFlight(shttp.Client(refused_url())).read(5, time.monotonic)
    assert reading.refused and reading.count is None


# -- the drain -----------------------------------------------------------------------------

def test_drain_waits_until_zero(server):
    server.ranks = [(1, 1)]
    fake = FakeTime()

    def sleep(seconds):
        fake.sleep(seconds)
        if len(fake.sleeps) == 3:
            server.ranks = [(0, 0)]

    result = shttp.drain(shttp.Client(server.url), 60, 2, 10, fake.clock, sleep)
    assert result['drained'] and result['serving'] and result['in_flight'] == 0 and result['readings'] == 4


def test_drain_times_out_with_the_count(server):
    server.ranks = [(1, 0), (0, 2)]
    fake = FakeTime()
    result = shttp.drain(shttp.Client(server.url), 5, 2, 10, fake.clock, fake.sleep)
    assert not result['drained'] and result['in_flight'] == 3 and result['source'] == 'loads'
    assert fake.sleeps == [2, 2, 1]


def test_drain_of_a_server_that_is_not_listening():
    result = shttp.drain(shttp.Client(refused_url()), 5, 1, 1, time.monotonic, time.sleep)
    assert result['drained'] and not result['serving']


def test_drain_without_the_api_key_ends_at_once_unknown(server):
    server.api_key = 'k-123456'
    fake = FakeTime()
    result = shttp.drain(shttp.Client(server.url), 600, 2, 10, fake.clock, fake.sleep)
    assert not result['drained'] and result['in_flight'] is None and result['needs_api_key']
    assert fake.sleeps == []


class TimingOut:
    """An opener whose every request takes its whole timeout (on the fake clock) and fails."""

    def __init__(self, fake):
        self.fake = fake
        self.timeouts = []

    def open(self, req, timeout):
        self.timeouts.append(timeout)
        self.fake.now += timeout
        raise socket.timeout('timed out')


def test_drain_bound_is_the_timeout_even_when_every_request_times_out():
    fake = FakeTime()
    opener = TimingOut(fake)
    result = shttp.drain(shttp.Client('http://127.0.0.1:1', opener=opener), 25, 2, 10, fake.clock, fake.sleep)
    assert not result['drained'] and result['in_flight'] is None
    assert fake.now - 1000.0 == pytest.approx(25)
    # /metrics then /v1/loads share each reading's budget, which the time left cuts
    assert max(opener.timeouts) <= 10 and sum(opener.timeouts) + sum(fake.sleeps) == pytest.approx(25)


def test_abort_all(server):
    server.ranks = [(3, 0)]
    assert shttp.abort_all(shttp.Client(server.url), 5) is None
    assert server.requests[-1] == ('POST', '/abort_request', {'abort_all': True})
    assert shttp.count_loads(loads_doc(server.ranks)) == 0


# -- readiness, probe, /server_info --------------------------------------------------------

def test_wait_ready(server):
    fake = FakeTime()
    server.health = 503
    calls = []

    def alive():
        calls.append(1)
        if len(calls) == 3:
            server.health = 200
        return True

    result = shttp.wait_ready(shttp.Client(server.url), '/health_generate', 60, 1, 5, alive, fake.clock, fake.sleep)
    assert result['ready'] and result['last'] == 'HTTP 200'


def test_wait_ready_stops_when_the_process_dies(server):
    server.health = 503
    result = shttp.wait_ready(shttp.Client(server.url), '/health_generate', 60, 1, 5, lambda: False,
                              time.monotonic, time.sleep)
    assert result['died'] and not result['ready']


def test_wait_ready_times_out_with_the_last_answer(server):
    server.health = 503
    fake = FakeTime()
    result = shttp.wait_ready(shttp.Client(server.url), '/health_generate', 3, 1, 5, lambda: True, fake.clock, fake.sleep)
    assert not result['ready'] and not result['died'] and result['last'] == 'HTTP 503'


def test_generate_sends_its_rid(server):
    answer = shttp.generate(shttp.Client(server.url), 'probe-1', 'hello', 5)
    assert answer.status == 200 and server.requests[-1][2]['rid'] == 'probe-1'


def test_server_info(server):
    assert shttp.server_info(shttp.Client(server.url), 5)['cuda_graph_max_bs_decode'] == 160
    server.api_key = 'k-123456'
    with pytest.raises(shttp.Unanswered, match='HTTP 401 .*API key'):
        shttp.server_info(shttp.Client(server.url), 5)

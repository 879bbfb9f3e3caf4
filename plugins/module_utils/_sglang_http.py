# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Talking to a running SGLang server over HTTP: its requests in flight, the drain, readiness,
a probe request, and its own view of its arguments.

Endpoints, as both supported releases (0.5.14, 0.5.23) serve them (``srt/entrypoints``):

- ``/metrics`` exists only with ``--enable-metrics``; the gauges ``sglang:num_running_reqs`` and
  ``sglang:num_queue_reqs`` (``srt/observability/metrics_collector.py``) carry the total under
  the default labels and, with priority scheduling, a breakdown under ``priority="<n>"`` that must not
  be added again. ``/metrics`` and ``/health*`` need no API key (``srt/utils/auth.py``
  ``decide_request_auth``).
- ``/v1/loads`` (``v1_loads.py`` ``get_loads``) answers ``{"loads": [{"dp_rank", "num_running_reqs",
  "num_waiting_reqs", ...}, ...]}``, one entry per data-parallel rank; with ``--api-key`` it needs
  the bearer token.
- ``/server_info`` holds the resolved server arguments, flat, plus ``internal_states``, which
  carries no request counts.
- ``/abort_request`` with ``{"abort_all": true}`` ends every request in flight.
"""

from __future__ import annotations

import errno
import json
import re
import socket

from urllib.error import HTTPError, URLError
from urllib.request import HTTPRedirectHandler, ProxyHandler, Request, build_opener

_METRIC = re.compile(r'^sglang:num_(running|queue)_reqs(?:\{([^}]*)\})?\s+(\S+)', re.MULTILINE)
_PRIORITY = re.compile(r'(?:^|,)\s*priority="([^"]*)"')


class Refused(Exception):
    """Nothing listens at the server's address."""


class Unanswered(Exception):
    """The request got no usable answer (timeout, reset, unreachable); the message says which."""


class Answer:
    def __init__(self, status, body):
        self.status = status
        self.body = body

    def text(self):
        return self.body.decode('utf-8', 'replace')

    def json(self):
        return json.loads(self.text())


def _refused(reason):
    return isinstance(reason, ConnectionRefusedError) or getattr(reason, 'errno', None) == errno.ECONNREFUSED


# Paths that SGLang serves without the API key (srt/utils/auth.py decide_request_auth): no key is sent there.
UNKEYED = ('/health', '/health_generate', '/metrics')


class _NoRedirect(HTTPRedirectHandler):
    """Follow no redirect: urllib's handler would send the request again, Authorization header included, to
    whatever address the answer names. The 3xx comes back as the answer."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def default_opener():
    """urllib's opener for servers and gateways: no proxy (the environment's proxy would see every key), no
    redirect."""
    return build_opener(ProxyHandler({}), _NoRedirect())


class Client:
    """HTTP to one server. OPENER is urllib's (injected in tests); proxies and redirects are never followed.

    The API key goes only with requests to paths that need it (not UNKEYED), and only after GUARD(), when given,
    returned: GUARD raises (see _sglang_procs.Guard) where the address no longer belongs to the server."""

    def __init__(self, url, api_key=None, opener=None, guard=None):
        self.url = url.rstrip('/')
        self.api_key = api_key
        self.opener = opener or default_opener()
        self.guard = guard

    def request(self, path, timeout, body=None, method=None):
        """An Answer for any HTTP status; Refused or Unanswered when there is none. METHOD: GET, or POST with a BODY."""
        headers = {'Accept': 'application/json, text/plain'}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers['Content-Type'] = 'application/json'
        if self.api_key and path.split('?', 1)[0] not in UNKEYED:
            if self.guard is not None:
                self.guard()
            headers['Authorization'] = 'Bearer ' + self.api_key
        req = Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with self.opener.open(req, timeout=max(timeout, 0.05)) as res:
                return Answer(res.status, res.read())
        except HTTPError as e:
            return Answer(e.code, e.read() or b'')
        except URLError as e:
            if _refused(e.reason):
                raise Refused('nothing listens at %s' % self.url)
            if isinstance(e.reason, socket.timeout) or 'timed out' in str(e.reason):
                raise Unanswered('%s%s: no answer within %.1f s' % (self.url, path, timeout))
            raise Unanswered('%s%s: %s' % (self.url, path, e.reason))
        except socket.timeout:
            raise Unanswered('%s%s: no answer within %.1f s' % (self.url, path, timeout))
        except OSError as e:
            if _refused(e):
                raise Refused('nothing listens at %s' % self.url)
            raise Unanswered('%s%s: %s' % (self.url, path, e))


def count_metrics(text):
    """Requests running plus queued from /metrics text, or None when the gauges are absent."""
    total, seen = 0.0, False
    for dummy, labels, value in _METRIC.findall(text):
        priority = _PRIORITY.search(labels or '')
        if priority and priority.group(1):
            continue  # per-priority breakdown of the total reported beside it
        try:
            total += float(value)
        except ValueError:
            return None
        seen = True
    return int(round(total)) if seen else None


def count_loads(doc):
    """Requests running plus waiting over every DP rank of a /v1/loads answer, or None when it has no counts."""
    loads = doc.get('loads') if isinstance(doc, dict) else None
    if not isinstance(loads, list) or not loads:
        return None
    total = 0
    for load in loads:
        if not isinstance(load, dict) or 'num_running_reqs' not in load or 'num_waiting_reqs' not in load:
            return None
        total += int(load['num_running_reqs']) + int(load['num_waiting_reqs'])
    return total


class Reading:
    """One reading of the requests in flight: COUNT, or None with ERROR; REFUSED when nothing listens."""

    def __init__(self, count=None, source=None, error=None, refused=False, auth=False):
        self.count = count
        self.source = source
        self.error = error
        self.refused = refused
        self.auth = auth


class InFlight:
    """Reads the requests in flight: from /metrics while it serves the gauges, else from /v1/loads."""

    def __init__(self, client):
        self.client = client
        self.metrics = None  # None: not known yet; False: the server has no /metrics

    def read(self, timeout, clock):
        """A Reading within TIMEOUT seconds in all (CLOCK gives the time)."""
        deadline = clock() + timeout
        errors, auth = [], False
        sources = (('metrics', self._metrics), ('loads', self._loads)) if self.metrics is not False else (('loads', self._loads),)
        for name, read in sources:
            left = deadline - clock()
            if left <= 0:
                errors.append('%s: no time left' % name)
                break
            try:
                count, error = read(left)
            except Refused as e:
                return Reading(refused=True, error=str(e))
            except Unanswered as e:
                count, error = None, str(e)
            if count is not None:
                return Reading(count=count, source=name)
            auth = auth or (error or '').startswith('HTTP 401') or (error or '').startswith('HTTP 403')
            errors.append('%s: %s' % (name, error))
        return Reading(error='; '.join(errors), auth=auth)

    def _metrics(self, timeout):
        answer = self.client.request('/metrics', timeout)
        if answer.status == 404:
            self.metrics = False
            return None, 'HTTP 404 (the server runs without --enable-metrics)'
        if answer.status != 200:
            return None, 'HTTP %d' % answer.status
        count = count_metrics(answer.text())
        if count is None:
            return None, 'no sglang:num_running_reqs or sglang:num_queue_reqs gauge'
        self.metrics = True
        return count, None

    def _loads(self, timeout):
        answer = self.client.request('/v1/loads', timeout)
        if answer.status != 200:
            hint = ' (the server has an API key: pass it)' if answer.status in (401, 403) else ''
            return None, 'HTTP %d%s' % (answer.status, hint)
        try:
            count = count_loads(answer.json())
        except (ValueError, TypeError):
            return None, 'not JSON'
        if count is None:
            return None, 'no num_running_reqs/num_waiting_reqs per DP rank'
        return count, None


def drain(client, timeout, interval, request_timeout, clock, sleep):
    """Wait until the server has no request in flight, at most TIMEOUT seconds in all: each reading's
    own timeout is cut to the time left, and so is each pause.

    A count that cannot be read is not zero: the wait goes on. A refused connection means the server
    is not serving (it cannot hold requests). Returns a dict: drained, serving, in_flight (the last
    count, None when unknown), source, readings, seconds, error."""
    start = clock()
    deadline = start + timeout
    counter = InFlight(client)
    readings = 0
    last = Reading()
    while True:
        left = deadline - clock()
        last = counter.read(min(request_timeout, max(left, 1.0)), clock)
        readings += 1
        result = {'readings': readings, 'seconds': round(clock() - start, 2), 'source': last.source,
                  'in_flight': last.count, 'error': last.error, 'needs_api_key': last.auth and last.count is None}
        if last.refused:
            return dict(result, drained=True, serving=False)
        if last.count == 0:
            return dict(result, drained=True, serving=True)
        if result['needs_api_key']:
            return dict(result, drained=False, serving=True)
        left = deadline - clock()
        if left <= 0:
            return dict(result, drained=False, serving=True)
        sleep(min(interval, left))


def abort_all(client, timeout):
    """Ask the server to end every request in flight; an error message, or None when it accepted."""
    try:
        answer = client.request('/abort_request', timeout, body={'abort_all': True})
    except (Refused, Unanswered) as e:
        return str(e)
    return None if answer.status == 200 else 'HTTP %d' % answer.status


def wait_ready(client, path, timeout, interval, request_timeout, alive, clock, sleep):
    """Wait until PATH answers 200, at most TIMEOUT seconds; stop at once when ALIVE() turns false.
    Returns a dict: ready, died, seconds, last (the last answer or error)."""
    start = clock()
    deadline = start + timeout
    last = 'no answer yet'
    while True:
        if not alive():
            return {'ready': False, 'died': True, 'seconds': round(clock() - start, 2), 'last': last}
        left = deadline - clock()
        try:
            answer = client.request(path, min(request_timeout, max(left, 1.0)))
            if answer.status == 200:
                return {'ready': True, 'died': False, 'seconds': round(clock() - start, 2), 'last': 'HTTP 200'}
            last = 'HTTP %d' % answer.status
        except (Refused, Unanswered) as e:
            last = str(e)
        left = deadline - clock()
        if left <= 0:
            return {'ready': False, 'died': False, 'seconds': round(clock() - start, 2), 'last': last}
        sleep(min(interval, left))


def generate(client, rid, prompt, timeout):
    """One /generate request with request id RID and one new token; the Answer."""
    body = {'rid': rid, 'text': prompt, 'sampling_params': {'max_new_tokens': 1, 'temperature': 0}}
    return client.request('/generate', timeout, body=body)


def server_info(client, timeout):
    """The server's /server_info mapping; Unanswered when it gives none."""
    answer = client.request('/server_info', timeout)
    if answer.status != 200:
        hint = ' (the server has an API key: pass it)' if answer.status in (401, 403) else ''
        raise Unanswered('%s/server_info: HTTP %d%s' % (client.url, answer.status, hint))
    try:
        info = answer.json()
    except ValueError:
        raise Unanswered('%s/server_info: not JSON' % client.url)
    if not isinstance(info, dict):
        raise Unanswered('%s/server_info: not a mapping' % client.url)
    return info

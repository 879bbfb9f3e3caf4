# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A worker's registration in the SGLang Model Gateway (PyPI ``sglang-router``): find it by URL, take it out,
register it again with the same fields, wait for the gateway to list it healthy or no more.

The control plane of sglang-router 0.3.2, as measured against the real gateway:

- ``GET /workers`` answers ``{"workers": [...]}``; each worker has ``id`` (a UUID), ``url``, ``model_id``,
  ``priority``, ``cost``, ``worker_type``, ``is_healthy``, ``load``, ``connection_mode``,
  ``disable_health_check`` and ``metadata``: the labels given at registration, merged with what the gateway
  read from the worker's ``/server_info`` and ``/model_info`` (``DISCOVERED``) and with ``priority`` and
  ``cost`` as strings. The worker API key is not listed.
- ``POST /workers`` with a JSON body (``url``, ``model_id``, ``priority``, ``cost``, ``labels``,
  ``worker_type``, ``api_key``, ...) answers 202 with ``worker_id`` and registers in the background;
  ``GET /workers/{id}`` shows the job (``job_status``) meanwhile. Unknown fields are ignored. A URL that is
  listed already answers 202 with the listed id.
- ``DELETE /workers/{id}`` answers 202 and takes the worker out of routing at once; an unknown id answers 404
  ``{"error": ..., "code": "WORKER_NOT_FOUND"}``.
- With ``--control-plane-api-keys``, the control plane wants ``Authorization: Bearer <admin key>``.
"""

from __future__ import annotations

import math

import ipaddress
from urllib.parse import urlsplit

from ansible_collections.gpuops.host.plugins.module_utils._gateway_procs import is_gateway
from ansible_collections.gpuops.host.plugins.module_utils._procs import ProcFS
from ansible_collections.gpuops.host.plugins.module_utils._sglang_args import Redactor
from ansible_collections.gpuops.host.plugins.module_utils._sglang_http import Client, Refused, Unanswered
from ansible_collections.gpuops.host.plugins.module_utils._sglang_procs import port_holders

# What the gateway puts into a worker's metadata itself (from /server_info and /model_info, and the
# registration's priority and cost): not labels to give again, since the new server reports its own.
DISCOVERED = frozenset((
    'model_path', 'is_generation', 'model_type', 'architectures', 'served_model_name', 'tp_size', 'dp_size',
    'load_balance_method', 'disaggregation_mode', 'max_batch_size', 'max_prefill_tokens', 'max_running_requests',
    'max_num_reqs', 'priority', 'cost',
))


class GatewayError(Exception):
    """A gateway that cannot be read or refused a change; the message says which gateway, what and why."""

    def __init__(self, msg, **data):
        super().__init__(msg)
        self.data = data


class Refusal(GatewayError):
    """The capacity guard refused to take the worker out; nothing was changed."""


def same_url(a, b):
    """Whether two worker URLs name the same worker: scheme and host compared without case, no trailing slash."""
    def norm(url):
        url = (url or '').strip().rstrip('/')
        scheme, sep, rest = url.partition('://')
        if not sep:
            return url.lower()
        host, slash, path = rest.partition('/')
        return '%s://%s%s%s' % (scheme.lower(), host.lower(), slash, path)
    return norm(a) == norm(b)


def registration(worker):
    """The fields to register WORKER (an entry of GET /workers) again with: model_id when it was given rather
    than read from the server, priority, cost, worker_type, labels, and disable_health_check when set."""
    metadata = worker.get('metadata') or {}
    reg = {}
    model_id = worker.get('model_id')
    if model_id and model_id not in (metadata.get('served_model_name'), metadata.get('model_path')):
        reg['model_id'] = model_id
    for key in ('priority', 'cost', 'worker_type'):
        if worker.get(key) is not None:
            reg[key] = worker[key]
    labels = dict((k, v) for k, v in metadata.items() if k not in DISCOVERED)
    if labels:
        reg['labels'] = labels
    if worker.get('disable_health_check'):
        reg['disable_health_check'] = True
    return reg


def required(minimum, total):
    """How many healthy workers MINIMUM asks for among TOTAL: an int, or a string 'N' or 'N%' (rounded up)."""
    text = str(minimum).strip()
    try:
        if text.endswith('%'):
            percent = float(text[:-1])
            if not 0 <= percent <= 100:
                raise ValueError(text)
            return int(math.ceil(percent * total / 100.0 - 1e-9))
        count = int(text)
        if count < 0:
            raise ValueError(text)
        return count
    except ValueError:
        raise GatewayError('min_healthy must be a count (2) or a percentage (50%%), not %r' % (minimum,))


def guard(workers, leaving, minimum, models=None):
    """Check that taking out the workers in LEAVING (a list of worker entries) leaves at least MINIMUM healthy
    workers for each of MODELS (default: the models of LEAVING), counting every worker listed for the model.
    Raises Refusal; returns {model_id: {'total', 'healthy_after', 'required'}}."""
    leaving_ids = set(w['id'] for w in leaving)
    report = {}
    for model in sorted(set(w.get('model_id') for w in leaving) if models is None else models):
        peers = [w for w in workers if w.get('model_id') == model]
        after = [w for w in peers if w.get('is_healthy') and w['id'] not in leaving_ids]
        need = required(minimum, len(peers))
        report[model] = {'total': len(peers), 'healthy_after': len(after), 'required': need}
        if len(after) < need:
            raise Refusal(
                'Refusing to take %s out of the gateway: model %s would keep %d healthy worker(s)%s, fewer than the '
                'minimum of %d (min_healthy %s of %d listed). Nothing was changed.'
                % (', '.join(sorted(set(w['url'] for w in leaving))), model, len(after),
                   (' (' + ', '.join(w['url'] for w in after) + ')') if after else '', need, minimum, len(peers)),
                capacity=report)
    return report


def loopback(host):
    """Whether HOST (a URL's host) is a loopback address or ``localhost``."""
    host = (host or '').strip('[]').lower()
    if host == 'localhost':
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def key_refusal(url, holders):
    """Why no key (the admin key, a worker's API key) may go to the gateway at URL, or None. Over https the
    certificate names the gateway; plain http only to a loopback address whose listening socket a gateway process
    holds, and nothing else: HOLDERS(port) gives the processes that hold the listener on that port of the URL's
    address, as dicts with ``pid``, ``user``, ``cmdline`` and ``gateway`` (gateways.is_gateway), or None when that
    cannot be read."""
    parts = urlsplit(url)
    if parts.scheme == 'https':
        return None
    if not loopback(parts.hostname):
        return ('the gateway URL %s is plain http to another host: anything on the way reads the keys sent there; '
                'use https, or run the task on the gateway\'s host (sglang_gateway_delegate_to) at a loopback URL'
                % url)
    found = holders(parts.port or 80) if holders else None
    if found is None:
        return 'who listens at %s cannot be read on this host' % url
    strangers = [h for h in found if not h['gateway']]
    if strangers or not found:
        who = ', '.join('pid %d (user %s: %s)' % (h['pid'], h['user'], h['cmdline']) for h in strangers)
        return '%s is %s, not an SGLang Model Gateway' % (url, 'held by ' + who if who else 'not listened on')
    return None


def listeners(url, procfs=None):
    """HOLDERS for key_refusal: PORT -> the processes of this host that hold a socket listening on PORT at the
    address of URL (port_holders), each with ``gateway``; None when that cannot be told from here."""
    def holders(port):
        fs = procfs or ProcFS()
        table = fs.snapshot()
        if not table:
            return None
        host = urlsplit(url).hostname
        held = port_holders(fs, table, port, Redactor([]), None if host == 'localhost' else host)
        if held['unheld']:
            return None
        return [dict(h, gateway=is_gateway(table[h['pid']])) for h in held['holders']]
    return holders


class Gateway:
    """The control plane of one gateway at URL. OPENER (urllib's) is injected in tests; proxies and redirects are
    never followed. A request that carries a key (ADMIN_KEY, or a worker's ``api_key`` in its body) is sent only
    where key_refusal(URL, HOLDERS) finds nothing to refuse, checked before each such request."""

    def __init__(self, url, admin_key=None, timeout=10.0, opener=None, holders=None):
        self.url = url.rstrip('/')
        self.client = Client(self.url, api_key=admin_key or None, opener=opener)
        self.timeout = timeout
        self.holders = holders

    def call(self, method, path, body=None, ok=(200,)):
        """The parsed JSON answer of METHOD PATH; GatewayError for no answer or another status."""
        what = '%s %s%s' % (method, self.url, path)
        if self.client.api_key or (isinstance(body, dict) and body.get('api_key')):
            refusal = key_refusal(self.url, self.holders)
            if refusal:
                raise GatewayError('%s: not sent, since it carries a key: %s' % (what, refusal), refused=refusal)
        try:
            answer = self.client.request(path, self.timeout, body=body, method=method)
        except Refused:
            raise GatewayError('%s: the gateway is unreachable: nothing listens at %s' % (what, self.url))
        except Unanswered as e:
            raise GatewayError('%s: the gateway is unreachable: %s' % (what, e))
        if answer.status not in ok:
            hint = ' (the control plane wants an admin key: set admin_key)' if answer.status in (401, 403) else ''
            raise GatewayError('%s answered HTTP %d%s: %s' % (what, answer.status, hint, answer.text()[:2000].strip()),
                               status=answer.status, body=answer.text()[:2000])
        try:
            return answer.json()
        except ValueError:
            raise GatewayError('%s answered HTTP %d with no JSON: %s' % (what, answer.status, answer.text()[:2000]))

    def workers(self):
        doc = self.call('GET', '/workers')
        workers = doc.get('workers') if isinstance(doc, dict) else None
        if not isinstance(workers, list):
            raise GatewayError('GET %s/workers: no list of workers in the answer: %r' % (self.url, doc))
        return workers

    def matching(self, url):
        return [w for w in self.workers() if same_url(w.get('url'), url)]

    def job(self, worker_id):
        """The background job of WORKER_ID (GET /workers/{id}: job_status), or None."""
        try:
            return self.call('GET', '/workers/' + worker_id).get('job_status')
        except GatewayError:
            return None

    def remove(self, worker_id):
        return self.call('DELETE', '/workers/' + worker_id, ok=(200, 202, 404))

    def add(self, body):
        return self.call('POST', '/workers', body=body, ok=(200, 201, 202))


def _wait(check, timeout, interval, clock, sleep):
    """Call CHECK() until it returns a true value or TIMEOUT seconds passed; (value, seconds)."""
    start = clock()
    while True:
        value = check()
        left = start + timeout - clock()
        if value or left <= 0:
            return value, round(clock() - start, 2)
        sleep(min(interval, left))


def take_out(gw, url, clock, sleep, minimum='0', leaving=(), check=False, wait=True, timeout=60.0, interval=0.5):
    """Take every worker listed at URL out of gateway GW, once the capacity guard passed, and wait until the
    gateway lists it no more. LEAVING: other worker URLs that leave at the same time (the rest of a batch),
    counted as gone by the guard. CHECK: plan only. Returns the result dict of the module."""
    workers = gw.workers()
    mine = [w for w in workers if same_url(w.get('url'), url)]
    if not mine:
        return {'changed': False, 'registration': None, 'removed': [], 'workers': workers, 'capacity': {},
                'worker': None, 'seconds': 0.0}
    others = [w for w in workers if not any(same_url(w.get('url'), u) for u in [url] + list(leaving))]
    gone = [w for w in workers if w not in others]
    # The rest of the batch counts as gone, but only this worker's models decide here.
    capacity = guard(workers, gone, minimum, models=set(w.get('model_id') for w in mine))
    result = {'changed': True, 'registration': registration(mine[0]), 'removed': [w['id'] for w in mine], 'worker': mine[0],
              'workers': workers, 'capacity': capacity, 'seconds': 0.0}
    if check:
        return result
    for worker in mine:
        gw.remove(worker['id'])
    if not wait:
        return result
    left, seconds = _wait(lambda: not gw.matching(url), timeout, interval, clock, sleep)
    result['seconds'] = seconds
    if not left:
        raise GatewayError('%s is still listed by the gateway %s %.1f s after DELETE /workers/%s'
                           % (url, gw.url, seconds, mine[0]['id']), **result)
    return result


def put_back(gw, url, clock, sleep, fields=None, worker_api_key=None, check=False, wait=True, timeout=60.0,
             interval=0.5):
    """Register URL in gateway GW with FIELDS (a registration dict) unless it is listed already, and wait
    until the gateway lists it healthy. Returns the result dict of the module."""
    mine = gw.matching(url)
    # Registered without a trailing slash: the gateway keeps the URL as given and joins paths to it.
    body = dict(fields or {}, url=url.strip().rstrip('/'))
    if worker_api_key:
        body['api_key'] = worker_api_key
    result = {'changed': not mine, 'worker': mine[0] if mine else None, 'seconds': 0.0,
              'registration': dict((k, v) for k, v in body.items() if k not in ('url', 'api_key'))}
    if check:
        return result
    worker_id = mine[0]['id'] if mine else gw.add(body).get('worker_id')
    if not wait:
        result['worker'] = mine[0] if mine else {'id': worker_id, 'url': url}
        return result

    def healthy():
        listed = [w for w in gw.matching(url) if w.get('is_healthy')]
        return listed[0] if listed else None

    worker, seconds = _wait(healthy, timeout, interval, clock, sleep)
    result.update(worker=worker, seconds=seconds)
    if worker is None:
        listed = gw.matching(url)
        job = gw.job(worker_id) if worker_id else None
        raise GatewayError(
            '%s did not turn healthy in the gateway %s within %.1f s: %s%s'
            % (url, gw.url, seconds, 'listed, not healthy' if listed else 'not listed',
               ('; registration job: %s' % job) if job else ''), job=job, listed=listed, **result)
    return result


def query(gw, url=None):
    """The gateway's workers, and the one at URL with its registration."""
    workers = gw.workers()
    mine = [w for w in workers if url and same_url(w.get('url'), url)]
    return {'changed': False, 'workers': workers, 'worker': mine[0] if mine else None, 'seconds': 0.0,
            'registration': registration(mine[0]) if mine else None}

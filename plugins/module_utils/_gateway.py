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

A gateway may list this node's server under another URL than the one the inventory names it by: the node's IP
while the inventory has its host name, or loopback for a gateway that runs on the node. Such an alias is this node's
worker too (Node, this_nodes): taken out with it, and registered again under the URL that the gateway listed.
"""

from __future__ import annotations

import ipaddress
import math
import os
import socket
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


class Ambiguous(GatewayError):
    """A listed worker may or may not reach this node's server; nothing was changed."""


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


DEFAULT_PORTS = {'http': 80, 'https': 443}


def _address(text):
    """TEXT (an IP literal, bracketed or with a zone) as a normalised ipaddress object, or None for a host name."""
    try:
        ip = ipaddress.ip_address((text or '').strip('[]').split('%', 1)[0])
    except ValueError:
        return None
    return (ip.ipv4_mapped or ip) if ip.version == 6 else ip


def _endpoint(url):
    """(scheme, host, port) of URL, the port defaulted by its scheme; None for a URL without host or port."""
    try:
        parts = urlsplit((url or '').strip())
        port = parts.port or DEFAULT_PORTS.get(parts.scheme.lower())
    except ValueError:
        return None
    if not parts.hostname or not port:
        return None
    return parts.scheme.lower(), parts.hostname.lower(), port


def local_addresses(proc='/proc'):
    """The addresses of the host this runs on (of its network namespace), as strings: the ``/32 host LOCAL``
    entries of PROC/net/fib_trie and every address of PROC/net/if_inet6. None when fib_trie cannot be read."""
    found = set()
    try:
        with open(os.path.join(proc, 'net', 'fib_trie')) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    leaf = None
    for line in lines:
        text = line.strip()
        if text.startswith('|--'):
            leaf = text[3:].strip()
        elif text == '/32 host LOCAL' and _address(leaf):
            found.add(str(_address(leaf)))
    try:
        with open(os.path.join(proc, 'net', 'if_inet6')) as f:
            for line in f:
                fields = line.split()
                if fields and len(fields[0]) == 32:
                    found.add(str(ipaddress.IPv6Address(bytes.fromhex(fields[0]))))
    except (OSError, ValueError):
        pass  # no IPv6 on this host
    return sorted(found)


class Node:
    """The node whose server is restarted, as the host this runs on tells it: ADDRESSES, its addresses (None: they
    cannot be told); LOCAL, whether this runs on the node itself, so that loopback here is the node's loopback;
    NAMES, the node's own host names (those an /etc/hosts may map to loopback, as Debian does); RESOLVE, a
    socket.getaddrinfo to resolve the other host names with."""

    def __init__(self, addresses, local=True, names=(), resolve=socket.getaddrinfo):
        self.addresses = None if addresses is None else frozenset(
            str(ip) for ip in (_address(a) for a in addresses) if ip and not ip.is_loopback)
        self.local = local
        self.names = frozenset(n.lower() for n in names if n)
        self.resolve = resolve
        self.why = {}
        self._seen = {}

    @classmethod
    def here(cls, addresses=None, proc='/proc', hostname=socket.gethostname, resolve=socket.getaddrinfo):
        """The node as the module sees it: ADDRESSES (node_addresses) when given, else the addresses of the host it
        runs on. Given ones that share no address with this host mean that it runs elsewhere (delegated)."""
        own = local_addresses(proc)
        name = hostname()
        names = (name, name.split('.', 1)[0])
        if addresses is None:
            return cls(own, local=True, names=names, resolve=resolve)
        wrong = [a for a in addresses if _address(a) is None]
        if wrong:
            raise GatewayError('node_addresses must be IP addresses of the node, not %s' % ', '.join(map(repr, wrong)))
        node = cls(addresses, resolve=resolve)
        node.local = bool(node.addresses & cls(own or ()).addresses)
        if node.local:
            node.names = frozenset(n.lower() for n in names if n)
        return node

    def where(self, host):
        """Where HOST (a URL's host) leads from here: ``loopback``, ``node`` (one of the node's addresses or names),
        ``other``, ``some`` (a name that resolves to the node and to other hosts) or ``unknown`` (the node's
        addresses cannot be told); self.why[HOST] says why for the last two."""
        host = (host or '').strip('[]').lower()
        if host not in self._seen:
            self._seen[host] = self._where(host)
        return self._seen[host]

    def _where(self, host):
        if loopback(host):
            return 'loopback'
        if host in self.names:
            return 'node'
        ip = _address(host)
        if ip is not None:
            kind = self._of(ip)
            if kind == 'unknown':
                self.why[host] = "this host's addresses cannot be read (/proc/net/fib_trie)"
            return kind
        try:
            resolved = sorted(set(_address(info[4][0]) for info in self.resolve(host, None, 0, socket.SOCK_STREAM)),
                              key=str)
        except (OSError, UnicodeError):
            return 'other'  # not resolved here: no way from here to the node
        kinds = dict((str(ip), 'loopback' if ip.is_loopback else self._of(ip)) for ip in resolved if ip)
        found = set(kinds.values())
        if not found or found == {'other'}:
            return 'other'
        if found <= {'loopback'}:
            return 'loopback'
        if found <= {'node', 'loopback'}:
            return 'node'
        self.why[host] = '%s resolves to %s' % (host, ', '.join(
            '%s (%s)' % (ip, {'node': "this node's", 'other': "another host's", 'loopback': 'loopback'}.get(
                kind, 'which cannot be told')) for ip, kind in sorted(kinds.items())))
        return 'unknown' if found <= {'node', 'loopback', 'unknown'} else 'some'

    def _of(self, ip):
        if self.addresses is None:
            return 'unknown'
        if ip.is_loopback:
            return 'loopback'
        return 'node' if str(ip) in self.addresses else 'other'

    def serves(self, listed, url, gateway_url):
        """Whether the worker LISTED (a URL a gateway at GATEWAY_URL lists) reaches this node's server at URL:
        True, False, or None when that cannot be told (self.why says why)."""
        if same_url(listed, url):
            return True
        mine, theirs = _endpoint(url), _endpoint(listed)
        if not mine or not theirs or mine[0] != theirs[0] or mine[2] != theirs[2]:
            return False
        where = self.where(theirs[1])
        if where == 'loopback':
            # Loopback of the gateway's own host: this node's only where the gateway runs on the node.
            gateway = _endpoint(gateway_url)
            where = self.where(gateway[1]) if gateway else 'other'
            if where == 'loopback':
                return self.local
            if where in ('some', 'unknown'):
                self.why[theirs[1]] = 'a loopback URL of the gateway\'s host, and whether that is this node: %s' % (
                    self.why.get(gateway[1], gateway[1]))
        if where in ('some', 'unknown'):
            self.why.setdefault(theirs[1], theirs[1])
            return None
        return where == 'node'


def this_nodes(workers, url, gateway_url, node=None, doing='take %s out of'):
    """The WORKERS (entries of GET /workers of the gateway at GATEWAY_URL) that reach this node's server at URL:
    those listed at URL and, with NODE, those listed under another URL that leads to the same server (Node.serves).
    Raises Ambiguous, naming both URLs, for one that may or may not; DOING says what was being done."""
    if node is None:
        return [w for w in workers if same_url(w.get('url'), url)]
    mine = []
    for worker in workers:
        serves = node.serves(worker.get('url'), url, gateway_url)
        if serves is None:
            host = (_endpoint(worker.get('url')) or ('', '', 0))[1]
            raise Ambiguous(
                'Refusing to %s the gateway %s: it lists %s, at the same port, and whether that reaches this '
                'node\'s server cannot be told (%s). Set sglang_gateway_worker_url (url) to the URL the gateway '
                'lists this node\'s server by, or sglang_gateway_node_addresses (node_addresses) to the node\'s '
                'addresses. Nothing was changed.'
                % (doing % url, gateway_url, worker.get('url'), node.why.get(host, host)),
                listed=worker.get('url'), url=url)
        if serves:
            mine.append(worker)
    # The worker at URL itself first: its registration is the one named ``registration``.
    return sorted(mine, key=lambda w: not same_url(w.get('url'), url))


def registrations(workers):
    """One {url, registration} per URL among WORKERS (entries of GET /workers), in their order."""
    out = []
    for worker in workers:
        if not any(same_url(r['url'], worker.get('url')) for r in out):
            out.append({'url': worker.get('url'), 'registration': registration(worker)})
    return out


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


def _listed(workers, urls):
    """The entries of WORKERS listed at one of URLS."""
    return [w for w in workers if any(same_url(w.get('url'), u) for u in urls)]


def take_out(gw, url, clock, sleep, minimum='0', leaving=(), check=False, wait=True, timeout=60.0, interval=0.5,
             node=None):
    """Take every worker of this node (this_nodes: listed at URL, and with NODE under another URL that reaches the
    same server) out of gateway GW, once the capacity guard passed, and wait until the gateway lists none of them.
    LEAVING: other worker URLs that leave at the same time (the rest of a batch), counted as gone by the guard.
    CHECK: plan only. Returns the result dict of the module: ``registrations`` has one registration per URL that
    the gateway listed this node's server by, ``registration`` the one of URL itself (or of the first alias)."""
    workers = gw.workers()
    mine = this_nodes(workers, url, gw.url, node)
    if not mine:
        return {'changed': False, 'registration': None, 'registrations': [], 'removed': [], 'workers': workers,
                'capacity': {}, 'worker': None, 'seconds': 0.0}
    gone = mine + [w for w in _listed(workers, leaving) if w not in mine]
    # The rest of the batch counts as gone, but only this worker's models decide here.
    capacity = guard(workers, gone, minimum, models=set(w.get('model_id') for w in mine))
    given = registrations(mine)
    result = {'changed': True, 'registration': given[0]['registration'], 'registrations': given,
              'removed': [w['id'] for w in mine], 'worker': mine[0], 'workers': workers, 'capacity': capacity,
              'seconds': 0.0}
    if check:
        return result
    for worker in mine:
        gw.remove(worker['id'])
    if not wait:
        return result
    urls = [r['url'] for r in given]
    left, seconds = _wait(lambda: not _listed(gw.workers(), urls), timeout, interval, clock, sleep)
    result['seconds'] = seconds
    if not left:
        still = _listed(gw.workers(), urls)
        raise GatewayError('%s is still listed by the gateway %s %.1f s after DELETE /workers/%s'
                           % (', '.join(w['url'] for w in still) or url, gw.url, seconds,
                              ', '.join(w['id'] for w in still) or mine[0]['id']), **result)
    return result


def put_back(gw, url, clock, sleep, fields=None, worker_api_key=None, check=False, wait=True, timeout=60.0,
             interval=0.5, given=None, node=None):
    """Register this node's worker in gateway GW and wait until the gateway lists it healthy. GIVEN (the
    ``registrations`` that take_out returned): each one under its own URL, unless the gateway lists that URL
    already; each URL must reach this node's server (this_nodes with NODE), checked before anything is touched.
    Without GIVEN: URL with FIELDS (a registration dict), unless the gateway lists this node's worker already, at URL
    or (with NODE) under another URL. Returns the result dict of the module."""
    workers = gw.workers()
    # Registered without a trailing slash: the gateway keeps the URL as given and joins paths to it.
    if given:
        strangers = [r['url'] for r in given if not this_nodes([{'url': r['url']}], url, gw.url, node,
                                                               doing='register %s in')]
        if strangers:
            raise GatewayError('Refusing to register %s in the gateway %s as the worker of this node\'s server %s: '
                               'it does not reach that server. Nothing was changed.'
                               % (', '.join(strangers), gw.url, url), strangers=strangers)
        wanted = [(r['url'].strip().rstrip('/'), dict(r.get('registration') or {})) for r in given]
    else:
        listed = this_nodes(workers, url, gw.url, node, doing='register %s in')
        wanted = [(listed[0]['url'] if listed else url.strip().rstrip('/'), dict(fields or {}))]
    adding = [(u, f) for u, f in wanted if not _listed(workers, [u])]
    result = {'changed': bool(adding), 'worker': (_listed(workers, [wanted[0][0]]) or [None])[0], 'seconds': 0.0,
              'registration': wanted[0][1], 'registrations': [{'url': u, 'registration': f} for u, f in wanted]}
    if check:
        return result
    ids = dict((u, w['id']) for u, f in wanted for w in _listed(workers, [u])[:1])
    for u, f in adding:
        body = dict(f, url=u)
        if worker_api_key:
            body['api_key'] = worker_api_key
        ids[u] = gw.add(body).get('worker_id')
    if not wait:
        result['worker'] = result['worker'] or {'id': ids.get(wanted[0][0]), 'url': wanted[0][0]}
        return result

    def healthy():
        listing = gw.workers()
        found = [([w for w in _listed(listing, [u]) if w.get('is_healthy')] or [None])[0] for u, f in wanted]
        return found if all(found) else None

    found, seconds = _wait(healthy, timeout, interval, clock, sleep)
    result.update(worker=found[0] if found else None, seconds=seconds)
    if found is None:
        listing = gw.workers()
        late = [u for u, f in wanted if not [w for w in _listed(listing, [u]) if w.get('is_healthy')]][0]
        listed = _listed(listing, [late])
        job = gw.job(ids[late]) if ids.get(late) else None
        raise GatewayError(
            '%s did not turn healthy in the gateway %s within %.1f s: %s%s'
            % (late, gw.url, seconds, 'listed, not healthy' if listed else 'not listed',
               ('; registration job: %s' % job) if job else ''), job=job, listed=listed, **result)
    return result


def query(gw, url=None, node=None):
    """The gateway's workers, and this node's worker at URL (this_nodes with NODE) with its registrations."""
    workers = gw.workers()
    mine = this_nodes(workers, url, gw.url, node, doing='find %s in') if url else []
    given = registrations(mine)
    return {'changed': False, 'workers': workers, 'worker': mine[0] if mine else None, 'seconds': 0.0,
            'registration': given[0]['registration'] if given else None, 'registrations': given}

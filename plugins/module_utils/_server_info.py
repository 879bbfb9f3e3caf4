# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What runs on a node and whether it is what was asked for: gpuops.host.sglang_server_info on plain values and
injected collaborators (_sglang.Deps).

    result = info(params, deps)

The record and the servers of the node; with ``config``, what the node has now (the installed SGLang release, the
dump patch, the model files, a container image) and the plan: whether the recorded server must restart to match,
why in words, and the before/after of a diff. Nothing is signalled or written.
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.host.plugins.module_utils import _server_config as config
from ansible_collections.gpuops.host.plugins.module_utils import _sglang as sglang
from ansible_collections.gpuops.host.plugins.module_utils import _sglang_http as shttp

# A HuggingFace hub model ID (org/name), found in HF_HOME's cache; anything else is a path.
HUB_ID = re.compile(r'^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+$')
# find's options that this module does not take: the record's server and every SGLang server of the node, read only.
_FIND = dict(patterns=[], pids=[], owners=[], port=None, drain=False, stop_supervised=False, other_namespaces=False,
             default_url='http://127.0.0.1:30000')


def model_of(p):
    """The fingerprint of P's model: its directory, or a hub ID's snapshot in P's hf_home."""
    path = p['model_path']
    if HUB_ID.match(path):
        snapshot = config.hub_snapshot(p.get('hf_home') or '', path)
        if snapshot is None:
            return {'path': path, 'missing': 'not in the cache under %s' % p.get('hf_home')}
        found = config.model_fingerprint(snapshot)
        found['path'] = path
        found['revision'] = snapshot.rsplit('/', 1)[-1]
        return found
    return config.model_fingerprint(path)


def _image_id(p, deps):
    container = p['container']
    rc, out, dummy = deps.run([container.get('engine') or 'docker', 'image', 'inspect', '--format', '{{.Id}}', '--',
                               container['image']], None)
    return out.strip() if rc == 0 and out.strip() else None


def observe(p, deps):
    """What makes a server stale, read on the node now: the SGLang release (run by P's interpreter as run_as, never
    as root) and, in a dumping mode, the dump patch's digest; a container image's ID instead of both; the model's
    fingerprint."""
    now = {}
    if p.get('container'):
        now['image'] = _image_id(p, deps)
    else:
        found = sglang.release(sglang.merged(p), deps)
        now['sglang'] = found['release']
        patch = p.get('dump_patch')
        if patch and found.get('package'):
            now['dump_patch'] = config.patch_digest(found['package'], patch['paths'], patch['pattern'])
    if p.get('model_path'):
        now['model'] = model_of(p)
    return now


def _health(record, p, deps):
    """The recorded server's /health status, or the reason there is none."""
    try:
        answer = shttp.Client(record['url'], opener=deps.opener).request('/health', p['request_timeout'])
    except (shttp.Refused, shttp.Unanswered) as e:
        return None, str(e)
    return answer.status, None if answer.status == 200 else 'HTTP %d' % answer.status


def _server(record, found, p, deps):
    """The recorded server as it runs now: pid, start, user, healthy and, where it does not serve, why."""
    if not record:
        return None, 'no server is recorded on this node (%s)' % p['record_path']
    if record.get('status') != 'ok':
        return None, 'the last launch recorded did not pass its checks (status %s)' % record.get('status')
    recorded = found.get('recorded')
    if not recorded or not sglang.identified(record, recorded):
        return None, 'the recorded server (pid %s, run %s) does not run' % (record.get('pid'), record.get('marker'))
    server = dict((k, recorded.get(k)) for k in ('pid', 'start', 'user', 'cmdline', 'supervisor'))
    status, why = _health(record, p, deps)
    server['health'] = status
    if why:
        return server, 'the recorded server (pid %s) does not answer /health: %s' % (record.get('pid'), why)
    return server, None


def desired(p):
    """The desired identity: P's config, the digest of its secrets, and what the node has now."""
    want = dict(p['config'])
    secrets = dict(('arg:%s' % k, v) for k, v in (p.get('secret_server_args') or {}).items())
    secrets.update(('env:%s' % k, v) for k, v in (p.get('secret_environment') or {}).items())
    want['secrets'] = config.secrets_digest(secrets)
    return want


def plan(record, down, before, after, restart, config_hash=None):
    """Whether the server that RECORD names must (re)start to match AFTER: DOWN (why it does not serve, or None),
    the identities BEFORE (recorded) and AFTER compared, RESTART asked. A record of an earlier release (no identity)
    is compared by its CONFIG_HASH. ``(needs_restart, reasons, changes)``."""
    reasons = [down] if down else []
    if before:
        changes = config.compare(before, after)
    elif record:
        same = config_hash is not None and record.get('config_hash') == config_hash
        changes = [] if same else [{'field': 'config_hash', 'words': 'configuration: changed (recorded by an earlier '
                                    'release, which names no fields)'}]
    else:
        changes = []
    reasons.extend(c['words'] for c in changes)
    if restart:
        reasons.append('a restart was asked for (restart)')
    return bool(reasons), reasons, changes


def info(p, deps):
    """The node's record and SGLang servers; with P's config, what the node has now and the plan (see plan)."""
    record = sglang._record(p)
    found = sglang.find(dict(_FIND, **p), deps, record=record)
    server, down = _server(record, found, p, deps)
    result = {'record': record, 'server': server,
              'servers': found['servers'], 'elsewhere': found['elsewhere'], 'others': found['others'],
              'gateways': found['gateways']}
    if p.get('config') is None:
        return result
    after = dict(desired(p), **observe(p, deps))
    before = record.get('identity') or {}
    needs, reasons, changes = plan(record, down, before, after, p.get('restart'), p.get('config_hash'))
    result.update(current=after, needs_restart=needs, reasons=reasons, changes=changes,
                  diff={'before_header': '%s (running)' % p['record_path'], 'after_header': 'desired',
                        'before': config.render(before) if server else '', 'after': config.render(after)})
    return result

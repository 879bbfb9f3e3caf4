# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What runs on a node and whether it is what was asked for: gpuops.host.sglang_server_info on plain values and
injected collaborators (_sglang.Deps).

    result = info(params, deps)

The record and the servers of the node; with ``config``, what the node has now (the installed SGLang release, the
dump patch, the model files, a container image) and the plan: whether the recorded server must restart to match,
why in words, and the before/after of a diff. With ``extraction``, how the recorded extraction run goes (see
extraction_status). Nothing is signalled or written, and no lock is taken.
"""

from __future__ import annotations

import os

from ansible_collections.gpuops.host.plugins.module_utils import _checks as checks
from ansible_collections.gpuops.host.plugins.module_utils import _extraction as extraction
from ansible_collections.gpuops.host.plugins.module_utils import _manifest as manifests
from ansible_collections.gpuops.host.plugins.module_utils import _owner as owners
from ansible_collections.gpuops.host.plugins.module_utils import _server_config as config
from ansible_collections.gpuops.host.plugins.module_utils import _sglang as sglang
from ansible_collections.gpuops.host.plugins.module_utils import _sglang_http as shttp
from ansible_collections.gpuops.host.plugins.module_utils import _writers as writers
from ansible_collections.gpuops.host.plugins.module_utils._dump_dir import DumpDir, DumpDirError
from ansible_collections.gpuops.host.plugins.module_utils._nvml import NvmlError
from ansible_collections.gpuops.host.plugins.module_utils import _supervisor as supervisors

# find's options that this module does not take: the record's server and every SGLang server of the node, read only.
_FIND = dict(patterns=[], pids=[], owners=[], port=None, drain=False, stop_supervised=False, other_namespaces=False,
             default_url='http://127.0.0.1:30000')


def model_of(p):
    """The fingerprint of P's model: its directory, or a hub ID's snapshot in P's hf_home."""
    path = p['model_path']
    if config.HUB_ID.match(path):
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


def observe(p, deps, checked=None):
    """What makes a server stale, read on the node now: the SGLang release (run by P's interpreter as run_as, never
    as root; CHECKED's, the parser's check of the command, where it ran) and, in a dumping mode, the dump patch's
    digest; a container image's ID instead of both; the model's fingerprint."""
    now = {}
    if p.get('container'):
        now['image'] = _image_id(p, deps)
    else:
        found = checked or sglang.release(p, deps)
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


def _server(record, found, p):
    """The recorded server as it runs now (pid, start, user, cmdline, supervisor; ``health`` not asked yet), or None
    and why it does not run."""
    if not record:
        return None, 'no server is recorded on this node (%s)' % p['record_path']
    if record.get('status') != 'ok':
        return None, 'the last launch recorded did not pass its checks (status %s)' % record.get('status')
    recorded = found.get('recorded')
    if not recorded or not sglang.identified(record, recorded):
        return None, 'the recorded server (pid %s, run %s) does not run' % (record.get('pid'), record.get('marker'))
    server = dict((k, recorded.get(k)) for k in ('pid', 'start', 'user', 'cmdline', 'supervisor'))
    server['health'] = None
    return server, None


def desired(p):
    """The desired identity: P's config and the digest of its secrets (secrets_digest)."""
    want = dict(p['config'])
    if p.get('secrets_digest') is not None:
        want['secrets'] = p['secrets_digest']
    return want


def plan(record, down, before, after, restart):
    """Whether the server that RECORD names must (re)start to match AFTER: DOWN (why it does not serve, or None),
    the identities BEFORE (recorded) and AFTER compared, RESTART asked. A record of an earlier release, which keeps no
    identity, counts as changed; a failed launch's record keeps none either, and DOWN says why it restarts.
    ``(needs_restart, reasons, changes)``."""
    reasons = [down] if down else []
    if before:
        changes = config.compare(before, after)
    elif record.get('status') == 'ok':
        changes = [{'field': 'identity', 'words': 'configuration: changed (recorded by an earlier release, which names '
                    'no fields)'}]
    else:
        changes = []
    reasons.extend(c['words'] for c in changes)
    if restart:
        reasons.append('a restart was asked for (restart)')
    return bool(reasons), reasons, changes


def in_flight(url, p, deps):
    """The requests in flight on the server at URL, as the drain reads them (SGLang's /metrics gauges with
    --enable-metrics, else /v1/loads), sent no API key: ``(count, source, error)``, count None where it cannot be
    read (a server with an API key answers /v1/loads with 401)."""
    try:
        reading = shttp.InFlight(shttp.Client(url, opener=deps.opener)).read(p['request_timeout'], deps.clock)
    except (shttp.Refused, shttp.Unanswered) as e:
        return None, None, str(e)
    return reading.count, reading.source, reading.error


def extraction_status(record, server, p, deps):
    """How the run that RECORD names goes, read without touching it (no /health, which a patched server would
    dump): its mode and marker, ``state`` (``running`` while the recorded SERVER runs; else how its manifest says it
    ended, or ``down`` - for a dumping run whose manifest still says running, a crash that the next stop or launch
    records - and ``none`` without a recorded run), ``uptime`` (seconds since its start), what it has written and how
    fast (_extraction.status over the last ``rate_window`` seconds), the free space of its dump volume and the hours
    until it is full at that rate, the requests in flight and the manifest's path. A run that dumps nothing (another
    mode) has only its mode, marker, state and requests."""
    now = deps.wall_clock()
    ok = bool(record) and record.get('status') == 'ok'
    out = {'dumping': manifests.recorded(record), 'mode': record.get('mode') if ok else None,
           'marker': record.get('marker') if ok else None, 'dump_dir': record.get('dump_dir') if ok else None,
           'pid': server['pid'] if server else None, 'state': 'running' if server else 'none' if not ok else 'down',
           'uptime': None, 'manifest': None, 'in_flight': None, 'in_flight_source': None, 'in_flight_error': None}
    for key in ('files', 'bytes', 'gb', 'own', 'newest', 'age', 'recent', 'rate_seconds', 'rate_files_per_min',
                'rate_gb_per_hour', 'free_gb', 'hours_to_full'):
        out[key] = None
    if server:
        if record.get('started'):
            out['uptime'] = round(max(now - float(record['started']), 0.0), 1)
        out['in_flight'], out['in_flight_source'], out['in_flight_error'] = in_flight(record['url'], p, deps)
    if not out['dumping']:
        return out
    found = extraction.status(record['dump_dir'], now, p['rate_window'], extraction.epoch(record.get('checked')),
                              p.get('dump_patterns') or extraction.DUMPS)
    out.update((k, found[k]) for k in found if k in out)
    manifest = manifests.read(record['dump_dir'], manifests.owners(record)[0])
    if manifest and manifest.get('run') == record.get('marker'):
        out['manifest'] = '%s/%s' % (record['dump_dir'], manifests.NAME)
        if not server and manifest.get('ended') in manifests.ENDED and manifest['ended'] != 'running':
            out['state'] = manifest['ended']
    return out


def gpu_count(deps):
    """The number of GPUs NVML shows (deps.open_nvml); ActionFailed where NVML cannot be read."""
    try:
        with deps.open_nvml() as nvml:
            return nvml.count()
    except (NvmlError, checks.Unreadable) as e:
        raise sglang.ActionFailed('Cannot read the GPUs of the node: %s; refusing before the running server is touched.'
                                  % e)


def _listdir(path):
    try:
        return os.listdir(path)
    except OSError:
        return []


def refusals(options, p, deps):
    """Refuse a restart that the node cannot take, before anything is touched (ActionFailed): OPTIONS ``gpus``, the
    GPU indices the server would need, which NVML must show, each once; ``port`` (with ``bind_host``), which only a
    process of a server that the restart replaces (a server of ``owners``, its tree) may hold - another program there,
    or another user's, would take the new server's port; ``model``: its ``path`` must exist, or, for a ``hub`` ID
    that the server may not download (``offline``), a snapshot must be in its ``cache`` (the server's ``user``'s, in
    ``hf_home``); ``dump_dir``: the run directory of the dumps, checked as _dump_dir.DumpDir.create checks it before it
    makes it. The checks made: ``gpu_count``, ``port``, ``dump_dir``."""
    out = {}
    gpus = options.get('gpus')
    if gpus is not None:
        out['gpu_count'] = count = gpu_count(deps)
        if not gpus or max(gpus) >= count or len(set(gpus)) != len(gpus):
            raise sglang.ActionFailed(
                'The server would need GPU(s) %s (tp_size x dp_size from base_gpu_id in steps of gpu_id_step, or '
                'sglang_launch_gpus), but NVML sees %d GPU(s) on this node (indices 0 to %d); refusing before the '
                'running server is touched.' % (', '.join(str(i) for i in gpus), count, count - 1), out)
    dump = options.get('dump_dir')
    if dump:
        try:
            out['dump_dir'] = DumpDir(dump['root'], dump['name'], dump['owner'] or 0, dump['group'] or 0).create(
                dump['min_free_gb'], check_mode=True)
        except (DumpDirError, OSError) as e:
            raise sglang.ActionFailed('%s. Refusing before the running server is touched.' % e,
                                      dict(out, path=os.path.join(dump['root'], dump['name'])))
    model = options.get('model') or {}
    if model.get('hub'):
        snapshots = os.path.join(model['cache'], 'snapshots')
        if model.get('offline') and not [n for n in _listdir(snapshots) if os.path.isdir(os.path.join(snapshots, n))]:
            raise sglang.ActionFailed(
                'The model %s is a HuggingFace hub ID that is not in the cache of the server\'s user %s (no snapshot under '
                '%s), and HF_HUB_OFFLINE in sglang_launch_environment forbids downloading it. Download it into that cache '
                '(HF_HOME is %s) or point sglang_launch_model_path at a local directory; refusing before the running '
                'server is touched.' % (model['path'], model.get('user'), snapshots, model.get('hf_home')), out)
    elif model.get('path') and not os.path.exists(model['path']):
        raise sglang.ActionFailed('The model path %s does not exist on this host; refusing before the running server is '
                                  'touched.' % model['path'], out)
    if options.get('port'):
        # the servers a restart replaces: the recorded one, and those started by hand (the stop's sglang preset)
        found = sglang.find(dict(_FIND, record_path=p['record_path'], presets=['sglang'], port=options['port'],
                                 bind_host=options.get('bind_host'), owners=options.get('owners') or []), deps)
        out['port'] = found['port']
        holders = [h['pid'] for h in found['port']['holders']]
        replaced = set(proc['pid'] for server in found['servers'] for proc in server.get('tree') or [])
        if found['port']['listening'] and (not holders or set(holders) - replaced):
            held = ('process %s' % ', '.join(str(pid) for pid in holders)) if holders else \
                'a process this node does not name'
            what = (': ' + '; '.join(h['cmdline'] for h in found['port']['holders'])) if holders else ''
            raise sglang.ActionFailed(
                'Port %d is held by %s, which is not an SGLang server that this launch replaces%s. Free the port or '
                'choose another sglang_launch_port; refusing before the running server is touched.'
                % (options['port'], held, what), out)
    return out


def mounts(paths, trusted, realpath=os.path.realpath, lstat=os.lstat):
    """What a container server mounts from the host, resolved here rather than by the engine when it runs: each of
    PATHS with its ``resolved`` path (every link followed now) and the entries on the way to it, before and after its
    links, that a user outside TRUSTED (UIDs) can change (_writers.writers), who could otherwise swap a link on the
    way for any host directory, which the container would then see, however that directory's own parents restrict
    it. The engine gets the resolved path, which no such user can redirect."""
    return [{'path': path, 'resolved': realpath(path),
             'writers': ['%s (%s)' % entry for entry in writers.writers(path, trusted, lstat=lstat)]}
            for path in paths]


def untrusted_mounts(found):
    """The failure message for the mounts of FOUND (mounts) that a user outside the trusted ones can redirect, or
    None."""
    said = []
    bad = [m for m in found if m['writers']]
    if bad:
        said.append('%s: a container server mounts %s, but %s can be changed by a user other than root and the '
                    'server\'s user, who could swap it for any host directory between this check and the engine\'s '
                    'run; make the path theirs alone or choose another' % (
                        '; '.join(m['path'] for m in bad), 'it' if len(bad) == 1 else 'them',
                        ', '.join(w for m in bad for w in m['writers'])))
    colons = [m for m in found if ':' in m['resolved']]
    if colons:
        said.append('%s: a container engine\'s --volume splits a path at its colons, so it would mount something else '
                    'than this path; rename it or choose another' % ', '.join(
                        '%s (resolved from %s)' % (m['resolved'], m['path']) for m in colons))
    return '; '.join(said) + '.' if said else None


def foreign_unit(units, kinds):
    """ActionFailed where the unit file a launch under systemd writes (UNITS' ``path``) is not the collection's, as
    KINDS (unit_kind by path) reads it: a team's own unit, a link or another user's file is never written over."""
    if units and kinds.get(units['path']) == 'foreign':
        raise sglang.ActionFailed(
            'The unit file %s was not written by gpuops.host (its first line is not \'%s\'), so it is not written '
            'over: set sglang_launch_unit to another name for the collection\'s unit (default gpuops-sglang); '
            'refusing before the running server is touched.' % (units['path'], units['mark']), {'unit_files': kinds})


def missing_patch(p, now, checked):
    """ActionFailed where P's mode dumps (``dump_patch``) but the installed SGLang, as NOW read it, has no file that
    carries the patch: the server would run and silently dump nothing. A container image's is looked for by the
    caller, in the image."""
    patch = p.get('dump_patch')
    if patch and not p.get('container') and not (now.get('dump_patch') or {}).get('files'):
        raise sglang.ActionFailed(
            'The installed SGLang (%s) does not carry the hidden-state dump patch: no file under %s contains \'%s\'. It '
            'would run and silently dump nothing; refusing before the running server is touched.'
            % ((checked or {}).get('package'), ', '.join(patch['paths']), patch['pattern']),
            {'dump_patch': now.get('dump_patch')})


def command_of(p):
    """P's command with the options it is checked with: P's environment, its secret arguments and environment."""
    return dict(p['command'], environment=p.get('environment') or {},
                secret_server_args=p.get('secret_server_args') or {},
                secret_environment=p.get('secret_environment') or {})


def check_command(p, deps):
    """P's command through the installed SGLang's own parser (_sglang.check_args), run by P's interpreter as run_as
    (or in P's container image), with P's environment and the command's secret one: the command line, its argument
    files by name, the release, and what the server will report in /server_info. Nothing is written."""
    command = command_of(p)
    sglang.refuse_bad_command(command)
    return sglang.check_args(sglang.merged(dict(p, **command)), deps)


def info(p, deps):
    """The node's record and SGLang servers; with P's command, its check (check_command); with P's config, what the
    node has now and the plan (see plan). The recorded server's /health is asked only where it decides the plan - it
    runs, and nothing else makes it restart: on SGLang /health generates a token, which a patched server in a dumping
    mode dumps into its run. A command whose names or logged options are refused is refused before anything is
    read."""
    owner = None
    if p.get('owner'):
        try:
            owner = owners.resolve(p['owner'])
        except owners.UnknownOwner as e:
            raise sglang.ActionFailed(str(e), {'owner': None})
        p = owners.apply(p, owner)
    if p.get('command'):
        sglang.refuse_bad_command(command_of(p))
    record = sglang._record(p)
    found = sglang.find(dict(_FIND, **p), deps, record=record)
    server, down = _server(record, found, p)
    result = {'record': record, 'server': server, 'owner': owner,
              'servers': found['servers'], 'elsewhere': found['elsewhere'], 'others': found['others'],
              'gateways': found['gateways']}
    if p.get('extraction'):
        result['extraction'] = extraction_status(record, server, p, deps)
    container = p.get('container') or {}
    if container.get('mounts'):
        trusted = set([0] + ([p['run_as']['uid']] if p.get('run_as') else []))
        result['mounts'] = mounts(container['mounts'], trusted)
        why = untrusted_mounts(result['mounts'])
        if why:
            raise sglang.ActionFailed(why, {'mounts': result['mounts']})
    # after the mounts: the check in a container image mounts them
    checked = check_command(p, deps) if p.get('command') else None
    if checked is not None:
        result['command'] = checked
    if p.get('config') is None:
        return result
    # a unit's settings count only under systemd
    asked = p['config'].get('supervisor')
    result['supervisor'] = supervisor = supervisors.chosen(asked, deps.procfs) if asked == 'auto' else asked
    if supervisor != asked:
        p = dict(p, config=dict(p['config'], supervisor=supervisor,
                                unit=p['config'].get('unit') if supervisor == 'systemd' else None))
    if p.get('unit_files') and supervisor == 'systemd':
        units = p['unit_files']
        result['unit_files'] = dict((path, supervisors.unit_kind(path, units['mark'], units['old_description']))
                                    for path in (units['path'], units['old_path']))
    after = dict(desired(p), **observe(p, deps, checked))
    before = record.get('identity') or {}
    needs, reasons, changes = plan(record, down, before, after, p.get('restart'))
    if not needs:
        server['health'], why = _health(record, p, deps)
        if why:
            needs, reasons, changes = plan(record, 'the recorded server (pid %s) does not answer /health: %s'
                                           % (record.get('pid'), why), before, after, False)
    if needs and p.get('refuse'):
        result['refusals'] = refusals(p['refuse'], p, deps)
        foreign_unit(p.get('unit_files'), result.get('unit_files') or {})
        missing_patch(p, after, checked)
    result.update(current=after, needs_restart=needs, reasons=reasons, changes=changes,
                  diff={'before_header': '%s (%s)' % (p['record_path'], 'running' if server else 'not running'),
                        'after_header': 'desired',
                        'before': config.render(before) if server else '', 'after': config.render(after)})
    return result


def argument_spec():
    """The options of gpuops.host.sglang_server_info, which gpuops.host.sglang_server's launch plans with too."""
    return dict(
        record_path=dict(type='path', required=True),
        presets=dict(type='list', elements='str', default=['sglang']),
        config=dict(type='dict'),
        secrets_digest=dict(type='str', no_log=False),
        environment=dict(type='dict', default={}),
        python=dict(type='path', default='/usr/bin/python3'),
        pythonpath=dict(type='list', elements='path', default=[]),
        owner=dict(type='dict', options=dict(user=dict(type='str', required=True),
                                             group=dict(type='str', default=''),
                                             dump_group=dict(type='str', default=''))),
        run_as=dict(type='dict', options=dict(uid=dict(type='int', required=True),
                                              gid=dict(type='int', required=True))),
        container=dict(type='dict', options=dict(
            engine=dict(type='str', choices=['docker', 'podman'], default='docker'),
            image=dict(type='str', required=True),
            mounts=dict(type='list', elements='path', default=[]),
            options=dict(type='list', elements='str', default=[]))),
        command=dict(type='dict', options=dict(
            sglang.command_options(), entry_module=dict(type='str', default='sglang.launch_server'))),
        secret_server_args=dict(type='dict', default={}, no_log=True),
        secret_environment=dict(type='dict', default={}, no_log=True),
        refuse=dict(type='dict', options=dict(gpus=dict(type='list', elements='int'), port=dict(type='int'),
                                              bind_host=dict(type='str'),
                                              owners=dict(type='list', elements='str', default=[]),
                                              model=dict(type='dict'), dump_dir=dict(type='dict', options=dict(
                                                  root=dict(type='path', required=True),
                                                  name=dict(type='str', required=True),
                                                  owner=dict(type='int'),
                                                  group=dict(type='int'),
                                                  min_free_gb=dict(type='float', default=0))))),
        unit_files=dict(type='dict', options=dict(path=dict(type='path', required=True),
                                                  old_path=dict(type='path', required=True),
                                                  mark=dict(type='str', required=True),
                                                  old_description=dict(type='str', required=True))),
        model_path=dict(type='str'),
        hf_home=dict(type='path'),
        dump_patch=dict(type='dict', options=dict(paths=dict(type='list', elements='str', required=True),
                                                  pattern=dict(type='str', required=True))),
        restart=dict(type='bool', default=False),
        request_timeout=dict(type='float', default=10),
        extraction=dict(type='bool', default=False),
        rate_window=dict(type='float', default=600),
        dump_patterns=dict(type='list', elements='str', default=['*']),
    )

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The actions of gpuops.host.sglang_server on plain values and injected collaborators.

    result = perform(params, Deps(procfs=ProcFS(), run=module.run_command, ...))

Every action returns a dict for exit_json or raises ActionFailed with a message and the same
kind of dict. The collaborators: ``procfs`` (_procs.ProcFS), ``run`` (``run(argv, environ) ->
(rc, stdout, stderr)``), ``opener`` (urllib's, None for the default), ``clock``, ``sleep``,
``tmpdir`` (a private directory for temporary files), ``check_mode`` and ``warn``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import tempfile
import time
from urllib.parse import urlsplit

from ansible_collections.gpuops.host.plugins.module_utils import _sglang_args as sargs
from ansible_collections.gpuops.host.plugins.module_utils import _sglang_http as shttp
from ansible_collections.gpuops.host.plugins.module_utils import _sglang_procs as sprocs
from ansible_collections.gpuops.host.plugins.module_utils import _supervisor as supervisors
from ansible_collections.gpuops.host.plugins.module_utils import _checks as checks
from ansible_collections.gpuops.host.plugins.module_utils import _record as records
from ansible_collections.gpuops.host.plugins.module_utils import _start as starts
from ansible_collections.gpuops.host.plugins.module_utils import _stop_report as stop_report
from ansible_collections.gpuops.host.plugins.module_utils import _extraction as extraction
from ansible_collections.gpuops.host.plugins.module_utils import _lock as locks
from ansible_collections.gpuops.host.plugins.module_utils import _manifest as manifests
from ansible_collections.gpuops.host.plugins.module_utils import _writers as writers
from ansible_collections.gpuops.host.plugins.module_utils._timeline import Timeline
from ansible_collections.gpuops.host.plugins.module_utils._namespaces import Place
from ansible_collections.gpuops.host.plugins.module_utils._nvml import NvmlError
from ansible_collections.gpuops.host.plugins.module_utils._reap import ReapFailure
from ansible_collections.gpuops.host.plugins.module_utils._reap_options import PRESETS, ReapError
from ansible_collections.gpuops.host.plugins.module_utils._verify import SelectionError

# The options of gpu_reap that the stop sets itself: the selectors (from its own presets, patterns, pids, owners and the
# record's run marker), the wait before SIGKILL (stop_timeout) and the verification (its own verify option).
STOP_SETS = ('patterns', 'presets', 'environ', 'pids', 'users', 'term_timeout', 'verify')
# What the probe of an extraction run asks: its prefill is dumped.
PROBE_PROMPT = 'The hidden states of this prompt are dumped to check the extraction run.'
# Parents of a server that are no wrapper which could start it again: init systems and container shims.
_NO_RESPAWNER = frozenset(('systemd', 'init', 'tini', 'dumb-init', 'catatonit', 'conmon', 'containerd-shim',
                           'containerd-shim-runc-v2', 'docker-init'))


class ActionFailed(Exception):
    def __init__(self, msg, result=None):
        super().__init__(msg)
        self.msg = msg
        self.result = result or {}


class Deps:
    def __init__(self, procfs, run, opener=None, clock=time.monotonic, sleep=time.sleep, tmpdir=None,
                 check_mode=False, warn=None, self_pids=(), reaping=None, wall_clock=time.time, open_nvml=None):
        self.procfs = procfs
        # open_nvml() -> a context manager giving an open _nvml.Nvml (the post-check of GPU occupancy)
        self.open_nvml = open_nvml
        # the wall clock, which file times are on (the extraction runs' last writes)
        self.wall_clock = wall_clock
        self.run = run
        self.opener = opener
        self.clock = clock
        self.sleep = sleep
        self.tmpdir = tmpdir
        self.check_mode = check_mode
        self.warn = warn or (lambda msg: None)
        self.self_pids = tuple(self_pids)
        # reaping(params) -> a _reap.Run of those gpu_reap parameters (the stop's)
        self.reaping = reaping


def public_secrets(p):
    """Where the options of P that the module's invocation log shows as given (server_args, environment) carry a
    secret value: a secret-named argument or variable, or an argument of secret_args. Such a value belongs in
    secret_server_args or secret_environment, which are declared no_log."""
    args = p.get('server_args') or {}
    found = ['server_args.%s' % n for n in sargs.secret_names(args, p.get('secret_args') or ())
             if args[n] not in (None, False, True, '')]
    found.extend('environment.%s' % k for k, v in sorted((p.get('environment') or {}).items())
                 if sargs.SECRET_NAME.search(k) and v not in (None, ''))
    return found


def merged(p):
    """P with secret_server_args folded into server_args (their names added to secret_args) and
    secret_environment into environment: what every action reads."""
    hidden = p.get('secret_server_args') or {}
    env = p.get('secret_environment') or {}
    if not hidden and not env:
        return p
    return dict(p, server_args=dict(p.get('server_args') or {}, **hidden),
                secret_args=sorted(set(p.get('secret_args') or ()) | set(hidden)),
                environment=dict(p.get('environment') or {}, **env))


def secrets_of(p):
    """Every secret value among the parameters P, to be masked wherever it could show."""
    p = merged(p)
    secrets = list(p.get('secrets') or [])
    if p.get('api_key'):
        secrets.append(p['api_key'])
    secrets.extend(sargs.secret_values(p.get('server_args') or {}, p.get('secret_args') or ()))
    secrets.extend(str(v) for k, v in (p.get('environment') or {}).items() if sargs.SECRET_NAME.search(k))
    secrets.extend(str(v) for v in (p.get('secret_environment') or {}).values())
    return [s for s in secrets if s]


def plan_masks(no_log_values, command, secret_server_args, secret_environment):
    """What a result that holds a plan masks, and what its invocation shows of SECRET_ENVIRONMENT: NO_LOG_VALUES less
    the secret environment's values under no secret's name (a plan's identity records paths that such a variable may
    name too, HF_HOME: masked there, the next plan would read a change that is none), with every secret of COMMAND (its
    secret arguments, SECRET_SERVER_ARGS, the environment's values under a secret's name); and the secret
    environment's names alone."""
    masked = set(no_log_values) - set(str(v) for k, v in secret_environment.items() if not sargs.SECRET_NAME.search(k))
    masked.update(secrets_of(dict(command or {}, secret_server_args=secret_server_args,
                                  environment=secret_environment)))
    return masked, dict((k, 'VALUE_SPECIFIED_IN_NO_LOG_PARAMETER') for k in secret_environment)


def _redactor(p):
    return sargs.Redactor(secrets_of(p))


def _client(p, deps, tie=None):
    """The client for P's server; with TIE (own_listener's), every keyed request first checks that it still holds
    (_sglang_procs.Guard)."""
    if not p.get('url'):
        raise ActionFailed('no url: the server\'s base URL is needed to reach it')
    guard = sprocs.Guard(deps.procfs, tie) if tie else None
    return shttp.Client(p['url'], api_key=p.get('api_key'), opener=deps.opener, guard=guard)


def _environ(p):
    env = dict((k, str(v)) for k, v in (p.get('environment') or {}).items())
    if p.get('pythonpath'):
        env['PYTHONPATH'] = ':'.join(p['pythonpath'])
    return env


# -- arguments ---------------------------------------------------------------------------------

def _rendered(p):
    """_sglang_args.rendered, its refusal an ActionFailed."""
    try:
        return sargs.rendered(p)
    except sargs.ArgsError as e:
        raise ActionFailed(str(e))


# The container's shell reads the environment from the 0600 file: an engine's --env-file or -e would copy every
# value, secrets included, into what ``inspect`` shows while the check runs.
_SOURCE_ENV = 'set -a; . "$0"; set +a; exec "$@"'


# Helper programs run by absolute path: a PATH lookup would run the first match, from a directory that the server's
# user may own (a venv's bin comes first in its PATH).
SETPRIV = '/usr/bin/setpriv'


def _run_as(p):
    """(uid, gid) that P's run_as names, (0, 0) without it."""
    run_as = p.get('run_as') or {}
    return int(run_as.get('uid') or 0), int(run_as.get('gid') or 0)


def _program(p, program):
    """PROGRAM after the lines that put P's pythonpath first on sys.path: under ``-I`` Python reads no PYTHONPATH."""
    if not p.get('pythonpath'):
        return program
    return 'import sys\nsys.path[0:0] = %r\n%s' % (list(p['pythonpath']), program)


def _refuse_untrusted(p):
    """ActionFailed where a user other than root and the run_as user can change the interpreter, its venv or a
    pythonpath directory: what they put there would run in the check, and in the server."""
    uid = _run_as(p)[0]
    found = writers.untrusted_python(p['python'], p.get('pythonpath') or [], set([0, uid]))
    if found:
        raise ActionFailed('refusing to run %s: %s, which a user other than root%s can change; nothing was run'
                           % (p['python'], '; '.join('%s is %s' % entry for entry in found),
                              ' and UID %d' % uid if uid else ''), {'untrusted': [e for e, dummy in found]})


class _CheckFiles:
    """The temporary files of a check, readable by whoever runs it: in the module's private directory for root or
    a container; for the run_as user, in a directory of root's (mode 0711, so nothing in it can be renamed or
    replaced) whose files are given to that user through their descriptors."""

    def __init__(self, p, deps):
        self.uid, self.gid = _run_as(p)
        self.host_user = self.uid != 0 and not (p.get('container') or {}).get('image')
        self.dir = tempfile.mkdtemp(prefix='gpuops-check-') if self.host_user else deps.tmpdir
        if self.host_user:
            os.chmod(self.dir, 0o711)
        self.paths = []

    def write(self, content):
        fd, path = _mkstemp(self.dir)
        self.paths.append(path)
        if self.host_user:
            os.fchown(fd, self.uid, self.gid)
        with os.fdopen(fd, 'w') as f:
            f.write(content)
        return path

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for path in self.paths:
            os.unlink(path)
        if self.host_user:
            os.rmdir(self.dir)
        return False


def _run_python(p, deps, program, args):
    """P['python'] running PROGRAM with ARGS, isolated (``-I``: no user site, no PYTHON* variables, no current
    directory on sys.path) and as the run_as user (setpriv) on the host, once _refuse_untrusted found nothing; or in
    a container of P['container']['image'] where that is set: ``ENGINE run --rm --network none --log-driver none
    --entrypoint /bin/sh IMAGE -c ... ENV_FILE PYTHON ARGS``, with the module's private temporary directory (the
    argument files of the check) mounted read-only at its own path and the environment in a 0600 file there, in
    shell syntax, which the container's shell reads. No log driver: the check prints the parsed arguments, the API
    key among them, which Podman's default driver would write to the journal."""
    container = p.get('container') or {}
    env = _environ(p)
    env.pop('PYTHONPATH', None)
    if not container.get('image'):
        _refuse_untrusted(p)
        uid, gid = _run_as(p)
        prefix = [SETPRIV, '--reuid=%d' % uid, '--regid=%d' % gid, '--init-groups', '--'] if uid else []
        return deps.run(prefix + [p['python'], '-I', '-c', _program(p, program)] + list(args), env)
    fd, env_file = tempfile.mkstemp(prefix='sglang-env-', dir=deps.tmpdir)
    try:
        with os.fdopen(fd, 'w') as f:
            f.write(''.join('%s=%s\n' % (k, shlex.quote(v)) for k, v in sorted(_environ(p).items())))
        argv = [container.get('engine') or 'docker', 'run', '--rm', '--network', 'none', '--log-driver', 'none',
                '--volume', '%s:%s:ro' % (deps.tmpdir, deps.tmpdir)]
        argv += list(container.get('options') or []) + ['--entrypoint', '/bin/sh', container['image'],
                                                        '-c', _SOURCE_ENV, env_file, p['python'], '-c',
                                                        program] + list(args)
        return deps.run(argv, None)
    finally:
        os.unlink(env_file)


def release(p, deps):
    rc, out, err = _run_python(p, deps, sargs.CHECK_PROGRAM, ['--release-only'])
    try:
        found = json.loads((out or '').strip().splitlines()[0])
    except (ValueError, IndexError):
        found = {}
    if rc != 0 or not found.get('release'):
        redact = _redactor(p)
        # the program's first step is the import: a failure is the import's, worded as check_args words it
        what = ('%s cannot import sglang (exit %d)' % (p['python'], rc) if rc != 0
                else 'cannot read the installed SGLang release with %s' % p['python'])
        raise ActionFailed('%s: %s' % (what, sargs.parser_message(err, redact)), {'rc': rc})
    return {'release': found['release'], 'package': found.get('package')}


def check_args(p, deps):
    """The whole command line through the installed SGLang's own parser, without launching anything or writing a
    file of the server (argument_files). The check reads the files from a private temporary directory, and secret
    arguments reach it only through such a file, never through its command line. On the host it runs as the
    run_as user, isolated (_run_python): root runs nothing of the server's Python."""
    redact = _redactor(p)
    out = _rendered(p)
    args = dict(p.get('server_args') or {})
    argv = []
    with _CheckFiles(p, deps) as temp:
        for arg in out['server_argv']:
            argv.append(temp.write(out['files'][arg]) if arg in out['files'] else arg)
        if out['hidden'] and '--config' not in argv:
            argv.extend(['--config', temp.write(sargs.dump_yaml(sargs.render_config(out['hidden'])))])
        rc, stdout, stderr = _run_python(p, deps, sargs.CHECK_PROGRAM, argv)
    try:
        found = sargs.check_result(rc, stdout, stderr, redact.argv(sargs.render_flags(args)), redact, p['python'])
    except sargs.ArgsError as e:
        raise ActionFailed(str(e), dict(sargs.public(out), rc=rc))
    parsed = found.get('parsed')
    if parsed is None:
        # An SGLang without ServerArgs.add_cli_args: expect the values as given.
        parsed = dict((k, v) for k, v in args.items() if v is not False and v is not None)
    expected = dict((k, v) for k, v in parsed.items() if k not in out['secret_args'] and not sargs.SECRET_NAME.search(k))
    keys = found.get('config_keys') or {}
    return dict(sargs.public(out), release=found['release'], package=found.get('package'), expected_info=expected,
                config_keys=keys)


def argument_files(p, keys=None):
    """The argument files of P's command line, path -> content: the --config file of every argument (config_file),
    or of the secret ones (secrets_path). KEYS (check_args' ``config_keys``) renames the keys that the installed
    release refuses in a file."""
    out = _rendered(p)
    if not keys:
        return out['files']
    args = dict(p.get('server_args') or {})
    subset = args if p.get('config_file') else out['hidden']
    return dict((path, sargs.dump_yaml(sargs.render_config(subset, keys))) for path in out['files'])


def _mkstemp(tmpdir):
    return tempfile.mkstemp(prefix='sglang-args-', suffix='.yaml', dir=tmpdir)


# -- processes ---------------------------------------------------------------------------------

def _record(p):
    path = p.get('record_path')
    if not path:
        return {}
    try:
        with open(path) as f:
            record = json.load(f)
    except (IOError, OSError):
        return {}
    except ValueError as e:
        raise ActionFailed('the server record %s is not JSON: %s' % (path, e))
    return record if isinstance(record, dict) else {}


def find(p, deps, record=None):
    redact = _redactor(p)
    patterns = list(p.get('patterns') or [])
    for preset in p.get('presets') or []:
        if preset not in PRESETS:
            raise ActionFailed('presets: unknown preset %r; known: %s' % (preset, ', '.join(sorted(PRESETS))))
        patterns.extend(PRESETS[preset])
    record = _record(p) if record is None else record
    table = deps.procfs.snapshot()
    if not table:
        raise ActionFailed('no process is readable under %s (hidepid, or not root?)' % deps.procfs.root)
    own_cgroup = deps.procfs.cgroup(deps.self_pids[0]) if deps.self_pids else ''
    elsewhere = None
    if not p.get('other_namespaces') and deps.self_pids:
        place = Place(deps.procfs, deps.self_pids[0])

        def elsewhere(pid):
            # a server in a Docker or Podman container is stopped through its engine: found here, not apart
            kind = supervisors.classify(deps.procfs.cgroup(pid), own_cgroup)
            return None if kind['kind'] == 'container' else place.elsewhere(pid)
    named = p.get('pids') or []
    servers, apart = sprocs.find_servers(deps.procfs, table, patterns, record, p['default_url'], redact,
                                         deps.self_pids, elsewhere, named)
    servers, others = _owned(servers, p.get('owners') or [], named, deps)
    servers, moved = _supervise(servers, table, own_cgroup, deps)
    recorded = [s for s in servers if s['recorded']]
    found = {'servers': servers, 'elsewhere': apart + moved, 'others': others, 'record': record,
             'recorded': recorded[0] if recorded else None,
             'gateways': sprocs.gateways(deps.procfs, table, redact, named)}
    if p.get('port'):
        found['port'] = sprocs.port_holders(deps.procfs, table, p['port'], redact, p.get('bind_host'))
    if p.get('drain'):
        _refuse_colaunched(found, _counting(p, deps, servers))
        found['runs'] = _runs(found, p, deps)
        found['drains'] = _drain_each(found, p, deps, table)
    if p.get('stop_supervised'):
        found['supervised_stops'] = _stop_supervised(found, p, deps)
        found['changed'] = bool(found['supervised_stops'])
    found['comes_back'] = [line for line in map(_comes_back, servers) if line]
    for line in found['comes_back']:
        deps.warn(line)
    return found


def _reap_params(p, record):
    """gpu_reap's parameters for the rest of a stop: the stop's selectors, every process of the recorded run (its
    GPUOPS_RUN), SIGKILL after stop_timeout, the verification, and the options of ``reap``."""
    params = dict(p['reap'] or {}, presets=p.get('presets') or [], patterns=p.get('patterns') or [],
                  pids=p.get('pids') or [], users=p.get('owners') or None, term_timeout=p['stop_timeout'],
                  verify=p.get('verify'), environ=None)
    if record.get('marker'):
        params['environ'] = {'GPUOPS_RUN': '^%s$' % re.escape(str(record['marker']))}
    return params


def stop(p, deps):
    """The whole stop in one call: find the servers, drain them, stop those of a unit or a container through it,
    stop what is left of them with gpu_reap's escalation, wait until every GPU is clean, and watch for a server that
    a wrapper starts again. Every option is checked, and NVML opened, before anything is drained or signalled.

    The result is find's, plus ``reap`` (gpu_reap's result), ``settled`` and ``signalled``: true from the first
    signal on, also in the result of a failure, so that the caller knows whether the old server was touched;
    ``summary`` and ``said`` (_stop_report; in a failure, ``said`` names what was left running). With
    the lock option, the host lock is taken or checked first and released or checked again last (_StopLock)."""
    record = _record(p)
    try:
        run = deps.reaping(_reap_params(p, record))
    except ReapError as e:
        raise ActionFailed('reap: %s; nothing was drained or signalled' % e, {'signalled': False})
    except ValueError as e:
        raise ActionFailed('%s; nothing was drained or signalled' % e, {'signalled': False})
    try:
        with _StopLock(p.get('lock'), deps) as lock:
            found = _stopped(p, deps, record, run)
            lock.check_again(found)
    except ActionFailed as e:
        e.result.setdefault('said', stop_report.left_running(e.result.get('reap')))
        raise
    if lock.result is not None:
        found['lock'] = lock.result
    # in figures and in words (_stop_report): what gpuops.host.sglang_stop reports and prints
    found['summary'] = stop_report.summary(found)
    found['said'] = stop_report.said(found, p.get('owners') or [], deps.check_mode)
    return found


def _stopped(p, deps, record, run):
    """The stop itself (see stop), with gpu_reap's RUN for what is left. Once it has signalled, the extraction runs
    that it ended say how (_manifest.after_stop: ``ended``, and the recorded run's manifest completed), also when it
    fails after that; a recorded run whose server it found gone is completed as crashed."""
    began = deps.wall_clock()
    gone = False
    try:
        with run:
            found = find(dict(p, drain=True, stop_supervised=True), deps, record)
            gone = manifests.recorded(record) and not any(identified(record, s) for s in found['servers']) and not (
                sprocs.alive(deps.procfs, record.get('pid'), record.get('start')) if record.get('pid') else False)
            found['signalled'] = any('seconds' in s for s in found['supervised_stops'])
            try:
                found['reap'] = run(deps.check_mode)
            except ReapFailure as e:
                raise ActionFailed('stopping what is left of the SGLang servers: %s' % e,
                                   dict(found, reap=e.result, signalled=not deps.check_mode))
    except NvmlError as e:
        raise ActionFailed('verify: %s; nothing was drained or signalled' % e, {'nvml_error': e.code, 'signalled': False})
    except SelectionError as e:
        raise ActionFailed('verify: %s; nothing was drained or signalled' % e, {'signalled': False})
    except ActionFailed as e:
        e.result.setdefault('signalled', any('seconds' in s for s in e.result.get('supervised_stops') or []))
        if e.result['signalled'] and e.result.get('runs'):
            _ended(e.result, p, deps, record, began, gone)
        raise
    finally:
        for warning in run.warnings:
            deps.warn(warning)
    _ended(found, p, deps, record, began, gone)
    found['signalled'] = found['signalled'] or (not deps.check_mode and bool(found['reap']['stopped']))
    found['changed'] = bool(found['supervised_stops']) or found['reap']['changed']
    found['diff'] = found['reap']['diff']
    found['settled'] = None
    wrapped = [s['pid'] for s in found['servers'] if s['supervisor'].get('kind') == 'process'
               and s['supervisor'].get('parent')]
    if wrapped and not deps.check_mode and p['settle'] > 0:
        try:
            found['settled'] = settle(dict(p, stopped=found['servers'], timeout=p['settle'], interval=0.1), deps)
        except ActionFailed as e:
            raise ActionFailed(e.msg, dict(found, **e.result))
    return found


def _ended(found, p, deps, record, began, gone):
    """FOUND's runs once the stop is done (_manifest.after_stop)."""
    starts = dict((s['pid'], s['start']) for s in found.get('servers') or [])
    found['runs'] = manifests.after_stop(
        found.get('runs') or [], record, began, deps.wall_clock(),
        lambda pid: sprocs.alive(deps.procfs, pid, starts.get(pid)), gone,
        p.get('dump_patterns') or extraction.DUMPS, deps.check_mode, deps.warn)


def lock_options():
    """The suboptions of sglang_server's lock: host_lock's options, less state, and take."""
    spec = dict((k, v) for k, v in locks.argument_spec().items() if k != 'state')
    spec['take'] = dict(type='bool', default=False)
    spec['release'] = dict(type='bool', default=False)
    return spec


def keeping_lock(stop):
    """The stop's options STOP with their lock kept held when the stop is done (``release`` off), for a stop within a
    call that goes on after it: the call itself releases it, where it was asked to, once its work is done."""
    lock = (stop or {}).get('lock')
    return dict(stop, lock=dict(lock, release=False)) if lock else stop


def release_lock(options, deps):
    """Release the host lock of OPTIONS (the stop's lock option), held by its run, once the call did its work: what
    the result reports of it (``path``, ``released``); a lock that cannot be released is warned of, and stays until
    the run's own release or its max_age."""
    lock = locks.HostLock(options['path'])
    try:
        released = locks.act(lock, 'absent', options['run'])['released']
    except locks.ERRORS as e:
        deps.warn('the host lock was not released: %s' % locks.failure(lock, e)['msg'])
        released = False
    return {'path': lock.path, 'released': released}


class _StopLock:
    """The host lock around a stop (its lock option, OPTIONS; None for none): taken or checked on entry, before
    anything is drained or signalled; checked again (check_again) or released on exit. ``result`` is what the stop
    reports of it (None without a lock). On exit an ActionFailed gets the lock's state in its result too."""

    def __init__(self, options, deps):
        self.options, self.deps = options, deps
        self.lock = locks.HostLock(options['path']) if options else None
        self.result = None

    def __enter__(self):
        if self.lock is None:
            return self
        o = self.options
        try:
            held = locks.act(self.lock, 'present' if o['take'] else 'held', o['run'], o['owner'], o['max_age'],
                             self.deps.check_mode)
        except locks.ERRORS as e:
            failure = locks.failure(self.lock, e)
            raise ActionFailed('%s Nothing was drained or signalled.' % failure.pop('msg'),
                               dict(failure, signalled=False, lock_lost=True))
        self.result = {'path': self.lock.path, 'owner': held['owner'], 'taken_over': held.get('taken_over'),
                       'released': False}
        return self

    def check_again(self, found):
        """With a lock that the run held before the stop: fail, with FOUND, where it no longer holds it."""
        if self.lock is None or self.options['take']:
            return
        try:
            locks.act(self.lock, 'held', self.options['run'])
        except locks.ERRORS as e:
            failure = locks.failure(self.lock, e)
            raise ActionFailed('%s The stop itself was done when this was found.' % failure.pop('msg'),
                               dict(found, lock_lost=True, **failure))

    def __exit__(self, kind, error, trace):
        if self.result is not None and not self.deps.check_mode and \
                (self.options['take'] or (self.options.get('release') and error is None)):
            self.result['released'] = release_lock(self.options, self.deps)['released']
        if isinstance(error, ActionFailed) and self.result is not None:
            error.result.setdefault('lock', self.result)
        return False


def _owned(servers, owners, named, deps):
    """SERVERS split into those of OWNERS (all of them when OWNERS is empty), and the others - another user's, each
    with its user and the ports it listens on - which are neither drained nor stopped unless NAMED lists them."""
    for server in servers:
        server['user'] = deps.procfs.owner(server['pid'])
    if not owners:
        return servers, []
    kept, others = [], []
    listening = None
    for server in servers:
        user = server['user']
        if user in owners or server['pid'] in named or user is None:
            kept.append(server)
            continue
        if listening is None:
            listening = deps.procfs.tcp_listening()
        pids = [m['pid'] for m in server['tree']]
        others.append({'pid': server['pid'], 'user': user, 'cmdline': server['cmdline'],
                       'ports': deps.procfs.listening_ports(pids, listening)})
    return kept, others


def _supervise(servers, table, own_cgroup, deps):
    """SERVERS, each with its ``supervisor`` (see _supervisor.classify and the supervisor's own answer); and the
    container servers that cannot be reached or inspected from here, moved apart with the reason.

    A unit or a container is a server's supervisor only when its own answer holds the server (supervisors.confirm):
    a cgroup that merely carries its name (a user's own manager makes any) is no supervisor. A server whose cgroup
    names a unit that does not hold it is stopped as a process of its own; one whose cgroup names a container that
    does not hold it is moved apart, not stopped (gpu_reap leaves a process in a container cgroup alone), and never
    stopped through the container it names."""
    init = table.get(1)
    systemd_here = init is not None and init.comm == 'systemd'
    kept, moved = [], []
    for server in servers:
        kind = supervisors.classify(deps.procfs.cgroup(server['pid']), own_cgroup)
        try:
            if kind['kind'] == 'systemd' and systemd_here:
                sup = supervisors.read_unit(deps.run, kind['unit'])
                _confirmed(kind, sup, '', own_cgroup)
            elif kind['kind'] == 'container':
                sup = supervisors.read_container(deps.run, kind['engine'], kind['id'])
                main = deps.procfs.cgroup(sup['main_pid']) if sup['main_pid'] > 0 else ''
                _confirmed(kind, sup, main, own_cgroup)
                url = supervisors.container_url(sup, server['url'])
                if url is None:
                    raise supervisors.SupervisorError(
                        'it publishes no host port for %s and does not use the host network' % server['url'])
                server['url'] = url
            else:
                sup = _bare(server, table)
        except _Unconfirmed as e:
            if kind['kind'] == 'container':
                reason = ('its cgroup names %s container %s, which does not hold it (%s): not stopped, and never '
                          'through that container' % (kind['engine'], kind['id'][:12], e))
                deps.warn('the SGLang server %d is not stopped: %s' % (server['pid'], reason))
                moved.append({'pid': server['pid'], 'cmdline': server['cmdline'], 'supervisor': {'kind': 'process'},
                              'claimed': e.claim, 'reason': reason})
                continue
            deps.warn('the SGLang server %d is not stopped through the unit %s, which its cgroup names: %s; it is '
                      'stopped as a process of its own' % (server['pid'], kind['unit'], e))
            sup = dict(_bare(server, table), claimed=e.claim)
        except supervisors.SupervisorError as e:
            if kind['kind'] == 'container':
                moved.append({'pid': server['pid'], 'cmdline': server['cmdline'], 'supervisor': kind,
                              'reason': 'in %s container %s, not stopped: %s; stop it with %s stop %s'
                                        % (kind['engine'], kind['id'][:12], e, kind['engine'], kind['id'][:12])})
                continue
            sup = dict(kind, error=str(e))
        server['supervisor'] = sup
        kept.append(server)
    return kept, moved


class _Unconfirmed(Exception):
    def __init__(self, claim):
        super().__init__(claim['why'])
        self.claim = claim


def _confirmed(kind, sup, main_cgroup, own_cgroup):
    """_Unconfirmed, with what the cgroup claimed and why it does not hold, where SUP does not hold the server."""
    why = supervisors.confirm(kind, sup, main_cgroup, own_cgroup)
    if why is not None:
        raise _Unconfirmed(dict(kind, why=why))


def _bare(server, table):
    """A server that no unit or container runs: the session it leads, and the parent that may start it again
    when it exits (a ``while true`` wrapper, a script), unless that is init or a container shim."""
    proc = table[server['pid']]
    parent = table.get(proc.ppid)
    respawner = None
    if parent is not None and proc.ppid > 1 and not parent.kernel_thread and not (parent.names() & _NO_RESPAWNER):
        respawner = {'pid': parent.pid, 'start': parent.start, 'cmdline': parent.command}
    return {'kind': 'process', 'session': server['session'], 'parent': respawner}


def _comes_back(server):
    """What starts SERVER again at boot or when its engine restarts, as a warning line, or None."""
    sup = server.get('supervisor') or {}
    if sup.get('kind') == 'systemd' and sup.get('enabled') and not sup.get('written_by_gpuops'):
        return ('the systemd unit %s of the SGLang server %d is enabled: it starts again at the next boot '
                '(%s, or disable_supervisors)' % (sup['unit'], server['pid'], supervisors.disable_hint(sup)))
    if sup.get('kind') == 'container' and sup.get('comes_back'):
        return ('the container %s of the SGLang server %d has restart policy %s: it starts again when the host or '
                'the engine restarts (%s, or disable_supervisors)'
                % (sup.get('name') or sup['id'][:12], server['pid'], sup['restart'], supervisors.disable_hint(sup)))
    return None


def _stop_supervised(found, p, deps):
    """Stop each server that a unit or a container runs through that supervisor, after its drain; the others are
    left to gpu_reap. A restart policy does not fire on an explicit stop (systemd: Restart= applies to exits it
    did not ask for; Docker and Podman: a stopped container stays stopped)."""
    stops = []
    for server in found['servers']:
        sup = server['supervisor']
        if sup['kind'] not in ('systemd', 'container') or sup.get('error'):
            continue
        entry = {'pid': server['pid'], 'supervisor': sup['kind'], 'name': sup.get('unit') or sup.get('name'),
                 'changed': True}
        if sup['kind'] == 'systemd' and sup.get('kill_mode') == 'control-group':
            deps.warn('the unit %s has KillMode=control-group: systemctl stop sends SIGTERM to the schedulers of the '
                      'SGLang server %d too, which cuts their release of GPU memory, and systemd escalates to SIGKILL '
                      'after TimeoutStopSec if the server does not exit; KillMode=mixed in the unit lets SGLang stop '
                      'its own children' % (sup['unit'], server['pid']))
        if not deps.check_mode:
            try:
                entry.update(supervisors.stop(deps.run, sup, p['stop_timeout'], deps.clock))
                if p.get('disable_supervisors'):
                    entry['disabled'] = _disable(sup, deps)
            except supervisors.SupervisorError as e:
                raise ActionFailed('stopping the SGLang server %d through its supervisor: %s' % (server['pid'], e),
                                   dict(found, supervised_stops=stops + [dict(entry, error=str(e))]))
        stops.append(entry)
    return stops


def _disable(sup, deps):
    argv = (['systemctl', 'disable', '--', sup['unit']] if sup['kind'] == 'systemd'
            else [sup['engine'], 'update', '--restart=no', '--', sup['id']])
    rc, out, err = deps.run(argv, None)
    if rc != 0:
        raise supervisors.SupervisorError('%s failed (rc %d): %s' % (' '.join(argv), rc, (err or out).strip()))
    return ' '.join(argv)


def settle(p, deps):
    """Watch, for ``timeout`` seconds after a stop, for a new SGLang server: one that a wrapper, unit or container
    started again. Fails naming what started it and how to disable that."""
    patterns = list(p.get('patterns') or [])
    for preset in p.get('presets') or []:
        patterns.extend(PRESETS[preset])
    redact = _redactor(p)
    before = set((int(s['pid']), int(s['start'])) for s in p.get('stopped') or [])
    # only a new server of the owners (or of the stopped servers' users) counts: another user's does not fail the stop
    counts = _counting(p, deps, p.get('stopped') or [])
    deadline = deps.clock() + p['timeout']
    polls = 0
    while True:
        polls += 1
        table = deps.procfs.snapshot()
        servers, dummy = sprocs.find_servers(deps.procfs, table, patterns, {}, p['default_url'], redact,
                                             deps.self_pids)
        new = [s for s in servers if (s['pid'], s['start']) not in before and counts(s['pid'])]
        if new:
            own_cgroup = deps.procfs.cgroup(deps.self_pids[0]) if deps.self_pids else ''
            new, dummy = _supervise(new, table, own_cgroup, deps)
            lines = [_respawned(s) for s in new]
            stopped = ', '.join('%d' % pid for pid, dummy in sorted(before)) or 'none'
            raise ActionFailed('a new SGLang server started within %g s of the stop of the server(s) %s: %s'
                               % (p['timeout'], stopped, '; '.join(lines)), {'respawned': new, 'polls': polls})
        if deps.clock() >= deadline:
            return {'respawned': [], 'polls': polls, 'seconds': p['timeout']}
        deps.sleep(min(p['interval'], max(deadline - deps.clock(), 0)))


def _respawned(server):
    sup = server.get('supervisor') or {}
    head = 'pid %d (%s)' % (server['pid'], server['cmdline'])
    if sup.get('kind') == 'process' and sup.get('parent'):
        parent = sup['parent']
        return ('%s, started by pid %d (%s), which starts it again whenever it exits; stop that process first '
                '(kill %d), then stop the server' % (head, parent['pid'], parent['cmdline'], parent['pid']))
    if sup.get('kind') in ('systemd', 'container'):
        return '%s, started by %s %s; disable it first (%s)' % (
            head, 'the systemd unit' if sup['kind'] == 'systemd' else 'the container',
            sup.get('unit') or sup.get('name') or sup.get('id', '')[:12], supervisors.disable_hint(sup))
    return '%s, started by nothing this host can name (its parent is init)' % head


def _runs(found, p, deps):
    """The extraction runs of the servers FOUND (a dump directory: the record's for the server it names, else its
    main process's SGLANG_HS_DUMP_DIR), each with what it has written (_extraction.activity, of the files that
    dump_patterns names) and ``recorded`` (the record's server's run). An active run fails the stop before anything
    is drained or signalled, naming it, unless cut_active_run is set: then it is cut, and said so (``cut``)."""
    window = p.get('active_window') or 0
    runs = []
    for server in found['servers']:
        since = None
        recorded = identified(found['record'], server) and bool(found['record'].get('dump_dir'))
        if recorded:
            path, marker = found['record']['dump_dir'], found['record'].get('marker')
            # what the launch itself made it dump (warm-up, readiness checks, probe) is no work of the run
            since = extraction.epoch(found['record'].get('checked'))
        else:
            path = (deps.procfs.environ(server['pid']) or {}).get('SGLANG_HS_DUMP_DIR')
            marker = server.get('marker')
        if not path:
            continue
        run = dict(extraction.activity(path, window, deps.wall_clock(), since=since,
                                       patterns=p.get('dump_patterns') or extraction.DUMPS),
                   pid=server['pid'], marker=marker, cut=False, recorded=recorded)
        runs.append(run)
    active = [r for r in runs if r['active']]
    if active and not p.get('cut_active_run'):
        lines = ['the SGLang server %d is in an active extraction run%s: its dump directory %s holds %s' % (
            r['pid'], ' (%s)' % r['marker'] if r['marker'] else '', r['path'], extraction.describe(r)) for r in active]
        raise ActionFailed('%s, within the %g s window of an active run. Nothing was drained or signalled: stopping it '
                           'now would cut the run, whose driver sends its next request to a server that is gone. Let '
                           'the run finish, or set cut_active_run (sglang_stop_cut_active_run) to stop it anyway.'
                           % ('; '.join(lines), window), dict(found, runs=runs, signalled=False))
    for run in active:
        run['cut'] = True
        deps.warn('the active extraction run of the SGLang server %d is cut (cut_active_run): %s holds %s'
                  % (run['pid'], run['path'], extraction.describe(run)))
    return runs


def _counting(p, deps, servers):
    """Whether a process counts for a stop of SERVERS (find's): root itself runs it (ProcFS.trusted_root), or its
    real user is one of owners, or without owners, the user of one of SERVERS. Another user's gateway or new server
    then neither blocks nor fails the stop."""
    users = set(p.get('owners') or [s.get('user') for s in servers])
    users.discard(None)
    return lambda pid: deps.procfs.trusted_root(pid) or deps.procfs.owner(pid) in users


def _refuse_colaunched(found, counts):
    """ActionFailed when a gateway's co-launcher of a user that COUNTS(pid) runs servers of its own: stopping them
    behind its back is no restart (the launcher neither restarts them nor tells its router), so they are stopped
    through it."""
    lines = []
    for gw in found['gateways']:
        if not counts(gw['pid']):
            continue
        for server in gw['colaunched']:
            lines.append('%d (%s, port %s) was started by the SGLang Model Gateway launcher %d (%s)' % (
                server['pid'], server['cmdline'], ', '.join(str(p) for p in server['ports']) or 'unknown',
                gw['pid'], gw['cmdline']))
    if lines:
        raise ActionFailed(
            'not stopping servers that the SGLang Model Gateway co-launched: %s; stopping them behind the launcher\'s '
            'back is not a restart. Stop the launcher itself, or name the servers in pids (sglang_stop_pids) to '
            'stop them anyway; nothing was drained or signalled' % '; '.join(lines), found)


def _port(url):
    try:
        parts = urlsplit(url)
        return parts.port or (443 if parts.scheme == 'https' else 80)
    except ValueError:
        return None


def _host(url):
    try:
        return urlsplit(url).hostname
    except ValueError:
        return None


def _tied(p, deps, pid, url, table=None):
    """own_listener for the server PID at URL's port and host: where that server itself listens, or why it cannot be
    told."""
    table = deps.procfs.snapshot() if table is None else table
    port = _port(url)
    if port is None:
        return {'port': None, 'tied': False, 'url': None, 'holders': [], 'strangers': [],
                'reason': 'its URL %s names no port' % url}
    return sprocs.own_listener(deps.procfs, table, pid, port, _redactor(p), _host(url))


def identified(record, server):
    """Whether SERVER (an entry of find's servers) is the process that RECORD names by PID and start time: the
    server a run of this collection started and recorded. Its run marker alone proves nothing: any process can
    carry any environment."""
    try:
        return bool(record) and (int(record['pid']), int(record['start'])) == (server['pid'], server['start'])
    except (KeyError, TypeError, ValueError):
        return False


def key_trust(p, deps, server, record, servers=()):
    """Why SERVER is not trusted with an API key, or None when it is: the server that RECORD names (identified),
    one that root itself runs (ProcFS.trusted_root: not a setuid program's image, whose /proc entry only looks
    root's), or one whose real user is in api_key_users, or is the user of the recorded server where SERVERS (find's)
    hold it."""
    pid = server['pid']
    if identified(record, server) or deps.procfs.trusted_root(pid):
        return None
    user = deps.procfs.owner(pid)
    users = set(p.get('api_key_users') or [])
    recorded = record.get('owner') if record else None
    if recorded and recorded != 'root' and any(identified(record, s) for s in servers):
        users.add(recorded)
    if user in users:
        return None
    uids = deps.procfs.uids(pid) or ()
    disguise = ' (its effective UID is %d: a setuid program\'s image)' % uids[1] if uids and uids[1] != uids[0] else ''
    return 'it runs as %s%s, who is not trusted with the API key (root%s)' % (
        user, disguise, ''.join(', ' + u for u in sorted(users)))


def _drain_each(found, p, deps, table):
    """Drain each server FOUND, one after the other, as action drain does, at the address where its own tree listens;
    stop at the first that fails. A server whose listener cannot be tied to its tree, or that is not trusted with
    the API key (key_trust), is sent nothing: it is not drained, and is listed in RV(undrained) with the reason."""
    drains, undrained = [], []
    for server in found['servers']:
        user = server['user']
        if server.get('node_rank'):
            try:
                drains.append(_await_rank0(server, p, deps))
            except ActionFailed as e:
                raise ActionFailed(e.msg, dict(found, undrained=undrained, drains=drains, **e.result))
            continue
        tie = _tied(p, deps, server['pid'], server['url'], table)
        reason = tie['reason'] if not tie['tied'] else key_trust(p, deps, server, found['record'], found['servers'])
        if reason:
            undrained.append({'pid': server['pid'], 'user': user, 'url': server['url'], 'reason': reason,
                              'strangers': tie['strangers']})
            deps.warn('the SGLang server %d (user %s, %s) is not drained and is sent nothing: %s'
                      % (server['pid'], user, server['url'], reason))
            continue
        # The key it was started with, where its command line or --config file says: a restart that rotates the key
        # drains the old server with its own; P['api_key'] (the new configuration's) otherwise.
        keyed = _with_own_key(p, deps, server['pid'], table.get(server['pid']))
        try:
            result = drain(dict(keyed, url=tie['url'], pid=server['pid']), deps, tie=tie)
        except ActionFailed as e:
            raise ActionFailed(e.msg, dict(found, undrained=undrained,
                                           drains=drains + [dict(e.result, pid=server['pid'], url=tie['url'])]))
        drains.append(dict(result, pid=server['pid'], url=tie['url']))
    found['undrained'] = undrained
    return drains


def _await_rank0(server, p, deps):
    """The drain of a node of rank 1 or more of a multi-node server. It has no requests of its own (only rank 0 runs
    the tokenizer), and a SIGTERM to it only logs: it stops once rank 0, after its own drain, broadcasts its
    ShutdownReq (SGLang 0.5.23 engine.py _launch_subprocesses; "Non-zero ranks cannot drain on their own"). Stopped
    before that, its death would leave rank 0's requests in flight in their collectives. So, rank 0 first: the stop
    waits while the worker's tree holds its connection to rank 0's store (_sglang_procs.head_connected), up to the
    drain's timeout - it goes on at once where rank 0 is gone; past the timeout it fails, leaving the worker running,
    unless force."""
    entry = {'pid': server['pid'], 'url': server['url'], 'drained': True, 'in_flight': 0, 'lost': 0,
             'source': 'node_rank', 'node_rank': server['node_rank'], 'seconds': 0.0, 'readings': 0,
             'serving': False, 'aborted': False, 'needs_api_key': False, 'error': None, 'rank0': None}
    port = server.get('dist_port')
    if not port:
        return entry
    pids = [proc['pid'] for proc in server.get('tree') or []] or [server['pid']]
    began = deps.clock()
    while True:
        entry['readings'] += 1
        connected = sprocs.head_connected(deps.procfs, pids, port)
        entry['rank0'] = 'running' if connected else 'gone'
        waited = deps.clock() - began
        if not connected or deps.check_mode:
            break
        if waited >= p['timeout']:
            if not p.get('force'):
                raise ActionFailed(
                    'the SGLang server %d is node %d of a multi-node server whose rank 0 (its store at port %d) still '
                    'runs after %g s: a node of rank 1 or more stops once rank 0 has, and stopped before, it would '
                    'leave rank 0\'s requests in flight; stop rank 0 first (a stop of the whole group does), or force '
                    'the stop' % (server['pid'], server['node_rank'], port, waited),
                    {'signalled': False, 'rank0': 'running'})
            entry['forced'] = True
            break
        deps.sleep(p['interval'])
    entry['seconds'] = round(deps.clock() - began, 2)
    return entry


def check_environ(p, deps):
    if not p.get('pid'):
        raise ActionFailed('action check_environ needs pid')
    redact = _redactor(p)
    wanted = dict((k, str(v)) for k, v in (p.get('environ') or {}).items())
    table = deps.procfs.snapshot()
    try:
        report = sprocs.check_environ(deps.procfs, table, p['pid'], wanted, p.get('schedulers') or 1, redact)
    except sprocs.ProcsError as e:
        raise ActionFailed(str(e))
    if not report['ok']:
        if report['missing']:
            lacks = ['%d (%s) lacks %s%s' % (c['pid'], c['cmdline'], ', '.join(c['lacking']),
                                             '' if c['readable'] else ' (environment unreadable)')
                     for c in report['missing']]
            why = '; '.join(lacks)
        else:
            why = 'only %d scheduler(s) found in the tree of %d, %d expected' % (
                report['schedulers'], p['pid'], max(p.get('schedulers') or 1, 1))
        raise ActionFailed('the environment of SGLang server %d is incomplete: %s; those processes run without it'
                           % (p['pid'], why), report)
    return report


# -- HTTP --------------------------------------------------------------------------------------

def _require_own(p, deps, what):
    """With P['pid'], refuse to send anything to P['url'] unless the listener on its port belongs to that server's
    tree; the message names the processes that hold the port instead (PID, user, command line). The tie, or None
    without a pid."""
    if not p.get('pid'):
        return None
    tie = _tied(p, deps, p['pid'], p['url'])
    if not tie['tied']:
        raise ActionFailed('%s: %s is not the SGLang server %d\'s own listener, so nothing is sent there: %s'
                           % (what, p['url'], p['pid'], tie['reason']), {'listener': tie})
    return tie


def drain(p, deps, tie=None):
    p = _with_own_key(p, deps, p['pid']) if p.get('pid') and tie is None else p
    redact = _redactor(p)
    if tie is None:
        tie = _require_own(p, deps, 'cannot drain')
    client = _client(p, deps, tie)
    try:
        return _drained(p, deps, client, redact)
    except sprocs.Moved as e:
        raise ActionFailed('stopped draining %s: %s; nothing more was sent there, and nothing was stopped'
                           % (p['url'], e), {'drained': False, 'moved': str(e)})


def _drained(p, deps, client, redact):
    if deps.check_mode:
        reading = shttp.InFlight(client).read(min(p['request_timeout'], 10), deps.clock)
        return {'drained': reading.count == 0 or reading.refused, 'serving': not reading.refused,
                'in_flight': reading.count, 'source': reading.source, 'readings': 1, 'seconds': 0.0,
                'error': redact(reading.error), 'lost': 0, 'aborted': False,
                'needs_api_key': reading.auth and reading.count is None}
    result = shttp.drain(client, p['timeout'], p['interval'], p['request_timeout'], deps.clock, deps.sleep)
    result['error'] = redact(result['error'])
    result.update(lost=0, aborted=False)
    if result['drained']:
        return result
    count = 'an unknown number of' if result['in_flight'] is None else str(result['in_flight'])
    server = '%d (%s)' % (p['pid'], p['url']) if p.get('pid') else p['url']
    why = (' (last error: %s)' % result['error']) if result['error'] else ''
    if result['needs_api_key']:
        head = 'cannot read the requests in flight on the SGLang server %s: it requires an API key%s' % (server, why)
    else:
        head = '%s request(s) still in flight on the SGLang server %s after waiting %g s%s' % (
            count, server, p['timeout'], why)
    if not p['force']:
        raise ActionFailed(head + '; the server is left running. Wait longer (drain timeout) or force the stop, '
                           'which loses them.', result)
    error = shttp.abort_all(client, min(p['request_timeout'], 10))
    result['aborted'] = error is None
    result['lost'] = result['in_flight']
    deps.warn(head + '; force is set: ' + ('every request in flight was aborted (/abort_request), they are lost'
                                           if error is None else 'aborting them failed (%s); the stop cuts them' % error))
    return result


def _main_process(p, deps):
    """The main process of the supervisor that P's main_process_of names, once it has one (supervisors.main_process,
    polled for supervisors.MAIN_PROCESS_WAIT seconds); ActionFailed, with died, when the server ended first."""
    of = p['main_process_of']
    what = ('The unit %s has no main process after systemctl start' % of['name'] if of['kind'] == 'systemd' else
            'The container %s has no main process after %s run' % (of['name'], of['kind']))
    deadline = deps.clock() + supervisors.MAIN_PROCESS_WAIT
    while True:
        pid, ended, state = supervisors.main_process(deps.run, of['kind'], of['name'])
        if pid > 0:
            return pid
        if ended or deps.clock() >= deadline:
            raise ActionFailed('%s%s: its server exited, or never started (%s)' % (
                what, '' if ended else ' within %g s' % supervisors.MAIN_PROCESS_WAIT, state),
                {'ready': False, 'died': ended, 'pid': None, 'log_tail': []})
        deps.sleep(0.1)


# The options of the stop, which P['stop'] holds for a stop made by ready, or by stop itself.
def stopping(p):
    """P with the stop's options of P['stop'] in place of its own, where it has them."""
    return merged(dict(p, **p['stop'])) if p.get('stop') else p


def ready(p, deps, actions=None):
    """With P['stop'], stop what runs first (stop, with those options): then nothing but this call runs between the
    old server's exit and the new server's start. With P['start'], start the server (_start); then wait until it
    answers ready (_ready). What the stop found (``stopped``, its summary and lines) and what the start did (its
    wall-clock moment, ``started``; ``unit_written``) are in the result, in a failure too; a failure of the stop
    itself says so (``stop_failed``, with ``signalled`` and ``lock_lost``). ACTIONS (a _timeline.Timeline) gets
    each step with its seconds."""
    actions = actions or Timeline(deps.clock)
    stopped = None
    if p.get('stop') is not None:
        try:
            with actions.step('stop') as entry:
                stopped = stop(stopping(p), deps)
                entry['servers'] = [s['pid'] for s in stopped.get('servers') or []]
        except ActionFailed as e:
            raise ActionFailed(e.msg, {'stop_failed': True, 'stopped': e.result, 'ready': False, 'pid': None,
                                       'signalled': e.result.get('signalled', False),
                                       'lock_lost': e.result.get('lock_lost', False),
                                       'said': e.result.get('said') or []})
        if p.get('record') is not None:
            # the run history's line gets what the stop took
            entry = dict(p['record'].get('entry') or {}, seconds_to_clean=stopped['summary']['seconds_to_clean'],
                         gpus_verified=stopped['summary']['gpus_verified'])
            p = dict(p, record=dict(p['record'], entry=entry))
    try:
        result = _started(p, deps, actions)
    except ActionFailed as e:
        if stopped is not None:
            e.result['stopped'] = stopped
        raise
    if stopped is not None:
        result['stopped'] = stopped
    # a server started (and the old one stopped) is a change, whatever the checks' own results say
    result['changed'] = bool(p.get('start') is not None or (stopped or {}).get('changed') or result.get('changed'))
    return result


def _started(p, deps, actions):
    started = {}
    if p.get('start') is not None:
        started['started'] = int(deps.wall_clock())
        try:
            with actions.step('start', kind=p['start']['kind']) as entry:
                started.update(starts.start(p['start'], deps.run))
                entry['pid'] = started.get('pid')
        except starts.StartFailed as e:
            failure = dict(e.result, ready=False, died=True, pid=None, log_tail=[], started=started['started'])
            raise ActionFailed(_redactor(p)(e.msg), failure)
        p = dict(p, pid=started.get('pid'), main_process_of=started.get('main_process_of'))
    kept = dict((k, v) for k, v in started.items() if k in ('started', 'unit_written'))
    try:
        result = _ready(p, deps, kept, actions)
    except ActionFailed as e:
        e.result.update(kept)
        raise
    result.update(kept)
    return result


def _ready(p, deps, started=None, actions=None):
    actions = actions or Timeline(deps.clock)
    client = _client(p, deps)
    redact = _redactor(p)
    pid = p.get('pid') or (_main_process(p, deps) if p.get('main_process_of') else None)
    proc = deps.procfs.stat(pid) if pid else None
    if pid and proc is None:
        tail = sprocs.log_tail(p.get('log_path'), p['log_lines'], redact)
        raise ActionFailed('the SGLang server %d exited while loading, before the first check%s' % (
            pid, '. Last %d lines of %s:\n%s' % (len(tail), p['log_path'], '\n'.join(tail)) if tail else ''),
            {'ready': False, 'died': True, 'log_tail': tail, 'pid': pid})
    start = proc.start if proc else None
    with actions.step('wait', path=p['path']) as entry:
        result = shttp.wait_ready(client, p['path'], p['timeout'], p['interval'], p['request_timeout'],
                                  (lambda: sprocs.alive(deps.procfs, pid, start)) if pid else (lambda: True),
                                  deps.clock, deps.sleep)
        entry['ready'] = result['ready']
    result['last'] = redact(result['last'])
    result['pid'] = pid
    tie = _tied(p, deps, pid, p['url']) if pid else None
    if tie is not None:
        result['listener'] = tie
    if result['ready'] and (tie is None or tie['tied']):
        if pid:
            # who the server is, beyond its PID (which the kernel reuses): for the record; how long it took to load
            age = deps.procfs.age(start)
            result.update(start=start, user=deps.procfs.owner(pid),
                          seconds_to_ready=round(age if age is not None else result['seconds'], 1))
        if p.get('checks') is not None:
            began = deps.clock()
            result['checks'] = post_checks(p, deps, pid, p['checks'], result, actions)
            result['checks_seconds'] = round(deps.clock() - began, 2)
        if p.get('record') is not None and pid:
            try:
                with actions.step('record', path=p['record']['path']):
                    result['record_written'] = records.commit(p['record'], dict(result, **(started or {})),
                                                              deps.wall_clock())
            except records.RecordError as e:
                raise ActionFailed('the SGLang server %d passed its checks but cannot be recorded: %s' % (pid, e),
                                   dict(result, ready=True, check='record'))
        return result
    result['log_tail'] = sprocs.log_tail(p.get('log_path'), p['log_lines'], redact)
    if tie is not None and (tie['strangers'] or (result['ready'] and not tie['tied'])):
        # Whatever answered, it was not (only) the new server: another program holds its port.
        result['ready'] = False
        head = 'the SGLang server %d is not what answers at %s: %s' % (pid, p['url'], tie['reason'])
        if result['died']:
            head += '; the server exited after %.1f s' % result['seconds']
    elif result['died']:
        head = 'the SGLang server %d exited while loading, after %.1f s' % (pid, result['seconds'])
    else:
        head = 'the SGLang server%s did not answer %s with 200 within %g s (last: %s)' % (
            ' %d' % pid if pid else '', p['path'], p['timeout'], result['last'])
    tail = ('. Last %d lines of %s:\n%s' % (len(result['log_tail']), p['log_path'], '\n'.join(result['log_tail']))
            if result['log_tail'] else '')
    raise ActionFailed(head + tail, result)


def _with_own_key(p, deps, pid, proc=None):
    """P with the API key that server PID was started with (sprocs.api_key_of), where its command line or its own
    --config file says, masked like every secret; P itself otherwise."""
    proc = proc or deps.procfs.read(pid)
    key = sprocs.api_key_of(deps.procfs, proc, deps.procfs.uid(pid)) if proc else None
    return dict(p, api_key=key, secrets=list(p.get('secrets') or []) + [key]) if key else p


def probe(p, deps):
    """A request with its own id; with dump_dir, wait for the hidden-state dump named by that id."""
    p = _with_own_key(p, deps, p['pid']) if p.get('pid') else p
    client = _client(p, deps, _require_own(p, deps, 'cannot send the probe'))
    rid = p.get('rid') or 'gpuops-probe-%d-%d' % (os.getpid(), int(time.time() * 1000))
    if deps.check_mode:
        return {'changed': True, 'rid': rid, 'dumps': [], 'seconds': 0.0}
    start = deps.clock()
    try:
        answer = shttp.generate(client, rid, p['prompt'], p['timeout'])
    except (shttp.Refused, shttp.Unanswered, sprocs.Moved) as e:
        raise ActionFailed('the probe request %s got no answer: %s' % (rid, e), {'rid': rid})
    if answer.status != 200:
        raise ActionFailed('the probe request %s was refused: HTTP %d %s' % (rid, answer.status, answer.text()[:300]),
                           {'rid': rid, 'status': answer.status})
    result = {'changed': True, 'rid': rid, 'dumps': [], 'seconds': 0.0}
    if not p.get('dump_dir'):
        result['seconds'] = round(deps.clock() - start, 2)
        return result
    deadline = start + p['timeout']
    while True:
        result['dumps'] = sprocs.find_dump(p['dump_dir'], rid)
        result['seconds'] = round(deps.clock() - start, 2)
        if result['dumps']:
            return result
        left = deadline - deps.clock()
        if left <= 0:
            raise ActionFailed('no hidden-state dump of the probe request %s appeared under %s within %g s; '
                               'the server does not dump (is the patch active and SGLANG_HS_DUMP_DIR set?)'
                               % (rid, p['dump_dir'], p['timeout']), result)
        deps.sleep(min(p['interval'], left))


def check_info(p, deps):
    p = _with_own_key(p, deps, p['pid']) if p.get('pid') else p
    client = _client(p, deps, _require_own(p, deps, 'cannot read /server_info'))
    expected = p.get('expect') or {}
    try:
        info = shttp.server_info(client, p['request_timeout'])
    except (shttp.Refused, shttp.Unanswered, sprocs.Moved) as e:
        raise ActionFailed('cannot read the server\'s own view of its arguments: %s' % e)
    mismatches = sargs.server_info_mismatches(expected, info)
    result = {'checked': sorted(expected), 'mismatches': mismatches}
    if mismatches:
        shown = ['%s is %s, requested %s' % (m['name'], 'missing' if m['missing'] else json.dumps(m['reported']),
                                             json.dumps(m['expected'])) for m in mismatches]
        raise ActionFailed('/server_info does not report the requested values: %s' % '; '.join(shown), result)
    return result


def check_names(options):
    """The checks that OPTIONS (the checks option) asks for, in the order they run: ``environ`` and ``probe`` (with
    ``dump_dir``; the probe unless ``probe`` is false), else ``schedulers`` (with ``schedulers``), then ``info``
    (with ``expected_info``), then ``gpus``, always."""
    names = []
    if options.get('dump_dir'):
        names.append('environ')
        if options.get('probe', True):
            names.append('probe')
    elif options.get('schedulers'):
        names.append('schedulers')
    if options.get('expected_info') is not None:
        names.append('info')
    return names + ['gpus']


def post_checks(p, deps, pid, options, ready_result=None, actions=None):
    """The checks of the SGLang server PID once it answers ready, in order, each on the server's own listener: with
    OPTIONS['dump_dir'], the dump directory in the environment of the main process and every scheduler (one per GPU),
    then a probe request whose own dump must appear there; with OPTIONS['expected_info'], /server_info against the
    values the installed parser stored; then NVML, which must show every GPU of OPTIONS['gpus'] in use. A dict of what
    each check found; ActionFailed at the first that fails, its result saying which (check) and that the server answered
    ready (ready, pid): the caller stops it."""
    done = {}
    actions = actions or Timeline(deps.clock)
    base = dict(p, api_key=options.get('api_key') or None, pid=pid)

    def failed(name, error):
        result = dict(ready_result or {})
        result.update(error.result)
        result.update(ready=True, pid=pid, check=name, checks=done)
        raise ActionFailed(error.msg, result)

    dump_dir = options.get('dump_dir')
    made = {
        'environ': lambda: (check_environ, dict(base, environ={'SGLANG_HS_DUMP_DIR': dump_dir},
                                                schedulers=max(len(options.get('gpus') or ()), 1))),
        'probe': lambda: (probe, dict(base, dump_dir=dump_dir, timeout=options['probe_timeout'], interval=0.5,
                                      rid=None, prompt=options.get('prompt') or PROBE_PROMPT)),
        # a node of rank 1 or more answers 200 whatever its schedulers do: they must be there, alive
        'schedulers': lambda: (check_environ, dict(base, environ={}, schedulers=options['schedulers'])),
        'info': lambda: (check_info, dict(base, expect=options['expected_info'], request_timeout=30)),
    }
    steps = [(name,) + made[name]() for name in check_names(options) if name != 'gpus']
    for name, step, params in steps:
        try:
            with actions.step('check', check=name):
                done[name] = step(params, deps)
        except ActionFailed as e:
            failed(name, e)
    gpus = options.get('gpus') or []
    report = error = None
    with actions.step('check', check='gpus'):
        try:
            report = checks.read(options, deps.open_nvml, deps.warn)
        except checks.Unreadable as e:
            error = str(e)
    why = checks.occupancy_failure(gpus, report, error, options.get('min_used_mib') or checks.MIN_USED_MIB)
    done['gpus'] = {'gpus': gpus, 'idle': checks.idle(report, gpus, options.get('min_used_mib') or checks.MIN_USED_MIB),
                    'error': error}
    if why:
        failed('gpus', ActionFailed(why, {}))
    return done


def command_options():
    """The options that name a server's command line, as every module of the collection takes them (its ``command``
    option): the arguments and where the --config files go. The secret arguments are each module's own top-level
    ``secret_server_args`` (no_log), which the invocation log shows as NOT_LOGGING_PARAMETER, whole."""
    return dict(server_args=dict(type='dict', default={}),
                secret_args=dict(type='list', elements='str', default=[], no_log=False),
                config_file=dict(type='bool', default=False),
                config_path=dict(type='path'),
                secrets_path=dict(type='path'))


def refuse_bad_names(params):
    """_sglang_args.refuse_bad_names, its refusal an ActionFailed."""
    try:
        sargs.refuse_bad_names(params)
    except sargs.ArgsError as e:
        raise ActionFailed(str(e))


def refuse_bad_command(params):
    """ActionFailed where PARAMS (a command's options) name a server argument that is no plain name, or carry a secret
    in an option that the invocation log shows as given: checked before anything else is done."""
    refuse_bad_names(params)
    leaked = public_secrets(params)
    if leaked:
        raise ActionFailed('%s: secret value(s) in an option that the module logs as given (syslog or the journal); '
                           'pass secret server arguments in secret_server_args and secret variables in '
                           'secret_environment, which are never logged' % ', '.join(leaked), {'leaked': leaked})

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A launch request - the sglang_launch role's variables, as gpuops.host.sglang_server's ``launch`` option takes them -
turned into the options of the plan (_server_info.info) and, once the node has answered it (the owner, the
supervisor, the command line as its SGLang parses it), into the options of the start (_converge.started).

    r = Request(launch, secret_server_args, secret_environment, marker='extraction-20261205T120000Z-node1-0a1b2c3d')
    found = info(r.plan_options(), deps)
    params = r.start_options(found)

Pure: nothing is read or written here. The secrets (the secret arguments, the environment's secret variables) stay in
their own options: the start writes them into the run directory's 0600 files, and counts them in the configuration's
identity by a digest.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import time

from ansible_collections.gpuops.host.plugins.module_utils import _sglang_args as sargs
from ansible_collections.gpuops.host.plugins.module_utils._server_config import HUB_ID, env_lines

# The variables of the environment that the launch sets itself or that rendering reads: every other one is a secret.
PUBLIC_ENV = ('CUDA_VISIBLE_DEVICES', 'PYTHONPATH', 'SPT_NOENV', 'HOME', 'HF_HOME', 'PATH')
SYSTEM_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
# The first line of the unit files the launch writes, by which a later plan knows one (_supervisor.unit_kind).
UNIT_MARK = '# Managed by gpuops.host (sglang_launch)'
UNIT_HEADER = UNIT_MARK + '; a change here is overwritten by its next launch.'
# The unit of releases before gpuops-sglang: sglang.service, which it described so. Such a file is migrated; any other
# file of that name is a team's own unit.
OLD_UNIT = 'sglang.service'
OLD_UNIT_DESCRIPTION = r'^Description=SGLang server, [^ ]+ mode \(run [^)]+\)$'
CONTAINER_LABEL = 'gpuops.host.role=sglang_launch'
GPU_DEFAULTS = {'docker': ['--gpus', 'all'], 'podman': ['--device', 'nvidia.com/gpu=all']}
LOG_DRIVERS = {'docker': 'json-file', 'podman': 'k8s-file'}
ENGINES = ('docker', 'podman')
# huggingface_hub reads these as set
_TRUE = ('1', 'true', 'yes', 'on')


def split_environment(env):
    """ENV as (public, secret): the variables of PUBLIC_ENV go as they are, every other one is a secret."""
    return (dict((k, v) for k, v in env.items() if k in PUBLIC_ENV),
            dict((k, v) for k, v in env.items() if k not in PUBLIC_ENV))


def marker(mode, host, now=None, token=None):
    """The name of a run: MODE, the UTC time, the inventory HOST (made a plain name) and a random part, so that two
    hosts on one shared dump root, or two runs in one second, never share a name, and no local user can predict it."""
    stamp = time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now))
    token = random.SystemRandom().randrange(1 << 32) if token is None else token
    return '%s-%s-%s-%08x' % (mode, stamp, re.sub(r'[^A-Za-z0-9_.-]', '-', host)[:32], token)


def would(launched):
    """The result of a launch in check mode, from LAUNCHED (Request.results): what it would start, the old server
    still running."""
    return dict(launched, status='check', server='old', pid=None, seconds_to_clean=None, seconds_to_ready=None,
                gpus_verified=0)


def _word(text):
    """TEXT as one word of a unit's ExecStart= (systemd.syntax): double-quoted, \\ and " escaped, % and $ doubled."""
    text = str(text)
    for char, escaped in (('\\', '\\\\'), ('"', '\\"'), ('%', '%%'), ('$', '$$')):
        text = text.replace(char, escaped)
    return '"%s"' % text


def _path(text):
    return str(text).replace('%', '%%')


class Request:
    """LAUNCH (the public request), SECRET_ARGS (the secret server arguments) and SECRET_ENV (the secret variables of
    the environment), under the run name MARKER."""

    def __init__(self, launch, secret_args=None, secret_env=None, marker=None):
        r = self.r = launch
        self.hidden = dict(secret_args or {})
        self.args = dict(r['server_args'], **self.hidden)
        self.marker = marker
        self.dumps = bool(r['dumps'])
        self.containerized = r['supervisor'] in ENGINES
        self.state_dir = r['state_dir']
        # the environment as the launch sets it, less the owner's HOME and HF_HOME and what changes from run to run
        env = {'PATH': os.path.dirname(r['python']) + ':' + SYSTEM_PATH}
        env.update(r['environment'])
        env.update(secret_env or {})
        if r['pythonpath']:
            env['PYTHONPATH'] = ':'.join(r['pythonpath'])
        env['SPT_NOENV'] = '1'
        self.env = env
        self.public_env, self.secret_env = split_environment(env)
        self.model_path = r['model_path']
        self.hub = bool(HUB_ID.match(self.model_path))
        self.identity_config = self.state_dir + '/server-args.yaml'
        self.rendered = sargs.render({
            'python': r['python'], 'entry_module': r['module'], 'server_args': self.args,
            'secret_args': r['secret_args'],
            'environment': dict((k, v) for k, v in self.public_env.items() if k == 'CUDA_VISIBLE_DEVICES'),
            'config_file': r['config_file'], 'config_path': self.identity_config})
        self.expected_gpus = [int(g) for g in r['gpus']] if r['gpus'] else self.rendered['expected_gpus']

    # -- what every call names ----------------------------------------------------------------------------------

    @property
    def run_dir(self):
        return '%s/runs/%s' % (self.state_dir, self.marker)

    @property
    def dump_name(self):
        return self.r['run_name'] or self.marker

    @property
    def dump_dir(self):
        return '%s/%s' % (self.r['dump_root'], self.dump_name) if self.dumps else None

    @property
    def url(self):
        host = self.r['host']
        return 'http://%s:%s' % ('127.0.0.1' if host in ('0.0.0.0', '::') else host, self.r['port'])

    @property
    def log(self):
        return '%s/%s.log' % (self.r['log_dir'], self.marker)

    @property
    def unit_path(self):
        return '%s/%s.service' % (self.r['unit_dir'], self.r['unit'])

    @property
    def old_unit_path(self):
        return '%s/%s' % (self.r['unit_dir'], OLD_UNIT)

    @property
    def container_name(self):
        return 'gpuops-sglang-' + self.marker

    def _command(self, run_dir):
        r = self.r
        return {'server_args': r['server_args'], 'secret_args': r['secret_args'], 'config_file': r['config_file'],
                'config_path': run_dir + '/server-args.yaml', 'secrets_path': run_dir + '/secret-args.yaml'}

    # -- the plan -------------------------------------------------------------------------------------------------

    def secrets_digest(self):
        """The digest by which the secret arguments and variables count in the configuration's identity."""
        text = json.dumps({'args': self.hidden, 'env': self.secret_env}, sort_keys=True)
        return 'sha256:' + hashlib.sha256(text.encode('utf-8', 'surrogateescape')).hexdigest()

    def identity(self):
        """The configuration that the plan compares, field by field, with the running server's; auto for the
        supervisor, which the plan chooses on the node."""
        r = self.r
        supervisor = r['supervisor']
        return {
            'mode': r['mode'], 'argv': self.rendered['argv'],
            # with a --config file the command line names the file, not the arguments
            'args': r['server_args'] if r['config_file'] else None,
            'environment': self.public_env, 'supervisor': supervisor,
            'unit': ({'name': r['unit'], 'memlock': r['limit_memlock'], 'nofile': r['limit_nofile'],
                      'restart_on_failure': r['restart_on_failure'], 'enable': r['enable']}
                     if supervisor in ('systemd', 'auto') else None),
            'container': ({'image': r['image'], 'shm_size': r['shm_size'], 'gpu_options': r['container_gpu_options'],
                           'network': r['container_network'], 'restart': r['container_restart'],
                           'volumes': r['container_volumes'], 'options': r['container_options']}
                          if self.containerized else None),
            'user': r['user'], 'dumps': [r['dump_root'], None] if self.dumps else None, 'run_name': r['run_name']}

    def mount_sources(self):
        """The host paths a container mounts, each at the same path inside (a hub ID's cache: the plan adds it)."""
        return (([] if self.hub else [self.model_path]) + ([self.r['dump_root']] if self.dumps else [])
                + [self.state_dir])

    def plan_options(self):
        """The options of _server_info.info for this request (less its defaults)."""
        r = self.r
        offline = str(self.env.get('HF_HUB_OFFLINE', '')).lower() in _TRUE
        options = {
            'record_path': self.state_dir + '/server.json', 'presets': [], 'config': self.identity(),
            'secrets_digest': self.secrets_digest(), 'environment': self.public_env, 'python': r['python'],
            'pythonpath': r['pythonpath'],
            'owner': {'user': r['user'], 'group': r['group'], 'dump_group': r['dump_group']},
            'command': dict(self._command(self.run_dir), entry_module=r['module']),
            'secret_server_args': self.hidden, 'secret_environment': self.secret_env,
            'refuse': {'gpus': self.expected_gpus, 'port': r['port'], 'bind_host': r['host'],
                       'owners': r['owners'] if r['owners'] is not None else ['root'] + ([r['user']] if r['user'] != 'root' else []),
                       'dump_dir': ({'root': r['dump_root'], 'name': self.dump_name,
                                     'min_free_gb': float(r['dump_min_free_gb'])} if self.dumps else None),
                       'model': ({'path': self.model_path, 'hub': self.hub, 'offline': offline}
                                 if r['check_model_path'] else {})},
            'model_path': self.model_path,
            'dump_patch': ({'paths': r['dump_patch_paths'], 'pattern': r['dump_patch_pattern']}
                           if self.dumps else None),
            'restart': r['restart']}
        if self.containerized:
            options['container'] = {'engine': r['supervisor'], 'image': r['image'], 'mounts': self.mount_sources(),
                                    'options': ['--volume=' + v for v in r['container_volumes']]}
        if r['supervisor'] in ('systemd', 'auto'):
            options['unit_files'] = {'path': self.unit_path, 'old_path': self.old_unit_path, 'mark': UNIT_MARK,
                                     'old_description': OLD_UNIT_DESCRIPTION}
        return options

    # -- the start ------------------------------------------------------------------------------------------------

    def environment(self, owner):
        """The server's environment: the owner's HOME and HF_HOME (unless set), this request's, the run's name and
        in a dumping mode the dump directory."""
        env = dict(owner['environment'], **self.env)
        env['GPUOPS_RUN'] = self.marker
        if self.dumps:
            env['SGLANG_HS_DUMP_DIR'] = self.dump_dir
        return env

    def secret_values(self):
        """The values of the environment and of the arguments kept off the command line: masked in messages and log
        tails (of 4 characters or more; the longer first)."""
        values = list(self.r['environment'].values()) + list(self.secret_env.values())
        values += [self.args[name] for name in self.rendered['secret_args'] if name in self.args]
        return sargs.masked_values(values)

    def process_argv(self, owner, exec_argv):
        """A detached process in its own session, as its user. The environment comes from the 0600 file, read by the
        shell, so that no value of it appears in a command line; the log is created 0600 (umask 077), as SGLang
        writes its arguments, API key included, into it. The server runs with umask 027: its dumps are 0640 files of
        the dump group. The shell (root) opens both files, then setpriv takes the server's user, its group and the
        user's supplementary groups. It prints the server's PID."""
        argv = ['/bin/sh', '-c', 'umask 077; log=$1; pidfile=$2; envfile=$3; shift 3; : >>"$log"; umask 027;'
                ' set -a; . "$envfile"; set +a; /usr/bin/setsid "$@" </dev/null >>"$log" 2>&1 & echo $! >"$pidfile";'
                ' echo $!', 'sglang-launch', self.log, self.state_dir + '/server.pid', self.run_dir + '/server.env']
        if not (int(owner['uid']) == 0 and int(owner['gid']) == 0):
            argv += ['/usr/bin/setpriv', '--reuid=%s' % owner['uid'], '--regid=%s' % owner['gid'], '--init-groups',
                     '--']
        return argv + list(exec_argv)

    def unit_file(self, owner, exec_argv):
        """The systemd unit. The environment, whose values are secrets, is in EnvironmentFile=, a file of mode 0600,
        not in Environment= (systemctl show prints those). Newlines and other control characters never get here:
        the role refuses them before the node is read."""
        r = self.r
        lines = [UNIT_HEADER, '[Unit]',
                 'Description=SGLang server, %s mode (run %s)' % (_path(r['mode']), _path(self.marker)),
                 'After=network-online.target', 'Wants=network-online.target', '', '[Service]', 'Type=exec',
                 'User=' + _path(owner['user'])]
        if r['group']:
            lines.append('Group=' + _path(r['group']))
        lines += [
            '# Read by systemd itself (root) before it starts the server: the file stays root\'s, mode 0600.',
            'EnvironmentFile=' + _path(self.run_dir + '/server.env'),
            'ExecStart=' + ' '.join(_word(arg) for arg in exec_argv),
            '# Its dumps are mode 0640, for the dump group (the run directory\'s setgid group); nothing for other '
            'users.',
            'UMask=0027',
            '# Opened by systemd (root), so the log stays root\'s, mode 0600: SGLang logs its arguments, API key '
            'included.',
            'StandardOutput=append:' + _path(self.log), 'StandardError=inherit',
            'LimitMEMLOCK=%s' % r['limit_memlock'], 'LimitNOFILE=%s' % r['limit_nofile'],
            '# SIGTERM to the main process only, which drains and stops its children itself;',
            '# SIGKILL to whatever is left in the unit\'s cgroup after the timeout, gpuops.host.sglang_stop\'s.',
            'KillMode=mixed', 'TimeoutStopSec=%s' % r['term_timeout'],
            'Restart=' + ('on-failure' if r['restart_on_failure'] else 'no')]
        if r['enable']:
            lines += ['', '[Install]', 'WantedBy=multi-user.target']
        return '\n'.join(lines) + '\n'

    def container_mounts(self, resolved):
        """--volume values: the model (read-only, unless a hub ID's cache), the dump root, the run directory
        (read-only), then the request's own; each source as the plan RESOLVED it (path -> resolved path)."""
        r = self.r
        hf_home = self.env.get('HF_HOME')
        mounts = []
        if not self.hub:
            mounts.append('%s:%s:ro' % (resolved.get(self.model_path, self.model_path), self.model_path))
        else:
            mounts.append('%s:%s' % (resolved.get(hf_home, hf_home), hf_home))
        if self.dumps:
            mounts.append('%s:%s' % (resolved.get(r['dump_root'], r['dump_root']), r['dump_root']))
        source = (resolved[self.state_dir] + self.run_dir[len(self.state_dir):] if self.state_dir in resolved
                  else self.run_dir)
        return mounts + ['%s:%s:ro' % (source, self.run_dir)] + list(r['container_volumes'])

    def container_argv(self, engine, owner, exec_argv, resolved):
        """The server as the main process of a container of the image, named after the run and labelled as the
        collection's. The environment reaches it through the run directory's 0600 environment file, which the
        container's shell reads before it execs the server (an engine's --env-file or -e would copy every value into
        what `inspect` shows); its output goes to a log only root reads, never to the journal. Podman refuses
        --shm-size beside --ipc=host, so only Docker gets it."""
        r = self.r
        argv = [engine, 'run', '--detach', '--name', self.container_name, '--label', CONTAINER_LABEL,
                '--label', 'gpuops.host.run=' + self.marker, '--user', '%s:%s' % (owner['uid'], owner['gid']),
                '--ipc=host', '--log-driver', LOG_DRIVERS[engine]]
        if engine == 'docker':
            argv += ['--shm-size', r['shm_size']]
        argv += ['--restart', r['container_restart']]
        if r['container_network'] == 'host':
            argv.append('--network=host')
        else:
            argv += ['--network=' + r['container_network'],
                     '--publish=%s:%s:%s' % (r['host'], r['port'], r['port'])]
        argv += r['container_gpu_options'] or GPU_DEFAULTS[engine]
        argv += ['--volume=' + m for m in self.container_mounts(resolved)]
        argv += r['container_options']
        return argv + ['--entrypoint', '/bin/sh', r['image'], '-c', 'umask 027; set -a; . "$0"; set +a; exec "$@"',
                       self.run_dir + '/server.env'] + list(exec_argv)

    def start(self, plan):
        """gpuops.host.sglang_server's start option under the supervisor the plan chose."""
        owner, kind, exec_argv = plan['owner'], plan['supervisor'], plan['command']['argv']
        if kind == 'process':
            return {'kind': 'process', 'argv': self.process_argv(owner, exec_argv)}
        if kind == 'systemd':
            migrate = (self.old_unit_path != self.unit_path
                       and (plan.get('unit_files') or {}).get(self.old_unit_path, 'absent') == 'old')
            # restarted, not started: a unit still active would keep its old main process
            return {'kind': 'systemd', 'unit': {
                'name': self.r['unit'] + '.service', 'path': self.unit_path,
                'content': self.unit_file(owner, exec_argv), 'enable': self.r['enable'],
                'migrate': {'name': OLD_UNIT, 'path': self.old_unit_path} if migrate else None}}
        resolved = dict((m['path'], m['resolved']) for m in plan.get('mounts') or [])
        return {'kind': kind, 'argv': self.container_argv(kind, owner, exec_argv, resolved),
                'container': self.container_name}

    def results(self, plan):
        """The record of the new server once it passed its checks, and ``launched``, the result of the launch (less
        what the start adds: pid, seconds_to_ready, and the stop's seconds_to_clean and gpus_verified)."""
        r, kind, checked = self.r, plan['supervisor'], plan['command']
        record = {
            'status': 'ok', 'marker': self.marker, 'mode': r['mode'], 'url': self.url, 'supervisor': kind,
            'unit': r['unit'] if kind == 'systemd' else None,
            'container': self.container_name if self.containerized else None, 'log': self.log,
            'dump_dir': self.dump_dir, 'identity': plan['current'], 'argv': checked['argv'], 'run_dir': self.run_dir,
            'relaunch': self.start(plan), 'gpus_serving': self.expected_gpus,
            'expected_info': checked.get('expected_info') if r['verify_info'] else None}
        launched = {'status': 'launched', 'server': 'new', 'changed': True, 'mode': r['mode'], 'marker': self.marker,
                    'url': self.url, 'dump_dir': self.dump_dir, 'gpus_serving': self.expected_gpus, 'message': None,
                    'rollback': None, 'reasons': plan.get('reasons') or []}
        return record, launched

    def start_options(self, plan, stop):
        """The options of _converge.started once the node answered the plan (PLAN: owner, supervisor, command,
        mounts, unit_files, current, record), with STOP the stop's options (the new API key and the lock added)."""
        r, owner, checked = self.r, plan['owner'], plan['command']
        uid, gid = int(owner['uid']), int(owner['gid'])
        record, launched = self.results(plan)
        before = plan.get('record') or {}
        api_key = self.args.get('api_key') or None
        if api_key:
            stop = dict(stop, api_key=api_key)
        if r['lock_run']:
            lock = {'run': r['lock_run'], 'release': bool(r['lock_release']) and not r['multinode']}
            if r['lock_path']:
                lock['path'] = r['lock_path']
            stop = dict(stop, lock=lock)
        syntax = 'systemd' if plan['supervisor'] == 'systemd' else 'shell'
        worker = r['worker']
        checks = {'dump_dir': self.dump_dir, 'prompt': r.get('probe_prompt'), 'probe_timeout': r['probe_timeout'],
                  # only rank 0 takes requests and answers /server_info
                  'probe': not worker, 'schedulers': len(self.expected_gpus) if worker else 0,
                  'expected_info': checked.get('expected_info') if r['verify_info'] and not worker else None,
                  'api_key': api_key, 'gpus': self.expected_gpus, 'min_used_mib': r['min_used_mib'],
                  'expected_count': r.get('expected_count'), 'v1_reserved_mib': r.get('v1_reserved_mib')}
        return {
            'state': 'started',
            # the server's user passes through the state directory to its run directory (its --config files)
            'directories': [{'path': self.state_dir, 'group': gid}, {'path': self.state_dir + '/runs', 'group': gid},
                            {'path': r['log_dir']}],
            'dump_dir': ({'root': r['dump_root'], 'name': self.dump_name, 'owner': uid,
                          'group': int(owner['dump_gid']), 'min_free_gb': float(r['dump_min_free_gb'])}
                         if self.dumps else None),
            'run_dir': {'path': self.run_dir, 'group': gid, 'owner': {'uid': uid, 'gid': gid},
                        'environment_owner': {'uid': uid, 'gid': gid} if self.containerized else None},
            'environment_file': '\n'.join(env_lines(self.environment(owner), syntax)) + '\n',
            'command': dict(self._command(self.run_dir), config_keys=checked.get('config_keys')),
            'secret_server_args': self.hidden, 'stop': stop,
            # a node of a multi-node server rolled back alone would wait for its peers: the group stops instead
            'rollback': bool(r['rollback']) and not r['multinode'],
            'start': record['relaunch'], 'url': self.url,
            # a node of rank 1 or more serves only a health server, which answers 200 whatever its schedulers do
            'path': '/health' if worker else r['ready_path'], 'timeout': r['ready_timeout'],
            'interval': r['ready_interval'], 'log_path': self.log, 'log_lines': r['log_tail_lines'],
            'secrets': self.secret_values(), 'checks': dict((k, v) for k, v in checks.items() if v is not None),
            'record': {'path': self.state_dir + '/server.json', 'fields': record,
                       'dump_patterns': stop.get('dump_patterns'), 'history': self.state_dir + '/runs.jsonl',
                       'entry': launched, 'runs_dir': self.state_dir + '/runs',
                       'keep': [self.run_dir, before.get('run_dir') or ''],
                       'remove': [self.identity_config] if self.identity_config in (before.get('argv') or []) else []}}

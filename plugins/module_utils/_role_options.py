# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The options that the roles' variables give their module calls, worked out on the controller (the lookup
gpuops.host.role_options). Each function takes GET, which returns a variable's value by name (templated), or the
default it is given where the variable is not set:

    call = launch_call(get)      # sglang_launch: the converging call's options, the refusals, the secrets
    stop = stop_options(get)     # sglang_stop: the stop option, also of the converging call
    verify = verify_options(get) # gpu_clean: the wait until every GPU is clean

An option whose variable is unset is left out, so that the module's own defaults (or the play's module_defaults)
apply to it.
"""

from __future__ import annotations

from ansible.module_utils.parsing.convert_bool import boolean

# The launch's modules (_sglang_args, _launch, _launch_options, _launch_request) are imported by the functions of a
# launch only: the lookup runs in the worker of each task that uses it, which compiles every collection module it
# imports from source (ansible-core's collection loader keeps no bytecode), and a stop's call does not need them.

# gpu_reap's options that gpuops.host.gpu_clean documents, which the stop's reap takes too.
REAP = ('nvml_processes', 'other_namespaces', 'max_processes', 'protect', 'protect_defaults', 'protect_gateways',
        'term_signal', 'kill_timeout')
# gpu_verify's options, by gpuops.host.gpu_clean's variable names (gpu_clean_NAME) where they differ.
VERIFY = {'gpus': 'gpus', 'max_used_mib': 'max_used_mib', 'allow_processes': 'allow_processes',
          'expected_count': 'expected_count', 'v1_reserved_mib': 'v1_reserved_mib', 'timeout': 'verify_timeout',
          'poll_interval': 'poll_interval'}
# The stop's options whose variables (sglang_stop_NAME) have role defaults, then those that are unset by default.
STOP = {'presets': 'presets', 'patterns': 'patterns', 'pids': 'pids', 'owners': 'owners', 'stop_timeout': 'term_timeout',
        'disable_supervisors': 'disable_supervisors', 'settle': 'settle_seconds', 'active_window': 'active_window',
        'cut_active_run': 'cut_active_run', 'dump_patterns': 'dump_patterns'}
STOP_UNSET = {'default_url': 'default_url', 'timeout': 'drain_timeout', 'interval': 'drain_interval',
              'request_timeout': 'request_timeout', 'force': 'force'}
# The launch option's suboptions that are no sglang_launch_NAME variable as they are: the call works them out.
DERIVED = ('node_name', 'dumps', 'verify_info', 'server_args', 'environment', 'term_timeout', 'expected_count',
           'v1_reserved_mib', 'owners', 'multinode', 'worker', 'restart')


_UNSET = object()


class RoleOptionsError(ValueError):
    """A variable of the wrong kind, named."""


def _set(pairs):
    return dict((name, value) for name, value in pairs if value is not None)


def _dict(value, name):
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RoleOptionsError('%s must be a dict, got %s' % (name, type(value).__name__))
    return value


def verify_options(get):
    """The options of the wait until every GPU is clean that gpu_clean_* variables set."""
    return _set((option, get('gpu_clean_' + name)) for option, name in VERIFY.items())


def reap_options(get):
    """The stop's reap of what is left of the servers: the gpu_reap options that gpu_clean_* variables set, SIGTERM to
    main processes only (kill_mode mixed: SGLang drains, then lets each scheduler free its GPU memory before it
    exits), and the holders of the devices gpu_clean_stop_holders_of names."""
    options = _set((name, get('gpu_clean_' + name)) for name in REAP)
    options['kill_mode'] = 'mixed'
    holders = get('gpu_clean_stop_holders_of') or []
    if holders:
        options.update(device_holders=True, devices=['/dev/nvidia%s' % minor for minor in holders])
    return options


def stop_options(get):
    """gpuops.host.sglang_server's stop option from the sglang_stop_* variables (and gpu_clean_*'s reap and verify)."""
    if get('sglang_stop_kill_timeout', _UNSET) is not _UNSET:
        from ansible_collections.gpuops.host.plugins.module_utils._launch_request import REMOVED
        raise RoleOptionsError(REMOVED['sglang_stop_kill_timeout'])
    options = {'record_path': '%s/server.json' % get('sglang_stop_state_dir'), 'reap': reap_options(get)}
    options.update((option, get('sglang_stop_' + name)) for option, name in STOP.items())
    options.update(_set((option, get('sglang_stop_' + name)) for option, name in STOP_UNSET.items()))
    if get('sglang_stop_api_key'):
        options['api_key'] = get('sglang_stop_api_key')
    if boolean(get('gpu_clean_verify', True), strict=False):
        options['verify'] = verify_options(get)
    if get('sglang_stop_lock'):
        options['lock'] = get('sglang_stop_lock')
    return options


class LaunchVariables:
    """The sglang_launch_* variables as the call reads them: the mode's table entry, the arguments the mode, the role,
    the model, the address and a multi-node server's place give, and the server's environment."""

    def __init__(self, get):
        from ansible_collections.gpuops.host.plugins.module_utils import _sglang_args as sargs
        from ansible_collections.gpuops.host.plugins.module_utils._launch import split_environment
        self.get = get
        self.modes = modes = _dict(get('sglang_launch_modes'), 'sglang_launch_modes')
        mode = get('sglang_launch_mode')
        self.known = isinstance(mode, str) and mode in modes
        spec = _dict(modes[mode], 'sglang_launch_modes.' + mode) if self.known else {}
        self.dumps = boolean(spec.get('dump_hidden_states', False), strict=False)
        self.verify_info = boolean(spec.get('verify_server_info', False), strict=False)
        self.multinode = bool(get('sglang_launch_multinode_group'))
        self.node = _dict(get('sglang_launch_node'), 'sglang_launch_node') if self.multinode else {}
        args = dict(_dict(spec.get('server_args'), 'the mode\'s server_args'))
        args.update(_dict(get('sglang_launch_server_args'), 'sglang_launch_server_args'))
        args.update(model_path=get('sglang_launch_model_path'), host=get('sglang_launch_host'),
                    port=get('sglang_launch_port'))
        args.update(self.node.get('args') or {})
        self.args = args
        hidden = set(sargs.secret_names(args, get('sglang_launch_secret_args') or []))
        self.public_args = dict((k, v) for k, v in args.items() if k not in hidden)
        self.hidden_args = dict((k, v) for k, v in args.items() if k in hidden)
        env = dict(_dict(get('sglang_launch_environment'), 'sglang_launch_environment'))
        env.update(_dict(spec.get('environment'), 'the mode\'s environment'))
        self.env = env
        self.public_env, self.secret_env = split_environment(env)

    def request(self):
        """The launch option: every suboption from sglang_launch_NAME, or as DERIVED says."""
        from ansible_collections.gpuops.host.plugins.module_utils._launch_options import OPTIONS
        get = self.get
        request = dict((name, get('sglang_launch_' + name)) for name in OPTIONS if name not in DERIVED)
        request.update(
            node_name=get('inventory_hostname'), dumps=self.dumps, verify_info=self.verify_info,
            server_args=self.public_args, environment=self.public_env,
            term_timeout=get('sglang_stop_term_timeout'), owners=get('sglang_stop_owners'),
            # how the node's GPUs are read, as the stop's verification reads them (gpuops.host.gpu_clean's)
            expected_count=get('gpu_clean_expected_count'), v1_reserved_mib=get('gpu_clean_v1_reserved_mib'),
            multinode=self.multinode, worker=self.multinode and (self.node.get('rank') or 0) > 0,
            restart=boolean(get('sglang_launch_restart', False), strict=False))
        return request

    def refusals(self):
        """What is wrong with the request before the node is read (_launch_request.refusals)."""
        from ansible_collections.gpuops.host.plugins.module_utils._launch_request import REMOVED, refusals
        get = self.get
        return refusals({
            'removed': [name for name in REMOVED if get(name, _UNSET) is not _UNSET],
            'mode': get('sglang_launch_mode'), 'modes': list(self.modes),
            'model_path': get('sglang_launch_model_path'), 'python': get('sglang_launch_python'),
            'module': get('sglang_launch_module'), 'run_name': get('sglang_launch_run_name'),
            'supervisor': get('sglang_launch_supervisor'), 'image': get('sglang_launch_image'),
            'server_args': self.args if self.known else {}, 'secret_args': get('sglang_launch_secret_args'),
            'config_file': get('sglang_launch_config_file'), 'state_dir': get('sglang_launch_state_dir'),
            'dump_root': get('sglang_launch_dump_root') if self.dumps else None,
            'environment': self.env if self.known else {}, 'pythonpath': get('sglang_launch_pythonpath'),
            'names': [get('sglang_launch_' + name) for name in ('log_dir', 'state_dir', 'unit', 'user', 'group')]})


def launch_call(get):
    """The sglang_launch role's call of gpuops.host.sglang_server: its options ``launch``, ``secret_server_args``
    (the arguments named like a secret, or in sglang_launch_secret_args) and ``secret_environment`` (every variable
    but _launch.PUBLIC_ENV); the ``refusals``; the ``secrets`` to mask in a message the controller writes; and
    ``staged``, whether the call goes through a plan in check mode first: a multi-node server (its nodes restart
    together), a prefetch (it runs before the stop), or a dumping mode in a container (``image_dump_patch``: the image
    is searched for the dump patch)."""
    from ansible_collections.gpuops.host.plugins.module_utils import _sglang_args as sargs
    from ansible_collections.gpuops.host.plugins.module_utils._launch import ENGINES
    variables = LaunchVariables(get)
    image_dump_patch = variables.dumps and get('sglang_launch_supervisor') in ENGINES
    return {
        'launch': variables.request(),
        'secret_server_args': variables.hidden_args,
        'secret_environment': variables.secret_env,
        'refusals': variables.refusals(),
        'secrets': sargs.masked_values(list(variables.env.values()) + list(variables.hidden_args.values())),
        'image_dump_patch': image_dump_patch,
        'staged': variables.multinode or boolean(get('sglang_launch_prefetch', False), strict=False) or image_dump_patch,
    }


CALLS = {'sglang_launch': launch_call, 'sglang_stop': stop_options, 'gpu_clean_verify': verify_options}

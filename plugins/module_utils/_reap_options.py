# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Options of gpu_reap: presets, the protected names, and the checks that refuse a run
before anything is read or signalled.

Types, defaults and choices come from the module's argument spec; ``parse_options`` checks
what the spec cannot say (regular expressions that would match everything, device globs
outside the NVIDIA devices, timeouts that are not finite numbers).
"""

from __future__ import annotations

import fnmatch
import math
import re
import signal

# Python's own options before the module or script: flags (-u, -O, -OO, -B, -E, -s, -I,
# -P, ...), grouped or not, and the two options that take an argument (-X opt, -W arg),
# written with or without a space.
_PYTHON = r'\S*python[0-9.]*(?:\s+(?:-[XW]\s*\S+|-[A-Za-z]+))*?'

# Command lines of an SGLang server and of its titled children, anchored at the first
# argument so that `grep sglang`, `tail -f /var/log/sglang/server.log` or
# `vim /etc/sglang/serve.yaml` are never selected (a bare `sglang` would select them).
# The `sglang` command is the console script sglang.cli.main:main (the wheel's
# entry_points.txt). The titles are named one by one, each as the release sets it with
# setproctitle (the same lines in 0.5.14 and 0.5.23, srt/managers/): scheduler.py
# run_scheduler_process ("sglang::scheduler" plus a suffix such as _TP3 or _DP0_PP1_TP0_EP0),
# detokenizer_manager.py ("sglang::detokenizer"), data_parallel_controller.py
# ("sglang::data_parallel_controller"), multi_tokenizer_mixin.py ("sglang::detokenizer_router",
# "sglang::tokenizer_worker:PID"); and sglang-router 0.3.2's launch_server.py run_server()
# ("sglang::server", a server that the gateway's co-launcher started). Not every `sglang::`
# title: the SGLang Model Gateway calls itself "sglang::router" (_gateway_procs), and it is never
# a server.
SGLANG_TITLES = (
    r'scheduler(?:_[A-Za-z0-9_]+)?',
    r'detokenizer',
    r'data_parallel_controller',
    r'detokenizer_router',
    r'tokenizer_worker:[0-9]+',
    r'server',
)
SGLANG_PATTERNS = (
    r'^' + _PYTHON + r'\s+-[A-Za-z]*m\s*sglang\.launch_server(?:\s|$)',
    r'^(?:' + _PYTHON + r'\s+)?(?:\S*/)?sglang\s+serve(?:\s|$)',
    r'^sglang::(?:' + '|'.join(SGLANG_TITLES) + r')(?:\s|$)',
)

PRESETS = {'sglang': SGLANG_PATTERNS}

# Processes that hold NVIDIA devices on purpose, or keep the host and its containers
# running. Each is documented in the module's protect_defaults option.
DEFAULT_PROTECT = (
    # NVIDIA driver and fabric daemons
    'nvidia-persistenced',      # keeps the driver initialised between jobs
    'nv-fabricmanager',         # NVSwitch fabric (HGX); CUDA fails with error 802 without it
    'nvidia-fabricmanager',     # the same daemon under its package's name
    'nvidia-imex',              # memory export between nodes of an NVLink domain (GB200)
    'nvidia-powerd',            # Dynamic Boost power management
    'nvidia-vgpu-mgr',          # vGPU manager of a hypervisor host
    'nvidia-vgpud',             # vGPU configuration daemon
    'nvidia-gridd',             # vGPU licensing daemon
    'nvidia-cuda-mps-control',  # CUDA MPS control daemon, shared by every MPS client
    'nvidia-cuda-mps-server',   # CUDA MPS server that runs its clients' kernels
    # monitoring and management
    'nv-hostengine',            # DCGM host engine
    'dcgm-exporter',            # DCGM metrics; a SIGKILL of it has frozen GPUs until reboot
    'nvsm',                     # NVIDIA System Management (DGX)
    'nvsm-core',
    'nvidia-smi',               # NVIDIA's query tool: a monitor, never a workload
    'nvtop',                    # interactive GPU monitor
    # Kubernetes GPU operator
    'nvidia-device-plugin',     # k8s device plugin: advertises the GPUs to the kubelet
    'gpu-feature-discovery',    # labels the node with its GPUs' features
    'nvidia-mig-parted',        # MIG partition manager
    # display servers
    'Xorg', 'Xwayland',
    # remote access, init systems and container runtimes
    'sshd', 'sshd-session',
    'systemd', 'init', 'tini', 'dumb-init', 'catatonit', 'runit', 'runsvdir', 's6-svscan', 'openrc-init',
    'containerd', 'containerd-shim-runc-v2', 'dockerd', 'conmon', 'kubelet',
)

# Every NVIDIA device file: what makes a process a GPU holder in reports.
NVIDIA_DEVICES = ('/dev/nvidia*',)

# device globs may only name NVIDIA device files and DRM devices
_DEVICE_PREFIXES = ('/dev/nvidia', '/dev/dri/')
_GLOB_CHARS = re.compile(r'[*?[]')
# NVIDIA device files that are not one GPU's: every CUDA process holds the first three
_SHARED_DEVICES = ('/dev/nvidiactl', '/dev/nvidia-uvm', '/dev/nvidia-uvm-tools', '/dev/nvidia-modeset',
                   '/dev/nvidia-caps/nvidia-cap1', '/dev/nvidia-nvswitchctl', '/dev/nvidia-nvlink')


def argument_spec():
    """gpu_reap's options, without ``verify`` (``_verify.wait_argument_spec``); sglang_server's stop takes those that
    are not its own as its ``reap`` option."""
    return dict(
        patterns=dict(type='list', elements='str'),
        presets=dict(type='list', elements='str', choices=sorted(PRESETS)),
        environ=dict(type='dict'),
        pids=dict(type='list', elements='int'),
        descendants=dict(type='bool', default=True),
        sessions=dict(type='bool', default=True),
        other_namespaces=dict(type='bool', default=False),
        nvml_processes=dict(type='bool', default=False),
        device_holders=dict(type='bool', default=False),
        devices=dict(type='list', elements='str'),
        max_processes=dict(type='int', default=512),
        protect=dict(type='list', elements='str'),
        protect_defaults=dict(type='bool', default=True),
        protect_gateways=dict(type='bool', default=True),
        users=dict(type='list', elements='str'),
        kill_mode=dict(type='str', default='mixed', choices=['mixed', 'control-group']),
        term_signal=dict(type='str', default='SIGTERM'),
        term_timeout=dict(type='float', default=30),
        kill_timeout=dict(type='float', default=10),
    )


class ReapError(Exception):
    """Bad options: raised before anything is read or signalled."""


def signal_name(signum):
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


def parse_signal(value):
    """``SIGTERM``, ``term``, ``15`` -> 15; ReapError for anything else."""
    text = str(value).strip()
    try:
        if text.isdigit():
            return signal.Signals(int(text)).value
        name = text.upper()
        return signal.Signals[name if name.startswith('SIG') else 'SIG' + name].value
    except (KeyError, ValueError):
        raise ReapError('term_signal: unknown signal %r; use a name such as SIGTERM, SIGINT, SIGHUP or SIGQUIT, '
                        'or a signal number' % (value,))


def _compile(what, text):
    """The compiled expression; ReapError when it is invalid or matches the empty string.

    An expression that matches the empty string (``''``, ``.*``, ``|``, ``x?``) matches every
    command line or value, so it selects every process.
    """
    try:
        rx = re.compile(text)
    except re.error as e:
        raise ReapError('%s: invalid regular expression %r: %s' % (what, text, e))
    if rx.search('') is not None:
        raise ReapError('%s: %r matches the empty string, so it would select every process; '
                        'anchor it and make it name the process' % (what, text))
    return rx


def check_device_glob(glob):
    """ReapError unless ``glob`` names only per-GPU device files: /dev/nvidiaN, /dev/dri/*."""
    literal = _GLOB_CHARS.split(glob, maxsplit=1)[0]
    if '..' in glob.split('/') or not literal.startswith(_DEVICE_PREFIXES):
        raise ReapError('devices: %r may match files other than /dev/nvidia* and /dev/dri/*; gpu_reap only '
                        'stops holders of GPU device files' % (glob,))
    shared = [d for d in _SHARED_DEVICES if fnmatch.fnmatchcase(d, glob)]
    if shared:
        raise ReapError('devices: %r matches %s, which every CUDA process (and the NVIDIA daemons) holds; name '
                        'the GPUs instead, such as /dev/nvidia5' % (glob, shared[0]))


def _seconds(params, key):
    value = params[key]
    if value is None or not math.isfinite(value) or value < 0:
        raise ReapError('%s must be a finite number of seconds, 0 or more; got %r' % (key, value))
    return float(value)


class Options:
    """Validated options of one run (see ``parse_options``)."""

    def __init__(self, patterns=(), environ=(), pids=(), nvml_processes=False, device_holders=False, devices=(),
                 protect=DEFAULT_PROTECT, descendants=True, sessions=True, other_namespaces=False,
                 max_processes=512, kill_mode='mixed', term_signal=signal.SIGTERM, term_timeout=30.0,
                 kill_timeout=10.0, protect_gateways=True, users=()):
        self.patterns = list(patterns)            # [(text, compiled)]
        self.environ = list(environ)              # [(name, text, compiled)]
        self.pids = set(pids)
        self.nvml_processes = nvml_processes
        self.device_holders = device_holders
        self.devices = tuple(devices)
        self.protect = set(protect)
        self.descendants = descendants
        self.sessions = sessions
        self.other_namespaces = other_namespaces
        self.max_processes = max_processes
        self.kill_mode = kill_mode
        self.term_signal = int(term_signal)
        self.term_timeout = float(term_timeout)
        self.kill_timeout = float(kill_timeout)
        self.protect_gateways = protect_gateways
        self.users = set(users or ())


def parse_options(params):
    """Options from the module's parameters (types and defaults as the argument spec gives
    them); ReapError names the first value that cannot be used."""
    texts = []
    for preset in params['presets'] or []:
        texts.extend(PRESETS[preset])
    for i, text in enumerate(params['patterns'] or []):
        if not text:
            raise ReapError('patterns[%d] is empty: an empty pattern would select every process' % i)
        texts.append(text)
    patterns = [(text, _compile('patterns', text)) for text in texts]

    environ = []
    for name, text in sorted((params['environ'] or {}).items()):
        if not name or '=' in name:
            raise ReapError('environ: %r is not an environment variable name' % (name,))
        text = '' if text is None else str(text)
        environ.append((name, text, _compile('environ[%s]' % name, text)))

    pids = params['pids'] or []
    bad = [p for p in pids if p <= 0]
    if bad:
        raise ReapError('pids: %s is not a process ID' % bad[0])

    devices = params['devices'] or []
    for glob in devices:
        check_device_glob(glob)
    if not (patterns or environ or pids or params['nvml_processes'] or params['device_holders']):
        raise ReapError('no selector given: set at least one of patterns, presets, environ, pids, device_holders '
                        'or nvml_processes (gpu_reap never selects every process)')
    if params['max_processes'] < 1:
        raise ReapError('max_processes must be 1 or more; got %d' % params['max_processes'])

    protect = list(params['protect'] or [])
    if params['protect_defaults']:
        protect.extend(DEFAULT_PROTECT)

    return Options(
        patterns=patterns, environ=environ, pids=pids, nvml_processes=params['nvml_processes'],
        device_holders=params['device_holders'], devices=devices, protect=protect,
        descendants=params['descendants'], sessions=params['sessions'],
        other_namespaces=params['other_namespaces'], max_processes=params['max_processes'],
        kill_mode=params['kill_mode'], term_signal=parse_signal(params['term_signal']),
        term_timeout=_seconds(params, 'term_timeout'), kill_timeout=_seconds(params, 'kill_timeout'),
        protect_gateways=params['protect_gateways'], users=params['users'],
    )

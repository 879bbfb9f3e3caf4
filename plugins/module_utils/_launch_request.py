# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The sglang_launch role's variables, checked on the controller before anything on the node is read or touched
(the filter gpuops.host.sglang_launch_refusals).

    said = refusals({'mode': 'tuning', 'modes': ['extraction', 'tuning', 'serving'], 'model_path': '/models/m', ...})

Each refusal is one message that names the variable to set; none means the request may go to the node.
"""

from __future__ import annotations

import json
import re

from ansible_collections.gpuops.host.plugins.module_utils import _sglang_args as sargs
from ansible_collections.gpuops.host.plugins.module_utils._launch import ENGINES
from ansible_collections.gpuops.host.plugins.module_utils._server_config import HUB_ID

# Variables the role no longer reads, and what replaces each.
REMOVED = {
    'sglang_launch_stop_timeout': 'sglang_launch_stop_timeout was removed: the unit\'s TimeoutStopSec is the stop '
                                  'timeout of gpuops.host.sglang_stop, set sglang_stop_term_timeout instead.',
    'sglang_launch_planned': 'sglang_launch_planned was removed: the launch plans in the call that converges the node; '
                             'include the role\'s entry point plan first only to read sglang_launch_plan.',
    'sglang_stop_kill_timeout': 'sglang_stop_kill_timeout was removed: the wait after SIGKILL is gpuops.host.gpu_clean\'s, '
                                'set gpu_clean_kill_timeout instead (unset, gpuops.host.gpu_reap\'s default applies).',
}
NOT_TOUCHED = 'refusing before the running server is touched.'
MODE = re.compile(r'[a-z][a-z0-9_]*')
RUN_NAME = re.compile(r'[A-Za-z0-9_][A-Za-z0-9._-]*')
CONTROL = re.compile(r'[\x00-\x1f\x7f]')
# A path or unit name goes into a unit file unquoted: no space or backslash either.
UNQUOTED = re.compile(r'[\x00-\x20\x7f\\]')
ENV_NAME = re.compile(r'[A-Za-z_][A-Za-z0-9_]*')


def _json(value):
    return json.dumps(value)


def _number(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return float('nan')


def _mode(v):
    mode = v.get('mode')
    if not (isinstance(mode, str) and MODE.fullmatch(mode) and mode in v['modes']) or not v.get('model_path'):
        return ('sglang_launch_mode must be one of %s, each a plain name (^[a-z][a-z0-9_]*$), (got %s) and '
                'sglang_launch_model_path must be set (got \'%s\').'
                % (', '.join(v['modes']), _json(mode), v.get('model_path') or ''))
    return None


def _container(v):
    said = []
    if not v.get('image'):
        said.append('sglang_launch_supervisor %s runs the server in a container of sglang_launch_image, which is not '
                    'set; %s' % (v['supervisor'], NOT_TOUCHED))
    # an engine's --volume SRC:DST[:OPTIONS] splits at every colon: it would mount another directory than the one named
    colons = [path for path in v.get('mounts') or [] if ':' in path]
    if colons:
        said.append('%s: a container engine\'s --volume splits a path at its colons, so it would mount something else '
                    'than this path; rename it or choose another. Refusing before the running server is touched.'
                    % ', '.join(colons))
    return said


def broken_values(argv, environment, names):
    """What would break out of its line in a unit file or an environment file: ARGV's arguments and ENVIRONMENT's
    values with a control character, ENVIRONMENT's names that are no shell name, NAMES (paths, the unit, the user and
    group) with a control character, a space or a backslash. The environment's values are secrets: named by their
    variable only."""
    return (['the server argument ' + _json(arg) for arg in argv if CONTROL.search(arg)]
            + ['the value of the environment variable ' + name for name, value in environment.items()
               if isinstance(value, str) and CONTROL.search(value)]
            + ['the environment variable name ' + _json(name) for name in environment if not ENV_NAME.fullmatch(name)]
            + ['the path or unit name (no spaces or backslashes either) ' + _json(name) for name in names
               if UNQUOTED.search(name)])


def _argv(v):
    """The command line of V's arguments as the node will render it; none where it cannot be rendered (the node
    refuses that, naming the arguments)."""
    try:
        return sargs.render({'python': v['python'], 'entry_module': v.get('module') or 'sglang.launch_server',
                             'server_args': v.get('server_args') or {}, 'secret_args': v.get('secret_args') or [],
                             'config_file': v.get('config_file'),
                             'config_path': '%s/server-args.yaml' % v.get('state_dir')})['argv']
    except (sargs.ArgsError, KeyError, TypeError, ValueError):
        return []


def _mounts(v):
    """The host paths a container server mounts: the model (a hub ID's cache, HF_HOME, where the environment sets it),
    the state directory, the dump root."""
    model = v.get('model_path') or ''
    env = v.get('environment') or {}
    first = str(env.get('HF_HOME') or '') if HUB_ID.match(model) else model
    return [first, v.get('state_dir') or ''] + ([v['dump_root']] if v.get('dump_root') else [])


def refusals(v):
    """The refusals of the role's variables V (see the module docstring): ``removed``, the removed variables that are
    set; ``mode``, ``modes`` and ``model_path``; ``python``; ``run_name``; with a container ``supervisor``, ``image``
    and the paths it mounts (``state_dir``, ``dump_root``, the model's); the ``server_args`` (their
    ``mem_fraction_static``, and the command line rendered with ``module``, ``secret_args``, ``config_file``); the
    server's ``environment`` (with ``pythonpath``) and the ``names`` that go into its unit file."""
    said = [REMOVED[name] for name in v.get('removed') or []]
    mode = _mode(v)
    if mode:
        return said + [mode]
    if not v.get('python'):
        said.append('sglang_launch_python is not set: set it to the Python interpreter of the environment SGLang is '
                    'installed in (for example /opt/sglang/venv/bin/python); there is no system default. Refusing '
                    'before the running server is touched.')
    if v.get('supervisor') in ENGINES:
        said.extend(_container(dict(v, mounts=_mounts(v))))
    run_name = v.get('run_name') or ''
    if run_name and (not RUN_NAME.fullmatch(run_name) or '..' in run_name):
        said.append('sglang_launch_run_name must be a plain directory name (letters, digits, \'.\', \'_\', \'-\'; no '
                    '\'/\', no \'..\', no control characters), got %s. The running server was not touched.'
                    % _json(run_name))
    fraction = (v.get('server_args') or {}).get('mem_fraction_static')
    if fraction is not None and not 0 < _number(fraction) < 1:
        said.append('mem_fraction_static must be in (0, 1), got %s; %s' % (fraction, NOT_TOUCHED))
    environment = dict(v.get('environment') or {})
    if v.get('pythonpath'):
        environment['PYTHONPATH'] = ':'.join(v['pythonpath'])
    broken = broken_values(_argv(v) if v.get('python') else [], environment, v.get('names') or [])
    if broken:
        said.append('%s: newlines and other control characters are refused, since they would end the line in the '
                    'systemd unit or the environment file and could add directives or variables; %s'
                    % ('; '.join(broken), NOT_TOUCHED))
    return said


# Added to a failure of an interpreter that cannot import SGLang (the plan's read of its release, the parser's check).
PYTHON_HINT = (' sglang_launch_python must be the interpreter of the environment SGLang is installed in; refusing '
               'before the running server is touched.')


def failure(failed, mode, secrets=()):
    """The launch result of the converging call that FAILED (its task result): the node's own report where it
    answered, else a refusal before the node was touched (an option the module refused, a variable that could not be
    read), in mode MODE, its message with SECRETS masked."""
    if isinstance(failed.get('launch'), dict):
        return failed['launch']
    msg = sargs.Redactor(secrets)(str(failed.get('msg') or 'failed'))
    if 'cannot import sglang' in msg:
        msg += PYTHON_HINT
    return {'status': 'failed', 'server': 'old', 'changed': False, 'mode': mode, 'marker': None, 'pid': None,
            'url': None, 'dump_dir': None, 'seconds_to_clean': None, 'seconds_to_ready': None, 'gpus_verified': None,
            'gpus_serving': [], 'rollback': None, 'reasons': [], 'message': msg + ' The running server was not touched.'}

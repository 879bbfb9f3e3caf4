# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""SGLang server arguments: rendering them as SGLang's flags or as a ``--config`` file, checking
them with the installed SGLang's own parser, and keeping secret values out of what is shown.

Arguments are keyed by SGLang's own names, the fields of ``ServerArgs`` (``mem_fraction_static``,
``cuda_graph_max_bs_decode``). Every such field has the flag ``--`` + the name with dashes in both
supported releases: 0.5.14 and 0.5.23 derive their flags from the dataclass fields
(``srt/arg_groups/arg_utils.py`` ``add_cli_args_from_dataclass``: ``auto_dest`` is the flag without
``--``, dashes to underscores), so one rendering serves both. A name the installed release lacks
reaches its parser as written and is refused with the parser's own message: ``cuda_graph_max_bs``
renders ``--cuda-graph-max-bs``, a deprecated alias of ``--cuda-graph-max-bs-decode`` in 0.5.14 and
an ambiguous abbreviation (exit 2) in 0.5.23.
"""

from __future__ import annotations

import json
import re

# Argument and variable names whose values are secrets: one of these words between underscores or dashes
# (api_key, admin_api_key, hf_token, HF_TOKEN, ssl_keyfile_password), not inside a word (tokenizer_path,
# ssl_keyfile).
SECRET_NAME = re.compile(r'(?:^|[_-])(?:key|token|secret|password)(?:[_-]|$)', re.IGNORECASE)
MASK = '********'
# What a server argument's name may be (ServerArgs' field names are): nothing that could end a YAML key or a flag.
ARG_NAME = re.compile(r'^[a-z][a-z0-9_]*\Z')

# Run by the installed SGLang's interpreter with the server arguments as its own. It prints a JSON
# line with the release, then (when the arguments parse) one with the values the server will report
# in /server_info for the arguments given: the resolved ServerArgs field of each destination that the
# parser stored (the parser, and the command line after --config was merged in, are taken from the
# call of parse_args; a deprecated alias such as 0.5.14's --cuda-graph-max-bs is reported under its
# destination, cuda_graph_max_bs_decode). prepare_server_args is what `sglang serve` and
# `python -m sglang.launch_server` call (srt/server_args.py); argparse errors end in SystemExit(2)
# with the message on stderr.
# A --config file is first tried key by key against the installed release's ConfigArgumentMerger:
# 0.5.14's refuses the key of any destination that a deprecated alias shares
# (srt/server_args_config_parser.py: unsupported_actions by dest, so cuda-graph-max-bs-decode is
# refused because of --cuda-graph-max-bs), where the alias's own spelling passes. Such keys are
# renamed to a spelling that passes ("config_keys"), and the file is checked with them.
CHECK_PROGRAM = r'''
import argparse, json, os, sys, tempfile
import sglang
out = {"release": getattr(sglang, "__version__", None), "package": os.path.dirname(os.path.abspath(sglang.__file__))}
print(json.dumps(out))
sys.stdout.flush()
if sys.argv[1:2] == ["--release-only"]:
    sys.exit(0)
from sglang.srt.server_args import prepare_server_args
argv = sys.argv[1:]
seen, probing = [], [False]
class Probed(Exception):
    pass
parse_args = argparse.ArgumentParser.parse_args
def watch(self, args=None, namespace=None):
    seen.append((self, list(sys.argv[1:] if args is None else args)))
    if probing[0]:
        raise Probed()
    return parse_args(self, args, namespace)
argparse.ArgumentParser.parse_args = watch
def accepted(key, value):
    fd, path = tempfile.mkstemp(suffix=".yaml")
    with os.fdopen(fd, "w") as f:
        f.write("%s: %s\n" % (key, json.dumps(value)))
    probing[0] = True
    try:
        prepare_server_args(["--config", path])
    except Probed:
        return True
    except ValueError:
        return False
    finally:
        probing[0] = False
        os.unlink(path)
    return True
if "--config" in argv:
    import yaml
    path = argv[argv.index("--config") + 1]
    with open(path) as f:
        config = yaml.safe_load(f) or {}
    renamed = {}
    probing[0] = True
    try:
        prepare_server_args([])  # the parser, caught at its parse_args
    except Probed:
        pass
    finally:
        probing[0] = False
    parser = seen[-1][0] if seen else None
    for key, value in list(config.items()):
        if parser is None or accepted(key, value):
            continue
        dests = [a.dest for a in parser._actions if "--" + key in a.option_strings]
        for action in [a for a in parser._actions if dests and a.dest == dests[0]]:
            spellings = [o[2:] for o in action.option_strings if o.startswith("--") and o[2:] != key]
            good = [k for k in spellings if accepted(k, value)]
            if good:
                renamed[key] = good[0]
                break
    if renamed:
        config = dict((renamed.get(k, k), v) for k, v in config.items())
        with open(path, "w") as f:
            f.write("".join("%s: %s\n" % (k, json.dumps(v)) for k, v in config.items()))
        out["config_keys"] = renamed
seen[:] = []
server_args = prepare_server_args(argv)
argparse.ArgumentParser.parse_args = parse_args
def plain(value):
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return str(value)
try:
    parser, parsed_argv = seen[-1]
    for action in parser._actions:
        action.default = argparse.SUPPRESS
        action.required = False
    given = sorted(vars(parser.parse_known_args(parsed_argv)[0]))
    out["parsed"] = dict((name, plain(getattr(server_args, name, None))) for name in given if hasattr(server_args, name))
except Exception:
    pass
print(json.dumps(out))
'''


class ArgsError(Exception):
    """The arguments cannot be rendered or were refused; the message says why."""


def flag(name):
    """SGLang's flag for an argument name (``mem_fraction_static`` -> ``--mem-fraction-static``)."""
    return '--' + name.strip('-').replace('_', '-')


def _scalar(name, value):
    if isinstance(value, (dict, list, tuple)):
        raise ArgsError('server argument %s: a list may only hold plain values, got %r' % (name, value))
    return str(value)


def render_flags(args):
    """Command line arguments for ARGS, sorted by name.

    ``True`` renders the bare flag (SGLang's booleans are store_true), ``False`` and ``None`` leave the
    argument out, a list renders the flag once followed by its items, and a mapping is passed as JSON
    (as SGLang's --config reader does for ``--json-model-override-args`` and the like)."""
    argv = []
    for name in sorted(args):
        value = args[name]
        if value is False or value is None:
            continue
        if value is True:
            argv.append(flag(name))
        elif isinstance(value, dict):
            argv.extend([flag(name), json.dumps(value, sort_keys=True)])
        elif isinstance(value, (list, tuple)):
            if value:
                argv.append(flag(name))
                argv.extend(_scalar(name, item) for item in value)
        else:
            argv.extend([flag(name), _scalar(name, value)])
    return argv


def render_config(args, keys=None):
    """The ``--config`` YAML mapping for ARGS: keys with dashes, since SGLang emits each key verbatim as
    ``--KEY`` (srt/utils/server_args_config_parser.py ``_convert_config_to_args``), so ``model_path``
    would become the unknown ``--model_path``. ``False`` and ``None`` are left out, as on the command line.
    KEYS renames keys the installed release refuses in a file (CHECK_PROGRAM's "config_keys")."""
    config = {}
    for name in sorted(args):
        value = args[name]
        if value is False or value is None:
            continue
        key = name.strip('-').replace('_', '-')
        config[(keys or {}).get(key, key)] = list(value) if isinstance(value, tuple) else value
    return config


def dump_yaml(config):
    """YAML text of a flat mapping, without a YAML library: every scalar as a JSON scalar (which YAML reads
    the same), lists in flow style, mappings as a quoted JSON string."""
    lines = []
    for key in sorted(config):
        value = config[key]
        if isinstance(value, dict):
            value = json.dumps(value, sort_keys=True)
        lines.append('%s: %s' % (key, json.dumps(value)))
    return ''.join(line + '\n' for line in lines)


def refuse_bad_names(params):
    """ArgsError where PARAMS (a command's options) name a server argument that is no plain name."""
    names = sorted(set(params.get('server_args') or {}) | set(params.get('secret_server_args') or {}))
    bad = [n for n in names if not ARG_NAME.match(n)]
    if bad:
        raise ArgsError('server argument name(s) %s: each must be a plain name (%s), as SGLang\'s own are, '
                        'nothing was rendered' % (', '.join(repr(n) for n in bad), ARG_NAME.pattern))


def rendered(p):
    """The command line and argument files for P['server_args'] (P: ``python``, ``entry_module``, ``secret_args``,
    ``environment``, ``config_file``, ``config_path``, ``secrets_path``). Secret-named arguments never go onto the
    command line: with config_file every argument goes into the file config_path, else the secret ones go into the
    file secrets_path when it is given, and are left to the caller otherwise (``secret_args``). ArgsError where they
    cannot be rendered."""
    args = dict(p.get('server_args') or {})
    try:
        secret = secret_names(args, p.get('secret_args') or ())
        public = dict((k, v) for k, v in args.items() if k not in secret)
        hidden = dict((k, v) for k, v in args.items() if k in secret and v is not None and v is not False)
        server_argv = render_flags(public)
        gpus = expected_gpus(args, (p.get('environment') or {}).get('CUDA_VISIBLE_DEVICES'))
    except ArgsError as e:
        raise ArgsError('cannot render the server arguments: %s' % e)
    files = {}
    if p.get('config_file'):
        files[p['config_path']] = dump_yaml(render_config(args))
        server_argv = ['--config', p['config_path']]
    elif hidden and p.get('secrets_path'):
        files[p['secrets_path']] = dump_yaml(render_config(hidden))
        server_argv = server_argv + ['--config', p['secrets_path']]
    for path in files:
        if not path.endswith(('.yaml', '.yml')):
            raise ArgsError('%s: SGLang reads a --config file only when its name ends in .yaml or .yml' % path)
    argv = [p['python'], '-m', p['entry_module']] + server_argv
    return {'argv': argv, 'server_argv': server_argv, 'files': files, 'hidden': hidden, 'expected_gpus': gpus,
            'secret_args': sorted(hidden)}


def public(out):
    """What of OUT (rendered's) may be shown: the argument files by name only, no secret argument's value."""
    result = dict((k, v) for k, v in out.items() if k not in ('files', 'hidden'))
    return dict(result, files=sorted(out['files']))


def render(p):
    """The command line, its argument files by name, the GPUs it occupies: pure, nothing read or touched."""
    return public(rendered(p))


def secret_names(args, extra=()):
    """Names of ARGS whose values are secrets: by their name, or listed in EXTRA."""
    extra = set(n.strip('-').replace('-', '_') for n in extra)
    return sorted(n for n in args if SECRET_NAME.search(n) or n.strip('-').replace('-', '_') in extra)


def secret_values(args, extra=()):
    """The secret values of ARGS (see secret_names), as strings."""
    return sorted(set(str(args[n]) for n in secret_names(args, extra) if args[n] not in (None, False, True, '')))


def masked_values(values):
    """VALUES to mask in a message or a log: as strings of 4 characters or more, the longer (then later) first."""
    return sorted(set(str(value) for value in values if len(str(value)) >= 4), key=str.lower, reverse=True)


class Redactor:
    """Replaces known secret values, and the value of any secret-named flag or ``name='value'`` pair
    (SGLang logs ``server_args=ServerArgs(..., api_key='...')`` at start), with a mask."""

    _FLAG = re.compile(r'(--([\w-]+))(=|\s+)(\S+)')
    _PAIR = re.compile(r'''(\b(\w+)\s*[=:]\s*)(['"])(.*?)\3''')

    def __init__(self, secrets=()):
        # each value as given, and as repr() and JSON show it (quotes and backslashes escaped)
        forms = set()
        for s in set(secrets):
            if s and len(s) >= 4:
                forms.update((s, json.dumps(s)[1:-1], repr(s)[1:-1]))
        self.secrets = sorted(forms, key=len, reverse=True)

    def __call__(self, text):
        if text is None:
            return None
        for secret in self.secrets:
            text = text.replace(secret, MASK)
        text = self._FLAG.sub(lambda m: m.group(1) + m.group(3) + MASK if SECRET_NAME.search(m.group(2)) else m.group(0),
                              text)
        return self._PAIR.sub(lambda m: m.group(1) + m.group(3) + MASK + m.group(3) if SECRET_NAME.search(m.group(2))
                              else m.group(0), text)

    def argv(self, argv):
        """ARGV with the value after (or in) each secret-named flag masked."""
        out, hide = [], False
        for arg in argv:
            if hide:
                out.append(MASK)
                hide = False
                continue
            name, eq, dummy = arg.partition('=')
            secret = arg.startswith('--') and SECRET_NAME.search(name)
            if secret and eq:
                out.append(name + '=' + MASK)
            else:
                out.append(self(arg))
                hide = bool(secret)
        return out


def masked(value, redact):
    """VALUE (a result: mappings, lists, strings) with REDACT applied to every string in it."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return dict((k, masked(v, redact)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [masked(v, redact) for v in value]
    return value


def masking(report, redact=None):
    """REPORT (a module's exit_json or fail_json) that first masks, in every string of its keyword arguments, the
    values of secret-named flags and pairs (``--api-key X``, ``--hf-token=X``, ``api_key='X'``): command lines of
    processes started by hand carry them."""
    redact = redact or Redactor()

    def report_masked(**result):
        return report(**masked(result, redact))
    return report_masked


def _int(args, names, default):
    for name in names:
        if args.get(name) not in (None, False, ''):
            try:
                return int(args[name])
            except (TypeError, ValueError):
                raise ArgsError('server argument %s must be an integer, got %r' % (name, args[name]))
    return default


def expected_gpus(args, cuda_visible_devices=None):
    """NVML indices of the GPUs a server with ARGS occupies on a node: ``tp_size`` x ``dp_size`` GPUs (their share
    of each node, with ``nnodes``) from ``base_gpu_id`` in steps of ``gpu_id_step`` (SGLang's scheduler placement),
    mapped through
    CUDA_VISIBLE_DEVICES when it is set to indices."""
    count = _int(args, ('tp_size', 'tensor_parallel_size'), 1) * _int(args, ('dp_size', 'data_parallel_size'), 1)
    nnodes = _int(args, ('nnodes',), 1)
    if nnodes > 1:
        # over several nodes each runs its share of the ranks (engine.py _calculate_rank_ranges)
        if count % nnodes:
            raise ArgsError('tp_size x dp_size (%d) does not divide among %d nodes' % (count, nnodes))
        count //= nnodes
    base = _int(args, ('base_gpu_id',), 0)
    step = _int(args, ('gpu_id_step',), 1)
    cuda = [base + i * step for i in range(count)]
    if not cuda_visible_devices:
        return cuda
    visible = [v.strip() for v in str(cuda_visible_devices).split(',') if v.strip()]
    if not all(v.isdigit() for v in visible):
        raise ArgsError('CUDA_VISIBLE_DEVICES=%s names GPUs by UUID; set the expected GPUs explicitly' % cuda_visible_devices)
    missing = [c for c in cuda if c >= len(visible)]
    if missing:
        raise ArgsError('the server needs CUDA device(s) %s, but CUDA_VISIBLE_DEVICES=%s shows only %d'
                        % (', '.join(map(str, missing)), cuda_visible_devices, len(visible)))
    return [int(visible[c]) for c in cuda]


def parser_message(stderr, redact):
    """The parser's own words from the stderr of a refused check: argparse's ``prog: error: ...`` line,
    else the last line (the exception of a traceback; a container engine's error, before its usage hint)."""
    lines = [line.strip() for line in (stderr or '').splitlines() if line.strip()]
    for line in reversed(lines):
        if ': error: ' in line:
            return redact(line)
    # a container engine's own failure ends with its usage hint: the line before says what failed
    while len(lines) > 1 and lines[-1].startswith("Run '") and lines[-1].endswith("--help' for more information"):
        lines.pop()
    return redact(lines[-1]) if lines else 'no message'


def check_result(rc, stdout, stderr, argv, redact, python=None):
    """Interpret a run of CHECK_PROGRAM: the release and the parsed values, or ArgsError with SGLang's message
    (or, where PYTHON could not even import sglang, a message that says so)."""
    found, lines = {}, 0
    for line in (stdout or '').splitlines():
        if line.startswith('{'):
            try:
                found.update(json.loads(line))
                lines += 1
            except ValueError:
                continue
    if rc != 0 and 'release' not in found:
        raise ArgsError('%s cannot import sglang (exit %d): %s'
                        % (python or 'the interpreter', rc, parser_message(stderr, redact)))
    if rc != 0 or lines < 2:
        release = found.get('release')
        raise ArgsError('the installed SGLang%s refuses the server arguments %s (exit %d): %s'
                        % (' ' + release if release else '', ' '.join(redact.argv(argv)), rc, parser_message(stderr, redact)))
    return found


def server_info_mismatches(expected, info):
    """Names whose /server_info value differs from the expected one (numbers compared as numbers)."""
    def same(a, b):
        if isinstance(a, bool) or isinstance(b, bool):
            return a is b or (a == b and type(a) is type(b))
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(a)))
        if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        return a == b or (a is not None and b is not None and str(a) == str(b))
    out = []
    for name in sorted(expected):
        if name not in info:
            out.append({'name': name, 'expected': expected[name], 'reported': None, 'missing': True})
        elif not same(expected[name], info[name]):
            out.append({'name': name, 'expected': expected[name], 'reported': info[name], 'missing': False})
    return out

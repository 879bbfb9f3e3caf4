# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Rendering of server arguments, and the check with the installed parser, run for real.

The parser check runs CHECK_PROGRAM with this interpreter against a small SGLang package written
here, whose parser holds the options these tests use as each release defines them:
- 0.5.23 (srt/server_args.py ``prepare_server_args``; flags derived from ServerArgs fields by
  srt/arg_groups/arg_utils.py ``add_cli_args_from_dataclass``): --cuda-graph-max-bs-decode and
  --cuda-graph-max-bs-prefill, no --cuda-graph-max-bs, abbreviations allowed (argparse default);
- 0.5.14: the same two, plus --cuda-graph-max-bs, a DeprecatedAliasStoreAction with
  dest cuda_graph_max_bs_decode (srt/server_args.py ``add_cli_args``), whose --config reader
  refuses the key of any destination such an alias shares (srt/server_args_config_parser.py
  ``unsupported_actions``, keyed by dest).
``--config`` is merged as srt/utils/server_args_config_parser.py does: each key verbatim as --KEY,
store_true keys as bare flags, config first so the command line wins.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from ansible_collections.gpuops.host.plugins.module_utils import _sglang_args as sargs

RELEASES = ('0.5.23', '0.5.14')

SERVER_ARGS = textwrap.dedent('''
    import argparse, dataclasses, sys

    RELEASE = %(release)r


    class DeprecatedAliasStoreAction(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            setattr(namespace, self.dest, values)

    @dataclasses.dataclass
    class ServerArgs:
        model_path: str = None
        host: str = "127.0.0.1"
        port: int = 30000
        tp_size: int = 1
        dp_size: int = 1
        mem_fraction_static: float = None
        cuda_graph_max_bs_decode: int = None
        cuda_graph_max_bs_prefill: int = None
        enable_metrics: bool = False
        disable_radix_cache: bool = False
        api_key: str = None

        @staticmethod
        def add_cli_args(parser):
            parser.add_argument("--model-path", type=str, required=True)
            parser.add_argument("--host", type=str, default="127.0.0.1")
            parser.add_argument("--port", type=int, default=30000)
            parser.add_argument("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
            parser.add_argument("--dp-size", "--data-parallel-size", dest="dp_size", type=int, default=1)
            parser.add_argument("--mem-fraction-static", type=float, default=None)
            parser.add_argument("--cuda-graph-max-bs-decode", type=int, default=None)
            parser.add_argument("--cuda-graph-max-bs-prefill", type=int, default=None)
            if RELEASE == "0.5.14":
                parser.add_argument("--cuda-graph-max-bs", type=int, dest="cuda_graph_max_bs_decode",
                                    action=DeprecatedAliasStoreAction)
            parser.add_argument("--enable-metrics", action="store_true")
            parser.add_argument("--disable-radix-cache", action="store_true")
            parser.add_argument("--api-key", type=str, default=None)
            parser.add_argument("--config", type=str)

    def prepare_server_args(argv):
        parser = argparse.ArgumentParser(prog="sglang serve")
        ServerArgs.add_cli_args(parser)
        if "--config" in argv:
            from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger
            argv = ConfigArgumentMerger(parser).merge_config_with_args(argv)
        raw = parser.parse_args(argv)
        if raw.mem_fraction_static is not None and not 0 < raw.mem_fraction_static < 1:
            raise ValueError("mem_fraction_static must be in (0, 1)")
        return ServerArgs(**dict((f.name, getattr(raw, f.name)) for f in dataclasses.fields(ServerArgs)))
''')

CONFIG_PARSER = textwrap.dedent('''
    import argparse, json

    class ConfigArgumentMerger:
        def __init__(self, parser):
            self.store_true = set(a.dest for a in parser._actions if isinstance(a, argparse._StoreTrueAction))
            # 0.5.14: every destination of an action other than store and store_true is refused in a file
            self.unsupported = set(a.dest for a in parser._actions if a.option_strings and not isinstance(
                a, (argparse._StoreAction, argparse._StoreTrueAction)) and a.dest not in ("help", "config"))

        def merge_config_with_args(self, argv):
            i = argv.index("--config")
            path = argv[i + 1]
            if not path.endswith((".yaml", ".yml")):
                raise ValueError("Config file must be YAML format")
            import yaml
            with open(path) as f:
                config = yaml.safe_load(f) or {}
            args = []
            for key, value in config.items():
                if key.replace("-", "_") in self.unsupported:
                    raise ValueError("Unsupported config option %r" % key.replace("-", "_"))
                if isinstance(value, bool):
                    if key.replace("-", "_") in self.store_true:
                        if value:
                            args.append("--" + key)
                    else:
                        args.extend(["--" + key, str(value).lower()])
                elif isinstance(value, list):
                    args.extend(["--" + key] + [str(v) for v in value])
                elif isinstance(value, dict):
                    args.extend(["--" + key, json.dumps(value)])
                else:
                    args.extend(["--" + key, str(value)])
            return args + argv[:i] + argv[i + 2:]
''')


@pytest.fixture(params=RELEASES)
def sglang(request, tmp_path):
    """(release, PYTHONPATH) of a small SGLang package playing RELEASE's parser."""
    release = request.param
    root = tmp_path / ('sglang-' + release)
    pkg = root / 'sglang'
    (pkg / 'srt' / 'utils').mkdir(parents=True)
    (pkg / '__init__.py').write_text('__version__ = %r\n' % release)
    (pkg / 'srt' / '__init__.py').write_text('')
    (pkg / 'srt' / 'server_args.py').write_text(SERVER_ARGS % {'release': release})
    (pkg / 'srt' / 'utils' / '__init__.py').write_text('')
    (pkg / 'srt' / 'utils' / 'server_args_config_parser.py').write_text(CONFIG_PARSER)
    return release, str(root)


def run_check(pythonpath, argv):
    env = dict(os.environ, PYTHONPATH=pythonpath)
    proc = subprocess.run([sys.executable, '-c', sargs.CHECK_PROGRAM] + argv, capture_output=True, text=True,
                          env=env, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def check(pythonpath, argv):
    rc, out, err = run_check(pythonpath, argv)
    return sargs.check_result(rc, out, err, argv, sargs.Redactor())


# -- rendering -------------------------------------------------------------------------------

@pytest.mark.parametrize('args, argv', [
    ({'tp_size': 2}, ['--tp-size', '2']),
    ({'enable_metrics': True, 'disable_radix_cache': False, 'api_key': None}, ['--enable-metrics']),
    ({'cuda_graph_bs_decode': [1, 2, 4]}, ['--cuda-graph-bs-decode', '1', '2', '4']),
    ({'cuda_graph_bs_decode': []}, []),
    ({'json_model_override_args': {'b': 1, 'a': 2}}, ['--json-model-override-args', '{"a": 2, "b": 1}']),
    ({'mem_fraction_static': 0.92, 'cuda_graph_max_bs_decode': 160},
     ['--cuda-graph-max-bs-decode', '160', '--mem-fraction-static', '0.92']),
    ({'--already-dashed': 1}, ['--already-dashed', '1']),
])
def test_render_flags(args, argv):
    assert sargs.render_flags(args) == argv


def test_render_flags_refuses_nested_lists():
    with pytest.raises(sargs.ArgsError, match='plain values'):
        sargs.render_flags({'x': [[1]]})


def test_config_keys_have_dashes_and_read_back_as_yaml():
    yaml = pytest.importorskip('yaml')
    args = {'model_path': '/models/q: "x"', 'tp_size': 2, 'enable_metrics': True, 'disable_radix_cache': False,
            'cuda_graph_bs_decode': [1, 2], 'mem_fraction_static': 0.92, 'json_model_override_args': {'a': 1}}
    text = sargs.dump_yaml(sargs.render_config(args))
    assert yaml.safe_load(text) == {'model-path': '/models/q: "x"', 'tp-size': 2, 'enable-metrics': True,
                                    'cuda-graph-bs-decode': [1, 2], 'mem-fraction-static': 0.92,
                                    'json-model-override-args': '{"a": 1}'}
    assert '_' not in ''.join(line.split(':')[0] for line in text.splitlines())


@pytest.mark.parametrize('args, visible, gpus', [
    ({}, None, [0]),
    ({'tp_size': 4}, None, [0, 1, 2, 3]),
    ({'tensor_parallel_size': 2, 'data_parallel_size': 2}, None, [0, 1, 2, 3]),
    ({'tp_size': 2, 'base_gpu_id': 4, 'gpu_id_step': 2}, None, [4, 6]),
    ({'tp_size': 2}, '6,7', [6, 7]),
    ({'tp_size': 2, 'base_gpu_id': 1}, '3, 2, 1', [2, 1]),
    # over several nodes, each runs its share of tp_size x dp_size
    ({'tp_size': 16, 'nnodes': 2}, None, [0, 1, 2, 3, 4, 5, 6, 7]),
    ({'tp_size': 8, 'dp_size': 2, 'nnodes': 4}, None, [0, 1, 2, 3]),
    ({'tensor_parallel_size': 4, 'data_parallel_size': 2, 'nnodes': '2'}, None, [0, 1, 2, 3]),
    ({'tp_size': 2, 'nnodes': 2}, None, [0]),
    ({'tp_size': 4, 'nnodes': 1}, None, [0, 1, 2, 3]),
    ({'tp_size': 4, 'nnodes': None}, None, [0, 1, 2, 3]),
    ({'tp_size': 8, 'nnodes': 2, 'base_gpu_id': 4}, None, [4, 5, 6, 7]),
    ({'tp_size': 8, 'nnodes': 2, 'base_gpu_id': 1, 'gpu_id_step': 2}, None, [1, 3, 5, 7]),
    ({'tp_size': 8, 'nnodes': 4}, '5,4,3,2', [5, 4]),
    ({'tp_size': 16, 'nnodes': 2, 'base_gpu_id': 2, 'node_rank': 1}, '0,1,2,3,4,5,6,7,8,9', [2, 3, 4, 5, 6, 7, 8, 9]),
])
def test_expected_gpus(args, visible, gpus):
    assert sargs.expected_gpus(args, visible) == gpus


@pytest.mark.parametrize('args, visible, message', [
    ({'tp_size': 4}, '0,1', 'shows only 2'),
    ({'tp_size': 1}, 'GPU-aaaa', 'by UUID'),
    ({'tp_size': 'four'}, None, 'must be an integer'),
    ({'tp_size': 3, 'nnodes': 2}, None, r'tp_size x dp_size \(3\) does not divide among 2 nodes'),
    ({'tp_size': 8, 'dp_size': 3, 'nnodes': 5}, None, r'tp_size x dp_size \(24\) does not divide among 5 nodes'),
    ({'tp_size': 2, 'nnodes': 4}, None, r'tp_size x dp_size \(2\) does not divide among 4 nodes'),
    ({'tp_size': 2, 'nnodes': 'two'}, None, 'server argument nnodes must be an integer'),
    ({'tp_size': 16, 'nnodes': 2}, '0,1,2,3', 'shows only 4'),
])
def test_expected_gpus_refuses(args, visible, message):
    with pytest.raises(sargs.ArgsError, match=message):
        sargs.expected_gpus(args, visible)


# -- secrets ---------------------------------------------------------------------------------

def test_secret_names_and_values():
    args = {'api_key': 'k-123456', 'admin_api_key': None, 'hf_token': 'hf_abcdef', 'tp_size': 2, 'custom': 'c-999999',
            'tokenizer_path': '/models/tok', 'ssl_keyfile': '/etc/k.pem', 'skip_tokenizer_init': True}
    assert sargs.secret_names(args, ['custom']) == ['admin_api_key', 'api_key', 'custom', 'hf_token']
    assert sargs.secret_values(args, ['custom']) == ['c-999999', 'hf_abcdef', 'k-123456']


def test_redactor_masks_a_secret_of_4_characters_and_none_shorter():
    # SPT_NOENV=1 is among the values of the environment: masking '1' would garble every number
    redact = sargs.Redactor(['abcd', '1', 'xy', ''])
    assert redact('key abcd on GPU 1 of 12, abcde') == 'key ******** on GPU 1 of 12, ********e'


def test_redactor_masks_values_flags_and_logged_server_args():
    redact = sargs.Redactor(['hf_abcdef'])
    line = "server_args=ServerArgs(model_path='/m', api_key='k-123456', admin_api_key=None) HF_TOKEN=hf_abcdef"
    assert redact(line) == "server_args=ServerArgs(model_path='/m', api_key='********', admin_api_key=None) HF_TOKEN=********"
    assert redact.argv(['--api-key', 'k-123456', '--hf-token=x1234', '--port', '30000']) == \
        ['--api-key', '********', '--hf-token=********', '--port', '30000']
    # words that merely contain one of the secret words are no secrets
    assert redact("--tokenizer-path /models/tok tokenizer_path='/models/tok' --ssl-keyfile /k.pem") == \
        "--tokenizer-path /models/tok tokenizer_path='/models/tok' --ssl-keyfile /k.pem"
    assert redact.argv(['--tokenizer-path', '/models/tok']) == ['--tokenizer-path', '/models/tok']


# -- the installed parser, both releases -----------------------------------------------------

BASE = ['--model-path', '/models/q', '--port', '30000']


def test_check_reports_release_and_parsed_values(sglang):
    release, path = sglang
    found = check(path, BASE + sargs.render_flags({'cuda_graph_max_bs_decode': 160, 'tp_size': 2,
                                                   'mem_fraction_static': 0.92, 'enable_metrics': True}))
    assert found['release'] == release
    assert found['parsed'] == {'model_path': '/models/q', 'port': 30000, 'tp_size': 2, 'mem_fraction_static': 0.92,
                               'cuda_graph_max_bs_decode': 160, 'enable_metrics': True}


def test_old_graph_flag_is_ambiguous_on_0_5_23_and_an_alias_on_0_5_14(sglang):
    release, path = sglang
    argv = BASE + sargs.render_flags({'cuda_graph_max_bs': 160})
    if release == '0.5.23':
        with pytest.raises(sargs.ArgsError) as e:
            check(path, argv)
        assert 'ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill' in str(e.value)
        assert 'the installed SGLang 0.5.23 refuses' in str(e.value)
        assert '(exit 2)' in str(e.value)
    else:
        # stored under the new name, which is what /server_info reports
        assert check(path, argv)['parsed']['cuda_graph_max_bs_decode'] == 160


@pytest.mark.parametrize('args, message', [
    ({'no_such_flag': 1}, 'unrecognized arguments: --no-such-flag 1'),
    ({'tp_size': 'two'}, "argument --tp-size/--tensor-parallel-size: invalid int value: 'two'"),
    ({'mem_fraction_static': 1.5}, 'ValueError: mem_fraction_static must be in (0, 1)'),
])
def test_check_refuses_with_sglangs_own_message(sglang, args, message):
    dummy, path = sglang
    with pytest.raises(sargs.ArgsError) as e:
        check(path, BASE + sargs.render_flags(args))
    assert message in str(e.value)


def test_config_file_with_dashed_keys_parses_and_underscores_do_not(sglang, tmp_path):
    dummy, path = sglang
    args = {'model_path': '/models/q', 'port': 30000, 'tp_size': 2, 'enable_metrics': True,
            'cuda_graph_max_bs_decode': 160, 'disable_radix_cache': False}
    config = tmp_path / 'server-args.yaml'
    config.write_text(sargs.dump_yaml(sargs.render_config(args)))
    found = check(path, ['--config', str(config)])
    assert found['parsed'] == {'model_path': '/models/q', 'port': 30000, 'tp_size': 2, 'enable_metrics': True,
                               'cuda_graph_max_bs_decode': 160}
    config.write_text('model-path: "/models/q"\ntp_size: 2\n')
    with pytest.raises(sargs.ArgsError, match='unrecognized arguments: --tp_size 2'):
        check(path, ['--config', str(config)])


def test_check_message_masks_secrets(sglang):
    dummy, path = sglang
    redact = sargs.Redactor(['k-123456'])
    argv = BASE + ['--api-key', 'k-123456', '--tp-size', 'k-123456']
    rc, out, err = run_check(path, argv)
    assert 'k-123456' in err
    with pytest.raises(sargs.ArgsError) as e:
        sargs.check_result(rc, out, err, redact.argv(argv), redact)
    assert 'k-123456' not in str(e.value)
    assert "invalid int value: '********'" in str(e.value)


def test_release_only(sglang):
    release, path = sglang
    rc, out, dummy = run_check(path, ['--release-only'])
    assert rc == 0 and [json.loads(line) for line in out.splitlines()] == [
        {'release': release, 'package': os.path.join(path, 'sglang')}]


def test_check_without_sglang(tmp_path):
    rc, out, err = run_check(str(tmp_path), BASE)
    with pytest.raises(sargs.ArgsError) as e:
        sargs.check_result(rc, out, err, BASE, sargs.Redactor(), '/usr/bin/python3')
    assert str(e.value) == ("/usr/bin/python3 cannot import sglang (exit 1): "
                            "ModuleNotFoundError: No module named 'sglang'")


# -- /server_info --------------------------------------------------------------------------

def test_server_info_mismatches():
    expected = {'cuda_graph_max_bs_decode': 160, 'mem_fraction_static': 0.92, 'enable_metrics': True, 'tp_size': 2,
                'cuda_graph_bs_decode': [1, 2]}
    info = {'cuda_graph_max_bs_decode': 160, 'mem_fraction_static': 0.9200000001, 'enable_metrics': 1,
            'cuda_graph_bs_decode': [1, 2]}
    assert sargs.server_info_mismatches(expected, info) == [
        {'name': 'enable_metrics', 'expected': True, 'reported': 1, 'missing': False},
        {'name': 'tp_size', 'expected': 2, 'reported': None, 'missing': True},
    ]


def test_config_keys_that_the_release_refuses_in_a_file_are_renamed(sglang, tmp_path):
    release, path = sglang
    config = tmp_path / 'server-args.yaml'
    config.write_text(sargs.dump_yaml(sargs.render_config({'model_path': '/models/q', 'cuda_graph_max_bs_decode': 160})))
    found = check(path, ['--config', str(config)])
    assert found['parsed']['cuda_graph_max_bs_decode'] == 160
    renamed = {'cuda-graph-max-bs-decode': 'cuda-graph-max-bs'} if release == '0.5.14' else {}
    assert found.get('config_keys', {}) == renamed
    assert sargs.render_config({'cuda_graph_max_bs_decode': 160}, renamed) == \
        {renamed.get('cuda-graph-max-bs-decode', 'cuda-graph-max-bs-decode'): 160}


def test_redactor_masks_the_repr_and_json_forms_of_a_secret():
    secret = 'sk-"quoted"\\back\'slash'
    redact = sargs.Redactor([secret])
    for form in (secret, json.dumps(secret), repr(secret), json.dumps({'key': secret})):
        assert secret not in redact(form) and json.dumps(secret)[1:-1] not in redact(form) \
            and repr(secret)[1:-1] not in redact(form), redact(form)


def test_masked_masks_every_string_of_a_result():
    result = {'msg': 'pid 4 python -m x --api-key sk-1', 'stopped': [{'cmdline': 'x --admin-api-key=k2 --port 1', 'pid': 4}],
              'n': 3}
    assert sargs.masked(result, sargs.Redactor()) == {
        'msg': 'pid 4 python -m x --api-key ********', 'n': 3,
        'stopped': [{'cmdline': 'x --admin-api-key=******** --port 1', 'pid': 4}]}


def test_a_plan_s_result_masks_secrets_but_not_the_paths_a_plain_variable_names():
    """_sglang.plan_masks: what sglang_server_info and sglang_server's launch mask in a result that holds a plan."""
    from ansible_collections.gpuops.host.plugins.module_utils._sglang import plan_masks
    masked, shown = plan_masks({'/data/hf-cache', 'already-masked'}, {'server_args': {'model_path': '/m'}},
                               {'api_key': 'sk-12345'}, {'HF_TOKEN': 'hf_tok_12345', 'MY_CACHE': '/data/hf-cache'})
    # a plain variable's value may be a path the plan's identity records: masked there, the next plan would differ
    assert '/data/hf-cache' not in masked
    assert {'already-masked', 'sk-12345', 'hf_tok_12345'} <= masked
    assert shown == {'HF_TOKEN': 'VALUE_SPECIFIED_IN_NO_LOG_PARAMETER', 'MY_CACHE': 'VALUE_SPECIFIED_IN_NO_LOG_PARAMETER'}

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_server's main(): options, check mode, files and masking, through a real run of each action
that needs no running server, and a drain against a real local HTTP server."""

from __future__ import annotations

import http.server
import json
import os
import socket
import stat
import sys
import textwrap
import threading

import pytest

from ansible.module_utils.basic import AnsibleModule, remove_values
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpuops.host.plugins.modules import sglang_server

# A small SGLang: its version and a parser with the options used here (the unit tests of
# _sglang_args play both releases' parsers in full).
SERVER_ARGS = textwrap.dedent('''
    import argparse, dataclasses, os

    @dataclasses.dataclass
    class ServerArgs:
        model_path: str = None
        port: int = 30000
        tp_size: int = 1
        cuda_graph_max_bs_decode: int = None
        cuda_graph_max_bs_prefill: int = None
        api_key: str = None
        config: str = None

        @staticmethod
        def add_cli_args(parser):
            parser.add_argument("--model-path", required=True)
            parser.add_argument("--port", type=int, default=30000)
            parser.add_argument("--tp-size", type=int, default=1)
            parser.add_argument("--cuda-graph-max-bs-decode", type=int)
            parser.add_argument("--cuda-graph-max-bs-prefill", type=int)
            parser.add_argument("--api-key")
            parser.add_argument("--config")

    def prepare_server_args(argv):
        parser = argparse.ArgumentParser(prog="sglang serve")
        ServerArgs.add_cli_args(parser)
        if "--config" in argv:
            import yaml
            i = argv.index("--config")
            with open(argv[i + 1]) as f:
                text = f.read()
            if os.environ.get("SEEN_CONFIG"):  # what the last parse read, for the tests
                with open(os.environ["SEEN_CONFIG"], "w") as f:
                    f.write(text)
            extra = [x for k, v in yaml.safe_load(text).items() for x in ("--" + k, str(v))]
            argv = extra + argv[:i] + argv[i + 2:]
        raw = parser.parse_args(argv)
        return ServerArgs(**vars(raw))
''')


@pytest.fixture
def sglang(tmp_path):
    root = tmp_path / 'site'
    (root / 'sglang' / 'srt').mkdir(parents=True)
    (root / 'sglang' / '__init__.py').write_text('__version__ = "0.5.23"\n')
    (root / 'sglang' / 'srt' / '__init__.py').write_text('')
    (root / 'sglang' / 'srt' / 'server_args.py').write_text(SERVER_ARGS)
    return str(root)


@pytest.fixture
def base(sglang, tmp_path):
    return {'python': sys.executable, 'pythonpath': [sglang], 'secrets_path': str(tmp_path / 'secret-args.yaml')}


def test_results_mask_secrets_of_4_characters_and_keep_shorter_values(monkeypatch, base):
    """What Ansible returns: the result with the module's no_log values removed (AnsibleModule._return_formatted)."""
    returned = {}

    def exit_json(self, **result):
        returned.update(remove_values(result, self.no_log_values))
        raise SystemExit(0)

    monkeypatch.setattr(AnsibleModule, 'exit_json', exit_json)
    # '1' is a no_log value (secrets); the token's value is masked as a secret variable's
    args = dict(base, action='render', secrets=['1'], environment={'SPT_NOENV': '1'},
                secret_environment={'HF_TOKEN': 'wxyz'},
                server_args={'model_path': '/models/m1', 'tp_size': 1, 'served_model_name': 'wxyz'})
    with patch_module_args(args), pytest.raises(SystemExit):
        sglang_server.main()
    assert returned['argv'][3:6] == ['--model-path', '/models/m1', '--served-model-name']
    assert returned['argv'][7:] == ['--tp-size', '1'] and 'wxyz' not in json.dumps(returned)


def test_the_invocation_log_holds_no_secret_option(monkeypatch, run_module, base):
    """What AnsibleModule.__init__ logs (syslog or the journal): the no_log options as NOT_LOGGING_PARAMETER."""
    logged = []
    monkeypatch.setattr(AnsibleModule, 'log', lambda self, msg, log_args=None: logged.append(remove_values(msg, self.no_log_values)))
    args = dict(base, action='render', server_args={'model_path': '/m'},
                secret_server_args={'api_key': 'k-123456', 'served_model_name': 'private-name'},
                environment={'SPT_NOENV': '1'}, secret_environment={'HF_TOKEN': 'hf_abcdef', 'TEAM': 'team-value'})
    outcome, result, dummy = run_module(sglang_server, args)
    assert outcome == 'exit', result
    assert logged and logged[0].startswith('Invoked with ')
    assert 'secret_server_args=NOT_LOGGING_PARAMETER' in logged[0] and 'secret_environment=NOT_LOGGING_PARAMETER' in logged[0]
    for secret in ('k-123456', 'private-name', 'hf_abcdef', 'team-value'):
        assert secret not in logged[0] and secret not in json.dumps(result)
    # a secret argument, whatever its name, stays off the command line
    assert result['secret_args'] == ['api_key', 'served_model_name'] and result['argv'][3:5] == ['--model-path', '/m']


@pytest.mark.parametrize('extra, leaked', [
    ({'server_args': {'model_path': '/m', 'api_key': 'k-123456'}}, ['server_args.api_key']),
    ({'server_args': {'model_path': '/m', 'served_model_name': 'n-123456'}, 'secret_args': ['served_model_name']},
     ['server_args.served_model_name']),
    ({'server_args': {'model_path': '/m'}, 'environment': {'HF_TOKEN': 'hf_abcdef', 'SPT_NOENV': '1'}},
     ['environment.HF_TOKEN']),
])
def test_a_secret_in_an_option_that_is_logged_is_refused_before_anything_is_written(run_module, base, extra, leaked):
    outcome, result, dummy = run_module(sglang_server, dict(base, action='check_args', **extra))
    assert outcome == 'fail' and result['leaked'] == leaked
    assert result['msg'].startswith('%s: secret value(s) in an option that the module logs as given' % leaked[0])
    assert 'secret_server_args' in result['msg'] and 'secret_environment' in result['msg']
    assert not os.path.exists(base['secrets_path'])


def test_release_and_package_of_the_sglang_that_python_imports(run_module, base, sglang):
    outcome, result, dummy = run_module(sglang_server, dict(base, action='release'))
    assert outcome == 'exit' and result['release'] == '0.5.23' and not result['changed']
    assert result['package'] == os.path.join(sglang, 'sglang')


def test_check_args_keeps_the_api_key_off_every_command_line_and_out_of_the_result(run_module, base, tmp_path):
    args = dict(base, action='check_args', server_args={'model_path': '/m', 'tp_size': 2, 'cuda_graph_max_bs_decode': 160},
                secret_server_args={'api_key': 'k-123456'})
    outcome, result, dummy = run_module(sglang_server, args)
    assert outcome == 'exit', result
    assert result['argv'] == [sys.executable, '-m', 'sglang.launch_server', '--cuda-graph-max-bs-decode', '160',
                              '--model-path', '/m', '--tp-size', '2', '--config', base['secrets_path']]
    assert result['expected_info'] == {'model_path': '/m', 'tp_size': 2, 'cuda_graph_max_bs_decode': 160}
    assert result['release'] == '0.5.23' and result['changed'] and result['written'] == [base['secrets_path']]
    assert result['package'] == os.path.join(base['pythonpath'][0], 'sglang')
    assert stat.S_IMODE(os.stat(base['secrets_path']).st_mode) == 0o600
    with open(base['secrets_path']) as f:
        assert f.read() == 'api-key: "k-123456"\n'
    assert 'k-123456' not in json.dumps(result)
    # the same again writes nothing
    outcome, result, dummy = run_module(sglang_server, args)
    assert outcome == 'exit' and not result['changed'] and result['written'] == []


def test_the_secrets_file_holds_what_the_parser_checked_in_a_directory_of_its_own(run_module, base, tmp_path):
    secrets = str(tmp_path / 'runs' / 'serving-1' / 'secret-args.yaml')
    seen = str(tmp_path / 'seen.yaml')
    args = dict(base, action='check_args', secrets_path=secrets, environment={'SEEN_CONFIG': seen},
                server_args={'model_path': '/m', 'tp_size': 2}, secret_server_args={'api_key': 'k-123456'})
    outcome, result, dummy = run_module(sglang_server, args)
    assert outcome == 'exit', result
    assert result['written'] == [secrets] and result['argv'][-2:] == ['--config', secrets]
    with open(secrets) as f, open(seen) as g:
        assert f.read() == g.read() == 'api-key: "k-123456"\n'
    assert stat.S_IMODE(os.stat(secrets).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(secrets)).st_mode) == 0o700


def test_check_args_refuses_with_sglangs_message_and_writes_nothing(run_module, base):
    args = dict(base, action='check_args', server_args={'model_path': '/m', 'cuda_graph_max_bs': 160},
                secret_server_args={'api_key': 'k-123456'})
    outcome, result, dummy = run_module(sglang_server, args)
    assert outcome == 'fail'
    assert 'the installed SGLang 0.5.23 refuses the server arguments' in result['msg']
    assert 'ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill' in result['msg']
    assert 'k-123456' not in json.dumps(result)
    assert not os.path.exists(base['secrets_path'])


def test_secret_arguments_without_a_secrets_file_are_left_to_the_caller(run_module, base):
    args = dict(base, action='check_args', secrets_path=None, server_args={'model_path': '/m'},
                secret_server_args={'api_key': 'k-123456'})
    outcome, result, dummy = run_module(sglang_server, args)
    assert outcome == 'exit', result
    assert result['argv'][3:] == ['--model-path', '/m'] and result['secret_args'] == ['api_key']
    assert 'k-123456' not in json.dumps(result) and result['files'] == [] and not result['changed']


def test_secret_arguments_reach_the_parser_through_a_file(run_module, base):
    args = dict(base, action='check_args', secrets_path=None, server_args={'model_path': '/m', 'port': 'x'},
                secret_server_args={'api_key': 'k-123456'})
    outcome, result, dummy = run_module(sglang_server, args)
    assert outcome == 'fail' and "argument --port: invalid int value: 'x'" in result['msg']
    args['server_args'].update(port=1)
    args['secret_server_args'].update(api_key=['not', 'a', 'scalar'])
    outcome, result, dummy = run_module(sglang_server, args)
    # the fake parser reads the file's list value as one string, as a --config scalar
    assert outcome == 'exit' and result['secret_args'] == ['api_key']


def test_check_args_of_a_config_file_in_check_mode_writes_nothing(run_module, base, tmp_path):
    config = str(tmp_path / 'state' / 'server-args.yaml')
    args = dict(base, action='check_args', config_file=True, config_path=config, _ansible_check_mode=True,
                server_args={'model_path': '/m', 'tp_size': 4},
                environment={'CUDA_VISIBLE_DEVICES': '4,5,6,7'})
    outcome, result, dummy = run_module(sglang_server, args)
    assert outcome == 'exit' and result['changed'] and result['written'] == [config]
    assert result['argv'][-2:] == ['--config', config] and result['expected_gpus'] == [4, 5, 6, 7]
    assert not os.path.exists(config)


def test_check_args_with_a_config_file(run_module, base, tmp_path):
    config = str(tmp_path / 'server-args.yaml')
    args = dict(base, action='check_args', config_file=True, config_path=config,
                server_args={'model_path': '/m', 'tp_size': 2}, secret_server_args={'api_key': 'k-123456'})
    outcome, result, dummy = run_module(sglang_server, args)
    assert outcome == 'exit', result
    assert result['argv'][3:] == ['--config', config] and result['written'] == [config]
    with open(config) as f:
        assert f.read() == 'api-key: "k-123456"\nmodel-path: "/m"\ntp-size: 2\n'
    assert stat.S_IMODE(os.stat(config).st_mode) == 0o600


def test_render_touches_nothing(run_module, base):
    args = dict(base, action='render', server_args={'model_path': '/m'}, secret_server_args={'api_key': 'k-123456'})
    outcome, result, dummy = run_module(sglang_server, args)
    assert outcome == 'exit' and not result['changed'] and result['files'] == [base['secrets_path']]
    assert result['argv'][3:] == ['--model-path', '/m', '--config', base['secrets_path']]
    assert not os.path.exists(base['secrets_path'])


@pytest.mark.parametrize('args, message', [
    ({'action': 'drain'}, 'action is drain but all of the following are missing: url'),
    ({'action': 'check_environ'}, 'missing: pid'),
    ({'action': 'render', 'config_file': True}, 'missing: config_path'),
    ({'action': 'drain', 'url': 'http://x', 'timeout': float('nan')}, 'timeout must be 0 or more'),
    ({'action': 'drain', 'url': 'http://x', 'timeout': float('inf')}, 'all finite'),
])
def test_options_refused(run_module, args, message):
    outcome, result, dummy = run_module(sglang_server, args)
    assert outcome == 'fail' and message in result['msg']


class Loads(http.server.BaseHTTPRequestHandler):
    """/v1/loads with one request in flight on DP rank 1; no /metrics (the default)."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path == '/v1/loads':
            body = json.dumps({'loads': [{'dp_rank': 0, 'num_running_reqs': 0, 'num_waiting_reqs': 0},
                                         {'dp_rank': 1, 'num_running_reqs': 1, 'num_waiting_reqs': 0}]}).encode()
            self.send_response(200)
        else:
            body = b'{"detail": "Not Found"}'
            self.send_response(404)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        self.send_response(404)
        self.send_header('Content-Length', '0')
        self.end_headers()


@pytest.fixture
def busy_server():
    httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Loads)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield 'http://127.0.0.1:%d' % httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def test_drain_fails_and_leaves_the_server_alone_while_a_request_is_in_flight(run_module, busy_server):
    outcome, result, dummy = run_module(sglang_server, {'action': 'drain', 'url': busy_server, 'timeout': 1.5,
                                                        'interval': 0.2})
    assert outcome == 'fail'
    assert result['msg'].startswith('1 request(s) still in flight on the SGLang server %s after waiting 1.5 s' % busy_server)
    assert 'the server is left running' in result['msg']
    assert result['in_flight'] == 1 and result['source'] == 'loads' and not result['drained']


def test_forced_drain_reports_the_lost_requests(run_module, busy_server):
    outcome, result, warnings = run_module(sglang_server, {'action': 'drain', 'url': busy_server, 'timeout': 0.5,
                                                           'interval': 0.2, 'force': True})
    assert outcome == 'exit' and result['lost'] == 1 and not result['aborted']
    assert 'aborting them failed (HTTP 404); the stop cuts them' in warnings[0]


def test_drain_in_check_mode_reads_once(run_module, busy_server):
    outcome, result, dummy = run_module(sglang_server, {'action': 'drain', 'url': busy_server, 'timeout': 600,
                                                        '_ansible_check_mode': True})
    assert outcome == 'exit' and result['readings'] == 1 and result['in_flight'] == 1 and not result['drained']


def test_ready_of_a_server_gone_before_the_first_check_says_it_exited_while_loading(run_module, tmp_path):
    child = os.fork()
    if child == 0:
        os._exit(1)
    os.waitpid(child, 0)
    log = tmp_path / 'server.log'
    log.write_text('RuntimeError: CUDA error: out of memory\n')
    outcome, result, dummy = run_module(sglang_server, {'action': 'ready', 'pid': child, 'url': 'http://127.0.0.1:9',
                                                        'log_path': str(log), 'timeout': 5})
    assert outcome == 'fail' and result['died'] and not result['ready']
    assert result['msg'].startswith('the SGLang server %d exited while loading, before the first check' % child)
    assert 'CUDA error: out of memory' in result['msg'] and result['log_tail'] == ['RuntimeError: CUDA error: out of memory']


def test_find_names_the_process_that_listens_on_the_port(run_module, base):
    """A real listening socket of this process, read back from /proc/net and /proc/PID/fd."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(('127.0.0.1', 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        outcome, result, dummy = run_module(sglang_server, dict(base, action='find', port=port))
        assert outcome == 'exit', result
        assert result['port']['listening'] and os.getpid() in [h['pid'] for h in result['port']['holders']]
    finally:
        listener.close()
    outcome, result, dummy = run_module(sglang_server, dict(base, action='find', port=port))
    assert result['port'] == {'port': port, 'listening': False, 'holders': [], 'addresses': [], 'unheld': False}


@pytest.mark.parametrize('name', ['model_path\nadmin_api_key', 'tp-size', 'Tp_size', '_x', 'x: 1', 'x\n'])
def test_a_server_argument_name_that_is_not_plain_is_refused_before_anything_is_written(run_module, base, tmp_path, name):
    config = str(tmp_path / 'server-args.yaml')
    for option in ('server_args', 'secret_server_args'):
        args = dict(base, action='check_args', config_file=True, config_path=config,
                    **{option: {name: 'v', 'tp_size' if option == 'secret_server_args' else 'port': 1}})
        outcome, result, dummy = run_module(sglang_server, args)
        assert outcome == 'fail', result
        assert result['msg'].startswith('server argument name(s) %r: each must be a plain name' % name)
        assert not os.path.exists(config)

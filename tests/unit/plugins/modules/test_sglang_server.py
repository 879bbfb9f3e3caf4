# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_server's main() in state started - options, check mode, the run directory's files, masking and the
invocation log - through real runs that start no server (the start fails at once, or check mode starts nothing);
sglang_server_info's command option, the parser's check of the command line with the SGLang stand-in
(tests/sim/standin); and the drain and find of _sglang, which the stop runs, against a real local HTTP server and a
real listening socket."""

from __future__ import annotations

import http.server
import json
import os
import socket
import stat
import subprocess
import sys
import threading
import uuid

import pytest

from ansible.module_utils.basic import AnsibleModule, remove_values
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpuops.host.plugins.module_utils import _sglang as sglang
from ansible_collections.gpuops.host.plugins.module_utils._procs import ProcFS
from ansible_collections.gpuops.host.plugins.modules import sglang_server, sglang_server_info

from gpusim.nvml import SIM_DIR
from gpusim.standin import make_model_dir, standin_root

# the stand-in's package, and gpusim, which it imports
STANDIN, SIM = standin_root(), SIM_DIR
as_root = pytest.mark.skipif(os.geteuid() != 0, reason='the run directory is root\'s: needs root')
# the server's user and group, which root gives the argument files and the run directory's group
SERVER_UID, SERVER_GID = 4242, 4343
START_FAILED = 'The start of the server failed (/bin/sh -c '
# where the failed start of the fixture started copies the run directory
KEPT = '.kept'
ENVIRONMENT = 'HF_TOKEN=hf_abcdef\nTEAM=team-value\n'


def mode_of(path):
    return stat.S_IMODE(os.lstat(str(path)).st_mode)


def owner_of(path):
    st = os.lstat(str(path))
    return st.st_uid, st.st_gid


def alive(proc):
    return proc.poll() is None


def returned_by(monkeypatch, module, args):
    """What Ansible returns of MODULE's run with ARGS: the result with the module's no_log values removed
    (AnsibleModule._return_formatted)."""
    returned = {}

    def exit_json(self, **result):
        returned.update(remove_values(result, self.no_log_values))
        raise SystemExit(0)

    monkeypatch.setattr(AnsibleModule, 'exit_json', exit_json)
    monkeypatch.setattr(AnsibleModule, 'fail_json', exit_json)
    with patch_module_args(args), pytest.raises(SystemExit):
        module.main()
    return returned


@pytest.fixture
def logged(monkeypatch):
    """What AnsibleModule.__init__ logs (syslog or the journal), as log() gets it, the no_log values removed."""
    lines = []
    monkeypatch.setattr(AnsibleModule, 'log',
                        lambda self, msg, log_args=None: lines.append(remove_values(msg, self.no_log_values)))
    return lines


@pytest.fixture
def parser_runs(monkeypatch):
    """Each command a module runs (AnsibleModule.run_command): its argv, and the content of the --config file it
    names as it was while it ran (the check's own files are gone once it returns)."""
    runs = []
    original = AnsibleModule.run_command

    def run_command(self, args, *more, **options):
        argv = [str(a) for a in args]
        config = None
        if '--config' in argv[:-1]:
            with open(argv[argv.index('--config') + 1]) as f:
                config = f.read()
        runs.append({'argv': argv, 'config': config})
        return original(self, args, *more, **options)

    monkeypatch.setattr(AnsibleModule, 'run_command', run_command)
    return runs


@pytest.fixture
def info_base(tmp_path):
    """sglang_server_info's options for the parser's check: this interpreter importing the SGLang stand-in."""
    return {'record_path': str(tmp_path / 'server.json'), 'python': sys.executable, 'pythonpath': [STANDIN, SIM]}


@pytest.fixture
def started(tmp_path):
    """sglang_server in state started whose start fails at once: what comes before the start - the run directory -
    is done, and no server runs. The failed start copies the run directory as it saw it to KEPT (the run directory
    itself, with this run's secret files, is removed once the start failed)."""
    run = str(tmp_path / 'run')
    return {'url': 'http://127.0.0.1:9', 'run_dir': {'path': run},
            'start': {'kind': 'process', 'argv': ['/bin/sh', '-c', 'cp -a "$0" "$0%s"; exit 1' % KEPT, run]}}


@pytest.fixture
def old_server():
    """A process that the stop finds (a pattern only its command line carries): (the process, the stop's options)."""
    mark = 'gpuops-test-%s' % uuid.uuid4().hex
    proc = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', mark])
    yield proc, {'patterns': [mark], 'presets': [], 'settle': 0}
    proc.kill()
    proc.wait()


# -- masking and the invocation log --

def test_results_mask_secrets_of_4_characters_and_keep_shorter_values(monkeypatch, tmp_path):
    # '1' and 'wxyz' are no_log values (secrets); the diff shows the new record's command line
    argv = ['python', '-m', 'sglang.launch_server', '--served-model-name', 'wxyz', '--tp-size', '1']
    args = {'url': 'http://127.0.0.1:9', 'start': {'kind': 'process', 'argv': ['/bin/false']},
            '_ansible_check_mode': True, 'secrets': ['1', 'wxyz'],
            'record': {'path': str(tmp_path / 'server.json'), 'fields': {'identity': {'argv': argv}}}}
    returned = returned_by(monkeypatch, sglang_server, args)
    assert returned['changed'] and '--tp-size 1' in returned['diff']['after']
    assert '--served-model-name ********' in returned['diff']['after'] and 'wxyz' not in json.dumps(returned)


def test_the_info_command_masks_secrets_of_4_characters_and_keeps_shorter_values(monkeypatch, info_base):
    # the token's value is masked as a secret variable's; SPT_NOENV's '1' (a no_log value too) is not
    args = dict(info_base, command={'server_args': {'model_path': '/m1', 'tp_size': 1, 'served_model_name': 'wxyz'}},
                secret_environment={'HF_TOKEN': 'wxyz', 'SPT_NOENV': '1'})
    returned = returned_by(monkeypatch, sglang_server_info, args)
    # an element that is the secret whole is replaced whole (remove_values)
    assert returned['command']['argv'][3:] == ['--model-path', '/m1', '--served-model-name',
                                               'VALUE_SPECIFIED_IN_NO_LOG_PARAMETER', '--tp-size', '1']
    assert returned['command']['expected_info']['tp_size'] == 1 and 'wxyz' not in json.dumps(returned)


def test_the_invocation_log_holds_no_secret_option(run_module, logged, started, old_server, tmp_path):
    """The secret arguments and the environment file's content (several lines) are logged as NOT_LOGGING_PARAMETER
    whole; the other keys, masked where they hold a secret."""
    proc, stop = old_server
    run = started['run_dir']['path']
    args = dict(started, _ansible_check_mode=True, environment_file=ENVIRONMENT, secrets=['extra-secret'],
                secret_server_args={'api_key': 'k-123456', 'served_model_name': 'private-name'},
                stop=dict(stop, api_key='sk-stop-key'), checks={'api_key': 'sk-check-key', 'gpus': [0]},
                command={'server_args': {'model_path': '/m'}, 'secrets_path': os.path.join(run, 'secret-args.yaml')})
    outcome, result, dummy = run_module(sglang_server, args)
    assert outcome == 'exit', result
    assert logged and logged[0].startswith('Invoked with ')
    assert 'secret_server_args=NOT_LOGGING_PARAMETER' in logged[0]
    assert 'environment_file=NOT_LOGGING_PARAMETER' in logged[0]
    for secret in ('k-123456', 'private-name', 'hf_abcdef', 'team-value', 'sk-stop-key', 'sk-check-key',
                   'extra-secret'):
        assert secret not in logged[0] and secret not in json.dumps(result)
    assert alive(proc)


def test_the_info_modules_invocation_log_holds_no_secret_option(run_module, logged, info_base):
    args = dict(info_base, command={'server_args': {'model_path': '/m'}}, environment={'SPT_NOENV': '1'},
                secret_server_args={'api_key': 'k-123456', 'served_model_name': 'private-name'},
                secret_environment={'HF_TOKEN': 'hf_abcdef', 'TEAM': 'team-value'})
    outcome, result, dummy = run_module(sglang_server_info, args)
    assert outcome == 'exit', result
    assert logged and logged[0].startswith('Invoked with ')
    assert 'secret_server_args=NOT_LOGGING_PARAMETER' in logged[0]
    assert 'secret_environment=NOT_LOGGING_PARAMETER' in logged[0]
    for secret in ('k-123456', 'private-name', 'hf_abcdef', 'team-value'):
        assert secret not in logged[0] and secret not in json.dumps(result)
    # a secret argument, whatever its name, stays off the command line
    command = result['command']
    assert command['secret_args'] == ['api_key', 'served_model_name'] and command['argv'][3:] == ['--model-path', '/m']


# -- what is refused before anything is done --

@pytest.mark.parametrize('command, leaked', [
    ({'server_args': {'model_path': '/m', 'api_key': 'k-123456'}}, ['server_args.api_key']),
    ({'server_args': {'model_path': '/m', 'served_model_name': 'n-123456'}, 'secret_args': ['served_model_name']},
     ['server_args.served_model_name']),
])
def test_a_secret_in_an_option_that_is_logged_is_refused_before_anything_is_written(run_module, started, command,
                                                                                    leaked):
    command = dict(command, secrets_path=os.path.join(started['run_dir']['path'], 'secret-args.yaml'))
    outcome, result, dummy = run_module(sglang_server, dict(started, command=command))
    assert outcome == 'fail' and result['leaked'] == leaked
    assert result['msg'].startswith('%s: secret value(s) in an option that the module logs as given' % leaked[0])
    assert 'secret_server_args' in result['msg']
    assert not os.path.lexists(started['run_dir']['path'])


@pytest.mark.parametrize('extra, leaked', [
    ({'command': {'server_args': {'model_path': '/m', 'api_key': 'k-123456'}}}, ['server_args.api_key']),
    ({'command': {'server_args': {'model_path': '/m', 'served_model_name': 'n-123456'},
                  'secret_args': ['served_model_name']}}, ['server_args.served_model_name']),
    ({'command': {'server_args': {'model_path': '/m'}}, 'environment': {'HF_TOKEN': 'hf_abcdef', 'SPT_NOENV': '1'}},
     ['environment.HF_TOKEN']),
])
def test_the_info_command_refuses_a_secret_in_an_option_that_is_logged_before_anything_runs(
        run_module, parser_runs, info_base, extra, leaked):
    outcome, result, dummy = run_module(sglang_server_info, dict(info_base, **extra))
    assert outcome == 'fail' and result['leaked'] == leaked
    assert result['msg'].startswith('%s: secret value(s) in an option that the module logs as given' % leaked[0])
    assert 'secret_server_args' in result['msg'] and 'secret_environment' in result['msg']
    assert parser_runs == []


@pytest.mark.parametrize('name', ['model_path\nadmin_api_key', 'tp-size', 'Tp_size', '_x', 'x: 1', 'x\n'])
def test_a_server_argument_name_that_is_not_plain_is_refused_before_anything_is_written(run_module, started, name):
    run = started['run_dir']['path']
    for option in ('server_args', 'secret_server_args'):
        named = {name: 'v', 'tp_size' if option == 'secret_server_args' else 'port': 1}
        command = {'config_file': True, 'config_path': os.path.join(run, 'server-args.yaml')}
        if option == 'server_args':
            args = dict(started, command=dict(command, server_args=named))
        else:
            args = dict(started, command=command, secret_server_args=named)
        outcome, result, dummy = run_module(sglang_server, args)
        assert outcome == 'fail', result
        assert result['msg'].startswith('server argument name(s) %r: each must be a plain name' % name)
        assert not os.path.lexists(run)


@pytest.mark.parametrize('name', ['model_path\nadmin_api_key', 'tp-size', '_x', 'x: 1'])
def test_the_info_command_refuses_a_server_argument_name_that_is_not_plain_before_anything_runs(
        run_module, parser_runs, info_base, name):
    for option in ('server_args', 'secret_server_args'):
        named = {name: 'v', 'tp_size' if option == 'secret_server_args' else 'port': 1}
        if option == 'server_args':
            args = dict(info_base, command={'server_args': named})
        else:
            args = dict(info_base, command={'server_args': {'model_path': '/m'}}, secret_server_args=named)
        outcome, result, dummy = run_module(sglang_server_info, args)
        assert outcome == 'fail', result
        assert result['msg'].startswith('server argument name(s) %r: each must be a plain name' % name)
        assert parser_runs == []


@pytest.mark.parametrize('module', [sglang_server, sglang_server_info])
def test_a_secret_argument_inside_command_is_refused_not_dropped(run_module, info_base, started, module):
    """The secret arguments are the top-level secret_server_args: one given inside command would go nowhere - the
    server would start without its API key - so the option is unknown there."""
    base = started if module is sglang_server else info_base
    args = dict(base, command={'server_args': {'model_path': '/m'}, 'secret_server_args': {'api_key': 'k-123456'},
                               'secrets_path': '/run/gpuops-test/secret-args.yaml'})
    outcome, result, dummy = run_module(module, args)
    assert outcome == 'fail' and 'command.secret_server_args' in result['msg'], result
    assert 'k-123456' not in json.dumps(result)


@pytest.mark.parametrize('args, message', [
    ({}, 'state=started needs url and start, or relaunch'),
    ({'url': 'http://x'}, 'state=started needs url and start, or relaunch'),
    ({'relaunch': {'record': {'marker': 'm'}}},
     'relaunch needs record (its path): the configuration started again is recorded'),
    ({'relaunch': {'record': {}}, 'start': {'kind': 'process'}}, 'parameters are mutually exclusive: relaunch|start'),
    ({'state': 'stopped'}, 'state is stopped but all of the following are missing: stop'),
    ({'state': 'absent'}, 'state is absent but all of the following are missing: stop'),
    ({'url': 'http://x', 'start': {'kind': 'process'}, 'command': {'config_file': True}},
     'command.config_file is true but command.config_path is not set'),
    ({'url': 'http://x', 'start': {'kind': 'process'}, 'timeout': float('nan')}, 'timeout must be 0 or more'),
    ({'url': 'http://x', 'start': {'kind': 'process'}, 'interval': float('inf')}, 'all finite'),
    ({'state': 'stopped', 'stop': {'timeout': float('nan')}}, 'stop.timeout must be 0 or more'),
    ({'state': 'stopped', 'stop': {'request_timeout': 0}}, 'stop.request_timeout more than 0'),
    # the launch fills in the start's options itself
    ({'launch': {'mode': 'serving', 'python': '/usr/bin/python3', 'model_path': '/m'}, 'start': {'kind': 'process'}},
     'parameters are mutually exclusive: launch|start'),
    ({'launch': {'mode': 'serving', 'python': '/usr/bin/python3'}}, 'missing required arguments: model_path'),
    ({'launch': {'mode': 'serving', 'python': '/usr/bin/python3', 'model_path': '/m', 'supervisor': 'lxc'}},
     'value of supervisor must be one of: auto, process, systemd, docker, podman, got: lxc found in launch'),
])
def test_options_refused(run_module, args, message):
    outcome, result, dummy = run_module(sglang_server, args)
    assert outcome == 'fail' and message in result['msg']


# -- state started --

def test_check_mode_returns_the_steps_it_would_take_and_writes_no_run_dir(run_module, started, old_server, tmp_path):
    """Check mode reads what the stop would stop (the stop's own check mode), signals, starts and writes nothing, and
    says what it would do: each step not taken has ``would``."""
    proc, stop = old_server
    run = started['run_dir']['path']
    secrets = os.path.join(run, 'secret-args.yaml')
    args = dict(started, _ansible_check_mode=True, stop=stop, environment_file=ENVIRONMENT,
                secret_server_args={'api_key': 'k-123456'},
                command={'server_args': {'model_path': '/m'}, 'secrets_path': secrets},
                checks={'dump_dir': str(tmp_path / 'dumps'), 'expected_info': {'model_path': '/m'}, 'gpus': [0]},
                record={'path': str(tmp_path / 'server.json'), 'fields': {'identity': {'mode': 'serving'}}})
    outcome, result, dummy = run_module(sglang_server, args)
    assert outcome == 'exit', result
    assert result['changed'] is True and result['ready'] is False and result['pid'] is None
    actions = result['actions']
    assert [a['action'] for a in actions] == ['run_dir', 'stop', 'start', 'wait', 'check', 'check', 'check', 'check',
                                              'record']
    assert [a['check'] for a in actions if a['action'] == 'check'] == ['environ', 'probe', 'info', 'gpus']
    # what it read is no step it would take: the run directory's files named, the stop's servers found
    assert actions[0]['files'] == [secrets, os.path.join(run, 'server.env')] and 'would' not in actions[0]
    assert actions[1]['servers'] == [proc.pid] and actions[1]['check_mode'] is True and 'would' not in actions[1]
    assert all(a['would'] is True for a in actions[2:])
    assert result['stopped']['signalled'] is False and alive(proc)
    assert not os.path.lexists(run) and not os.path.lexists(str(tmp_path / 'server.json'))
    assert result['diff']['after'] == 'mode: serving\n' and result['diff']['before'] == ''
    assert 'k-123456' not in json.dumps(result) and 'hf_abcdef' not in json.dumps(result)


@as_root
@pytest.mark.parametrize('kind', ['link', 'another user\'s directory'])
def test_a_run_dir_that_is_a_link_or_not_roots_is_refused_before_anything_is_stopped(run_module, started, old_server,
                                                                                     tmp_path, kind):
    proc, stop = old_server
    run = started['run_dir']['path']
    target = tmp_path / 'elsewhere'
    target.mkdir()
    if kind == 'link':
        os.symlink(str(target), run)
    else:
        os.mkdir(run)
        os.chown(run, SERVER_UID, SERVER_GID)
    args = dict(started, stop=stop, environment_file=ENVIRONMENT, secret_server_args={'api_key': 'k-123456'},
                command={'server_args': {'model_path': '/m'}, 'secrets_path': os.path.join(run, 'secret-args.yaml')})
    outcome, result, dummy = run_module(sglang_server, args)
    assert outcome == 'fail', result
    what = 'a link' if kind == 'link' else 'UID %d\'s' % SERVER_UID
    assert result['msg'].startswith('%s is %s, not a directory of root\'s: refusing to write the run\'s secret files '
                                    'there' % (run, what)), result['msg']
    assert result['msg'].endswith('the running server was not touched')
    assert result['signalled'] is False and 'stopped' not in result
    assert [(a['action'], a.get('failed')) for a in result['actions']] == [('run_dir', True)]
    assert alive(proc) and os.listdir(str(target)) == [] and os.listdir(run) == []


@as_root
@pytest.mark.parametrize('environment_owner', [None, {'uid': SERVER_UID, 'gid': SERVER_GID}])
def test_the_argument_files_and_the_environment_file_are_0600_with_their_owners_in_a_0750_directory(
        run_module, started, tmp_path, environment_owner):
    """Written beside their names and renamed over them, never through a link: a link in the directory's place of
    a file is replaced, and what it points to is left alone. The directory's mode and group are set, whatever they
    were."""
    run = started['run_dir']['path']
    os.mkdir(run)
    os.chmod(run, 0o777)
    secrets = os.path.join(run, 'secret-args.yaml')
    elsewhere = tmp_path / 'elsewhere.yaml'
    elsewhere.write_text('not theirs\n')
    os.symlink(str(elsewhere), secrets)
    run_dir = dict(started['run_dir'], group=SERVER_GID, owner={'uid': SERVER_UID, 'gid': SERVER_GID},
                   environment_owner=environment_owner)
    args = dict(started, run_dir=run_dir, environment_file=ENVIRONMENT, secret_server_args={'api_key': 'k-123456'},
                command={'server_args': {'model_path': '/m', 'tp_size': 2}, 'secrets_path': secrets})
    outcome, result, dummy = run_module(sglang_server, args)
    # the run directory is made first; the start (which fails here) comes after it
    assert outcome == 'fail' and result['msg'].startswith(START_FAILED), result
    assert [a['action'] for a in result['actions']] == ['run_dir', 'start']
    environment = os.path.join(run, 'server.env')
    assert result['actions'][0]['files'] == [secrets, environment]
    # gone once the start failed; as the start saw it:
    assert not os.path.lexists(run)
    run, secrets, environment = (path.replace(run, run + KEPT) for path in (run, secrets, environment))
    assert mode_of(run) == 0o750 and owner_of(run) == (0, SERVER_GID)
    assert sorted(os.listdir(run)) == ['secret-args.yaml', 'server.env']
    assert stat.S_ISREG(os.lstat(secrets).st_mode) and mode_of(secrets) == 0o600
    assert owner_of(secrets) == (SERVER_UID, SERVER_GID)
    with open(secrets) as f:
        assert f.read() == 'api-key: "k-123456"\n'
    assert elsewhere.read_text() == 'not theirs\n'
    # the environment file: root's (the module's own user), or environment_owner's
    assert mode_of(environment) == 0o600
    expected = (os.getuid(), os.getgid()) if environment_owner is None else (SERVER_UID, SERVER_GID)
    assert owner_of(environment) == expected
    with open(environment) as f:
        assert f.read() == ENVIRONMENT


def test_a_server_gone_before_the_first_check_is_said_to_have_exited_while_loading(run_module, tmp_path):
    child = os.fork()
    if child == 0:
        os._exit(1)
    os.waitpid(child, 0)
    log = tmp_path / 'server.log'
    log.write_text('RuntimeError: CUDA error: out of memory\n')
    # the start prints the PID of a process that has exited already
    args = {'url': 'http://127.0.0.1:9', 'start': {'kind': 'process', 'argv': ['/bin/echo', str(child)]},
            'log_path': str(log), 'timeout': 5}
    outcome, result, dummy = run_module(sglang_server, args)
    assert outcome == 'fail' and result['died'] and not result['ready'] and result['pid'] == child
    assert result['msg'].startswith('the SGLang server %d exited while loading, before the first check' % child)
    assert 'CUDA error: out of memory' in result['msg']
    assert result['log_tail'] == ['RuntimeError: CUDA error: out of memory']
    assert [(a['action'], a.get('pid')) for a in result['actions']] == [('start', child)]


# -- sglang_server_info's command: the installed SGLang's parser --

def test_release_and_package_of_the_sglang_that_python_imports(run_module, info_base, tmp_path):
    model = make_model_dir(str(tmp_path / 'model'))
    for release in ('0.5.23', '0.5.14'):
        args = dict(info_base, environment={'GPUSIM_SGLANG_RELEASE': release},
                    command={'server_args': {'model_path': model}})
        outcome, result, dummy = run_module(sglang_server_info, args)
        assert outcome == 'exit' and not result['changed'], result
        assert result['command']['release'] == release
        assert result['command']['package'] == os.path.join(STANDIN, 'sglang')


def test_the_check_keeps_the_api_key_off_every_command_line_and_out_of_the_result(run_module, parser_runs, info_base,
                                                                                  tmp_path):
    secrets = str(tmp_path / 'runs' / 'r1' / 'secret-args.yaml')
    args = dict(info_base, command={'server_args': {'model_path': '/m', 'tp_size': 2, 'cuda_graph_max_bs_decode': 160},
                                    'secrets_path': secrets},
                secret_server_args={'api_key': 'k-123456'})
    outcome, result, dummy = run_module(sglang_server_info, args)
    assert outcome == 'exit', result
    command = result['command']
    assert command['argv'] == [sys.executable, '-m', 'sglang.launch_server', '--cuda-graph-max-bs-decode', '160',
                               '--model-path', '/m', '--tp-size', '2', '--config', secrets]
    assert command['server_argv'] == command['argv'][3:] and command['files'] == [secrets]
    assert command['expected_info'] == {'model_path': '/m', 'tp_size': 2, 'cuda_graph_max_bs_decode': 160}
    assert command['expected_gpus'] == [0, 1] and command['secret_args'] == ['api_key']
    assert command['release'] == '0.5.23' and command['config_keys'] == {} and not result['changed']
    assert command['package'] == os.path.join(STANDIN, 'sglang')
    assert 'k-123456' not in json.dumps(result)
    # the parser read the key from a file of its own, never from its command line; nothing of the server's was written
    checks = [r for r in parser_runs if r['config'] is not None]
    assert len(checks) == 1 and checks[0]['config'] == 'api-key: "k-123456"\n'
    assert not any('k-123456' in a for r in parser_runs for a in r['argv'])
    assert secrets not in checks[0]['argv'] and not os.path.lexists(str(tmp_path / 'runs'))


@as_root
def test_the_parser_checks_the_argument_file_that_sglang_server_writes(run_module, parser_runs, info_base, started):
    run = started['run_dir']['path']
    command = {'server_args': {'model_path': '/m', 'tp_size': 2},
               'secrets_path': os.path.join(run, 'secret-args.yaml')}
    secret = {'api_key': 'k-123456', 'served_model_name': 'private-name'}
    outcome, result, dummy = run_module(sglang_server_info, dict(info_base, command=command, secret_server_args=secret))
    assert outcome == 'exit', result
    checked = [r['config'] for r in parser_runs if r['config'] is not None]
    assert not os.path.lexists(run)
    outcome, result, dummy = run_module(sglang_server, dict(started, command=command, secret_server_args=secret))
    assert outcome == 'fail' and result['msg'].startswith(START_FAILED), result
    assert not os.path.lexists(run)
    with open(command['secrets_path'].replace(run, run + KEPT)) as f:
        assert [f.read()] == checked == ['api-key: "k-123456"\nserved-model-name: "private-name"\n']


@as_root
def test_a_config_file_has_the_keys_that_the_installed_release_accepts(run_module, parser_runs, info_base, started,
                                                                       tmp_path):
    """SGLang 0.5.14 refuses the key cuda-graph-max-bs-decode in a --config file (its deprecated alias shares the
    dest): the check finds the spelling it takes, and sglang_server writes the file with it."""
    run = started['run_dir']['path']
    config = os.path.join(run, 'server-args.yaml')
    model = make_model_dir(str(tmp_path / 'model'))
    command = {'server_args': {'model_path': model, 'cuda_graph_max_bs_decode': 160}, 'config_file': True,
               'config_path': config}
    args = dict(info_base, command=command, secret_server_args={'api_key': 'k-123456'},
                environment={'GPUSIM_SGLANG_RELEASE': '0.5.14', 'CUDA_VISIBLE_DEVICES': '4,5,6,7'})
    outcome, result, dummy = run_module(sglang_server_info, args)
    assert outcome == 'exit', result
    checked = result['command']
    assert checked['argv'] == [sys.executable, '-m', 'sglang.launch_server', '--config', config]
    assert checked['release'] == '0.5.14' and checked['files'] == [config] and checked['expected_gpus'] == [4]
    assert checked['config_keys'] == {'cuda-graph-max-bs-decode': 'cuda-graph-max-bs'}
    assert checked['expected_info'] == {'model_path': model, 'cuda_graph_max_bs_decode': 160}
    assert not os.path.lexists(run) and 'k-123456' not in json.dumps(result)
    outcome, result, dummy = run_module(sglang_server, dict(started, secret_server_args={'api_key': 'k-123456'},
                                                            command=dict(command, config_keys=checked['config_keys'])))
    assert outcome == 'fail' and result['msg'].startswith(START_FAILED), result
    assert not os.path.lexists(run)
    config = config.replace(run, run + KEPT)
    assert mode_of(config) == 0o600
    with open(config) as f:
        assert f.read() == 'api-key: "k-123456"\ncuda-graph-max-bs: 160\nmodel-path: "%s"\n' % model


def test_the_check_refuses_with_sglangs_message_and_writes_nothing(run_module, info_base, tmp_path):
    secrets = str(tmp_path / 'secret-args.yaml')
    args = dict(info_base, command={'server_args': {'model_path': '/m', 'cuda_graph_max_bs': 160},
                                    'secrets_path': secrets},
                secret_server_args={'api_key': 'k-123456'})
    outcome, result, dummy = run_module(sglang_server_info, args)
    assert outcome == 'fail'
    assert 'the installed SGLang 0.5.23 refuses the server arguments' in result['msg']
    assert ('ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, '
            '--cuda-graph-max-bs-prefill') in result['msg']
    assert 'k-123456' not in json.dumps(result) and not os.path.lexists(secrets)


def test_secret_arguments_without_a_secrets_file_are_left_to_the_caller(run_module, parser_runs, info_base):
    args = dict(info_base, command={'server_args': {'model_path': '/m'}}, secret_server_args={'api_key': 'k-123456'})
    outcome, result, dummy = run_module(sglang_server_info, args)
    assert outcome == 'exit', result
    command = result['command']
    assert command['argv'][3:] == ['--model-path', '/m'] and command['secret_args'] == ['api_key']
    assert 'k-123456' not in json.dumps(result) and command['files'] == [] and not result['changed']
    # the parser checked it all the same, through a file of its own
    assert [r['config'] for r in parser_runs if r['config'] is not None] == ['api-key: "k-123456"\n']


def test_secret_arguments_reach_the_parser_through_a_file(run_module, info_base):
    args = dict(info_base, command={'server_args': {'model_path': '/m', 'port': 'x'}},
                secret_server_args={'api_key': 'k-123456'})
    outcome, result, dummy = run_module(sglang_server_info, args)
    assert outcome == 'fail' and "argument --port: invalid int value: 'x'" in result['msg']
    # a secret argument's bad value: the parser read it (from the file), and its message is masked
    args = dict(info_base, command={'server_args': {'model_path': '/m'}}, secret_server_args={'port': 'p-123456'})
    outcome, result, dummy = run_module(sglang_server_info, args)
    assert outcome == 'fail' and "argument --port: invalid int value: '********'" in result['msg']
    assert 'p-123456' not in json.dumps(result)


def test_the_check_of_a_config_file_writes_nothing_in_either_mode(run_module, info_base, tmp_path):
    config = str(tmp_path / 'state' / 'server-args.yaml')
    for check_mode in (True, False):
        args = dict(info_base, _ansible_check_mode=check_mode, environment={'CUDA_VISIBLE_DEVICES': '4,5,6,7'},
                    command={'config_file': True, 'config_path': config,
                             'server_args': {'model_path': '/m', 'tp_size': 4}})
        outcome, result, dummy = run_module(sglang_server_info, args)
        assert outcome == 'exit' and not result['changed'], result
        assert result['command']['argv'][-2:] == ['--config', config] and result['command']['files'] == [config]
        assert result['command']['expected_gpus'] == [4, 5, 6, 7]
        assert not os.path.lexists(str(tmp_path / 'state'))


# -- the drain and find that the stop runs (_sglang.drain, _sglang.find) --

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


def drain_params(url, **options):
    return dict({'url': url, 'timeout': 600, 'interval': 0.2, 'request_timeout': 10, 'force': False}, **options)


def test_drain_fails_and_leaves_the_server_alone_while_a_request_is_in_flight(busy_server):
    with pytest.raises(sglang.ActionFailed) as e:
        sglang.drain(drain_params(busy_server, timeout=1.5), sglang.Deps(ProcFS(), run=None))
    assert e.value.msg.startswith('1 request(s) still in flight on the SGLang server %s after waiting 1.5 s'
                                  % busy_server)
    assert 'the server is left running' in e.value.msg
    assert e.value.result['in_flight'] == 1 and e.value.result['source'] == 'loads' and not e.value.result['drained']


def test_forced_drain_reports_the_lost_requests(busy_server):
    warnings = []
    result = sglang.drain(drain_params(busy_server, timeout=0.5, force=True),
                          sglang.Deps(ProcFS(), run=None, warn=warnings.append))
    assert result['lost'] == 1 and not result['aborted']
    assert 'aborting them failed (HTTP 404); the stop cuts them' in warnings[0]


def test_drain_in_check_mode_reads_once(busy_server):
    result = sglang.drain(drain_params(busy_server), sglang.Deps(ProcFS(), run=None, check_mode=True))
    assert result['readings'] == 1 and result['in_flight'] == 1 and not result['drained']


def test_find_names_the_process_that_listens_on_the_port():
    """A real listening socket of this process, read back from /proc/net and /proc/PID/fd."""
    params = {'presets': [], 'patterns': [], 'default_url': 'http://127.0.0.1:30000'}
    deps = sglang.Deps(ProcFS(), run=None, self_pids=(os.getpid(),))
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(('127.0.0.1', 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        found = sglang.find(dict(params, port=port), deps)
        assert found['port']['listening'] and os.getpid() in [h['pid'] for h in found['port']['holders']]
    finally:
        listener.close()
    found = sglang.find(dict(params, port=port), deps)
    assert found['port'] == {'port': port, 'listening': False, 'holders': [], 'addresses': [], 'unheld': False}

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A server's identity and its comparison, on real files: what makes a running server stale (the SGLang release,
the dump patch, the model files), the reasons in words, the diff, and the plan that decides a restart."""

from __future__ import annotations

import os

import pytest

from ansible_collections.gpuops.host.plugins.module_utils import _server_config as config
from ansible_collections.gpuops.host.plugins.module_utils import _server_info as server_info

PY = '/opt/sglang/venv/bin/python'
ARGV = [PY, '-m', 'sglang.launch_server', '--model-path', '/models/m', '--mem-fraction-static', '0.85',
        '--port', '30000', '--enable-metrics']


def identity(**changes):
    base = {'mode': 'serving', 'argv': list(ARGV), 'environment': {'CUDA_VISIBLE_DEVICES': '0,1'},
            'secrets': 'sha256:0a1b', 'supervisor': 'process', 'unit': None,
            'container': None, 'user': 'sglang', 'group': 1001, 'dumps': None, 'run_name': '',
            'sglang': '0.5.23', 'model': {'path': '/models/m', 'files': {'config.json': [10, 1], 'w.safetensors': [99, 2]},
                                          'content': {'config.json': 'aa'}}}
    base.update(changes)
    return base


def model(tmp_path, shards=2):
    d = tmp_path / 'model'
    d.mkdir(exist_ok=True)
    (d / 'config.json').write_text('{"hidden_size": 4096}')
    (d / 'model.safetensors.index.json').write_text('{"weight_map": {}}')
    for i in range(shards):
        (d / ('model-%05d.safetensors' % i)).write_bytes(b'w' * (10 + i))
    return d


def words(before, after):
    return [c['words'] for c in config.compare(before, after)]


def test_the_same_identity_has_no_change():
    assert config.compare(identity(), identity()) == []


@pytest.mark.parametrize('changes, expected', [
    ({'mode': 'tuning'}, 'mode: serving -> tuning'),
    ({'argv': ARGV[:6] + ['0.92'] + ARGV[7:]}, 'command line: --mem-fraction-static 0.85 -> 0.92'),
    ({'argv': ARGV[:-1]}, 'command line: --enable-metrics removed'),
    ({'argv': ARGV + ['--cuda-graph-max-bs-decode', '160']}, 'command line: --cuda-graph-max-bs-decode added (160)'),
    ({'environment': {'CUDA_VISIBLE_DEVICES': '2,3'}}, 'environment: CUDA_VISIBLE_DEVICES 0,1 -> 2,3'),
    ({'secrets': 'sha256:9f8e'}, 'secret arguments or variables: changed'),
    ({'supervisor': 'systemd'}, 'supervisor: process -> systemd'),
    ({'sglang': '0.5.24'}, 'SGLang release: 0.5.23 -> 0.5.24'),
])
def test_each_field_s_change_is_said_in_words(changes, expected):
    assert words(identity(), identity(**changes)) == [expected]


def test_a_field_the_record_lacks_counts_only_when_it_is_configured():
    before = identity()
    del before['sglang'], before['model']
    # an earlier release read nothing on the node: not stale for that
    assert words(before, identity()) == []
    del before['mode']
    assert words(before, identity()) == ['mode: not recorded']


def test_what_the_launch_could_not_read_on_the_node_counts_as_unchanged():
    # a hub model that the server's start downloaded, an image that its run pulled: no restart for that alone
    model = {'path': 'org/name', 'missing': 'not in the cache under /root/.cache/huggingface'}
    assert words(identity(model=model, image=None), identity(image='sha256:ab')) == []
    # what could be read then and not now is said
    gone = {'path': '/models/m', 'missing': 'No such file or directory'}
    assert words(identity(), identity(model=gone)) == [
        'model files: /models/m is not readable now (No such file or directory)']


def test_a_new_weight_file_a_resized_one_and_a_rewritten_one_are_named(tmp_path):
    d = model(tmp_path, shards=3)
    before = config.model_fingerprint(str(d))
    assert sorted(before['files']) == ['config.json', 'model-00000.safetensors', 'model-00001.safetensors',
                                       'model-00002.safetensors', 'model.safetensors.index.json']
    assert sorted(before['content']) == ['config.json', 'model.safetensors.index.json']
    assert config.compare({'model': before}, {'model': config.model_fingerprint(str(d))}) == []

    (d / 'model-00003.safetensors').write_bytes(b'new')
    (d / 'model-00000.safetensors').write_bytes(b'w' * 50)
    (d / 'config.json').write_text('{"hidden_size": 8192}')
    os.utime(str(d / 'config.json'), ns=(before['files']['config.json'][1],) * 2)
    assert words({'model': before}, {'model': config.model_fingerprint(str(d))}) == [
        'model files: config.json rewritten, model-00000.safetensors resized 10 -> 50 bytes, '
        'model-00003.safetensors added']


def test_a_model_path_that_is_gone_is_said(tmp_path):
    before = config.model_fingerprint(str(model(tmp_path)))
    after = config.model_fingerprint(str(tmp_path / 'nowhere'))
    assert after['missing']
    assert words({'model': before}, {'model': after})[0].startswith('model files: %s' % before['path'])


def test_a_fifo_or_a_link_to_a_device_in_the_model_directory_is_never_opened(tmp_path):
    d = model(tmp_path, shards=1)
    # names whose content counts: opening a FIFO would block, a device would act on the open
    os.mkfifo(str(d / 'generation_config.json'))
    (d / 'extra.index.json').symlink_to('/dev/null')
    found = config.model_fingerprint(str(d))
    assert sorted(found['content']) == ['config.json', 'model.safetensors.index.json']
    assert 'generation_config.json' not in found['files'] and 'extra.index.json' not in found['files']


def test_a_hub_model_s_snapshot_is_the_one_its_main_ref_names(tmp_path):
    repo = tmp_path / 'hub' / 'models--org--name'
    (repo / 'refs').mkdir(parents=True)
    (repo / 'refs' / 'main').write_text('abc123\n')
    snap = repo / 'snapshots' / 'abc123'
    snap.mkdir(parents=True)
    (snap / 'config.json').write_text('{}')
    assert config.hub_snapshot(str(tmp_path), 'org/name') == str(snap)
    found = server_info.model_of({'model_path': 'org/name', 'hf_home': str(tmp_path)})
    assert found['revision'] == 'abc123' and list(found['files']) == ['config.json'] and found['path'] == 'org/name'
    (repo / 'refs' / 'main').write_text('../../etc')
    assert config.hub_snapshot(str(tmp_path), 'org/name') is None
    assert server_info.model_of({'model_path': 'org/other', 'hf_home': str(tmp_path)})['missing']


def test_the_patch_digest_covers_the_patched_files_only(tmp_path):
    pkg = tmp_path / 'sglang'
    models = pkg / 'srt' / 'models'
    models.mkdir(parents=True)
    (models / 'llama.py').write_text('import os\nDUMP = os.environ.get("SGLANG_HS_DUMP_DIR")\n')
    (models / 'qwen.py').write_text('pass\n')
    first = config.patch_digest(str(pkg), ['srt/models'], 'SGLANG_HS_DUMP_DIR')
    assert first['files'] == ['srt/models/llama.py'] and first['digest'].startswith('sha256:')
    (models / 'qwen.py').write_text('pass # unrelated\n')
    assert config.patch_digest(str(pkg), ['srt/models'], 'SGLANG_HS_DUMP_DIR') == first
    (models / 'llama.py').write_text('import os\nDUMP = os.environ.get("SGLANG_HS_DUMP_DIR")  # v2\n')
    second = config.patch_digest(str(pkg), ['srt/models'], 'SGLANG_HS_DUMP_DIR')
    assert second['digest'] != first['digest']
    assert words({'dump_patch': first}, {'dump_patch': second}) == ['hidden-state dump patch: changed']
    assert config.patch_digest(str(pkg), ['nowhere'], 'SGLANG_HS_DUMP_DIR') == {'files': [], 'digest': None}


def test_the_diff_shows_the_command_line_one_flag_per_line_and_no_secret():
    text = config.render(identity())
    assert 'argv: %s -m sglang.launch_server\n' % PY in text
    assert '  --mem-fraction-static 0.85\n' in text and '  --enable-metrics\n' in text
    assert 'hf_abc' not in text and 'model: /models/m (2 files)' in text
    assert config.render({}) == ''


RECORD = {'status': 'ok', 'pid': 42, 'marker': 'serving-x'}


@pytest.mark.parametrize('record, down, before, restart, expected', [
    (RECORD, None, identity(), False, (False, [])),
    (RECORD, None, identity(), True, (True, ['a restart was asked for (restart)'])),
    (RECORD, 'the recorded server (pid 42, run serving-x) does not run', identity(), False,
     (True, ['the recorded server (pid 42, run serving-x) does not run'])),
    (RECORD, None, identity(sglang='0.5.14'), False, (True, ['SGLang release: 0.5.14 -> 0.5.23'])),
    # a record of an earlier release, which keeps no identity (0.1.0's kept a hash of other fields): changed
    (dict(RECORD, config_hash='h1'), None, {}, False,
     (True, ['configuration: changed (recorded by an earlier release, which names no fields)'])),
    ({}, 'no server is recorded on this node (/x)', {}, False, (True, ['no server is recorded on this node (/x)'])),
    # a failed launch's record keeps no identity either: why it restarts is that it failed, nothing else
    ({'status': 'failed', 'pid': 0}, 'the last launch recorded did not pass its checks (status failed)', {}, False,
     (True, ['the last launch recorded did not pass its checks (status failed)'])),
])
def test_the_plan_restarts_for_every_reason_and_only_then(record, down, before, restart, expected):
    needs, reasons, dummy = server_info.plan(record, down, before, identity(), restart)
    assert (needs, reasons) == expected


class HealthCounter:
    def __init__(self, answer):
        self.answer, self.asked = answer, 0

    def __call__(self, record, p, deps):
        self.asked += 1
        return self.answer


@pytest.mark.parametrize('desired, restart, answer, asked, expected', [
    # nothing else differs: /health decides
    (identity(), False, (200, None), 1, (False, [])),
    (identity(), False, (503, 'HTTP 503'), 1,
     (True, ['the recorded server (pid 42) does not answer /health: HTTP 503'])),
    # a change or a restart decides alone: /health, which an extraction server answers with a dump, is not asked
    (identity(mode='tuning'), False, (200, None), 0, (True, ['mode: serving -> tuning'])),
    (identity(), True, (200, None), 0, (True, ['a restart was asked for (restart)'])),
])
def test_health_is_asked_only_where_it_decides_the_plan(monkeypatch, desired, restart, answer, asked, expected):
    record = dict(RECORD, start=7, url='http://127.0.0.1:1', identity=identity())
    server = {'pid': 42, 'start': 7, 'user': 'sglang', 'cmdline': [], 'supervisor': None}
    monkeypatch.setattr(server_info.sglang, '_record', lambda p: record)
    monkeypatch.setattr(server_info.sglang, 'find', lambda p, deps, record=None: {
        'servers': [server], 'elsewhere': [], 'others': [], 'gateways': [], 'recorded': server})
    observed = dict((k, v) for k, v in desired.items() if k in config.OBSERVED)
    monkeypatch.setattr(server_info, 'observe', lambda p, deps, checked=None: observed)
    health = HealthCounter(answer)
    monkeypatch.setattr(server_info, '_health', health)
    config_ = dict((k, v) for k, v in desired.items() if k not in config.OBSERVED and k != 'secrets')
    p = {'record_path': '/x/server.json', 'config': config_, 'restart': restart,
         'secrets_digest': desired['secrets']}
    result = server_info.info(p, deps=None)
    assert (result['needs_restart'], result['reasons']) == expected
    assert health.asked == asked


# -- the command's check (_server_info.check_command) ------------------------------------------------------------

CHECKED = {'argv': [PY, '-m', 'sglang.launch_server', '--port', '30000'], 'release': '0.5.23', 'package': None,
           'expected_info': {'port': 30000}, 'config_keys': {}}


def test_the_command_is_checked_with_its_secret_arguments_and_environment_folded_in(monkeypatch):
    seen = []
    monkeypatch.setattr(server_info.sglang, 'check_args', lambda p, deps: seen.append(p) or CHECKED)
    p = {'python': PY, 'entry_module': 'sglang.launch_server', 'environment': {'CUDA_VISIBLE_DEVICES': '0'},
         'secret_environment': {'HF_TOKEN': 'hf_x'}, 'secret_server_args': {'api_key': 'sk-1'},
         'command': {'server_args': {'port': 30000}, 'secret_args': [], 'config_file': False,
                     'secrets_path': '/run/x/secret-args.yaml'}}
    assert server_info.check_command(p, None) is CHECKED
    checked, = seen
    assert checked['server_args'] == {'port': 30000, 'api_key': 'sk-1'} and checked['secret_args'] == ['api_key']
    assert checked['environment'] == {'CUDA_VISIBLE_DEVICES': '0', 'HF_TOKEN': 'hf_x'}
    assert checked['secrets_path'] == '/run/x/secret-args.yaml' and checked['python'] == PY


@pytest.mark.parametrize('command, top, refused', [
    ({'server_args': {'port; rm': 1}}, {}, "server argument name(s) 'port; rm'"),
    ({'server_args': {'api_key': 'sk-1'}}, {}, 'server_args.api_key: secret value(s) in an option that the module logs'),
    ({'server_args': {}}, {'secret_server_args': {'a b': 'sk-1'}}, "server argument name(s) 'a b'"),
    ({'server_args': {}}, {'environment': {'HF_TOKEN': 'hf_x'}}, 'environment.HF_TOKEN: secret value(s)'),
])
def test_a_bad_command_is_refused_before_the_parser_runs(monkeypatch, command, top, refused):
    monkeypatch.setattr(server_info.sglang, 'check_args', lambda p, deps: pytest.fail('the parser ran'))
    with pytest.raises(server_info.sglang.ActionFailed) as e:
        server_info.check_command(dict(top, python=PY, command=command), None)
    assert e.value.msg.startswith(refused)


def test_the_plan_observes_the_release_of_the_command_s_check_and_info_returns_the_check(monkeypatch):
    monkeypatch.setattr(server_info.sglang, 'release', lambda p, deps: pytest.fail('the release was read again'))
    assert server_info.observe({'python': PY}, None, CHECKED) == {'sglang': '0.5.23'}
    monkeypatch.setattr(server_info.sglang, 'check_args', lambda p, deps: CHECKED)
    monkeypatch.setattr(server_info.sglang, '_record', lambda p: {})
    monkeypatch.setattr(server_info.sglang, 'find', lambda p, deps, record=None: {
        'servers': [], 'elsewhere': [], 'others': [], 'gateways': [], 'recorded': None})
    p = {'record_path': '/x/server.json', 'python': PY, 'config': {'mode': 'serving'}, 'restart': False,
         'command': {'server_args': {'port': 30000}}}
    result = server_info.info(p, deps=None)
    assert result['command'] is CHECKED and result['current'] == {'mode': 'serving', 'sglang': '0.5.23'}
    assert 'command' not in server_info.info(dict(p, command=None, config=None), deps=None)


# -- what a container server mounts (_server_info.mounts) ---------------------------------------------------------

def test_a_mount_is_resolved_on_the_node_and_passes_where_only_root_and_the_server_s_user_can_change_it(tmp_path):
    os.chmod(str(tmp_path), 0o755)
    real = tmp_path / 'models' / 'kimi-20261101'
    real.mkdir(parents=True)
    os.chown(str(real), 4242, 4242)                         # the server's user's own model directory
    os.symlink(str(real), str(tmp_path / 'models' / 'current'))
    found = server_info.mounts([str(tmp_path / 'models' / 'current')], {0, 4242})
    assert found == [{'path': str(tmp_path / 'models' / 'current'), 'resolved': str(real), 'writers': []}]
    assert server_info.untrusted_mounts(found) is None


def test_a_mount_that_another_user_can_redirect_is_refused_naming_the_entry(tmp_path):
    os.chmod(str(tmp_path), 0o755)
    shared = tmp_path / 'shared'
    shared.mkdir()
    os.chown(str(shared), 4300, 4300)                       # another team's directory on the way
    (shared / 'kimi').mkdir()
    found = server_info.mounts([str(shared / 'kimi')], {0, 4242})
    assert found[0]['writers'] == ['%s (owned by UID 4300)' % shared]
    why = server_info.untrusted_mounts(found)
    assert why.startswith('%s: a container server mounts it, but %s (owned by UID 4300) can be changed by a user other '
                          'than root and the server\'s user' % (shared / 'kimi', shared))
    os.chown(str(shared), 0, 0)
    os.chmod(str(shared), 0o777)                            # anyone may rename the entries of a directory they write
    assert server_info.mounts([str(shared / 'kimi')], {0, 4242})[0]['writers'] == [
        '%s (writable by every user (mode 0777))' % shared]
    os.chmod(str(shared), 0o1777)                           # unless it is sticky and the entry is a trusted user's
    assert server_info.mounts([str(shared / 'kimi')], {0, 4242})[0]['writers'] == []


def test_a_link_that_resolves_to_a_path_with_a_colon_is_refused(tmp_path):
    (tmp_path / 'kimi:v2').mkdir()
    os.symlink(str(tmp_path / 'kimi:v2'), str(tmp_path / 'current'))
    why = server_info.untrusted_mounts(server_info.mounts([str(tmp_path / 'current')], {0}))
    assert why == ("%s (resolved from %s): a container engine's --volume splits a path at its colons, so it would mount "
                   "something else than this path; rename it or choose another." % (tmp_path / 'kimi:v2', tmp_path / 'current'))


# -- the unit files a launch under systemd writes over or migrates (_supervisor.unit_kind) ------------------------

MARK = '# Managed by gpuops.host (sglang_launch)'
OLD = r'^Description=SGLang server, [^ ]+ mode \(run [^)]+\)$'


@pytest.mark.parametrize('content,kind', [
    (MARK + '; a change here is overwritten by its next launch.\n[Unit]\n', 'ours'),
    ('# Ansible managed\n[Unit]\nDescription=SGLang server, serving mode (run serving-1)\n', 'old'),
    ('# Ansible managed\n[Unit]\nDescription=Team B inference\n', 'foreign'),
    ('[Unit]\nDescription=SGLang server, serving mode (run serving-1)\n', 'foreign'),
    ('', 'foreign'),
])
def test_a_unit_file_is_told_by_its_header(tmp_path, content, kind):
    path = tmp_path / 'gpuops-sglang.service'
    path.write_text(content)
    assert server_info.supervisors.unit_kind(str(path), MARK, OLD) == kind


def test_an_absent_unit_a_link_and_another_user_s_file_are_told_apart(tmp_path):
    assert server_info.supervisors.unit_kind(str(tmp_path / 'none.service'), MARK, OLD) == 'absent'
    os.symlink('/dev/null', str(tmp_path / 'masked.service'))          # a masked unit
    assert server_info.supervisors.unit_kind(str(tmp_path / 'masked.service'), MARK, OLD) == 'foreign'
    theirs = tmp_path / 'theirs.service'
    theirs.write_text(MARK + '\n')
    os.chown(str(theirs), 4300, 4300)
    assert server_info.supervisors.unit_kind(str(theirs), MARK, OLD) == 'foreign'


# -- the refusals of a restart that the node cannot take (_server_info.refusals) -----------------------------------

class _Nvml:
    def __init__(self, count):
        self.n = count

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def count(self):
        return self.n


class _Deps:
    def __init__(self, gpus=4):
        self.open_nvml = lambda: _Nvml(gpus)


P = {'record_path': '/var/lib/gpuops/sglang/server.json', 'presets': ['sglang']}


@pytest.mark.parametrize('gpus', [[0, 1, 2, 3, 4, 5, 6, 7], [], [1, 1]])
def test_a_server_that_needs_gpus_the_node_lacks_is_refused(gpus):
    with pytest.raises(server_info.sglang.ActionFailed) as e:
        server_info.refusals({'gpus': gpus}, P, _Deps(4))
    assert 'but NVML sees 4 GPU(s) on this node (indices 0 to 3); refusing before the running server is touched.' \
        in e.value.msg and e.value.result == {'gpu_count': 4}


def test_a_port_that_only_the_replaced_server_holds_passes_and_another_holder_is_named(monkeypatch):
    found = {'servers': [{'pid': 4200, 'tree': [{'pid': 4200}, {'pid': 4201}]}],
             'port': {'listening': True, 'holders': [{'pid': 4200, 'cmdline': 'python -m sglang.launch_server'}]}}
    asked = []
    monkeypatch.setattr(server_info.sglang, 'find', lambda p, deps: asked.append(p) or found)
    assert server_info.refusals({'gpus': [0, 1], 'port': 30000, 'bind_host': '127.0.0.1', 'owners': ['root']}, P,
                                _Deps(4)) == {'gpu_count': 4, 'port': found['port']}
    assert (asked[0]['port'], asked[0]['bind_host'], asked[0]['owners']) == (30000, '127.0.0.1', ['root'])
    found['port']['holders'].append({'pid': 5100, 'cmdline': 'nc -l 30000'})
    with pytest.raises(server_info.sglang.ActionFailed) as e:
        server_info.refusals({'port': 30000}, P, _Deps())
    assert e.value.msg.startswith('Port 30000 is held by process 4200, 5100, which is not an SGLang server that this '
                                  'launch replaces: python -m sglang.launch_server; nc -l 30000. Free the port')
    found['port']['holders'] = []
    with pytest.raises(server_info.sglang.ActionFailed, match='held by a process this node does not name, which'):
        server_info.refusals({'port': 30000}, P, _Deps())


def test_a_model_path_that_does_not_exist_is_refused(tmp_path):
    with pytest.raises(server_info.sglang.ActionFailed, match=r'The model path .*/gone does not exist on this host'):
        server_info.refusals({'model': {'path': str(tmp_path / 'gone'), 'hub': False}}, P, _Deps())
    assert server_info.refusals({'model': {'path': str(tmp_path), 'hub': False}}, P, _Deps()) == {}


def test_a_hub_model_that_may_not_be_downloaded_must_be_cached(tmp_path):
    model = {'path': 'moonshotai/Kimi-K2.5', 'hub': True, 'cache': str(tmp_path / 'models--moonshotai--Kimi-K2.5'),
             'offline': True, 'user': 'sglang', 'hf_home': str(tmp_path)}
    with pytest.raises(server_info.sglang.ActionFailed) as e:
        server_info.refusals({'model': model}, P, _Deps())
    assert e.value.msg.startswith("The model moonshotai/Kimi-K2.5 is a HuggingFace hub ID that is not in the cache of "
                                  "the server's user sglang (no snapshot under %s/snapshots)" % model['cache'])
    assert server_info.refusals({'model': dict(model, offline=False)}, P, _Deps()) == {}
    os.makedirs(os.path.join(model['cache'], 'snapshots', '0123abcd'))
    assert server_info.refusals({'model': model}, P, _Deps()) == {}


as_root = pytest.mark.skipif(os.geteuid() != 0, reason='a trusted dump root is root\'s: needs root')


def dump_options(tmp_path, name='run-1'):
    """The run directory NAME of the dumps under tmp_path/dumps, a trusted dump root (root's, mode 0755)."""
    dumps = tmp_path / 'dumps'
    dumps.mkdir(mode=0o755, exist_ok=True)
    return {'root': str(dumps), 'name': name, 'owner': 1001, 'group': 2001, 'min_free_gb': 0.0}


@as_root
def test_the_run_directory_of_the_dumps_is_checked_and_not_made(tmp_path):
    dump = dump_options(tmp_path)
    out = server_info.refusals({'dump_dir': dump}, P, _Deps())
    assert list(out) == ['dump_dir'] and out['dump_dir']['path'] == str(tmp_path / 'dumps' / 'run-1')
    assert isinstance(out['dump_dir']['free_gb'], float) and out['dump_dir']['free_gb'] >= 0
    assert os.listdir(str(tmp_path / 'dumps')) == []


@as_root
@pytest.mark.parametrize('kind', ['directory', 'link'])
def test_a_run_directory_of_the_dumps_that_already_exists_is_refused(tmp_path, kind):
    dump = dump_options(tmp_path)
    there = tmp_path / 'dumps' / 'run-1'
    if kind == 'directory':
        there.mkdir(mode=0o755)
    else:
        (tmp_path / 'elsewhere').mkdir()
        os.symlink(str(tmp_path / 'elsewhere'), str(there))
    with pytest.raises(server_info.sglang.ActionFailed) as e:
        server_info.refusals({'gpus': [0], 'dump_dir': dump}, P, _Deps(4))
    assert e.value.msg.startswith('The run directory %s already exists' % there)
    assert e.value.msg.endswith('. Refusing before the running server is touched.')
    assert e.value.result == {'gpu_count': 4, 'path': str(there)}
    assert os.listdir(str(tmp_path / 'dumps')) == ['run-1'] and os.listdir(str(there)) == []
    assert there.is_symlink() == (kind == 'link')


# -- what the plan refuses of a restart, beside _server_info.refusals ----------------------------------------------

UNITS = {'path': '/etc/systemd/system/gpuops-sglang.service', 'old_path': '/etc/systemd/system/sglang.service',
         'mark': MARK, 'old_description': OLD}


@pytest.mark.parametrize('kind, refused', [('foreign', True), ('ours', False), ('absent', False), ('old', False)])
def test_a_restart_never_writes_over_a_unit_file_the_collection_did_not_write(kind, refused):
    kinds = {UNITS['path']: kind}
    if not refused:
        server_info.foreign_unit(UNITS, kinds)
        return
    with pytest.raises(server_info.sglang.ActionFailed) as e:
        server_info.foreign_unit(UNITS, kinds)
    assert e.value.msg.startswith('The unit file /etc/systemd/system/gpuops-sglang.service was not written by '
                                  'gpuops.host (its first line is not \'%s\')' % MARK)
    assert 'set sglang_launch_unit to another name' in e.value.msg and e.value.result == {'unit_files': kinds}


def test_no_unit_file_is_looked_at_without_systemd():
    server_info.foreign_unit(None, {})


PATCH = {'paths': ['srt/models'], 'pattern': 'SGLANG_HS_DUMP_DIR'}


@pytest.mark.parametrize('p, now, refused', [
    ({'dump_patch': PATCH}, {'dump_patch': {'files': ['srt/models/glm4_moe.py'], 'digest': 'sha256:1'}}, False),
    ({'dump_patch': PATCH}, {'dump_patch': {'files': [], 'digest': None}}, True),
    # the release could not be read: no patch seen either
    ({'dump_patch': PATCH}, {}, True),
    # no dumping mode
    ({}, {}, False),
    # a container image's patch is looked for in the image
    ({'dump_patch': PATCH, 'container': {'image': 'i'}}, {}, False),
])
def test_a_dumping_mode_needs_the_dump_patch(p, now, refused):
    checked = {'package': '/opt/sglang/lib/python3.11/site-packages/sglang'}
    if not refused:
        server_info.missing_patch(p, now, checked)
        return
    with pytest.raises(server_info.sglang.ActionFailed) as e:
        server_info.missing_patch(p, now, checked)
    assert e.value.msg == (
        'The installed SGLang (/opt/sglang/lib/python3.11/site-packages/sglang) does not carry the hidden-state dump '
        'patch: no file under srt/models contains \'SGLANG_HS_DUMP_DIR\'. It would run and silently dump nothing; '
        'refusing before the running server is touched.')


def test_the_plan_makes_both_refusals_before_a_restart_and_only_then(monkeypatch, tmp_path):
    monkeypatch.setattr(server_info.sglang, '_record', lambda p: {})
    monkeypatch.setattr(server_info.sglang, 'find', lambda p, deps, record=None: {
        'servers': [], 'elsewhere': [], 'others': [], 'gateways': [], 'recorded': None})
    monkeypatch.setattr(server_info, 'observe', lambda p, deps, checked=None: {'dump_patch': {'files': []}})
    unit = tmp_path / 'gpuops-sglang.service'
    unit.write_text('[Unit]\nDescription=Team B inference\n')
    units = dict(UNITS, path=str(unit), old_path=str(tmp_path / 'sglang.service'))
    p = {'record_path': '/x/server.json', 'config': {'mode': 'extraction', 'supervisor': 'systemd'},
         'unit_files': units, 'refuse': {'owners': []}, 'dump_patch': PATCH}
    with pytest.raises(server_info.sglang.ActionFailed) as e:
        server_info.info(p, deps=None)
    assert 'was not written by gpuops.host' in e.value.msg
    unit.unlink()
    with pytest.raises(server_info.sglang.ActionFailed) as e:
        server_info.info(p, deps=None)
    assert 'does not carry the hidden-state dump patch' in e.value.msg
    # a plan without refuse reads and compares only
    result = server_info.info(dict(p, refuse=None), deps=None)
    assert result['needs_restart'] and 'refusals' not in result

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The sglang_launch role's variables, checked on the controller (_launch_request.refusals through the filter
sglang_launch_refusals): each refusal with the message that names what to set, and nothing refused where all is well."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.host.plugins.filter.sglang_launch_refusals import FilterModule, sglang_launch_refusals

MODES = ['extraction', 'tuning', 'serving']
NOT_TOUCHED = 'refusing before the running server is touched.'


def request(**changes):
    """A good request for tuning mode, with CHANGES."""
    base = {'removed': [], 'mode': 'tuning', 'modes': MODES, 'model_path': '/models/glm-5',
            'python': '/opt/sglang/bin/python', 'module': 'sglang.launch_server', 'run_name': '', 'supervisor': 'auto',
            'image': '', 'server_args': {'model_path': '/models/glm-5', 'mem_fraction_static': 0.92},
            'secret_args': [], 'config_file': False, 'state_dir': '/var/lib/gpuops/sglang', 'dump_root': None,
            'environment': {'PATH': '/opt/sglang/bin:/usr/bin', 'HF_TOKEN': 'hf_secret'}, 'pythonpath': [],
            'names': ['/var/log/gpuops', '/var/lib/gpuops/sglang', 'gpuops-sglang', 'sglang', '']}
    for name in ('mem_fraction_static', 'served_model_name'):
        if name in changes:
            base['server_args'] = dict(base['server_args'], **{name: changes.pop(name)})
    base.update(changes)
    return base


def test_a_good_request_is_refused_nothing():
    assert sglang_launch_refusals(request()) == []
    assert sglang_launch_refusals(request(supervisor='docker', image='lmsysorg/sglang:v0.5.23',
                                          run_name='glm5-layers-2026.12', mem_fraction_static='0.85')) == []
    assert FilterModule().filters()['sglang_launch_refusals'] is sglang_launch_refusals


MODE_SAID = ("sglang_launch_mode must be one of extraction, tuning, serving, each a plain name (^[a-z][a-z0-9_]*$), "
             "(got %s) and sglang_launch_model_path must be set (got '%s').")


@pytest.mark.parametrize('mode, model_path, said', [
    ('debug', '/m', MODE_SAID % ('"debug"', '/m')),
    # a plain name only: it names the run marker, and with it paths, the log and the unit
    ('Tuning', '/m', MODE_SAID % ('"Tuning"', '/m')),
    ('tuning\n', '/m', MODE_SAID % ('"tuning\\n"', '/m')),
    ('../x', '/m', MODE_SAID % ('"../x"', '/m')),
    (None, '/m', MODE_SAID % ('null', '/m')),
    ('tuning', '', MODE_SAID % ('"tuning"', '')),
])
def test_a_mode_outside_the_table_or_no_model_is_refused_alone(mode, model_path, said):
    # what follows from the mode is not checked: the refusal of the mode is the one message
    assert sglang_launch_refusals(request(mode=mode, model_path=model_path, python='', mem_fraction_static=3)) == [said]


def test_a_removed_variable_names_its_replacement():
    assert sglang_launch_refusals(request(removed=['sglang_launch_stop_timeout'])) == [
        "sglang_launch_stop_timeout was removed: the unit's TimeoutStopSec is the stop timeout of gpuops.host.sglang_stop, "
        "set sglang_stop_term_timeout instead."]


@pytest.mark.parametrize('changes, said', [
    ({'python': ''},
     'sglang_launch_python is not set: set it to the Python interpreter of the environment SGLang is installed in (for '
     'example /opt/sglang/venv/bin/python); there is no system default. Refusing before the running server is '
     'touched.'),
    ({'supervisor': 'podman', 'image': ''},
     'sglang_launch_supervisor podman runs the server in a container of sglang_launch_image, which is not set; '
     + NOT_TOUCHED),
    ({'supervisor': 'docker', 'image': 'i', 'model_path': '/models/a:b', 'state_dir': '/state', 'dump_root': '/d:u:mp'},
     "/models/a:b, /d:u:mp: a container engine's --volume splits a path at its colons, so it would mount something "
     "else than this path; rename it or choose another. Refusing before the running server is touched."),
    ({'run_name': '../etc'},
     "sglang_launch_run_name must be a plain directory name (letters, digits, '.', '_', '-'; no '/', no '..', no "
     'control characters), got "../etc". The running server was not touched.'),
    ({'run_name': 'a..b'}, 'got "a..b". The running server was not touched.'),
    ({'run_name': 'run\n'}, 'got "run\\n". The running server was not touched.'),
    ({'mem_fraction_static': 1.0}, 'mem_fraction_static must be in (0, 1), got 1.0; ' + NOT_TOUCHED),
    ({'mem_fraction_static': 0}, 'mem_fraction_static must be in (0, 1), got 0; ' + NOT_TOUCHED),
    ({'mem_fraction_static': 'most'}, 'mem_fraction_static must be in (0, 1), got most; ' + NOT_TOUCHED),
])
def test_each_variable_is_refused_with_what_to_set(changes, said):
    refused = sglang_launch_refusals(request(**changes))
    assert len(refused) == 1 and refused[0].endswith(said), refused


def test_a_colon_is_no_matter_without_a_container():
    assert sglang_launch_refusals(request(model_path='/models/a:b')) == []


@pytest.mark.parametrize('changes, item', [
    ({'served_model_name': 'x\nExecStartPre=/bin/sh'},
     'the server argument "x\\nExecStartPre=/bin/sh"'),
    # a value is a secret: named by its variable only
    ({'environment': {'HF_TOKEN': 'hf_abc\rX=1'}}, 'the value of the environment variable HF_TOKEN'),
    ({'environment': {'BAD NAME': '1'}}, 'the environment variable name "BAD NAME"'),
    ({'environment': {'A\n': '1'}}, 'the environment variable name "A\\n"'),
    ({'names': ['/var/log/gpu ops']}, 'the path or unit name (no spaces or backslashes either) "/var/log/gpu ops"'),
    ({'names': ['team\\unit']}, 'the path or unit name (no spaces or backslashes either) "team\\\\unit"'),
])
def test_what_would_break_out_of_its_line_is_refused_by_name(changes, item):
    refused = sglang_launch_refusals(request(**changes))
    assert refused == ['%s: newlines and other control characters are refused, since they would end the line in the '
                       'systemd unit or the environment file and could add directives or variables; %s'
                       % (item, NOT_TOUCHED)]
    assert 'hf_abc' not in refused[0]


def test_every_refusal_is_said_at_once():
    refused = sglang_launch_refusals(request(removed=['sglang_launch_stop_timeout'], python='', run_name='a/b',
                                             mem_fraction_static=2))
    assert [r.split(' ')[0] for r in refused] == ['sglang_launch_stop_timeout', 'sglang_launch_python',
                                                  'sglang_launch_run_name', 'mem_fraction_static']


def test_what_it_cannot_take_is_a_clear_error():
    with pytest.raises(AnsibleFilterError, match='takes the role'):
        sglang_launch_refusals(['tuning'])


@pytest.mark.parametrize('name, replacement', [
    ('sglang_launch_planned', 'the launch plans in the call that converges the node'),
])
def test_the_other_removed_variables_name_what_replaces_them(name, replacement):
    refused = sglang_launch_refusals(request(removed=[name]))
    assert len(refused) == 1 and refused[0].startswith(name + ' was removed: ') and replacement in refused[0]


def test_a_hub_model_in_a_container_mounts_the_cache_its_environment_names():
    said = sglang_launch_refusals(request(supervisor='docker', image='i', model_path='org/model',
                                          environment={'HF_HOME': '/data/hf:cache'}))
    assert said and said[0].startswith('/data/hf:cache: a container engine')

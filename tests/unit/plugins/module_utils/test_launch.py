# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A launch request turned into the plan's and the start's options (_launch.Request).

launch_cases.json holds six requests (a process, systemd with auto and with a unit to migrate, Docker, Podman on a
bridge network with a hub ID, a multi-node worker) and what the role's templates of release 0.9 rendered for each:
the configuration's identity and secrets digest, the environment file, the start (process argv, unit file,
container argv), the record, the results. A server recorded by that release compares equal to the same request now,
so that an upgrade restarts nothing."""

from __future__ import annotations

import json
import os
import re

import pytest

from ansible_collections.gpuops.host.plugins.module_utils import _launch as launches

CASES = json.load(open(os.path.join(os.path.dirname(__file__), 'launch_cases.json')))


def request(case):
    return launches.Request(case['launch'], case['secret_server_args'], case['secret_environment'],
                            marker=case['marker'])


@pytest.mark.parametrize('name', sorted(CASES))
def test_request_renders_as_the_role_did(name):
    case = CASES[name]
    expected = case['expected']
    r = request(case)
    options = r.start_options(case['plan'], {'dump_patterns': ['*']})
    record, launched = r.results(case['plan'])
    would = launches.would(launched)
    assert r.identity() == expected['identity']
    assert r.secrets_digest() == expected['digest']
    assert (r.public_env, r.secret_env) == (expected['public_env'], expected['secret_env'])
    assert r.expected_gpus == expected['expected_gpus']
    assert r.mount_sources() == expected['mount_sources']
    assert options['environment_file'].splitlines() == expected['env_lines']
    assert r.secret_values() == expected['secret_values']
    assert options['start'] == expected['start']
    assert (record, launched, would) == (expected['record_new'], expected['launched'], expected['would'])
    assert dict((k, options['stop'][k]) for k in ('api_key', 'lock') if k in options['stop']) == expected['stop_options']


def test_plan_options_carry_no_secret():
    case = CASES['process_extraction']
    options = request(case).plan_options()
    public = dict(options, secret_server_args=None, secret_environment=None)
    text = json.dumps(public)
    for value in list(case['secret_server_args'].values()) + list(case['secret_environment'].values()):
        assert value not in text
    assert options['secret_server_args'] == case['secret_server_args']
    assert options['secret_environment'] == case['secret_environment']
    assert options['refuse']['dump_dir'] == {'root': '/data/hs_dumps', 'name': case['marker'], 'min_free_gb': 100.0}


def test_environment_file_of_a_dumping_run_names_its_dump_directory():
    case = CASES['process_extraction']
    options = request(case).start_options(case['plan'], {})
    lines = options['environment_file'].splitlines()
    assert 'SGLANG_HS_DUMP_DIR=/data/hs_dumps/%s' % case['marker'] in lines
    assert 'GPUOPS_RUN=%s' % case['marker'] in lines
    # the owner's HOME, under the request's own variables
    assert 'HOME=/home/sglang' in lines


def test_multinode_lock_is_kept_and_rollback_left_to_the_group():
    case = CASES['multinode_worker']
    options = request(case).start_options(case['plan'], {})
    assert options['stop']['lock'] == {'run': 'r2', 'release': False, 'path': '/run/lock/x'}
    assert options['rollback'] is False
    assert options['path'] == '/health'
    assert options['checks']['schedulers'] == 2 and options['checks']['probe'] is False


def test_marker_names_mode_time_host_and_a_random_part():
    name = launches.marker('extraction', 'gpu node/01', now=0, token=0xabc)
    assert name == 'extraction-19700101T000000Z-gpu-node-01-00000abc'
    first, second = launches.marker('serving', 'h'), launches.marker('serving', 'h')
    assert re.fullmatch(r'serving-\d{8}T\d{6}Z-h-[0-9a-f]{8}', first)
    assert first != second

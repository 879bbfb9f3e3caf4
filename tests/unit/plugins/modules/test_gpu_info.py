# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import ctypes
import os
import sys

import pytest

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpuops.host.plugins.modules import gpu_info

SIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..', 'sim')
if SIM not in sys.path:
    sys.path.insert(0, SIM)

from gpusim.nvml import GHOST_PID, Node, lib_dir  # noqa: E402  pylint: disable=wrong-import-position


LIB = 'libnvidia-ml.so.1'


class Exit(Exception):
    pass


class Fail(Exception):
    pass


def exit_json(self, **result):
    raise Exit(result)


def fail_json(self, **result):
    raise Fail(result)


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A simulated 4-GPU H200 node that pynvml, loaded in this process, answers from."""
    dirs = [d for d in os.environ.get('LD_LIBRARY_PATH', '').split(':') if d and os.path.exists(os.path.join(d, LIB))]
    ctypes.CDLL(os.path.join(dirs[0] if dirs else lib_dir(), LIB))  # pynvml's dlopen by soname then finds it
    created = Node.create(str(tmp_path / 'state'), gpus=4, reserved_mib=700)
    monkeypatch.setenv('GPUSIM_STATE', created.state_dir)
    return created


def run(monkeypatch, args):
    monkeypatch.setattr(AnsibleModule, 'exit_json', exit_json)
    monkeypatch.setattr(AnsibleModule, 'fail_json', fail_json)
    with patch_module_args(args):
        with pytest.raises((Exit, Fail)) as caught:
            gpu_info.main()
    return caught.type, caught.value.args[0]


def test_reports_dirty_and_lost_gpus_without_failing(node, monkeypatch):
    node.set_ghost(1, 512)
    node.set_lost(3)
    outcome, result = run(monkeypatch, {})
    assert outcome is Exit and result['changed'] is False
    assert sorted(result) == ['changed', 'count', 'dirty', 'driver_version', 'gpus', 'memory_api']
    assert result['count'] == 4 and result['memory_api'] == 'v2' and result['driver_version'] == '570.133.20'
    assert result['dirty'] == [node.gpu_uuids[1], 'index-3']
    ghost = result['gpus'][node.gpu_uuids[1]]
    assert ghost['clean'] is False and ghost['processes'][0]['pid'] == GHOST_PID
    assert ghost['problem'] == '512 MiB held by pid %d which no longer exists: GPU needs a reset' % GHOST_PID
    idle = result['gpus'][node.gpu_uuids[0]]
    assert (idle['used_mib'], idle['v1_used_mib'], idle['clean'], idle['problem']) == (0, 700, True, None)


def test_selection_and_init_error(node, monkeypatch):
    outcome, result = run(monkeypatch, {'gpus': ['2']})
    assert outcome is Exit and list(result['gpus']) == [node.gpu_uuids[2]] and result['count'] == 4
    node.set_init_error('NO_PERMISSION')
    outcome, result = run(monkeypatch, {})
    assert outcome is Fail and result['nvml_error'] == 'NVML_ERROR_NO_PERMISSION'
    assert result['msg'] == ('Cannot initialise NVML: NVML_ERROR_NO_PERMISSION (Insufficient Permissions): '
                             'no permission to open /dev/nvidiactl')

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.gpuops.host.plugins.modules import gpu_info

from gpusim.nvml import GHOST_PID


def test_reports_dirty_and_lost_gpus_without_failing(node, run_module):
    node.set_ghost(1, 512)
    node.set_lost(3)
    outcome, result, dummy = run_module(gpu_info, {})
    assert outcome == 'exit' and result['changed'] is False
    assert sorted(result) == ['changed', 'count', 'dirty', 'driver_version', 'gpus', 'memory_api']
    assert result['count'] == 4 and result['memory_api'] == 'v2' and result['driver_version'] == '570.133.20'
    assert result['dirty'] == [node.gpu_uuids[1], 'index-3']
    ghost = result['gpus'][node.gpu_uuids[1]]
    assert ghost['clean'] is False and ghost['processes'][0]['pid'] == GHOST_PID
    assert ghost['problem'] == '512 MiB held by pid %d which no longer exists: GPU needs a reset' % GHOST_PID
    idle = result['gpus'][node.gpu_uuids[0]]
    assert (idle['used_mib'], idle['v1_used_mib'], idle['clean'], idle['problem']) == (0, 700, True, None)


def test_selection_and_init_error(node, run_module):
    outcome, result, dummy = run_module(gpu_info, {'gpus': ['2']})
    assert outcome == 'exit' and list(result['gpus']) == [node.gpu_uuids[2]] and result['count'] == 4
    node.set_init_error('NO_PERMISSION')
    outcome, result, dummy = run_module(gpu_info, {})
    assert outcome == 'fail' and result['nvml_error'] == 'NVML_ERROR_NO_PERMISSION'
    assert result['msg'] == ('Cannot initialise NVML: NVML_ERROR_NO_PERMISSION (Insufficient Permissions): '
                             'no permission to open /dev/nvidiactl')

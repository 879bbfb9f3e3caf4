# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Whether a server that answers ready occupies the GPUs it should: the last of its post-checks.

A server whose ``CUDA_VISIBLE_DEVICES`` or ``--base-gpu-id`` put it elsewhere answers ready all the same, on GPUs that
another job may be using; only NVML shows it. The reading is gpu_verify's (``_verify.Verification``, one reading,
no wait), with the node's own settings (``expected_count``, ``v1_reserved_mib``); NVML is opened through the injected
``open_nvml`` so that the judgement runs without it.
"""

from __future__ import annotations

from ansible_collections.gpuops.host.plugins.module_utils._nvml import NvmlError
from ansible_collections.gpuops.host.plugins.module_utils._verify import (
    POLL_INTERVAL, SelectionError, Verification, failure_message,
)

# Less than this in use (MiB) on a GPU that the server should occupy: the server is not there. A loaded model takes
# gigabytes; an idle GPU shows at most a few MiB (v2) or its reserved memory (v1).
MIN_USED_MIB = 1024


class Unreadable(Exception):
    """NVML could not be read: the message says why."""


def read(options, open_nvml, warn, sysfs_root='/sys'):
    """One reading of the GPUs OPTIONS['gpus'] (indices): gpu_verify's report. OPTIONS: ``expected_count`` and
    ``v1_reserved_mib`` (the node's, as the stop's verification reads them). Unreadable where NVML or a GPU cannot be
    read (OPEN_NVML may raise it too, e.g. without nvidia-ml-py); WARN gets what gpu_verify warns about."""
    verification = Verification(dict(gpus=[str(i) for i in options['gpus']], max_used_mib=32, allow_processes=False,
                                     v1_reserved_mib=options.get('v1_reserved_mib'),
                                     expected_count=options.get('expected_count'), timeout=0,
                                     poll_interval=POLL_INTERVAL), sysfs_root)
    for warning in verification.warnings:
        warn(warning)
    try:
        with open_nvml() as nvml:
            report = verification.wait(nvml.snapshot)
    except (NvmlError, SelectionError) as e:
        raise Unreadable(str(e))
    for warning in verification.report_warnings(report):
        warn(warning)
    return report


def idle(report, gpus, min_used_mib=MIN_USED_MIB):
    """The GPUs of GPUS (indices) that REPORT shows with less than MIN_USED_MIB in use, in the order of GPUS; every one
    of them without a REPORT (NVML could not be read)."""
    if report is None:
        return list(gpus)
    used = dict((gpu['index'], gpu.get('used_mib')) for gpu in report['gpus'].values())
    return [i for i in gpus if used.get(i) is None or used[i] < min_used_mib]


def occupancy_failure(gpus, report, error=None, min_used_mib=MIN_USED_MIB):
    """Why a server that should occupy GPUS does not, or None: the GPUs that show less than MIN_USED_MIB in use, then
    what the reading found wrong (a GPU count, a GPU another process holds) or why there was none (ERROR)."""
    left = idle(report, gpus, min_used_mib)
    if not left:
        return None
    detail = error if report is None else (None if report['clean'] else failure_message(report, 0))
    return ('The server should occupy GPU %s, but %s show(s) less than %d MiB in use: it came up on the wrong GPUs.%s'
            % (', '.join(str(i) for i in gpus), ', '.join(str(i) for i in left), min_used_mib,
               ' ' + detail if detail else ''))

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The run of a gpuops playbook (playbooks/fleet_run.yml): what it was asked to do, checked before any host is
touched, and its name and owner, as the host lock records them.

    fleet_run_result = named(get, now, token, controller)

GET reads a variable as the task sees it (default when unset); NOW is the current UTC time, TOKEN a random number
below one million, CONTROLLER what the lock records of the controller (playbook name aside).
"""

from __future__ import annotations

ACTIONS = ('restart', 'stop', 'verify')


class FleetRunError(Exception):
    pass


def refusal(action, mode, old_mode_set):
    """Why a request cannot run (None when it can): ACTION must be one the playbooks set, a restart needs its mode,
    and gpuops_mode is no longer read."""
    if action in ACTIONS and (action != 'restart' or mode) and not old_mode_set:
        return None
    return ('Run one of the playbooks restart_extraction, restart_tuning, restart_serving, stop_sglang or verify_gpus: '
            "gpuops_action must be one of %s (got '%s'), a restart needs sglang_launch_mode, and gpuops_mode is no "
            'longer read (set sglang_launch_mode instead).' % (', '.join(ACTIONS), action or ''))


def named(get, now, token, controller):
    """The run: ``run`` (its name: the UTC time, then TOKEN), ``action``, ``mode`` (the restart's mode, or the
    action), ``locked`` (whether it may hold the host lock: not in check mode) and ``owner`` (the lock's record of it:
    ``playbook``, the play's name, and CONTROLLER's ``controller``, ``controller_pid`` and ``user``)."""
    action, mode = get('gpuops_action', ''), get('sglang_launch_mode', '')
    why = refusal(action, mode, get('gpuops_mode', None) is not None)
    if why:
        raise FleetRunError(why)
    return {'run': '%s-%d' % (now.strftime('%Y%m%dT%H%M%SZ'), token), 'action': action,
            'mode': mode if action == 'restart' else action, 'locked': not get('ansible_check_mode', False),
            'owner': dict(controller, playbook=get('ansible_play_name', ''))}

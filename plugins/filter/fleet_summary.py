# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
name: fleet_summary
short_description: The table of a gpuops run for the whole fleet, one line per host
version_added: 0.3.0
description:
  - Builds the table that every gpuops playbook prints at its end, with one row per host of the play, padded into
    columns - V(host), V(status), V(mode), V(run marker), V(clean s), V(ready s), V(GPUs verified), V(serving on GPUs),
    V(server now), V(gateway) and V(dumps) - then the lines that need words.
  - A row reads only the documented results of the roles on its host - C(fleet_run_result) (C(action), C(mode)),
    C(sglang_launch_result), C(sglang_stop_result), C(gpu_clean_result) and C(sglang_gateway_result) - and the
    variables C(sglang_gateway_urls) and C(sglang_stop_signalled). Every other variable of the host is left alone,
    unread and untemplated.
  - V(status) is V(FAILED) for a host of the play that is not among O(play_hosts), V(ok) otherwise. A host without
    C(fleet_run_result) was never reached - V(pending) while no host has failed, V(untouched) once one has.
  - V(server now) is what the host's server is after the run, from C(sglang_launch_result.server) for a restart -
    V(new), V(unchanged), V(old) for a server left running, V(none) after a failed launch, V(rollback) - V(none) after
    a stop; for a host that failed before its role said anything, V(unverified) if the stop had signalled the server
    (C(sglang_stop_signalled)) and V(untouched) otherwise.
  - V(gateway) is C(sglang_gateway_result.summary) (C(back in N), C(LEFT OUT of N), C(not listed)); for a host with
    C(sglang_gateway_urls) that never left its gateways, V(untouched).
  - V(dumps) shows each extraction run that the host's stop left (C(sglang_stop_result.runs)) as its dumps, its
    gigabytes (10^9 bytes) and how it ended, as in C(1200 / 3.4 GB drained).
  - An empty cell is V(-).
  - After the table, for each host whose launch named its reasons, a line C(HOST restarted) followed by its reasons
    (C(would restart) in check mode, C(restart failed) after a failure); for each failed host that runs no server any
    more, or that stays out of its gateways, a line saying so; and once a host has failed, the line
    C(Rollout stopped after ...) naming the hosts that the rollout never touched.
positional: play_hosts, hostvars
options:
  _input:
    description:
      - Every host of the play, in the play's order (C(ansible_play_hosts_all)); one row each.
    type: list
    elements: str
    required: true
  play_hosts:
    description:
      - The hosts of the play that have not failed (C(ansible_play_hosts)).
    type: list
    elements: str
    required: true
  hostvars:
    description:
      - The variables of each host, C(hostvars) or a dictionary of host names to dictionaries that hold the keys
        named in the description.
    type: dict
    required: true
author:
  - gpuops maintainers (@gpuops)
"""

EXAMPLES = r"""
- name: Print the summary of the run for the whole fleet
  ansible.builtin.debug:
    msg: "{{ ansible_play_hosts_all | gpuops.host.fleet_summary(ansible_play_hosts, hostvars) }}"
  run_once: true

# node1 went through, node2 failed in its launch, the rollout never reached node3:
#   host   status     mode        run marker                 clean s  ready s  GPUs verified  serving on GPUs  server now  gateway  dumps
#   node1  ok         extraction  extraction-20260114-node1  1.16     5.9      4              0,1,2,3          new         -        1200 / 3.4 GB drained
#   node2  FAILED     extraction  extraction-20260114-node2  2.03     -        4              -                none        -        87 / 0.3 GB cut
#   node3  untouched  -           -                          -        -        -              -                -           -        -
#   node1 restarted: the model files changed
#   node2 restart failed: the model files changed
#   node2 now runs NO SGLang server: its old server was stopped and the new one failed.
#   Rollout stopped after node2 failed; 1 host(s) never touched: node3.
"""

RETURN = r"""
_value:
  description:
    - The lines of the table (its header first, every line stripped of trailing blanks), then the lines in words.
  type: list
  elements: str
"""

from collections.abc import Mapping

from ansible_collections.gpuops.host.plugins.module_utils import _table as table

HEADER = ('host', 'status', 'mode', 'run marker', 'clean s', 'ready s', 'GPUs verified', 'serving on GPUs',
          'server now', 'gateway', 'dumps')
GB = 1e9
VERBS = {'check': 'would restart', 'failed': 'restart failed'}
# The variables of a host that the table reads: the documented results of the roles and what the gateway and stop
# steps set.
DOCUMENTED = ('fleet_run_result', 'sglang_launch_result', 'sglang_stop_result', 'gpu_clean_result',
              'sglang_gateway_result', 'sglang_gateway_urls', 'sglang_stop_signalled')
MISSING = object()


def _documented(host_vars):
    """HOST_VARS's variables that the table reads, each read once: hostvars templates a variable on every read, and
    one that the table does not read is never templated."""
    return dict((name, host_vars[name]) for name in DOCUMENTED if name in host_vars)


def _result(host_vars, name):
    """The host's variable NAME, a dictionary ({} when unset or empty)."""
    return host_vars.get(name) or {}


def _run(run):
    """An extraction run that a stop left, as ``1200 / 3.4 GB drained``."""
    text = '%d / %.1f GB' % (run.get('files') or 0, (run.get('bytes') or 0) / GB)
    return '%s %s' % (text, run['ended']) if run.get('ended') else text


def _dumps(stop):
    """The extraction runs that the stop left (its result's ``runs``), None when it left none."""
    return ', '.join(_run(run) for run in stop.get('runs') or []) or None


def _gateway(host_vars):
    """Where the host's worker is in its gateways: the gateway result's summary; for a host with gateways that
    never left them (its server stays as it is), 'untouched'."""
    gateway = host_vars.get('sglang_gateway_result')
    summary = gateway.get('summary', MISSING) if isinstance(gateway, Mapping) else MISSING
    if summary is MISSING:
        return 'untouched' if host_vars.get('sglang_gateway_urls') else None
    return summary


def _row(host, host_vars, failed):
    """The cells of HOST's row, up to 'server now', and whether the rollout never reached it."""
    frame = host_vars.get('fleet_run_result')
    if not frame:
        return [host, 'untouched' if failed else 'pending'] + [None] * 7, True
    launch = _result(host_vars, 'sglang_launch_result')
    stop = _result(host_vars, 'sglang_stop_result')
    clean = _result(host_vars, 'gpu_clean_result')
    status = 'FAILED' if host in failed else 'ok'
    action, mode = frame.get('action'), frame.get('mode')
    if action == 'restart' and launch:
        return [host, status, launch.get('mode'), launch.get('marker'), launch.get('seconds_to_clean'),
                launch.get('seconds_to_ready'), launch.get('gpus_verified'),
                ','.join(str(gpu) for gpu in launch.get('gpus_serving') or []), launch.get('server')], False
    if action == 'stop' and stop:
        return [host, status, mode, stop.get('marker'), stop.get('seconds_to_clean'), None, stop.get('gpus_verified'),
                None, 'none'], False
    if action == 'verify' and clean:
        return [host, status, mode, None, clean.get('seconds'), None, clean.get('gpus_verified'), None, None], False
    # Failed before its role said anything: at the lock, or in a stop (the server was not touched unless the stop
    # had signalled it, sglang_stop's sglang_stop_signalled).
    now = None
    if status == 'FAILED':
        now = 'unverified' if host_vars.get('sglang_stop_signalled') else 'untouched'
    return [host, status, mode, None, None, None, None, None, now], False


def fleet_summary(hosts, play_hosts, hostvars):
    """The summary of a gpuops run: a row for each of HOSTS (every host of the play), FAILED for those not among
    PLAY_HOSTS, from the documented results in HOSTVARS (host -> mapping of its variables; only the keys that
    DOCUMENTATION names are read), then the lines in words. A list of lines."""
    hosts = list(hosts)
    failed = [host for host in hosts if host not in play_hosts]
    host_vars = dict((host, _documented(hostvars[host])) for host in hosts)
    rows, untouched = [list(HEADER)], []
    for host in hosts:
        cells, never_reached = _row(host, host_vars[host], failed)
        if never_reached:
            untouched.append(host)
        # a restart's stop is in the call that starts the new server (sglang_launch_result.stopped)
        stop = (_result(host_vars[host], 'sglang_stop_result')
                or (_result(host_vars[host], 'sglang_launch_result').get('stopped') or {}).get('summary') or {})
        cells += [_gateway(host_vars[host]), _dumps(stop)]
        rows.append([table.cell(cell) for cell in cells])
    lines = table.columns(rows)
    for host in hosts:
        launch = _result(host_vars[host], 'sglang_launch_result')
        if launch.get('reasons'):
            reasons = '; '.join(str(reason) for reason in launch['reasons'])
            lines.append('%s %s: %s' % (host, VERBS.get(launch.get('status'), 'restarted'), reasons))
        # what its stop did and left running
        lines.extend('%s: %s' % (host, line) for line in launch.get('said') or [])
    for host in failed:
        if _result(host_vars[host], 'sglang_launch_result').get('server') == 'none':
            lines.append('%s now runs NO SGLang server: its old server was stopped and the new one failed.' % host)
    for host in failed:
        if _result(host_vars[host], 'sglang_gateway_result').get('status') == 'left out':
            lines.append('%s stays out of its SGLang Model Gateways: it failed, and its old server does not serve.' % host)
    if failed and untouched:
        lines.append('Rollout stopped after %s failed; %d host(s) never touched: %s.'
                     % (', '.join(failed), len(untouched), ', '.join(untouched)))
    # One item per printed line, as the debug task prints them.
    return '\n'.join(lines).strip().split('\n')


class FilterModule:
    """The filter gpuops.host.fleet_summary."""

    def filters(self):
        return {'fleet_summary': fleet_summary}

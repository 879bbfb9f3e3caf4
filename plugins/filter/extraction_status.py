# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
name: extraction_status
short_description: The table of the extraction runs of the fleet, one line per host
version_added: 0.3.0
description:
  - Builds the table that C(playbooks/extraction_status.yml) prints, headed C(extraction runs of the fleet), with one
    row per host of the play, padded into columns - V(host), V(state), V(mode), V(run marker), V(uptime), V(dumps),
    V(GB), V(dumps/min), V(GB/h), V(free GB), V(hours to full), V(in flight) and V(newest s) - then the lines that
    need words.
  - A row reads only the host's variable C(gpuops_extraction_status), the C(extraction) result of
    M(gpuops.host.sglang_server_info). Every other variable of the host is left alone, unread and untemplated.
  - A host without C(gpuops_extraction_status), or with an empty one, is V(FAILED) - its module call did not get
    through - and has no other cell.
  - V(uptime) is C(uptime) as hours and minutes from one hour on (V(2h05m)), as minutes and seconds below
    (V(0m20s)). V(in flight) is V(?) for a running server whose requests in flight could not be read.
  - An empty cell is V(-).
  - After the table, for each running server whose requests in flight could not be read, a line with the reason
    (C(in_flight_error)); for each host whose recorded server does not run while its manifest still says running
    (V(down) and C(dumping)), a line saying that the next stop or launch records the crash.
positional: hostvars
options:
  _input:
    description:
      - Every host of the play, in the play's order (C(ansible_play_hosts_all)); one row each.
    type: list
    elements: str
    required: true
  hostvars:
    description:
      - The variables of each host, C(hostvars) or a dictionary of host names to dictionaries that may hold
        C(gpuops_extraction_status).
    type: dict
    required: true
author:
  - gpuops maintainers (@gpuops)
"""

EXAMPLES = r"""
- name: Print one table for the whole fleet
  ansible.builtin.debug:
    msg: "{{ ansible_play_hosts_all | gpuops.host.extraction_status(hostvars) }}"
  run_once: true

# node1 dumps, node2's server runs with an API key and no --enable-metrics, node3's module call failed:
#   extraction runs of the fleet
#   host   state    mode        run marker                   uptime  dumps  GB   dumps/min  GB/h  free GB  hours to full  in flight  newest s
#   node1  running  extraction  extraction-20260114T101502Z  2h05m   1200   3.4  84.13      0.9   83.388   92.65          2          1.2
#   node2  running  serving     serving-20260114T101502Z     0m20s   -      -    -          -     -        -              ?          -
#   node3  FAILED   -           -                            -       -      -    -          -     -        -              -          -
#   node2: requests in flight unknown (HTTP 401 from /v1/loads); with an API key, run the server with --enable-metrics
"""

RETURN = r"""
_value:
  description:
    - The lines of the table (its header first, every line stripped of trailing blanks), then the lines in words.
  type: list
  elements: str
"""

from ansible_collections.gpuops.host.plugins.module_utils import _table as table

HEADER = ('host', 'state', 'mode', 'run marker', 'uptime', 'dumps', 'GB', 'dumps/min', 'GB/h', 'free GB',
          'hours to full', 'in flight', 'newest s')
# The one variable of a host that the table reads: gpuops.host.sglang_server_info's extraction result.
FACT = 'gpuops_extraction_status'


def _uptime(seconds):
    """SECONDS as ``2h05m`` from one hour on, as ``0m20s`` below; None for None."""
    if seconds is None:
        return None
    if seconds >= 3600:
        return '%dh%02dm' % (int(seconds // 3600), int(seconds % 3600 // 60))
    return '%dm%02ds' % (int(seconds // 60), int(seconds % 60))


def _row(host, run):
    """The cells of HOST's row from its extraction result RUN ({} when the host has none)."""
    if not run:
        return [host, 'FAILED'] + [None] * (len(HEADER) - 2)
    flight = run.get('in_flight')
    if flight is None and run.get('state') == 'running':
        flight = '?'
    return [host, run.get('state'), run.get('mode'), run.get('marker'), _uptime(run.get('uptime')), run.get('files'),
            run.get('gb'), run.get('rate_files_per_min'), run.get('rate_gb_per_hour'), run.get('free_gb'),
            run.get('hours_to_full'), flight, run.get('age')]


def extraction_status(hosts, hostvars):
    """The table of the extraction runs of HOSTS (every host of the play), from each host's gpuops_extraction_status
    in HOSTVARS (host -> mapping of its variables; only that key is read, once), then the lines in words. A list of
    lines."""
    hosts = list(hosts)
    runs = dict((host, (hostvars[host][FACT] if FACT in hostvars[host] else None) or {}) for host in hosts)
    rows = [list(HEADER)] + [[table.cell(cell) for cell in _row(host, runs[host])] for host in hosts]
    lines = ['extraction runs of the fleet'] + table.columns(rows)
    for host in hosts:
        run = runs[host]
        if run.get('in_flight_error') and run.get('state') == 'running' and run.get('in_flight') is None:
            lines.append('%s: requests in flight unknown (%s); with an API key, run the server with --enable-metrics'
                         % (host, run['in_flight_error']))
    for host in hosts:
        if runs[host].get('state') == 'down' and runs[host].get('dumping'):
            lines.append('%s: the recorded server does not run and its manifest still says running: a crash, which '
                         'the next stop or launch records' % host)
    # One item per printed line, as the debug task prints them.
    return '\n'.join(lines).strip().split('\n')


class FilterModule:
    """The filter gpuops.host.extraction_status."""

    def filters(self):
        return {'extraction_status': extraction_status}

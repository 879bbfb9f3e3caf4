# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The table of the extraction runs of the fleet, from gpuops.host.sglang_server_info's extraction results as plain
dictionaries: every kind of row, the uptime, the lines in words after the table, and the same lines as the Jinja
template that playbooks/extraction_status.yml printed before the filter, over random fleets."""

from __future__ import annotations

import random
import re

import jinja2
import pytest

from ansible_collections.gpuops.host.plugins.filter.extraction_status import FilterModule, extraction_status

MARKER = 'extraction-20260114T101502Z-node1-9f2c4b17'
UNKNOWN = 'HTTP 401 from /v1/loads'
# The template that playbooks/templates/extraction_status.j2 held, as the playbook rendered it: lookup('template')
# | trim | split('\n').
TEMPLATE = r"""{#- One row per host of the play (playbooks/extraction_status.yml), padded into columns as the fleet summary is.
    Reads only gpuops_extraction_status, gpuops.host.sglang_server_info's extraction result. -#}
{%- set rows = [['host', 'state', 'mode', 'run marker', 'uptime', 'dumps', 'GB', 'dumps/min', 'GB/h', 'free GB',
                 'hours to full', 'in flight', 'newest s']] -%}
{%- for host in ansible_play_hosts_all -%}
{%-   set run = hostvars[host].gpuops_extraction_status | default({}) -%}
{%-   if not run -%}
{%-     set cells = [host, 'FAILED'] -%}
{%-   else -%}
{%-     set uptime = none if run.uptime is none
                     else '%dh%02dm' | format((run.uptime // 3600) | int, ((run.uptime % 3600) // 60) | int)
                     if run.uptime >= 3600 else '%dm%02ds' | format((run.uptime // 60) | int, (run.uptime % 60) | int) -%}
{%-     set flight = run.in_flight if run.in_flight is not none else ('?' if run.state == 'running' else none) -%}
{%-     set cells = [host, run.state, run.mode, run.marker, uptime, run.files, run.gb, run.rate_files_per_min,
                     run.rate_gb_per_hour, run.free_gb, run.hours_to_full, flight, run.age] -%}
{%-   endif -%}
{%-   set row = [] -%}
{%-   for i in range(rows[0] | length) -%}
{%-     set cell = cells[i] if i < cells | length else none -%}
{%-     set _ = row.append('-' if cell is none or cell == '' else cell | string) -%}
{%-   endfor -%}
{%-   set _ = rows.append(row) -%}
{%- endfor -%}
{%- set widths = [] -%}
{%- for i in range(rows[0] | length) -%}
{%-   set _ = widths.append(rows | map(attribute=i) | map('length') | max) -%}
{%- endfor -%}
{%- set lines = ['extraction runs of the fleet'] -%}
{%- for row in rows -%}
{%-   set cells = [] -%}
{%-   for cell in row -%}{%- set _ = cells.append(cell.ljust(widths[loop.index0])) -%}{%- endfor -%}
{%-   set _ = lines.append(cells | join('  ') | trim) -%}
{%- endfor -%}
{%- for host in ansible_play_hosts_all if (hostvars[host].gpuops_extraction_status | default({})).in_flight_error
                                          and hostvars[host].gpuops_extraction_status.state == 'running'
                                          and hostvars[host].gpuops_extraction_status.in_flight is none -%}
{%-   set _ = lines.append(host ~ ': requests in flight unknown (' ~ hostvars[host].gpuops_extraction_status.in_flight_error
                           ~ '); with an API key, run the server with --enable-metrics') -%}
{%- endfor -%}
{%- for host in ansible_play_hosts_all if (hostvars[host].gpuops_extraction_status | default({})).state | default('') == 'down'
                                          and hostvars[host].gpuops_extraction_status.dumping -%}
{%-   set _ = lines.append(host ~ ': the recorded server does not run and its manifest still says running: a crash, which the next stop or launch records') -%}
{%- endfor -%}
{{ lines | join('\n') }}
"""


OLD = jinja2.Environment().from_string(TEMPLATE)


def old_table(hosts, hostvars):
    """The lines that the playbook printed through TEMPLATE (builtin Jinja filters only)."""
    return OLD.render(ansible_play_hosts_all=hosts, hostvars=hostvars).strip().split('\n')


def status(**run):
    """gpuops.host.sglang_server_info's extraction result of a node whose server runs and dumps, with RUN."""
    result = dict(dumping=True, mode='extraction', marker=MARKER, dump_dir='/data/dumps/' + MARKER, pid=4242,
                  state='running', uptime=7512.3, manifest='/data/dumps/%s/gpuops-manifest.json' % MARKER,
                  in_flight=2, in_flight_source='metrics', in_flight_error=None, files=1200, bytes=3_400_000_000,
                  gb=3.4, own=1200, newest=1768385700.0, age=1.2, recent=84, rate_seconds=600.0,
                  rate_files_per_min=84.13, rate_gb_per_hour=0.9, free_gb=83.388, hours_to_full=92.65)
    result.update(run)
    return result


def idle(**run):
    """The extraction result of a node without a recorded run."""
    blank = dict.fromkeys(('mode', 'marker', 'dump_dir', 'pid', 'uptime', 'manifest', 'in_flight', 'in_flight_source',
                           'files', 'bytes', 'gb', 'own', 'newest', 'age', 'recent', 'rate_seconds',
                           'rate_files_per_min', 'rate_gb_per_hour', 'free_gb', 'hours_to_full'))
    blank.update(state='none', dumping=False)
    blank.update(run)
    return status(**blank)


def cells(lines, host):
    """HOST's row as header -> cell (columns are two blanks or more apart; no cell holds two blanks)."""
    header = re.split(r' {2,}', lines[1])
    row = next(line for line in lines[2:] if line.split(' ', 1)[0] == host)
    values = re.split(r' {2,}', row)
    assert len(values) == len(header), lines
    return dict(zip(header, values))


def test_the_table_pads_its_columns_and_the_lines_in_words_follow():
    hostvars = {
        'node1': {'gpuops_extraction_status': status()},
        'gpu-node-02': {'gpuops_extraction_status': status(
            mode='serving', marker='serving-m', uptime=20.4, in_flight=None, in_flight_error=UNKNOWN, dumping=False,
            files=None, gb=None, rate_files_per_min=None, rate_gb_per_hour=None, free_gb=None, hours_to_full=None,
            age=None)},
        'node3': {},
    }

    assert extraction_status(['node1', 'gpu-node-02', 'node3'], hostvars) == [
        'extraction runs of the fleet',
        'host         state    mode        run marker                                  uptime  dumps  GB   dumps/min'
        '  GB/h  free GB  hours to full  in flight  newest s',
        'node1        running  extraction  extraction-20260114T101502Z-node1-9f2c4b17  2h05m   1200   3.4  84.13    '
        '  0.9   83.388   92.65          2          1.2',
        'gpu-node-02  running  serving     serving-m                                   0m20s   -      -    -        '
        '  -     -        -              ?          -',
        'node3        FAILED   -           -                                           -       -      -    -        '
        '  -     -        -              -          -',
        'gpu-node-02: requests in flight unknown (HTTP 401 from /v1/loads); with an API key, run the server with '
        '--enable-metrics',
    ]


@pytest.mark.parametrize('uptime, text', [
    (None, '-'), (0, '0m00s'), (0.4, '0m00s'), (59.99, '0m59s'), (60, '1m00s'), (3599.9, '59m59s'), (3600, '1h00m'),
    (3659.9, '1h00m'), (7512.3, '2h05m'), (90061, '25h01m'),
])
def test_the_uptime_is_hours_and_minutes_from_one_hour_on(uptime, text):
    lines = extraction_status(['node1'], {'node1': {'gpuops_extraction_status': status(uptime=uptime)}})

    assert cells(lines, 'node1')['uptime'] == text


@pytest.mark.parametrize('run, flight', [
    pytest.param(status(in_flight=0), '0', id='none-in-flight'),
    pytest.param(status(in_flight=None, in_flight_error=UNKNOWN), '?', id='running-and-unknown'),
    pytest.param(status(state='down', in_flight=None), '-', id='down'),
    pytest.param(idle(), '-', id='no-run'),
])
def test_requests_in_flight_are_unknown_only_for_a_running_server(run, flight):
    lines = extraction_status(['node1'], {'node1': {'gpuops_extraction_status': run}})

    assert cells(lines, 'node1')['in flight'] == flight


@pytest.mark.parametrize('host_vars', [
    pytest.param({}, id='without-the-fact'),
    pytest.param({'gpuops_extraction_status': {}}, id='empty'),
    pytest.param({'gpuops_extraction_status': None}, id='none'),
])
def test_a_host_without_its_run_is_failed(host_vars):
    lines = extraction_status(['node1'], {'node1': host_vars})

    assert list(cells(lines, 'node1').values()) == ['node1', 'FAILED'] + ['-'] * 11
    assert len(lines) == 3, lines


def test_a_run_without_dumps_shows_blanks_and_zero_stays_zero():
    run = idle(state='drained', mode='extraction', marker='m', files=0, gb=0.0, free_gb=12.5, hours_to_full='')

    row = cells(extraction_status(['node1'], {'node1': {'gpuops_extraction_status': run}}), 'node1')

    assert list(row.values()) == ['node1', 'drained', 'extraction', 'm', '-', '0', '0.0', '-', '-', '12.5', '-', '-',
                                  '-']


def test_a_crashed_run_gets_a_line_and_so_does_an_unknown_count_of_a_running_server():
    hostvars = {'node1': {'gpuops_extraction_status': status(state='down', uptime=None, in_flight=None)},
                'node2': {'gpuops_extraction_status': status(in_flight=None, in_flight_error=UNKNOWN)},
                'node3': {'gpuops_extraction_status': status(state='down', dumping=False)},
                'node4': {'gpuops_extraction_status': status(state='down', in_flight=None, in_flight_error=UNKNOWN)}}

    lines = extraction_status(['node1', 'node2', 'node3', 'node4'], hostvars)

    assert lines[6:] == [
        'node2: requests in flight unknown (HTTP 401 from /v1/loads); with an API key, run the server with '
        '--enable-metrics',
        'node1: the recorded server does not run and its manifest still says running: a crash, which the next stop or '
        'launch records',
        'node4: the recorded server does not run and its manifest still says running: a crash, which the next stop or '
        'launch records',
    ]


def test_only_the_fact_is_read_once(host_vars):
    hostvars = {'node1': host_vars({'gpuops_extraction_status': status(state='down', in_flight_error=UNKNOWN)}),
                'node2': host_vars({})}

    lines = extraction_status(['node1', 'node2'], hostvars)

    assert cells(lines, 'node1')['state'] == 'down' and cells(lines, 'node2')['state'] == 'FAILED'
    assert (hostvars['node1'].reads, hostvars['node2'].reads) == ({'gpuops_extraction_status': 1}, {})


FLEETS = 3000
HOSTS = ('node1', 'gpu-node-02', 'n3', 'a-rather-long-host-name-04', 'node5', 'x')
STATES = ('running', 'down', 'none', 'drained', 'cut', 'crashed', '', None)
ERRORS = (None, '', UNKNOWN, 'connection refused')


def a_value(rnd):
    """A cell's value of any kind that the result may hold: none, empty, zero, a count, a float, a word."""
    return rnd.choice((None, None, '', 0, 0.0, rnd.randrange(100000), round(rnd.uniform(0, 1000), rnd.randrange(4)),
                       rnd.uniform(0, 1e6), True, 'x' * rnd.randrange(1, 30)))


def an_uptime(rnd):
    """An uptime near the hour boundary or near a minute's, as an int or a float, now and then none or 0."""
    return rnd.choice((None, 0, rnd.uniform(3590, 3610), rnd.randrange(3540, 3660), rnd.uniform(0, 100000),
                       round(rnd.uniform(0, 7200), 1), rnd.randrange(0, 200), 59.99, 3599.99, 3600, 3600.0))


def a_run(rnd):
    """A host's variables: without the fact, with none or an empty one, or with a random extraction result."""
    kind = rnd.random()
    if kind < 0.08:
        return {}
    if kind < 0.12:
        return {'gpuops_extraction_status': rnd.choice((None, {}))}
    run = status(**dict((key, a_value(rnd)) for key in ('files', 'gb', 'rate_files_per_min', 'rate_gb_per_hour',
                                                        'free_gb', 'hours_to_full', 'age')))
    run.update(state=rnd.choice(STATES), mode=rnd.choice(('extraction', 'serving', 'tuning', None, '')),
               marker=rnd.choice((MARKER, 'serving-20260114T101502Z-n3-00aa11bb', 'm', None, '')),
               uptime=an_uptime(rnd), in_flight=rnd.choice((None, None, 0, 3, 12)), in_flight_error=rnd.choice(ERRORS),
               dumping=rnd.choice((True, False, None)))
    return {'gpuops_extraction_status': run}


def test_the_lines_are_those_of_the_template_that_the_playbook_printed():
    rnd = random.Random(20260114)
    for fleet in range(FLEETS):
        hosts = rnd.sample(HOSTS, rnd.randrange(1, len(HOSTS) + 1))
        hostvars = dict((host, a_run(rnd)) for host in hosts)

        assert extraction_status(hosts, hostvars) == old_table(hosts, hostvars), (fleet, hosts, hostvars)


def test_the_filter_is_gpuops_host_extraction_status():
    assert FilterModule().filters() == {'extraction_status': extraction_status}

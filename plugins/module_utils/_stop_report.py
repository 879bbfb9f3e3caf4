# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What a stop did, in figures and in words, from the result of sglang_server's stop (_sglang.stop).

``summary`` is the stop's result as gpuops.host.sglang_stop reports it (``sglang_stop_result``): the servers found,
how each was stopped, the requests lost, what needed SIGKILL, the time to clean GPUs. ``said`` is one line for each
thing a reader of the run should know: how a unit or a container stopped its server, each extraction run cut or ended
and what it holds, and what was left running (other users' servers, gateways, GPU holders, other PID namespaces).
"""

from __future__ import annotations


def _pids(items):
    return [item['pid'] for item in items]


def summary(found):
    """The stop's result (sglang_stop_result) from FOUND, the stop's own result."""
    reap = found.get('reap') or {}
    supervised = found.get('supervised_stops') or []
    drains = found.get('drains') or []
    tree = set(proc['pid'] for server in found['servers'] for proc in server.get('tree') or [])
    killed = [s['pid'] for s in reap.get('stopped') or [] if 'SIGKILL' in (s.get('signals') or []) and s['pid'] in tree]
    mains = set(_pids(found['servers']))
    escalated = [s['pid'] for s in supervised if s.get('forced')]
    lost = None if [pid for pid in killed if pid in mains] or escalated else sum(d.get('lost') or 0 for d in drains)
    record = found.get('recorded')
    lock = found.get('lock') or {}
    return {
        'servers': _pids(found['servers']),
        'elsewhere': _pids(found.get('elsewhere') or []),
        'gateways': _pids(found.get('gateways') or []),
        'others': _pids(found.get('others') or []),
        'supervisors': [server['supervisor']['kind'] for server in found['servers']],
        'supervised_stops': supervised,
        'comes_back': found.get('comes_back') or [],
        'runs': found.get('runs') or [],
        'marker': record['marker'] if record else None,
        'in_flight': sum(d.get('in_flight') or 0 for d in drains),
        'forced': bool([d for d in drains if d.get('lost')]),
        'lost': lost,
        'killed': killed,
        'escalated': escalated,
        'exited_on_their_own': not killed and not escalated,
        'seconds_to_clean': round(float(reap.get('elapsed') or 0)
                                  + sum(float(s.get('seconds') or 0) for s in supervised), 2),
        'gpus_verified': len(((reap.get('verify') or {}).get('gpus')) or {}),
        # the run whose host lock the stop released (its lock option): the fleet's own release is then not needed
        'lock_released': ((lock.get('owner') or {}).get('run') or '') if lock.get('released') else '',
    }


def left_running(reap):
    """Lines naming what gpu_reap (REAP, its result) left running: GPU holders it did not select, and the matching
    processes of other PID namespaces."""
    lines = []
    for holder in (reap or {}).get('foreign') or []:
        lines.append('Left running: pid %s (user %s) %s holds %s%s' % (
            holder['pid'], holder.get('user'), holder.get('cmdline'), ', '.join(holder.get('devices') or []),
            ' ' + holder['where'] if holder.get('where') else ''))
    for other in (reap or {}).get('other_namespaces') or []:
        lines.append('Not touched: pid %s %s, %s' % (other['pid'], other.get('cmdline'), other.get('reason')))
    return lines


def said(found, owners, check_mode=False):
    """The lines of FOUND (the stop's result) for the reader: OWNERS are the users whose servers the stop stops."""
    lines = []
    for stop in found.get('supervised_stops') or []:
        how = stop.get('how') or '%s %s' % (stop.get('supervisor'), stop.get('name'))
        if 'seconds' in stop:
            done = 'in %s s, %s' % (stop['seconds'], 'escalated to SIGKILL by its supervisor' if stop.get('forced')
                                    else 'it exited on its own')
        else:
            done = '(check mode: would stop it)'
        lines.append('Stopped through its supervisor: the SGLang server %s, with %s %s' % (stop['pid'], how, done))
    for run in found.get('runs') or []:
        if run.get('cut'):
            lines.append('Cut the active extraction run %s of the SGLang server %s (sglang_stop_cut_active_run): %s holds '
                         '%s dumps, %s GB, the last written %s s before the stop' % (
                             run.get('marker') or '', run['pid'], run.get('path'), run.get('files'), run.get('gb'),
                             run.get('age')))
    if not check_mode:
        for run in found.get('runs') or []:
            if run.get('ended') is None:
                continue
            recent = (', %s of them written within 10 s before the stop (possibly partial)' % run['recent']
                      if (run.get('recent') or 0) > 0 and run['ended'] != 'crashed' else '')
            manifest = '; its manifest: %s' % run['manifest'] if run.get('manifest') else ''
            lines.append('The extraction run %s of the SGLang server %s ended %s: %s holds %s dumps, %s GB%s%s' % (
                run.get('marker') or '', run['pid'], run['ended'], run.get('path'), run.get('files'), run.get('gb'),
                recent, manifest))
    for other in found.get('others') or []:
        lines.append('Not touched: pid %s (user %s) %s, listening on TCP ports %s: another user\'s server '
                     '(sglang_stop_owners are %s); name it in sglang_stop_pids to stop it' % (
                         other['pid'], other.get('user'), other.get('cmdline'),
                         ', '.join(str(p) for p in other.get('ports') or []) or 'none', ', '.join(owners)))
    for gateway in found.get('gateways') or []:
        lines.append('Left running: the SGLang Model Gateway, pid %s (user %s) %s, listening on TCP ports %s' % (
            gateway['pid'], gateway.get('user'), (gateway.get('cmdline') or '').strip(),
            ', '.join(str(p) for p in gateway.get('ports') or [])))
    return lines + left_running(found.get('reap'))

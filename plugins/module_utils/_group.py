# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A server that spans nodes: one SGLang server over the hosts of an inventory group, the same command on each but
``--node-rank`` (``--nnodes N --node-rank R --dist-init-addr HEAD:PORT``, SGLang 0.5.23 server_args.py). Rank 0 runs
the HTTP server, the tokenizer and the drain; a node of rank 1 or more runs only its schedulers and a health server
that answers 200 whatever they do (engine.py ``_launch_subprocesses``).

    node = place({'host': 'gpu-b', 'group': 'glm5', 'members': ['gpu-a', 'gpu-b'], 'ranks': {},
                  'dist_hosts': {'gpu-a': '10.0.0.1'}, 'ansible_hosts': {}, 'port': 20000, 'server_args': {...},
                  'play_hosts': [...], 'batch': [...]})
    node['args']   # {'nnodes': 2, 'node_rank': 1, 'dist_init_addr': '10.0.0.1:20000'}

Everything here is refused with GroupError before anything is touched: ranks that are not 0..N-1 once each, flags set
by hand that disagree with the inventory, and a run that would restart only part of a group (``-l`` naming some of
its hosts, or ``serial`` batches that split it) - a node restarted alone leaves its peers waiting in NCCL until
``--dist-timeout``, holding their GPUs.
"""

from __future__ import annotations

FLAGS = ('nnodes', 'node_rank', 'dist_init_addr')


class GroupError(Exception):
    """The group cannot run as one server; the message says why and what to set."""


def ranks(group, members, explicit):
    """Host -> rank for the MEMBERS of GROUP (in inventory order): EXPLICIT's rank (sglang_launch_node_rank) where a
    host has one, else its place in the group; every rank 0..N-1 exactly once."""
    given = dict((h, explicit.get(h)) for h in members if explicit.get(h) is not None)
    if given and len(given) != len(members):
        raise GroupError('sglang_launch_node_rank is set on %s but not on %s of the group %s: set it on every host of '
                         'the group, or on none (then the inventory order gives the ranks)'
                         % (', '.join(sorted(given)), ', '.join(h for h in members if h not in given), group))
    out = dict((h, int(given[h])) if given else (h, i) for i, h in enumerate(members))
    if sorted(out.values()) != list(range(len(members))):
        raise GroupError('the ranks of the group %s must be 0 to %d, each once; got %s'
                         % (group, len(members) - 1, ', '.join('%s=%s' % (h, out[h]) for h in members)))
    return out


def _address(address, port):
    bare = address[1:-1] if address.startswith('[') and address.endswith(']') else address
    return '[%s]:%d' % (bare, port) if ':' in bare else '%s:%d' % (bare, port)


def place(options):
    """This host's place in its group (see the module's docstring): ``args`` (the three flags), ``rank``, ``nnodes``,
    ``head`` (rank 0's host), ``members`` (the hosts in rank order)."""
    host, group = options['host'], options['group']
    members = list(options.get('members') or [])
    if host not in members:
        raise GroupError('%s is not a host of the inventory group %s (sglang_launch_multinode_group)' % (host, group))
    if len(members) < 2:
        raise GroupError('the group %s has one host (%s): a server on one node needs no sglang_launch_multinode_group'
                         % (group, host))
    by_host = ranks(group, members, options.get('ranks') or {})
    ordered = sorted(members, key=by_host.get)
    head = ordered[0]
    port = int(options['port'])
    if not 0 < port < 65536:
        raise GroupError('sglang_launch_dist_port must be a TCP port, got %r' % options['port'])
    address = ((options.get('dist_hosts') or {}).get(head) or (options.get('ansible_hosts') or {}).get(head)
               or (options.get('addresses') or {}).get(head) or head)
    args = {'nnodes': len(members), 'node_rank': by_host[host], 'dist_init_addr': _address(str(address), port)}
    given = options.get('server_args') or {}
    wrong = ['%s=%s (the inventory gives %s)' % (k, given[k], args[k]) for k in FLAGS
             if given.get(k) is not None and str(given[k]) != str(args[k])]
    if wrong:
        raise GroupError('%s set by hand disagree(s) with the group %s (ranks from sglang_launch_node_rank or the '
                         'inventory order, rank 0 %s at %s): leave them out of sglang_launch_server_args, or fix the '
                         'inventory' % ('; '.join(wrong), group, head, args['dist_init_addr']))
    missing = [h for h in ordered if h not in (options.get('play_hosts') or members)]
    if missing:
        raise GroupError('this run names only part of the group %s: %s %s not in it (a -l limit?). A node restarted '
                         'alone leaves its peers waiting until --dist-timeout, holding their GPUs: run on every host of '
                         'the group (-l %s), or on none; nothing was touched'
                         % (group, ', '.join(missing), 'is' if len(missing) == 1 else 'are', group))
    split = [h for h in ordered if h not in (options.get('batch') or members)]
    if split:
        raise GroupError('the serial batch of this run splits the group %s: %s %s in another batch. Make the batch '
                         'size (gpuops_serial, and a canary of one group) a multiple of the group size (%d) and list '
                         'each group\'s hosts together; nothing was touched'
                         % (group, ', '.join(split), 'is' if len(split) == 1 else 'are', len(members)))
    return {'args': args, 'rank': by_host[host], 'nnodes': len(members), 'head': head, 'members': ordered}


def group_plan(plan, host, restarting):
    """HOST's PLAN (sglang_server_info's) once the group's plans are known: where HOST's server stays but another node
    of the group restarts (RESTARTING, the hosts whose plan restarts), HOST restarts too, each such node a reason;
    PLAN itself otherwise. A node restarted alone would leave its peers waiting in NCCL."""
    others = [h for h in restarting if h != host]
    if plan.get('needs_restart') or not others:
        return plan
    return dict(plan, needs_restart=True, reasons=list(plan.get('reasons') or [])
                + ['node %s of the multi-node server restarts' % h for h in others])


def failure_outcome(result, failed, rolled_back=None, relaunch_failed=()):
    """What a node of a multi-node server whose launch failed on one or more nodes runs now, and says: the node's own
    launch RESULT (its sglang_launch_result: ``status`` failed where this node's launch failed itself), FAILED the other
    nodes whose launch failed; ROLLED_BACK this node's start of the group's previous configuration (sglang_server's
    relaunch result: ``rollback``; None where none was tried) and RELAUNCH_FAILED the nodes where that start failed.
    RESULT updated: ``status`` failed, ``server`` V(rollback) where every node started the previous configuration
    again, else V(none) (every node stopped), ``pid``, ``rollback`` and ``message``."""
    own = result.get('status') == 'failed'
    parts = [result.get('message') or 'the launch failed'] if own else [
        'node(s) %s of the multi-node server failed; this node was stopped with it.' % ', '.join(failed)]
    back = (rolled_back or {}).get('rollback') if rolled_back is not None else None
    ok = rolled_back is not None and not relaunch_failed and bool((back or {}).get('ok'))
    if ok:
        parts.append('The previous configuration (%s) was started again on every node of the multi-node server and '
                     'passed its checks: %s serves again.' % (back['marker'], back['marker']))
    elif rolled_back is not None:
        why = (back or {}).get('message') or (rolled_back.get('msg') if rolled_back.get('failed') else None)
        parts.append('The previous configuration could not be started again on every node (%s)%s, so every node of the '
                     'multi-node server was stopped again.' % (', '.join(relaunch_failed) or 'none',
                                                               ': %s' % why if why else ''))
    return dict(result, status='failed', server='rollback' if ok else 'none',
                pid=(back or {}).get('pid') if ok else None, rollback=back, message=' '.join(parts))

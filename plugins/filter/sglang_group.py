# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
name: sglang_group
short_description: A host's place in an SGLang server that spans the hosts of an inventory group
version_added: 0.3.0
description:
  - One SGLang server over several nodes runs the same command on each but C(--node-rank) - C(--nnodes N --node-rank R
    --dist-init-addr HEAD:PORT). This filter gives a host its three flags from the inventory group that the server
    spans - the ranks from each host's C(sglang_launch_node_rank) where every host has one, else from the group's
    order; rank 0's address (C(sglang_launch_dist_host), else its C(ansible_host), else its name) and C(port).
  - It fails, naming what to set, where the ranks are not 0 to N-1 each once, where the server's arguments set one of
    the flags by hand to another value, and where the run would restart part of the group only - C(play_hosts) (a
    C(-l) limit) or C(batch) (a C(serial) batch) lacking one of its hosts - since a node restarted alone leaves its
    peers waiting in NCCL until C(--dist-timeout), holding their GPUs.
options:
  _input:
    description:
      - C(host), C(group), C(members) (the group's hosts, in inventory order), C(hostvars) (host to its variables,
        whose C(sglang_launch_node_rank), C(sglang_launch_dist_host) and C(ansible_host) are read) or, instead,
        C(ranks) (host to rank, where set) and C(dist_hosts) and C(ansible_hosts) (host to address, the first
        preferred), C(port), C(server_args) (those set by hand), C(play_hosts), C(batch).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Place this node in its group
  ansible.builtin.set_fact:
    node: >-
      {{ {'host': inventory_hostname, 'group': 'glm5', 'members': groups['glm5'],
          'hostvars': dict(groups['glm5'] | zip(groups['glm5'] | map('extract', hostvars))),
          'port': 20000, 'server_args': {}, 'play_hosts': ansible_play_hosts_all, 'batch': ansible_play_batch}
         | gpuops.host.sglang_group }}
"""

RETURN = r"""
_value:
  description: C(args) (C(nnodes), C(node_rank), C(dist_init_addr)), C(rank), C(nnodes), C(head) (rank 0's host), C(members) (in rank order).
  type: dict
  sample: {args: {nnodes: 2, node_rank: 1, dist_init_addr: "10.0.0.1:20000"}, rank: 1, nnodes: 2, head: gpu-a,
           members: [gpu-a, gpu-b]}
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.host.plugins.module_utils._group import GroupError, place


# What the filter reads of each member's host variables, where C(hostvars) is given.
READS = {'ranks': 'sglang_launch_node_rank', 'dist_hosts': 'sglang_launch_dist_host', 'ansible_hosts': 'ansible_host'}


def from_hostvars(options):
    """OPTIONS with ranks, dist_hosts and ansible_hosts read from its ``hostvars`` (host -> its variables), where
    given: each member's sglang_launch_node_rank, sglang_launch_dist_host and ansible_host, unset ones left out."""
    found = options.get('hostvars')
    if found is None:
        return options
    out = dict((k, v) for k, v in options.items() if k != 'hostvars')
    for key, name in READS.items():
        out[key] = {}
        for host in options.get('members') or []:
            value = found[host][name] if host in found and name in found[host] else None
            if value is not None:
                out[key][host] = value
    return out


def sglang_group(options):
    """This host's place in its group (see DOCUMENTATION)."""
    if not isinstance(options, dict) or not options.get('host') or not options.get('group'):
        raise AnsibleFilterError('sglang_group takes a dict with host, group, members and port')
    try:
        return place(from_hostvars(options))
    except GroupError as e:
        raise AnsibleFilterError(str(e))
    except (TypeError, ValueError, KeyError) as e:
        raise AnsibleFilterError('sglang_group: %s' % e)


class FilterModule:
    def filters(self):
        return {'sglang_group': sglang_group}

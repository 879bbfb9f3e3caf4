# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which scheduler ranks a node runs, and on which GPU (0.5.23 sglang/srt/entrypoints/engine.py).

One server over N nodes runs the same command on every node but --node-rank; each node spawns
only its own share of the ranks (Engine._launch_scheduler_processes over _calculate_rank_ranges).
With one node the share is every rank and the GPU of rank r is base_gpu_id + r x gpu_id_step.
"""

from __future__ import annotations


def _calculate_rank_ranges(server_args, node_rank: int) -> tuple:
    """engine.py _calculate_rank_ranges: (pp_rank_range, tp_rank_range, pp_size_per_node,
    tp_size_per_node) of NODE_RANK. The release reads the sizes from its published context; the
    stand-in from SERVER_ARGS."""
    nnodes = server_args.nnodes
    pp_size_per_node = max(server_args.pp_size // nnodes, 1)
    nnodes_per_pp_rank = max(nnodes // server_args.pp_size, 1)
    pp_rank_range = range(pp_size_per_node * (node_rank // nnodes_per_pp_rank),
                          pp_size_per_node * (node_rank // nnodes_per_pp_rank + 1))
    nnodes_per_tp_group = nnodes_per_pp_rank
    tp_size_per_node = server_args.tp_size // nnodes_per_tp_group
    tp_rank_range = range(tp_size_per_node * (node_rank % nnodes_per_tp_group),
                          tp_size_per_node * (node_rank % nnodes_per_tp_group + 1))
    return pp_rank_range, tp_rank_range, pp_size_per_node, tp_size_per_node


def scheduler_gpu_id(server_args, tp_rank: int, pp_rank: int = 0) -> int:
    """The local GPU id of a rank, as Engine._launch_scheduler_processes computes it:
    base_gpu_id + (pp_rank % pp_size_per_node) x tp_size_per_node + (tp_rank % tp_size_per_node) x gpu_id_step."""
    dummy, dummy, pp_size_per_node, tp_size_per_node = _calculate_rank_ranges(server_args, server_args.node_rank)
    return (server_args.base_gpu_id + (pp_rank % pp_size_per_node) * tp_size_per_node
            + (tp_rank % tp_size_per_node) * server_args.gpu_id_step)


def local_tp_ranks(server_args) -> list:
    """The TP ranks this node (--node-rank) spawns."""
    return list(_calculate_rank_ranges(server_args, server_args.node_rank)[1])

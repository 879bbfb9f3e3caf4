# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The action of every gpuops.host module: the module itself, run as ansible.builtin.normal runs it, in a worker whose
inherited objects the cyclic garbage collector no longer walks.

Each task runs in a worker that ansible-playbook forks for it, holding a copy of the whole controller (its plays,
inventory, variables and plugins), all of which lives until the worker exits. Before the module runs, Ansible
assembles its payload: it parses the module and every module_utils file it imports, about 0.4 MB of ansible-core's
and up to 0.5 MB of this collection's for gpuops.host.sglang_server, hundreds of thousands of syntax-tree objects.
Their allocation triggers collections, and each full collection walks every object of the worker, the inherited
ones included (writing to their pages, which the fork then copies). gc.freeze() moves what the worker holds when the
action starts into the permanent generation, as CPython's documentation advises for forked children: collections
then walk only what the task itself allocates, and still free it. make bench measures the difference.
"""

from __future__ import annotations

import gc

from ansible.plugins.action.normal import ActionModule as NormalAction


class ModuleAction(NormalAction):
    """ansible.builtin.normal, with the worker's inherited objects frozen first."""

    def run(self, tmp=None, task_vars=None):
        gc.freeze()
        return super().run(tmp, task_vars)

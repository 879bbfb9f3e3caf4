# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The action of gpuops.host.sglang_gateway: the module, run as every gpuops.host module is (plugin_utils/_action.py)."""

from __future__ import annotations

from ansible_collections.gpuops.host.plugins.plugin_utils._action import ModuleAction


class ActionModule(ModuleAction):
    pass

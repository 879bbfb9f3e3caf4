# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The variables of the task that runs a lookup, read by name as the task sees them."""

from __future__ import annotations


def reader(templar, variables):
    """``get(name, default=None)``: the variable NAME of VARIABLES templated by TEMPLAR, DEFAULT when unset. Each
    variable is templated once per reader: a lookup may read one more than once."""
    templated = {}

    def get(name, default=None):
        if name not in variables:
            return default
        if name not in templated:
            templated[name] = templar.template(variables[name])
        return templated[name]

    return get

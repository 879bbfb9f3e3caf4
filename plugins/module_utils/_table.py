# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The fleet tables that the playbooks print (the filters fleet_summary and extraction_status): cells and columns."""

from __future__ import annotations


def cell(value):
    """A cell's text: '-' when it says nothing."""
    return '-' if value is None or value == '' else str(value)


def columns(rows):
    """ROWS (lists of cell texts) padded into columns two blanks apart, each line stripped of trailing blanks."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return ['  '.join(text.ljust(width) for text, width in zip(row, widths)).strip() for row in rows]

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What a converging call did, in order, each step with its seconds: the ``actions`` of gpuops.host.sglang_server.

    timeline = Timeline(time.monotonic)
    with timeline.step('stop') as entry:
        entry['servers'] = [4242]
    timeline.done   # [{'action': 'stop', 'servers': [4242], 'seconds': 2.05}]

A step that raises is kept with ``failed: true``; in check mode, ``would`` notes a step that is not taken.
"""

from __future__ import annotations

import contextlib


class Timeline:
    def __init__(self, clock):
        self.clock = clock
        self.done = []

    @contextlib.contextmanager
    def step(self, action, **detail):
        entry = dict(action=action, **detail)
        began = self.clock()
        try:
            yield entry
        except BaseException:
            entry['failed'] = True
            raise
        finally:
            entry['seconds'] = round(self.clock() - began, 2)
            self.done.append(entry)

    def would(self, action, **detail):
        """ACTION, which check mode does not take."""
        self.done.append(dict(action=action, seconds=0.0, would=True, **detail))

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The steps of a converging call (_timeline.Timeline): in order, each with its seconds on the clock it is given, a
failing one kept and marked, and the steps that check mode does not take."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.host.plugins.module_utils._timeline import Timeline


class Clock:
    """A clock that reads the next of TIMES each time it is asked."""

    def __init__(self, *times):
        self.times = list(times)

    def __call__(self):
        return self.times.pop(0)


def test_steps_are_kept_in_order_with_their_details_and_seconds():
    timeline = Timeline(Clock(10.0, 12.054, 12.054, 12.3, 12.3, 12.3))
    with timeline.step('stop') as entry:
        entry['servers'] = [4242]
    with timeline.step('start', kind='process') as entry:
        entry['pid'] = 4300
    with timeline.step('wait', path='/health'):
        pass
    assert timeline.done == [{'action': 'stop', 'servers': [4242], 'seconds': 2.05},
                             {'action': 'start', 'kind': 'process', 'pid': 4300, 'seconds': 0.25},
                             {'action': 'wait', 'path': '/health', 'seconds': 0.0}]


class Boom(Exception):
    pass


def test_a_failing_step_is_kept_marked_failed_and_its_exception_goes_on():
    timeline = Timeline(Clock(0.0, 1.5, 1.5, 4.0))
    with timeline.step('stop') as entry:
        entry['servers'] = []
    with pytest.raises(Boom):
        with timeline.step('check', check='probe'):
            raise Boom('no dump')
    assert timeline.done == [{'action': 'stop', 'servers': [], 'seconds': 1.5},
                             {'action': 'check', 'check': 'probe', 'failed': True, 'seconds': 2.5}]


def test_would_notes_a_step_not_taken_without_reading_the_clock():
    timeline = Timeline(Clock(0.0, 0.5))
    with timeline.step('stop', check_mode=True):
        pass
    timeline.would('start', kind='systemd')
    timeline.would('check', check='gpus')
    assert timeline.done == [{'action': 'stop', 'check_mode': True, 'seconds': 0.5},
                             {'action': 'start', 'kind': 'systemd', 'seconds': 0.0, 'would': True},
                             {'action': 'check', 'check': 'gpus', 'seconds': 0.0, 'would': True}]

#!/usr/bin/python
# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_lock
short_description: Take, check or release the per-host lock of a gpuops run
version_added: 0.2.0
description:
  - Keeps two runs from acting on one host at once. The lock is the file C(lock.json) in O(path), a directory
    that belongs to the user the module runs as (root) with mode 0700, so no other user can create, hold or
    remove the lock. The module creates the directory when it is missing. Something else at O(path) - a directory
    that another user owns or can enter, a link, a file - cannot hold a lock of a gpuops run, so an unprivileged
    user cannot block runs with it - it is renamed to C(<path>.untrusted-<time>-<pid>) and a new directory made.
  - The lock file is created with its owner's record already in it (O(run), O(owner), and the host's own PID and
    time, its boot ID and its boot-time clock). A run finds the lock held when another run's record is younger than
    O(max_age), and fails naming that run. Age is judged by the boot-time clock (C(CLOCK_BOOTTIME)), which a step of
    the wall clock does not move, when the record was taken in this boot (C(/proc/sys/kernel/random/boot_id)); a
    record of an earlier boot is stale, and one without a boot ID (written by an earlier release) is judged by the
    wall clock.
  - A stale lock (older than O(max_age), or dated more than a minute in the future) is replaced in one step by
    the C(rename) system call and read back. Every reading and change happens under C(flock) on O(path), which the kernel
    drops when the module exits, so of two runs that race for one stale lock exactly one takes it.
  - O(state=held) changes nothing; it checks that the lock file still names O(run), and fails naming the run that
    holds the lock now (or saying that nobody does) when it does not. A run that holds the lock longer than
    O(max_age) can lose it to another controller that breaks it as stale; checking right before each step that
    must not run twice at once (stopping a server, starting one) keeps such a run from acting on the host after
    that.
  - O(state=absent) removes the lock only when O(run) holds it, so a run that failed to take the lock never
    releases another run's.
author:
  - gpuops maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.host.attributes
attributes:
  check_mode:
    support: full
    details:
      - Reports whether the lock would be taken or released; neither takes nor removes a lock, nor creates O(path).
        O(state=held) checks the lock as in a real run.
  diff_mode:
    support: none
  idempotent:
    support: full
    details:
      - Taking a lock that O(run) already holds, or releasing one it does not hold, changes nothing; O(state=held)
        never changes anything.
options:
  path:
    description: Directory of the lock. It must not be writable or enterable by other users (mode 0700).
    type: path
    default: /run/gpuops
  state:
    description:
      - V(present) takes the lock for O(run).
      - V(held) checks that O(run) still holds it and fails, naming the holder, when it does not.
      - V(absent) releases it if O(run) holds it.
    type: str
    choices: [present, held, absent]
    default: present
  run:
    description:
      - Name of the run that takes, checks or releases the lock; the token that the lock file names while this run
        holds it, so it must be unique to the run (the gpuops playbooks use the UTC time and a random number).
    type: str
    required: true
  owner:
    description:
      - More about the run, written into the record and quoted to a run that finds the lock held, for example
        C(playbook), C(controller), C(controller_pid) and C(user).
    type: dict
    default: {}
  max_age:
    description:
      - Seconds after which a lock counts as stale, its run as dead, by the host's boot-time clock.
      - Not read by O(state=held) and O(state=absent).
    type: int
    default: 21600
"""

EXAMPLES = r"""
- name: Take the lock of this host
  gpuops.host.host_lock:
    run: "{{ run_id }}"
    owner:
      playbook: "{{ ansible_play_name }}"
      controller: "{{ lookup('ansible.builtin.pipe', 'hostname') }}"

- name: Check, right before the server is stopped, that no other run has taken the lock over
  gpuops.host.host_lock:
    run: "{{ run_id }}"
    state: held

- name: Release it
  gpuops.host.host_lock:
    run: "{{ run_id }}"
    state: absent
"""

RETURN = r"""
lock:
  description: Path of the lock file.
  returned: always
  type: str
  sample: /run/gpuops/lock.json
owner:
  description:
    - The record of the run that holds the lock after the call (O(state=present), O(state=held)), or of another run
      whose lock was left in place (O(state=absent)); V(null) when no lock is left.
    - C(run), the keys of O(owner), C(host_pid), C(taken) (seconds since the epoch, host clock) and C(taken_utc).
  returned: always
  type: dict
  sample: {"run": "20260101T000000Z-42", "playbook": "Restart SGLang in serving mode", "host_pid": 4242,
           "taken": 1767225600.0, "taken_utc": "2026-01-01T00:00:00Z"}
taken_over:
  description: The record of the stale lock that was replaced, V(null) when none was.
  returned: O(state=present)
  type: dict
  sample: null
moved_aside:
  description: Where what another user had put at O(path) was moved; absent when nothing was.
  returned: when something other than a root-only directory was at O(path)
  type: str
  sample: /run/gpuops.untrusted-1767225600-4242
released:
  description: Whether O(run) held the lock that was removed.
  returned: O(state=absent)
  type: bool
  sample: true
holder:
  description:
    - The record of the run that holds the lock, when the module fails because the lock is held (O(state=present)) or
      because another run holds it now (O(state=held)); V(null) when O(state=held) finds no lock at all.
  returned: failure
  type: dict
  sample: {"run": "20260101T060100Z-77", "playbook": "Restart SGLang in serving mode", "controller": "ops-2",
           "host_pid": 5151, "taken": 1767247260.0, "taken_utc": "2026-01-01T06:01:00Z"}
age:
  description:
    - Age in seconds, by the host's clock, of the lock that is held, when the module fails because of it; V(null) when
      O(state=held) finds no lock.
  returned: failure
  type: float
  sample: 12.5
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.host.plugins.module_utils._lock import ERRORS, HostLock, act, argument_spec, failure


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    p = module.params
    lock = HostLock(p['path'])
    try:
        result = act(lock, p['state'], p['run'], p['owner'], p['max_age'], module.check_mode)
    except ERRORS as e:
        module.fail_json(**failure(lock, e))
    module.exit_json(lock=lock.path, **result)


if __name__ == '__main__':
    main()

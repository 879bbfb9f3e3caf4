#!/usr/bin/python
# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: dump_dir
short_description: Make the run directory of a server's hidden-state dumps, following no link
version_added: 0.3.0
description:
  - Makes the directory O(name) under the dump root O(root) for one run of a server, as root, on a host where other
    users can write files.
  - The dump root and every directory above it must belong to root or to the server's user (O(owner)) and be
    writable by nobody else; above the dump root a sticky directory (such as C(/tmp)) is allowed. A link on the way
    is accepted only where it sits in such a directory. Anything else fails the module before a directory is made,
    naming the path, its owner and its mode.
  - The run directory is created with C(mkdir) relative to an open descriptor of the checked dump root, so an
    entry already at O(name) - a directory of an earlier run, a link that a user planted, a FIFO - fails the module
    and is neither used nor followed. Earlier dumps are never overwritten or deleted.
  - The new directory belongs to O(owner) and O(group) with mode 2750. A server that runs with umask 027 writes its
    dumps there as mode 0640 files of O(group) (the setgid bit), so the members of O(group) can read them and
    nobody else can.
  - O(state=absent) removes the run directory only when it is an empty directory (C(rmdir), which follows no
    link), for a launch that failed before its server wrote anything there; anything else at O(name) is kept and
    reported.
  - With O(manifest_from), the run directory must exist already (this launch made it), and the module writes the
    run's manifest into it - C(gpuops-manifest.json), JSON of schema 1, from the server's record (O(manifest_from))
    and the files under the run directory (counted and sized, never opened), marked C(ended) V(running).
    M(gpuops.host.sglang_server) completes it when the run ends (V(drained), V(cut) or V(crashed)). The directory is
    opened relative to the checked dump root with C(O_NOFOLLOW) and must belong to the server's user or root; the
    manifest is written to a new temporary file beside its name (C(O_CREAT|O_EXCL|O_NOFOLLOW)), given to root and
    the record's dump group with mode 0640 through its descriptor, synced, and renamed over its name - so a link or
    anything else that the server's user put at that name is replaced, never followed. The schema is documented in
    the collection's README.
author:
  - gpuops maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.host.attributes
attributes:
  check_mode:
    support: full
    details:
      - Makes every check of a real run (the dump root, its free space, nothing at O(name)) and creates or removes
        nothing.
  diff_mode:
    support: none
  idempotent:
    support: none
    details:
      - O(state=present) makes a new directory or fails; a second run with the same O(name) fails, because the name
        is then taken. O(state=absent) is idempotent. O(manifest_from) writes the manifest anew each time (its counts
        and time change).
options:
  root:
    description: The dump root, an existing directory, usually a volume of its own.
    type: path
    required: true
  name:
    description: Name of the run directory, a plain name (letters, digits, C(.), C(_), C(-); no C(/), no C(..)).
    type: str
    required: true
  state:
    description:
      - V(present) makes the directory, and fails when something is at O(name) already.
      - V(absent) removes it when it is an empty directory.
    type: str
    choices: [present, absent]
    default: present
  owner:
    description: UID of the server's user, owner of the new directory. The dump root may belong to it too.
    type: int
    default: 0
  group:
    description: GID of the group that reads the dumps (the new directory's group).
    type: int
    default: 0
  min_free_gb:
    description: Free space, in GB (10^9 bytes), that the dump root's file system must have, for O(state=present).
    type: float
    default: 0
  manifest_from:
    description:
      - The record of the server (C(server.json) of the C(sglang_launch) role) whose run the directory O(name) holds.
        With it, the existing run directory is not made but gets the run's manifest; the record must name it as its
        C(dump_dir), and be the record of a launch that passed its checks.
      - The owner and group of the directory and the manifest come from the record; O(owner), O(group) and
        O(min_free_gb) are not used.
    type: path
  dump_patterns:
    description:
      - With O(manifest_from), the name patterns (shell-style) of the files under the run directory that count as
        dumps; every regular file by default. The manifest is never a dump.
    type: list
    elements: str
    default: ['*']
"""

EXAMPLES = r"""
- name: Check the dump root before anything is stopped (a check-mode call makes every check and nothing else)
  gpuops.host.dump_dir:
    root: /data/hs_dumps
    name: "{{ run_marker }}"
    owner: "{{ server_uid }}"
    group: "{{ training_gid }}"
    min_free_gb: 100
  check_mode: true

- name: Make the run directory
  gpuops.host.dump_dir:
    root: /data/hs_dumps
    name: "{{ run_marker }}"
    owner: "{{ server_uid }}"
    group: "{{ training_gid }}"
  register: run_dir

- name: Write the run's manifest once its server was proven ready and recorded
  gpuops.host.dump_dir:
    root: /data/hs_dumps
    name: "{{ run_marker }}"
    manifest_from: /var/lib/gpuops/sglang/server.json

- name: Remove it again after a launch that failed before its server started
  gpuops.host.dump_dir:
    root: /data/hs_dumps
    name: "{{ run_marker }}"
    state: absent
"""

RETURN = r"""
path:
  description: Path of the run directory (under O(root) as given).
  returned: always
  type: str
  sample: /data/hs_dumps/extraction-20260101T000000Z-node1-3f9a2c
owner:
  description: UID of the new directory's owner.
  returned: O(state=present)
  type: int
  sample: 1001
group:
  description: GID of the new directory's group.
  returned: O(state=present)
  type: int
  sample: 2001
mode:
  description: Mode of the new directory.
  returned: O(state=present)
  type: str
  sample: "2750"
free_gb:
  description: Free space of the dump root's file system, in GB.
  returned: O(state=present)
  type: float
  sample: 1843.2
removed:
  description: Whether the empty run directory was removed.
  returned: O(state=absent)
  type: bool
  sample: true
kept:
  description: Why the entry at O(name) was kept, V(null) when it was removed or nothing was there.
  returned: O(state=absent)
  type: str
  sample: it holds 12 entries
manifest:
  description: The path of the manifest written, V(null) in check mode.
  returned: O(manifest_from) is set
  type: str
  sample: /data/hs_dumps/extraction-20260101T000000Z-node1-3f9a2c/gpuops-manifest.json
ended:
  description: How the manifest says the run ended - V(running).
  returned: O(manifest_from) is set
  type: str
  sample: running
files:
  description: The run's dumps so far (those written before the server was proven ready are its warm-up's, in RV(own)).
  returned: O(manifest_from) is set
  type: int
  sample: 0
bytes:
  description: Their bytes.
  returned: O(manifest_from) is set
  type: int
  sample: 0
own:
  description: The readiness checks', the probe's and the warm-up's own dumps, counted apart.
  returned: O(manifest_from) is set
  type: int
  sample: 4
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.host.plugins.module_utils._dump_dir import DumpDir, DumpDirError
from ansible_collections.gpuops.host.plugins.module_utils._manifest import ManifestError, running


def manifest(p, check_mode):
    """The manifest of the run that the record P['manifest_from'] names, written into the run directory that P's
    root and name make (_manifest.running)."""
    return running(p['manifest_from'], os.path.join(p['root'], p['name']), time.time(), p['dump_patterns'], check_mode)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type='path', required=True),
            name=dict(type='str', required=True),
            state=dict(type='str', choices=['present', 'absent'], default='present'),
            owner=dict(type='int', default=0),
            group=dict(type='int', default=0),
            min_free_gb=dict(type='float', default=0),
            manifest_from=dict(type='path'),
            dump_patterns=dict(type='list', elements='str', default=['*']),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p['manifest_from'] and p['state'] != 'present':
        module.fail_json(msg='manifest_from writes the manifest of an existing run directory: state must be present')
    try:
        run_dir = DumpDir(p['root'], p['name'], p['owner'], p['group'])
        if p['manifest_from']:
            result = manifest(p, module.check_mode)
        elif p['state'] == 'present':
            result = run_dir.create(p['min_free_gb'], module.check_mode)
        else:
            result = run_dir.remove_if_empty(module.check_mode)
    except (DumpDirError, ManifestError) as e:
        module.fail_json(msg='%s.' % e, path='%s/%s' % (p['root'], p['name']))
    except OSError as e:
        module.fail_json(msg='Cannot make or remove the run directory %s/%s: %s' % (p['root'], p['name'], e))
    module.exit_json(**result)


if __name__ == '__main__':
    main()

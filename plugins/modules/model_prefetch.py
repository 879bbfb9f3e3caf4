#!/usr/bin/python
# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: model_prefetch
short_description: Read a model's weight files into the page cache before a server loads them
version_added: 0.2.0
description:
  - Reads the files of a model directory that are not yet in memory into the operating system's page cache, so
    that a server started next (SGLang reads C(*.safetensors) shards from disk at load) reads them from memory.
    Run it while the old server still serves, before it is stopped, to take the disk reads out of the downtime.
  - Which pages are in memory is read with C(mincore(2)); only the byte ranges that are not are read, so a second
    run on a warm cache reads nothing and reports no change.
  - Before it reads anything, the module refuses a prefetch that would leave less than O(min_available_mib) of
    C(MemAvailable) (C(/proc/meminfo)); while reading, it checks again every 64 MiB and stops with an error when
    C(MemAvailable) has fallen under it. The page cache it fills can be reclaimed by the kernel at any time; it
    never holds memory that a process needs.
  - O(bandwidth_mib) caps the read rate, so that the prefetch does not starve the disk of a server still at work
    (for example one writing hidden-state dumps).
author:
  - gpuops maintainers (@gpuops)
requirements:
  - Linux (C(mincore(2)), C(/proc/meminfo) with C(MemAvailable)).
extends_documentation_fragment:
  - gpuops.host.attributes
options:
  path:
    description:
      - A model directory, or one file.
    type: path
    required: true
  patterns:
    description:
      - Shell patterns of the file names to read under O(path); SGLang's default loader reads C(*.safetensors)
        and falls back to C(*.bin) and C(*.pt).
    type: list
    elements: str
    default: ['*.safetensors', '*.bin', '*.pt', '*.pth']
  recurse:
    description:
      - Look in the subdirectories of O(path) too.
    type: bool
    default: true
  bandwidth_mib:
    description:
      - Most MiB read per second, averaged from the start; V(0) reads as fast as the disk allows.
    type: float
    default: 0
  min_available_mib:
    description:
      - C(MemAvailable) in MiB that must remain after the files are read; the prefetch refuses to start, or stops,
        below it.
    type: float
    default: 4096
  timeout:
    description:
      - Seconds after which the prefetch stops, with an error that says how far it got; V(0) for no bound.
      - Checked before each file's look at the page cache and before each read of at most 8 MiB. A file is opened
        with C(O_NONBLOCK) and read only when C(fstat) shows a regular file, so a FIFO or a device swapped in for a
        model file is skipped at once, never waited for; a read that the kernel blocks (a hung network file
        system) is not interrupted.
    type: float
    default: 900
attributes:
  check_mode:
    support: full
    details:
      - Plans the reads and applies the memory check, then reads nothing; RV(bytes_to_read) is what a real run
        would read now.
  diff_mode:
    support: none
  idempotent:
    support: full
    details:
      - A run after a run that read everything finds the files in memory and reads nothing, unless the kernel
        has evicted pages in between.
notes:
  - The files are read, not locked in memory; under memory pressure the kernel may evict the pages again before
    the server loads them. Run the prefetch shortly before the restart.
  - SGLang 0.5.23 can itself prefetch while loading (C(--weight-loader-prefetch-checkpoints)) and drop the pages
    after loading (C(--weight-loader-drop-cache-after-load)); with the latter set, the cache is cold at every
    restart and this module is what warms it.
"""

EXAMPLES = r"""
- name: Read the new model into memory while the old server still serves
  gpuops.host.model_prefetch:
    path: /models/GLM-5
    bandwidth_mib: 2000
    min_available_mib: 65536
  register: prefetch

- name: Show how much was read
  ansible.builtin.debug:
    msg: "{{ prefetch.bytes_read // 1048576 }} MiB in {{ prefetch.seconds }} s"

- name: Read one checkpoint shard only
  gpuops.host.model_prefetch:
    path: /models/GLM-5/model-00001-of-00141.safetensors
"""

RETURN = r"""
skipped:
  description:
    - Files listed but not read, with the reason - one that was no longer a regular file when it was opened (a FIFO
      or a link swapped in since the listing; files are opened with C(O_NOFOLLOW|O_NONBLOCK) and checked with
      C(fstat)), so that the read neither blocks nor leaves the model's directories.
  returned: success
  type: list
  elements: dict
  sample: [{path: /models/qwen/model-00001.safetensors, reason: not a regular file (it changed since it was listed)}]
bytes_total:
  description: Size of the files matched.
  returned: success
  type: int
  sample: 1395864371200
bytes_resident_before:
  description: Bytes of those files that were in memory before the run.
  returned: success
  type: int
  sample: 0
bytes_to_read:
  description: Bytes that were not in memory, which a real run reads.
  returned: success
  type: int
  sample: 1395864371200
bytes_read:
  description: Bytes read; V(0) in check mode.
  returned: success
  type: int
  sample: 1395864371200
seconds:
  description: Seconds the reads took.
  returned: success
  type: float
  sample: 412.5
mib_per_second:
  description: Read rate; V(null) when nothing was read.
  returned: success
  type: float
  sample: 3227.1
available_mib_before:
  description: C(MemAvailable) in MiB before the reads.
  returned: success
  type: float
  sample: 1843200.0
available_mib_after:
  description: C(MemAvailable) in MiB after the reads.
  returned: success
  type: float
  sample: 1841020.5
files:
  description: Each file matched, with its size, the bytes in memory before the run and the bytes read.
  returned: success
  type: list
  elements: dict
  sample:
    - path: /models/GLM-5/model-00001-of-00141.safetensors
      size: 9899908912
      resident_before: 0
      read: 9899908912
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.host.plugins.module_utils._prefetch import DEFAULT_PATTERNS, PrefetchError, prefetch


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type='path', required=True),
            patterns=dict(type='list', elements='str', default=list(DEFAULT_PATTERNS)),
            recurse=dict(type='bool', default=True),
            bandwidth_mib=dict(type='float', default=0),
            min_available_mib=dict(type='float', default=4096),
            timeout=dict(type='float', default=900),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = prefetch(p['path'], p['patterns'], p['recurse'], p['bandwidth_mib'], p['min_available_mib'],
                          module.check_mode, timeout=p['timeout'])
    except PrefetchError as e:
        module.fail_json(msg=str(e), **e.result)
    except OSError as e:
        module.fail_json(msg='Cannot read %s: %s' % (e.filename or p['path'], e.strerror or e))
    module.exit_json(**result)


if __name__ == '__main__':
    main()

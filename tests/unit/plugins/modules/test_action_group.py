# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""In an action group an option name means one thing: a play's module_defaults for group/gpuops.host.gpu reaches
every module of the group, so an option that two of them share must have the same type, default and choices in
both (a timeout meant for gpu_verify's NVML wait must never become another module's drain timeout)."""

from __future__ import annotations

import importlib
import itertools
import os

import yaml

ROOT = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..')


def group_modules():
    with open(os.path.join(ROOT, 'meta', 'runtime.yml')) as f:
        return yaml.safe_load(f)['action_groups']['gpu']


def options(name):
    module = importlib.import_module('ansible_collections.gpuops.host.plugins.modules.%s' % name)
    doc = yaml.safe_load(module.DOCUMENTATION)
    found = dict(doc.get('options') or {})
    # options of the documentation fragments the module extends (verify_wait, nvml)
    for fragment in doc.get('extends_documentation_fragment') or []:
        parts = fragment.split('.')
        if parts[:2] != ['gpuops', 'host']:
            continue
        frag = importlib.import_module('ansible_collections.gpuops.host.plugins.doc_fragments.%s' % parts[2])
        text = getattr(frag.ModuleDocFragment, parts[3].upper() if len(parts) > 3 else 'DOCUMENTATION')
        found.update((yaml.safe_load(text) or {}).get('options') or {})
    return found


def test_every_option_shared_in_the_gpu_group_means_the_same_thing():
    names = group_modules()
    assert 'sglang_server' not in names
    clashes = []
    for a, b in itertools.combinations(names, 2):
        oa, ob = options(a), options(b)
        for opt in sorted(set(oa) & set(ob)):
            fields = ('type', 'default', 'choices', 'elements')
            if any(oa[opt].get(f) != ob[opt].get(f) for f in fields):
                clashes.append('%s: %s %r, %s %r' % (opt, a, dict((f, oa[opt].get(f)) for f in fields),
                                                     b, dict((f, ob[opt].get(f)) for f in fields)))
    assert clashes == []

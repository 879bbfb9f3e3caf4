# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A server's configuration, what makes a running server stale, and their comparison.

An identity is a plain dict. The desired configuration (as sglang_launch renders it): ``mode``, ``argv`` (the
command line, no secret on it), ``args`` (the arguments, where a --config file carries them), ``environment`` (the
public variables), ``secrets`` (a digest of the secret arguments and variables, never their values),
``supervisor``, ``unit``, ``container``, ``user``, ``group``, ``dumps``, ``run_name``. What the node has now:
``sglang`` (the installed release), ``dump_patch`` (a digest of the hidden-state dump patch, in a dumping mode),
``model`` (a fingerprint of the model directory), ``image`` (a container image's ID). ``compare(before, after)``
says in words what differs.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import shlex
import stat

from ansible_collections.gpuops.host.plugins.module_utils._procs import read_regular

# In the order that reasons and the diff name them: the field and its words.
FIELDS = (
    ('mode', 'mode'),
    ('argv', 'command line'),
    ('args', 'server arguments'),
    ('environment', 'environment'),
    ('secrets', 'secret arguments or variables'),
    ('supervisor', 'supervisor'),
    ('unit', 'systemd unit'),
    ('container', 'container'),
    ('user', 'user'),
    ('group', 'group'),
    ('dumps', 'dump root and group'),
    ('run_name', 'run name'),
    ('sglang', 'SGLang release'),
    ('dump_patch', 'hidden-state dump patch'),
    ('model', 'model files'),
    ('image', 'container image'),
)
# Read on the node, not rendered: a record that lacks one (an earlier release's) is not stale for that.
OBSERVED = ('sglang', 'dump_patch', 'model', 'image')
# The files of a model directory whose content counts (the rest count by name, size and modification time).
CONTENT_PATTERNS = ('config.json', '*.index.json', 'generation_config.json')
_CONTENT_LIMIT = 16 << 20
_NAMED = 5


# A HuggingFace hub model ID (org/name), found in HF_HOME's cache; anything else is a path.
HUB_ID = re.compile(r'^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+$')


def hub_repo(hf_home, model_id):
    """The directory of the HuggingFace hub model MODEL_ID (org/name) in HF_HOME's cache, whether it is there or not."""
    return os.path.join(hf_home, 'hub', 'models--' + model_id.replace('/', '--'))


def hub_snapshot(hf_home, model_id):
    """The snapshot directory of the HuggingFace hub model MODEL_ID (org/name) in HF_HOME's cache, as its ``main``
    ref names it, or None when the cache has no such model."""
    repo = hub_repo(hf_home, model_id)
    found = read_regular(os.path.join(repo, 'refs', 'main'), limit=256)
    if not found:
        return None
    revision = found[1].decode('ascii', 'replace').strip()
    if not revision or '/' in revision or revision.startswith('.'):
        return None
    return os.path.join(repo, 'snapshots', revision)


def model_fingerprint(path):
    """A cheap fingerprint of the model directory PATH: every regular file at its top (links followed, as a hub
    snapshot's are) by name, size and modification time, and the content of its config and index files. Nothing is
    opened but those (read_regular: no FIFO or device). ``{'path', 'files': {name: [size, mtime_ns]}, 'content':
    {name: digest}}``, or ``{'path', 'missing': reason}``."""
    files, content = {}, {}
    try:
        entries = sorted(os.listdir(path))
    except (IOError, OSError) as e:
        return {'path': path, 'missing': e.strerror or str(e)}
    for name in entries:
        full = os.path.join(path, name)
        try:
            st = os.stat(full)
        except (IOError, OSError):
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        files[name] = [st.st_size, st.st_mtime_ns]
        if any(fnmatch.fnmatchcase(name, p) for p in CONTENT_PATTERNS):
            found = read_regular(full, limit=_CONTENT_LIMIT)
            if found:
                content[name] = hashlib.sha256(found[1]).hexdigest()[:16]
    return {'path': path, 'files': files, 'content': content}


def patch_digest(package, paths, pattern, limit=_CONTENT_LIMIT):
    """A digest of the hidden-state dump patch in the SGLang PACKAGE directory: the Python files under PATHS (relative
    to it) that contain PATTERN, by relative name and content. ``{'files': [names], 'digest'}``; no files when the
    patch is missing."""
    digest = hashlib.sha256()
    names = []
    needle = pattern.encode('utf-8')
    for rel in paths:
        top = os.path.join(package, rel)
        for root, dirs, filenames in os.walk(top):
            dirs.sort()
            for name in sorted(filenames):
                if not name.endswith('.py'):
                    continue
                full = os.path.join(root, name)
                found = read_regular(full, limit=limit)
                if found and needle in found[1]:
                    relname = os.path.relpath(full, package)
                    names.append(relname)
                    digest.update(relname.encode('utf-8') + b'\0' + found[1] + b'\0')
    return {'files': names, 'digest': ('sha256:' + digest.hexdigest()) if names else None}


def _flags(argv):
    """ARGV's options as {flag: value}; a flag followed by another flag (or nothing) has the value True. The
    command (the interpreter and its module) is the key ''."""
    flags, head, i = {}, [], 0
    while i < len(argv) and not str(argv[i]).startswith('--'):
        head.append(argv[i])
        i += 1
    flags[''] = ' '.join(head)
    while i < len(argv):
        flag = argv[i]
        if i + 1 < len(argv) and not str(argv[i + 1]).startswith('--'):
            flags[flag] = argv[i + 1]
            i += 2
        else:
            flags[flag] = True
            i += 1
    return flags


def _value(v):
    return 'set' if v is True else json.dumps(v) if not isinstance(v, str) else v


def _dict_changes(before, after, show_values=True):
    before, after = before or {}, after or {}
    words = []
    for key in sorted(set(before) | set(after), key=str):
        if key not in before:
            words.append('%s added' % key + ((' (%s)' % _value(after[key])) if show_values else ''))
        elif key not in after:
            words.append('%s removed' % key)
        elif before[key] != after[key]:
            words.append(('%s %s -> %s' % (key, _value(before[key]), _value(after[key]))) if show_values
                         else '%s changed' % key)
    return words


def _named(words):
    return ', '.join(words[:_NAMED]) + (' and %d more' % (len(words) - _NAMED) if len(words) > _NAMED else '')


def _model_changes(before, after):
    if before.get('path') != after.get('path'):
        return ['%s -> %s' % (before.get('path'), after.get('path'))]
    if after.get('missing'):
        return ['%s is not readable now (%s)' % (after.get('path'), after['missing'])]
    words = []
    old, new = before.get('files') or {}, after.get('files') or {}
    for name in sorted(set(old) | set(new)):
        if name not in old:
            words.append('%s added' % name)
        elif name not in new:
            words.append('%s removed' % name)
        elif old[name][0] != new[name][0]:
            words.append('%s resized %d -> %d bytes' % (name, old[name][0], new[name][0]))
        elif old[name] != new[name] or (before.get('content') or {}).get(name) != (after.get('content') or {}).get(name):
            words.append('%s rewritten' % name)
    return words


def _field_changes(field, before, after):
    """The words for FIELD's change from BEFORE to AFTER (both present and different)."""
    if field == 'argv':
        return _dict_changes(_flags(before or []), _flags(after or []))
    if field in ('unit', 'container', 'args', 'environment'):
        if isinstance(before, dict) and isinstance(after, dict):
            return _dict_changes(before, after)
    if field == 'model' and isinstance(before, dict) and isinstance(after, dict):
        return _model_changes(before, after)
    if field in ('secrets', 'dump_patch'):
        return ['changed']
    return ['%s -> %s' % (_value(before), _value(after))]


def _unknown(value):
    return value is None or (isinstance(value, dict) and bool(value.get('missing')))


def compare(before, after):
    """What differs between the identity BEFORE (the running server's, as recorded) and AFTER (the desired one and
    what the node has now): a list of ``{'field', 'words'}``, in FIELDS' order. A field that BEFORE lacks and that
    is read on the node (OBSERVED) counts as unchanged where BEFORE lacks it or could not read it: an earlier release
    did not record it, a hub model not yet in the cache was downloaded by the server's start."""
    changes = []
    for field, words in FIELDS:
        if field not in after:
            continue
        if field in OBSERVED and (field not in before or _unknown(before[field])):
            # read on the node, but not then: an earlier release's record, a hub model downloaded at the start, an
            # image pulled by the run
            continue
        if field in before and before[field] == after[field]:
            continue
        detail = _field_changes(field, before.get(field), after[field]) if field in before else ['not recorded']
        changes.append({'field': field, 'words': '%s: %s' % (words, _named(detail) or 'changed')})
    return changes


def render(identity):
    """IDENTITY as the text of a diff: one ``field: value`` line per field (the command line one flag per line), in
    FIELDS' order. The model shows its path and file count, a digest its value."""
    if not identity:
        return ''
    lines = []
    for field, dummy in FIELDS:
        if field not in identity:
            continue
        value = identity[field]
        if field == 'argv':
            flags = _flags(value or [])
            lines.append('argv: %s' % flags.pop(''))
            lines.extend('  %s%s' % (k, '' if v is True else ' ' + str(v)) for k, v in flags.items())
        elif field == 'model' and isinstance(value, dict):
            lines.append('model: %s (%s)' % (value.get('path'), value.get('missing') or
                                             '%d files' % len(value.get('files') or {})))
        elif field == 'dump_patch' and isinstance(value, dict):
            lines.append('dump_patch: %s %s' % (value.get('digest'), ', '.join(value.get('files') or [])))
        elif isinstance(value, dict):
            lines.append('%s:' % field)
            lines.extend('  %s: %s' % (k, _value(v)) for k, v in sorted(value.items()))
        else:
            lines.append('%s: %s' % (field, _value(value)))
    return '\n'.join(lines) + '\n'


def env_lines(env, syntax):
    """The lines of a server's environment file for ENV (a dict), sorted by name without case: SYNTAX ``systemd``
    for systemd's EnvironmentFile= (double quotes, with backslash, double quote, dollar and backquote escaped, as
    systemd.exec reads them), ``shell`` for a POSIX shell's ``set -a; . FILE`` (single quotes, shlex.quote)."""
    if syntax not in ('systemd', 'shell'):
        raise ValueError('syntax must be systemd or shell, got %r' % (syntax,))
    lines = []
    for name, value in sorted(env.items(), key=lambda item: str(item[0]).lower()):
        value = str(value)
        if syntax == 'systemd':
            for char in ('\\', '"', '$', '`'):
                value = value.replace(char, '\\' + char)
            lines.append('%s="%s"' % (name, value))
        else:
            lines.append('%s=%s' % (name, shlex.quote(value)))
    return lines

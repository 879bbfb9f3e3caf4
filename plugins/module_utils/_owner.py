# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The user and groups an SGLang server runs as, named by the caller and resolved on the node itself; and what of a
plan follows from them (gpuops.host.sglang_server_info's ``owner``).

    found = resolve({'user': 'sglang', 'group': '', 'dump_group': 'research'})
    params = apply(params, found)
"""

from __future__ import annotations

import grp
import pwd

from ansible_collections.gpuops.host.plugins.module_utils._server_config import HUB_ID, hub_repo


class UnknownOwner(Exception):
    """A user or group that the node does not know."""


def resolve(names, getpwnam=pwd.getpwnam, getgrnam=grp.getgrnam):
    """NAMES (``user``; ``group``, else the user's primary group; ``dump_group``, the group that reads the dumps, else
    the server's group) as this node knows them: ``{'user', 'uid', 'gid', 'home', 'dump_gid', 'environment'}``, the
    last the owner's HOME and HF_HOME. UnknownOwner, naming each name the node does not know."""
    user, group, dump_group = names['user'], names.get('group') or '', names.get('dump_group') or ''
    unknown, entry, gids = [], None, {}
    try:
        entry = getpwnam(user)
    except KeyError:
        unknown.append('user %s' % user)
    for name in (group, dump_group):
        if name and name not in gids:
            try:
                gids[name] = getgrnam(name).gr_gid
            except KeyError:
                unknown.append('group %s' % name)
    if unknown:
        raise UnknownOwner(
            'The server would run as user %s%s%s, which this host does not know (no %s); refusing before the running '
            'server is touched.' % (user, (' and group ' + group) if group else '',
                                    (', its dumps read by group ' + dump_group) if dump_group else '',
                                    ', no '.join(unknown)))
    gid = gids[group] if group else entry.pw_gid
    home = entry.pw_dir
    return {'user': user, 'uid': entry.pw_uid, 'gid': gid, 'home': home,
            'dump_gid': gids[dump_group] if dump_group else gid,
            # as the server's environment file sets them, unless the caller's environment does
            'environment': {'HOME': home, 'HF_HOME': home + '/.cache/huggingface'}}


def apply(p, owner):
    """P, a plan's options, with what follows from OWNER (resolve) filled in where P leaves it out: the interpreter's
    user (``run_as``) and ``environment`` (the owner's HOME and HF_HOME first), ``hf_home`` (the environment's), the
    configuration's ``environment``, ``group`` and dump group (``dumps``), the dump directory's owner and group, the
    model's user and hub cache, and for a hub ID the cache that a container server mounts. P is not changed."""
    p = dict(p, run_as={'uid': owner['uid'], 'gid': owner['gid']},
             environment=dict(owner['environment'], **(p.get('environment') or {})))
    p['hf_home'] = p.get('hf_home') or p['environment']['HF_HOME']
    if p.get('config') is not None:
        cfg = p['config'] = dict(p['config'], group=owner['gid'],
                                 environment=dict(owner['environment'], **(p['config'].get('environment') or {})))
        if cfg.get('dumps'):
            cfg['dumps'] = [cfg['dumps'][0], owner['dump_gid']]
    refuse = p['refuse'] = dict(p.get('refuse') or {})
    if refuse.get('dump_dir'):
        dump = refuse['dump_dir'] = dict(refuse['dump_dir'])
        dump['owner'] = owner['uid'] if dump.get('owner') is None else dump['owner']
        dump['group'] = owner['dump_gid'] if dump.get('group') is None else dump['group']
    hub = bool(HUB_ID.match(p.get('model_path') or ''))
    if refuse.get('model'):
        model = refuse['model'] = dict(refuse['model'])
        model.setdefault('user', owner['user'])
        model.setdefault('hf_home', p['hf_home'])
        if model.get('hub'):
            model.setdefault('cache', hub_repo(p['hf_home'], model['path']))
    if p.get('container') and hub:
        p['container'] = dict(p['container'], mounts=[p['hf_home']] + list(p['container'].get('mounts') or []))
    return p

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Where a process runs: its PID namespace and container, compared with the module's own.

NVML lists processes by the PIDs of the host's PID namespace, the kernel's initial one
(inode ``PROC_PID_INIT_INO`` in the kernel's ``include/linux/proc_ns.h``). A module that
runs in another PID namespace (a container without the host's PID namespace) cannot map
those PIDs to its own processes.
"""

from __future__ import annotations

import os
import re

# include/linux/proc_ns.h: PROC_PID_INIT_INO = 0xEFFFFFFCU, the initial PID namespace
PROC_PID_INIT_INO = 0xEFFFFFFC
HOST_PID_NAMESPACE = 'pid:[%d]' % PROC_PID_INIT_INO
# A simulated GPU node (a PID namespace playing the host) names its namespace here, as
# pid:[INODE], or as "own" where the module's own namespace plays the host's (a node container).
HOST_PID_NAMESPACE_ENV = 'GPUOPS_HOST_PIDNS'

# cgroup path components of container runtimes: Docker (docker-ID.scope, /docker/ID),
# Podman (libpod-ID.scope), CRI-O (crio-ID.scope), containerd's CRI (cri-containerd-ID.scope),
# Kubernetes pods (kubepods*), LXC (lxc.payload.NAME) and systemd-nspawn (machine-NAME.scope).
_CONTAINER_COMPONENT = re.compile(
    r'^(?:(?:docker|libpod|crio|cri-containerd)-[0-9a-f]{12,}(?:\.scope)?'
    r'|kubepods.*|lxc\.payload\..+|machine-.+\.scope)$')
_CONTAINER_ID = re.compile(r'^[0-9a-f]{64}$')


def host_pid_namespace(environ=None):
    """The PID namespace whose PIDs NVML reports, as ``pid:[INODE]``."""
    environ = os.environ if environ is None else environ
    return environ.get(HOST_PID_NAMESPACE_ENV) or HOST_PID_NAMESPACE


def container_of(cgroup_text):
    """The cgroup path of the innermost container a process runs in, from /proc/PID/cgroup;
    None outside any."""
    found = None
    for line in cgroup_text.splitlines():
        path = line.split(':', 2)[-1]
        parts = [p for p in path.split('/') if p]
        for i, part in enumerate(parts):
            if _CONTAINER_COMPONENT.match(part) or (_CONTAINER_ID.match(part) and i > 0):
                found = '/' + '/'.join(parts[:i + 1])
        if found:
            return found
    return None


class Place:
    """The module's own PID namespace and container, to judge other processes against."""

    def __init__(self, procs, self_pid, environ=None):
        self.procs = procs
        self.pid_namespace = procs.pid_namespace(self_pid)
        self.container = container_of(procs.cgroup(self_pid))
        self.host_pid_namespace = host_pid_namespace(environ)
        if self.host_pid_namespace == 'own':
            self.host_pid_namespace = self.pid_namespace

    @property
    def nvml_pids_are_local(self):
        """True when NVML's PIDs (the host's) are the PIDs of the module's own namespace."""
        return self.pid_namespace is not None and self.pid_namespace == self.host_pid_namespace

    def elsewhere(self, pid):
        """Why process ``pid`` runs somewhere else than the module (another PID namespace or
        container), or None when it runs beside it."""
        theirs = self.procs.pid_namespace(pid)
        if theirs is not None and self.pid_namespace is not None and theirs != self.pid_namespace:
            return 'in another PID namespace (%s)' % theirs
        container = container_of(self.procs.cgroup(pid))
        if container is not None and container != self.container:
            return 'in container cgroup %s' % container
        return None

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""NVIDIA GPUs on the PCI bus, as sysfs lists them: what NVML should show."""

from __future__ import annotations

import os

NVIDIA_VENDOR = 0x10de
# PCI base class 0x03 is "display controller" (0x0300 VGA, 0x0302 3D controller: data-centre
# GPUs); NVSwitches are bridges (0x0680) and audio functions 0x0403, so neither counts.
DISPLAY_CLASS = 0x03


def _hex(path):
    with open(path) as f:
        return int(f.read().strip(), 16)


def nvidia_gpus(sysfs_root='/sys'):
    """PCI addresses of the NVIDIA display controllers under SYSFS_ROOT/bus/pci/devices, sorted.

    An empty list where sysfs shows none (no GPU, or a sysfs without the bus, as in some
    containers).
    """
    devices = os.path.join(sysfs_root, 'bus', 'pci', 'devices')
    try:
        names = os.listdir(devices)
    except OSError:
        return []
    found = []
    for name in names:
        try:
            vendor = _hex(os.path.join(devices, name, 'vendor'))
            klass = _hex(os.path.join(devices, name, 'class'))
        except (OSError, ValueError):
            continue
        if vendor == NVIDIA_VENDOR and klass >> 16 == DISPLAY_CLASS:
            found.append(name)
    return sorted(found)

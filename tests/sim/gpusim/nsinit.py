# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PID 1 of a sandbox (run by unshare, see sandbox.py): builds the private /dev and the PCI
bus that sysfs shows, starts the decoy GPU daemons, reports ready, then reaps orphans until
the sandbox is killed.

Usage: nsinit.py CONFIG_JSON, with keys staging, gpus, pci_gpus, decoys ({name: [exe, dev...]}), ready.
"""

import ctypes
import json
import os
import signal
import subprocess
import sys

MS_BIND, MS_MOVE = 4096, 8192
REAL_DEVICES = ("null", "zero", "random", "urandom", "tty", "full")
_libc = ctypes.CDLL(None, use_errno=True)


def _enc(text):
    return text.encode() if text is not None else None


def mount(source, target, fstype=None, flags=0, data=None):
    if _libc.mount(_enc(source), _enc(target), _enc(fstype), ctypes.c_ulong(flags), _enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "mount %s on %s: %s" % (source, target, os.strerror(err)))


def build_dev(staging, gpus):
    """A tmpfs /dev: real character devices bound in, fake NVIDIA device files."""
    os.makedirs(staging, exist_ok=True)
    mount("tmpfs", staging, "tmpfs", 0, "mode=755,size=16m")
    for name in REAL_DEVICES:
        path = os.path.join(staging, name)
        open(path, "w").close()
        mount("/dev/" + name, path, None, MS_BIND)
    for sub, fstype, data in (("pts", "devpts", "newinstance,ptmxmode=0666,mode=620"),
                              ("shm", "tmpfs", "mode=1777")):
        os.mkdir(os.path.join(staging, sub))
        mount(fstype, os.path.join(staging, sub), fstype, 0, data)
    for link, target in (("ptmx", "pts/ptmx"), ("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, os.path.join(staging, link))
    nodes = ["nvidia%d" % i for i in range(gpus)]
    nodes += ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"]
    for name in nodes:
        fd = os.open(os.path.join(staging, name), os.O_CREAT | os.O_WRONLY, 0o666)
        os.close(fd)
        os.chmod(os.path.join(staging, name), 0o666)
    mount(staging, "/dev", None, MS_MOVE)


# Bus numbers of the eight GPUs of an HGX H200 board (as gpusim.nvml.HGX_BUSES).
HGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


def build_pci(gpus):
    """A tmpfs over /sys/bus/pci/devices with GPUS NVIDIA 3D controllers (vendor 0x10de, class
    0x030200), four NVSwitches (bridges, class 0x068000) and a network card, as an HGX board shows."""
    devices = "/sys/bus/pci/devices"
    mount("tmpfs", devices, "tmpfs", 0, "mode=755,size=1m")
    functions = [("0000:%02x:00.0" % (HGX_BUSES[i] if i < len(HGX_BUSES) else 0xE0 + i), "0x10de", "0x030200")
                 for i in range(gpus)]
    functions += [("0000:%02x:00.0" % (0x05 + i), "0x10de", "0x068000") for i in range(4)]
    functions.append(("0000:c1:00.0", "0x15b3", "0x020700"))
    for address, vendor, klass in functions:
        os.mkdir(os.path.join(devices, address))
        for name, value in (("vendor", vendor), ("class", klass)):
            with open(os.path.join(devices, address, name), "w") as f:
                f.write(value + "\n")


def main():
    config = json.loads(sys.argv[1])
    build_dev(config["staging"], config["gpus"])
    build_pci(config.get("pci_gpus", config["gpus"]))
    decoys = {}
    for name, argv in sorted(config["decoys"].items()):
        decoys[name] = subprocess.Popen(argv, cwd="/", stdin=subprocess.DEVNULL).pid
    tmp = config["ready"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"decoys": decoys}, f)
    os.replace(tmp, config["ready"])

    # No handlers: the kernel then drops every signal sent to a namespace's init from inside it,
    # so no kill inside the sandbox can tear it down; only SIGKILL from the host ends it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        signal.sigwaitinfo({signal.SIGCHLD})


if __name__ == "__main__":
    main()

# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Offline stand-in for the get-pip bootstrap script that ansible-test downloads.

ansible-test bootstraps pip in every virtual environment it creates by running a
script fetched from ci-files.testing.ansible.com. Where that host is unreachable,
``make`` installs this file in its cache instead: pip comes from the interpreter's
own ensurepip, and the pinned packages from the configured package index.
ensurepip runs in a subprocess because running it in-process hides /etc/pip.conf.
"""

from __future__ import annotations

import subprocess
import sys

DROPPED_OPTIONS = ("--no-setuptools", "--no-wheel")


def main() -> int:
    subprocess.run([sys.executable, "-m", "ensurepip", "--upgrade"], check=True, stdout=subprocess.DEVNULL)
    args = [arg for arg in sys.argv[1:] if arg not in DROPPED_OPTIONS]
    return subprocess.run([sys.executable, "-m", "pip", "install"] + args, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# Install the Debian packages named as arguments that are not installed yet.
# dpkg -s answers from the local database: apt-get (and its index update) runs only when a
# package is missing, so repeated `make` calls never reach the network.
#
# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
set -euo pipefail

missing=()
for package in "$@"; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "apt-get install ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null

#!/usr/bin/env bash
# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Build what tests/gpu/run.sh needs on a machine with no package index: the wheels of
# tests/gpu/requirements.txt (and their dependencies) for CPython 3.11 and 3.12 on
# x86-64 Linux, and the collection tarball, all in one folder (default build/gpu-wheels).
# Usage: tests/gpu/bundle.sh [DEST]     (make gpu-bundle)
set -euo pipefail
cd "$(dirname "$0")/../.."

dest=${1:-build/gpu-wheels}
venv=${VENV:-.venv}
pythons=${GPU_BUNDLE_PYTHONS:-3.11 3.12}

rm -rf "$dest"
mkdir -p "$dest"
for version in $pythons; do
    "$venv/bin/python" -m pip download --quiet --disable-pip-version-check --dest "$dest" \
        --only-binary=:all: --implementation cp --python-version "$version" \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 \
        -r tests/gpu/requirements.txt
done
"$venv/bin/ansible-galaxy" collection build --force --output-path "$dest" . >/dev/null
ls "$dest"
du -sh "$dest"

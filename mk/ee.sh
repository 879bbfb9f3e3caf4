#!/usr/bin/env bash
# Render the build context of an execution environment from meta/execution-environment.yml,
# offline: ansible-builder create writes a Containerfile and copies the requirement files;
# nothing is pulled. Building the image (ansible-builder build) needs a container registry
# for its base image and is not done here.
#
#   mk/ee.sh WORKDIR        (make ee; the context lands in WORKDIR/context)
#
# The definition's paths are relative to the collection's root (how ansible-builder reads a
# collection's meta/execution-environment.yml), so it is rendered from a copy in WORKDIR
# that stands for the root, next to copies of the files it names. Then ansible-builder
# introspect reads it the way an image build does for every collection it installs.
#
# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
set -euo pipefail

work=$1
rm -rf "$work"
mkdir -p "$work"
cp meta/execution-environment.yml requirements.txt bindep.txt "$work"/
ansible-builder create --output-filename Containerfile --file "$work/execution-environment.yml" \
    --context "$work/context" --verbosity 2
containerfile=$work/context/Containerfile
test -s "$containerfile"
for file in requirements.txt bindep.txt; do
    cmp "$file" "$work/context/_build/$file"
done
grep -q '^ARG EE_BASE_IMAGE="quay.io/fedora/fedora:41"' "$containerfile"
grep -q 'requirements.txt' "$containerfile"
grep -q 'bindep.txt' "$containerfile"
# What ansible-builder adds to any execution environment that installs this collection.
root=$work/introspect/ansible_collections/gpuops/host
mkdir -p "$root/meta"
cp galaxy.yml requirements.txt bindep.txt "$root"/
cp meta/execution-environment.yml "$root/meta/"
ansible-builder introspect "$work/introspect" | tee "$work/introspect.yml"
grep -q "nvidia-ml-py.*from collection gpuops.host" "$work/introspect.yml"
grep -q "procps \[platform:dpkg\].*from collection gpuops.host" "$work/introspect.yml"
echo "execution environment context: $containerfile ($(wc -l <"$containerfile") lines)"

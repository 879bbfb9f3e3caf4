#!/usr/bin/env bash
# The collection's documentation as the ecosystem renders it:
#  - antsibull-docs lint-collection-docs --plugin-docs: module and role docs against the
#    docsite schema, markup and references (O(), RV(), M()) included;
#  - ansible-doc -t role for every role: each role's manual renders from its argument specs.
#
#   mk/docs-lint.sh COLLECTION_DIR     (ansible_collections/gpuops/host; make docs-lint)
#
# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
set -euo pipefail

collection=$1
failed=0

echo "antsibull-docs lint-collection-docs --plugin-docs $collection"
antsibull-docs lint-collection-docs --plugin-docs "$collection" || failed=1

out=$(mktemp)
trap 'rm -f "$out"' EXIT
for role in "$collection"/roles/*/; do
    name=gpuops.host.$(basename "$role")
    if ! ansible-doc -t role "$name" >"$out" 2>&1; then
        echo "ansible-doc -t role $name fails:"
        cat "$out"
        failed=1
    elif grep -E '^\[(WARNING|ERROR|DEPRECATION WARNING)\]' "$out"; then
        echo "ansible-doc -t role $name warns (above)"
        failed=1
    else
        echo "ansible-doc -t role $name: $(wc -l <"$out") lines"
    fi
done
exit $failed

#!/usr/bin/env bash
# Run galaxy-importer (what Galaxy and Automation Hub run on upload) on the one artifact in
# DIST; fail on any warning or error it prints, not only on a failed import.
#
#   mk/galaxy-import.sh DIST WORKDIR        (make galaxy-import; config from GALAXY_IMPORTER_CONFIG)
#
# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
set -euo pipefail

dist=$(cd "$1" && pwd)
work=$2
artifacts=("$dist"/*.tar.gz)
if [ ${#artifacts[@]} -ne 1 ] || [ ! -f "${artifacts[0]}" ]; then
    echo "expected one collection artifact in $dist, found: ${artifacts[*]}" >&2
    exit 2
fi
rm -rf "$work"
mkdir -p "$work"
cd "$work"          # the importer writes importer_result.json here
status=0
python -m galaxy_importer.main "${artifacts[0]}" 2>&1 | tee importer.log || status=$?
if [ "$status" -ne 0 ]; then
    echo "galaxy-importer exited with status $status" >&2
    exit 1
fi
if grep -E '^(WARNING|ERROR):' importer.log >/dev/null; then
    echo "galaxy-importer reported $(grep -cE '^(WARNING|ERROR):' importer.log) warnings or errors (above)" >&2
    exit 1
fi
grep -q '^Importer processing completed successfully' importer.log
echo "galaxy-importer: $(basename "${artifacts[0]}") imports cleanly"

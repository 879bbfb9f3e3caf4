#!/usr/bin/env bash
# Run molecule scenarios (molecule test), JOBS of them at a time (make molecule).
#
#   mk/molecule.sh LOGDIR JOBS SCENARIO...
#
# Each scenario logs to LOGDIR/molecule-<scenario>.log and keeps its own exit status; this
# prints one line per scenario as it ends (its time, its status), then the whole log of each
# scenario that failed, and exits 1 when one did. Scenarios start in the order given: name
# the longest first. Their containers have names of their own and no network (molecule/*/molecule.yml; multinode's
# two share the host's, on ports below 15000 that nothing else here takes), so scenarios running side by side share
# nothing but the image.
#
# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
set -uo pipefail

logdir=$1
jobs=$2
shift 2
status_dir=$(mktemp -d "$logdir/molecule-status.XXXXXX")
trap 'rm -rf "$status_dir"' EXIT

run_one() {
    local scenario=$1 start rc
    start=$(date +%s)
    molecule test --scenario-name "$scenario" >"$logdir/molecule-$scenario.log" 2>&1
    rc=$?
    echo "$rc" >"$status_dir/$scenario"
    echo "molecule scenario $scenario: $( [ "$rc" -eq 0 ] && echo ok || echo "FAILED (exit $rc)") in" \
        "$(( $(date +%s) - start )) s (log: $logdir/molecule-$scenario.log)"
}

running=0
for scenario in "$@"; do
    if [ "$running" -ge "$jobs" ]; then
        wait -n
        running=$((running - 1))
    fi
    run_one "$scenario" &
    running=$((running + 1))
done
wait

failed=()
for scenario in "$@"; do
    [ "$(cat "$status_dir/$scenario" 2>/dev/null)" = 0 ] || failed+=("$scenario")
done
[ ${#failed[@]} -eq 0 ] && exit 0
for scenario in "${failed[@]}"; do
    echo "===== molecule scenario $scenario failed; its log ($logdir/molecule-$scenario.log):"
    cat "$logdir/molecule-$scenario.log"
done
echo "molecule scenarios failed: ${failed[*]}"
exit 1

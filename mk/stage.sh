#!/usr/bin/env bash
# Run one stage of `make test` and keep its output, whatever happens.
#
#   mk/stage.sh LOGDIR NAME COMMAND [ARG...]     run COMMAND, tee its output into LOGDIR/NAME.log,
#                                                add "NAME SECONDS STATUS" to LOGDIR/times.tsv;
#                                                on failure copy the log to LOGDIR/failed/, where
#                                                the next run of the stage cannot overwrite it,
#                                                print its last lines and exit 1
#   mk/stage.sh LOGDIR --summary                 print the time of every stage recorded so far, their
#                                                sum and, where LOGDIR/started holds the time make
#                                                test began (stages overlap there), the wall time
#
# With STAGE_QUIET set (a stage that runs beside others), the output goes to the log only.
#
# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
set -uo pipefail

logdir=$1
shift
mkdir -p "$logdir"
times=$logdir/times.tsv

if [ "${1:-}" = --summary ]; then
    [ -s "$times" ] || exit 0
    echo "time per stage (logs in $logdir):"
    awk -F'\t' '{ printf "  %-14s %6d s  %s%s\n", $1, $2, $3, ($4 == "" ? "" : "  " $4); total += $2 } END { printf "  %-14s %6d s\n", "sum", total }' "$times"
    if [ -s "$logdir/started" ]; then
        printf '  %-14s %6d s\n' "wall" $(( $(date +%s) - $(cat "$logdir/started") ))
    fi
    exit 0
fi

name=$1
shift
log=$logdir/$name.log
echo "== stage $name (log: $log)"
start=$(date +%s)
if [ -n "${STAGE_QUIET:-}" ]; then
    "$@" >"$log" 2>&1
    status=$?
else
    "$@" 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
fi
seconds=$(( $(date +%s) - start ))
if [ "$status" -eq 0 ]; then
    printf '%s\t%d\tok\n' "$name" "$seconds" >>"$times"
    echo "== stage $name passed in $seconds s"
    exit 0
fi
kept=$logdir/failed/$name-$(date -u +%Y%m%dT%H%M%SZ).log
mkdir -p "$logdir/failed" && cp "$log" "$kept"
printf '%s\t%d\tFAILED (exit %d)\t%s\n' "$name" "$seconds" "$status" "$kept" >>"$times"
echo "== stage $name FAILED (exit $status) after $seconds s; its last 60 lines (all of it in $kept):"
tail -n 60 "$log" | sed 's/^/   | /'
exit 1

#!/bin/bash
# Runs make targets and ends with a table of what each took and how it ended.
#   tools/timed-make.sh TARGET...               one after the other
#   tools/timed-make.sh A B // C D              two lanes side by side: A then B, and C then D
# Every target runs even after one failed (as make -k), so one red suite does
# not hide another; the exit status is 1 if any failed. With lanes, a target's
# output is held in build/timed/TARGET.log and printed whole when it ends, so
# the two lanes' lines never interleave. Targets in different lanes must not
# share ports or files (docs/testing.md, "Ports").
set -uo pipefail
MAKE=${MAKE:-make}
logs=build/timed
mkdir -p "$logs"
t_all=$(date +%s)

# lane TARGET...: runs them in order; one "target seconds status" row each to stdout of fd 3
lane() {
	local t t0 st
	for t in "$@"; do
		t0=$(date +%s)
		if [ "$parallel" = 1 ]; then
			$MAKE --no-print-directory "$t" >"$logs/$t.log" 2>&1 && st=ok || st=FAILED
			{ echo "=== make $t ($st, $(($(date +%s) - t0))s)"; cat "$logs/$t.log"; } | flock "$logs/.print" cat
		else
			echo "=== make $t ($(date +%H:%M:%S))"
			$MAKE --no-print-directory "$t" && st=ok || st=FAILED
		fi
		printf '%-24s %6ss  %s\n' "$t" "$(($(date +%s) - t0))" "$st" >&3
	done
}

lanes=() cur=()
for a in "$@"; do
	if [ "$a" = // ]; then lanes+=("${cur[*]}"); cur=(); else cur+=("$a"); fi
done
lanes+=("${cur[*]}")
parallel=0; [ ${#lanes[@]} -gt 1 ] && parallel=1

rows=$logs/.rows; : >"$rows"
pids=()
for l in "${lanes[@]}"; do
	# shellcheck disable=SC2086 # a lane is a list of target names
	lane $l 3>>"$rows" &
	pids+=($!)
done
wait "${pids[@]}"

{
	echo "=== time per target"
	cat "$rows"
	printf '%-24s %6ss\n' total "$(($(date +%s) - t_all))"
} | tee -a "${TIMED_MAKE_LOG:-/dev/null}"
! grep -q 'FAILED$' "$rows"

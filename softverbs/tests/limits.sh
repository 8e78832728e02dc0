#!/bin/bash
# The counts soft0 reports (ibv_query_device: max_pd, max_cq, max_qp, max_srq, max_ah,
# max_mr), which libfabric passes on in fi_info -v, can all be held at once
# (tests/c/limits_test.c). About a minute, most of it the million registrations, each
# of which reads /proc/self/maps (core/pin.rs); make check runs it after its lanes.
# Prints PASS/FAIL and ends with "N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/../.."
SOFT=$PWD/build/lib/soft
out=build/softverbs-tests; mkdir -p "$out"
if cc -std=gnu11 -Wall -Wextra -Werror -O1 -g -o "$out/limits_test" softverbs/tests/c/limits_test.c -L"$SOFT" -l:libibverbs.so.1 -lpthread -ldl > "$out/limits-cc.txt" 2>&1 \
	&& LD_LIBRARY_PATH=$SOFT timeout 240 "$out/limits_test" > "$out/limits_test.txt" 2>&1; then
	sed 's/^/    /' "$out/limits_test.txt"
	echo "PASS soft0's reported counts can all be held"; echo "1 passed, 0 failed"
else
	cat "$out/limits-cc.txt" "$out/limits_test.txt" 2>/dev/null | tail -20
	echo "FAIL soft0's reported counts"; echo "0 passed, 1 failed"; exit 1
fi

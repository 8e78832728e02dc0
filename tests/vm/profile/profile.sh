#!/bin/bash
# make profile-vm, inside one guest boot (tests/vm/run-in-guest.sh): a
# cmtime -b server and tests/vm/profile/cmsteps under callgrind, with
# Debian's library ("C") and with ours, then the step table (steps.py).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
IP=${QRXE_IP:?run inside tests/vm/run-in-guest.sh}
RES=${PROFILE_RESULTS:-/tmp/profile-vm}
# PROFILE_LIB=DIR: ours from DIR (tools/build-symbols.sh's build/symbols names functions)
OURS=${PROFILE_LIB:-$ROOT/build/lib}
mkdir -p "$RES"
. "$ROOT/tests/vm/lib.sh" # wait_listen
fails=0
for lib in C ours; do
	if [ $lib = ours ]; then E="LD_LIBRARY_PATH=$OURS"; else E="-u LD_LIBRARY_PATH"; fi
	env $E timeout 120 cmtime -b "$IP" >"$RES/srv.$lib" 2>&1 &
	sp=$!
	wait_listen cmtime || sleep 1
	rm -f "$RES/st.$lib".*
	env $E timeout 300 valgrind --tool=callgrind --dump-instr=yes --callgrind-out-file="$RES/st.$lib" \
		"$ROOT/build/profile/cmsteps" "$IP" >"$RES/cli.$lib" 2>&1 || { fails=$((fails + 1)); tail "$RES/cli.$lib"; }
	kill $sp 2>/dev/null
	wait $sp 2>/dev/null
done
echo "cmsteps (cmtime -c 100 shaped) under callgrind in the guest: instructions per step (Ir) and"
echo "instructions run for the first time in the process (new, what TCG translates), every object"
python3 "$ROOT/tests/vm/profile/steps.py" "$RES" C ours | tee "$RES/steps.txt"
[ $fails -eq 0 ]

#!/bin/bash
# make profile-vm-first, inside one guest boot: tests/vm/profile/firstevent with
# Debian's library ("C") and ours, alternating for ROUNDS rounds, then the
# least and the median of each timed call (ms; *_faults: page faults, a count)
# and ours/C of each. The least
# is the cost without interference: the first get swings between about 3 and
# 10 ms with either library (something else in the guest, not the library). A measuring tool, not a test:
# fails only when a run fails.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
IP=${QRXE_IP:?run inside tests/vm/run-in-guest.sh}
RES=${PROFILE_RESULTS:-/tmp/profile-vm-first}
ROUNDS=${ROUNDS:-7}
mkdir -p "$RES"
: >"$RES/runs.txt"
fails=0
for r in $(seq "$ROUNDS"); do
	for lib in C ours; do
		if [ $lib = ours ]; then E="LD_LIBRARY_PATH=$ROOT/build/lib"; else E="-u LD_LIBRARY_PATH"; fi
		env $E timeout 30 "$ROOT/build/profile/firstevent" "$IP" | sed "s/^/$lib /" >>"$RES/runs.txt" || fails=$((fails + 1))
	done
done
python3 - "$RES/runs.txt" <<'PY' | tee "$RES/first.txt"
import collections, statistics, sys
v = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    for i in range(2, len(f), 2):
        v[(f[0], f[1], f[i])].append(float(f[i + 1]))
print(f'first and second ADDR_RESOLVED of a process, then two bursts of 100 creates and destroys, in ms (faults: a count), least and median of {len(v[("C", "first", "get")])} runs each (firstevent in the guest)')
print('| id | call | C least | ours least | ours/C | C median | ours median | ours/C |')
print('|---|---|---:|---:|---:|---:|---:|---:|')
for which in ('first', 'second', 'burst1', 'burst2'):
    for call in ('resolve', 'get', 'ack', 'resolve_faults', 'get_ack_faults', 'create100', 'destroy100', 'create_faults'):
        c, o = v.get(('C', which, call)), v.get(('ours', which, call))
        if c and o:
            lc, lo, mc, mo = min(c), min(o), statistics.median(c), statistics.median(o)
            r = lambda a, b: f'{a / b:.2f}' if b else '-'
            print(f'| {which} | {call} | {lc:.3f} | {lo:.3f} | {r(lo, lc)} | {mc:.3f} | {mo:.3f} | {r(mo, mc)} |')
PY
[ $fails -eq 0 ]

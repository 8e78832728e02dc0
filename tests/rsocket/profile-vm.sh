#!/bin/bash
# make profile-vm-rsocket, inside the qemu guest of tests/vm (rxe): Debian's
# rstream 64-byte ping-pong client under callgrind against a plain rstream
# server, with Debian's librdmacm and with ours (both sides), for two iteration
# counts; the difference over the extra iterations is the cost of one round
# trip's rsend + rrecv in the client, per object (instructions, Ir). Under TCG
# every instruction of that path is time on the ping-pong's critical path.
# A measuring tool, not a test: fails only when a run fails. PROFILE_LIB=DIR:
# ours from DIR (tools/build-symbols.sh's build/symbols names functions).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
IP=${QRXE_IP:?run inside tests/vm/run-in-guest.sh}
RES=${PROFILE_RESULTS:-/tmp/profile-vm-rsocket}
mkdir -p "$RES"
. "$ROOT/tests/vm/lib.sh" # wait_listen
LO=500 HI=1500 port=7700 fails=0
for lib in C ours; do
	if [ $lib = ours ]; then E="LD_LIBRARY_PATH=${PROFILE_LIB:-$ROOT/build/lib}"; else E="-u LD_LIBRARY_PATH"; fi
	for it in $LO $HI; do
		env $E timeout 300 rstream -b "$IP" -p $port -S 64 -I $it -C 1 >"$RES/srv.$lib.$it" 2>&1 &
		sp=$!
		wait_listen rstream || sleep 1
		env $E timeout 300 valgrind --tool=callgrind --callgrind-out-file="$RES/cg.$lib.$it" \
			rstream -s "$IP" -p $port -S 64 -I $it -C 1 >"$RES/cli.$lib.$it" 2>&1 || { fails=$((fails + 1)); tail -3 "$RES/cli.$lib.$it"; }
		wait $sp || fails=$((fails + 1))
		port=$((port + 1))
	done
done
python3 - "$RES" $LO $HI "$ROOT/tests/vm/profile" <<'PY' | tee "$RES/profile.txt"
import collections, re, sys
res, lo, hi = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sys.path.insert(0, sys.argv[4])
from steps import parse  # the callgrind dump reader of make profile-vm
def objs(path):
    """Ir per object (file name without .so...) of one dump."""
    d = collections.Counter()
    for ob, ir in parse(path)[2].items():
        d[re.sub(r'\.so.*', '', (ob or '?').split('/')[-1])] += ir
    return d
def calls(path):
    """Calls made per calling object (file name as above) of one dump: under TCG a
    return is an indirect jump, looked up rather than chained."""
    d, obs, cur = collections.Counter(), {}, '?'
    for line in open(path):
        m = re.match(r'^(c?ob)=\((\d+)\)(?: (.*))?$', line.rstrip('\n'))
        if m:
            if m.group(3) is not None:
                obs[m.group(2)] = re.sub(r'\.so.*', '', m.group(3).split('/')[-1])
            if m.group(1) == 'ob':
                cur = obs.get(m.group(2), '?')
        elif line.startswith('calls='):
            d[cur] += int(line.split('=')[1].split()[0])
    return d
rows, crows = {}, {}
for lib in ('C', 'ours'):
    a, b = objs(f'{res}/cg.{lib}.{lo}'), objs(f'{res}/cg.{lib}.{hi}')
    rows[lib] = {k: (b[k] - a[k]) / (hi - lo) for k in b}
    a, b = calls(f'{res}/cg.{lib}.{lo}'), calls(f'{res}/cg.{lib}.{hi}')
    crows[lib] = {k: (b[k] - a[k]) / (hi - lo) for k in b}
names = sorted({k for r in rows.values() for k, v in r.items() if v >= 5})
print('rstream -S 64 ping-pong client under callgrind: instructions per round trip (rsend + rrecv), by object')
print('%-22s %8s %8s' % ('object', 'Debian', 'ours'))
for n in names:
    print('%-22s %8.0f %8.0f' % (n, rows['C'].get(n, 0), rows['ours'].get(n, 0)))
print('%-22s %8.0f %8.0f' % ('total', sum(rows['C'].values()), sum(rows['ours'].values())))
print('calls made per round trip, by calling object')
for n in sorted({k for r in crows.values() for k, v in r.items() if v >= 0.5}):
    print('%-22s %8.1f %8.1f' % (n, crows['C'].get(n, 0), crows['ours'].get(n, 0)))
print('%-22s %8.1f %8.1f' % ('total', sum(crows['C'].values()), sum(crows['ours'].values())))
if any(v < -20 for r in rows.values() for v in r.values()):
    print('warning: a shorter run counted more than the longer one: the client spun while it waited '
          '(a busy host); these counts are not path lengths, run it on a quiet host')
PY
[ $fails -eq 0 ]

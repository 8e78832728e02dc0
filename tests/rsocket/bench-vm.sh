#!/bin/bash
# make bench-vm-rsocket, run inside the qemu guest of tests/vm (rxe): Debian's
# rstream with Debian's librdmacm and with ours on both sides, alternating
# (C, ours, C, ours, ...) for ROUNDS rounds, on 64 KiB transfers (bandwidth)
# and 64-byte ping-pong (latency). Prints the ratio ours/Debian of the time
# per transfer with min/median/max over the rounds (goal: median <= 1.00).
# Timings are reported, never asserted; exit status 1 only if a run failed.
# RS_BASE=DIR: that librdmacm plays "Debian" (an A/B of two builds of ours).
set -uo pipefail
cd "$(dirname "$0")/../.."
IP=${QRXE_IP:-10.10.10.1}
OURS=$PWD/build/lib
ROUNDS=${ROUNDS:-5}
out=${RS_VM_OUT:-/tmp/rsocket-bench}; mkdir -p "$out"
port=7900; failed=0
# Server and client each on its own vCPU (RS_PIN=0: wherever the guest puts them):
# the guest scheduler moving them adds to the round-to-round swing.
PIN_SRV= PIN_CLI=
[ "${RS_PIN:-1}" = 1 ] && [ "$(nproc)" -ge 2 ] && PIN_SRV="taskset -c 0" PIN_CLI="taskset -c 1"
declare -A T   # T[test.lib] = "usec usec ...", one per round ("x": that round failed)
. tests/vm/lib.sh # wait_listen

# one TEST LIB "rstream args": the client's usec/xfer appended to T[TEST.LIB]
one() {
	local t=$1 lib=$2 args=$3 env=()
	[ "$lib" = ours ] && env=(LD_LIBRARY_PATH=$OURS)
	[ "$lib" = debian ] && [ -n "${RS_BASE:-}" ] && env=(LD_LIBRARY_PATH=$RS_BASE)
	port=$((port+1))
	env "${env[@]}" timeout 120 $PIN_SRV rstream -b "$IP" -p $port $args > "$out/$t.$lib.$port.server.log" 2>&1 &
	local spid=$!
	wait_listen rstream || echo "  (rstream server did not listen within 10 s; starting the client anyway)"
	local u=""
	if env "${env[@]}" timeout 120 $PIN_CLI rstream -s "$IP" -p $port $args > "$out/$t.$lib.$port.log" 2>&1 && wait $spid; then
		u=$(awk '$1 == "custom" {print $8}' "$out/$t.$lib.$port.log")
		[ -n "$u" ] || echo "FAIL rstream $args with $lib's library: no result line (log $out/$t.$lib.$port.log)"
	else
		kill $spid 2>/dev/null; wait $spid 2>/dev/null
		echo "FAIL rstream $args with $lib's library (log $out/$t.$lib.$port.log)"
	fi
	[ -n "$u" ] || failed=1
	# A failed round keeps its place, so round i of ours is still compared with round i of Debian's.
	T[$t.$lib]="${T[$t.$lib]:-} ${u:-x}"
}

# RS_TESTS: which of the two to run (A/B runs of one path take half the time).
for r in $(seq "$ROUNDS"); do
	for lib in debian ours; do
		case " ${RS_TESTS:-bw lat} " in *" bw "*) one bw $lib "-S 65536 -C 2000" ;; esac
		case " ${RS_TESTS:-bw lat} " in *" lat "*) one lat $lib "-S 64 -I 10000 -C 1" ;; esac
	done
done

python3 - "$ROUNDS" "${T[bw.debian]:-}" "${T[bw.ours]:-}" "${T[lat.debian]:-}" "${T[lat.ours]:-}" "${RS_BASE:+base}" <<'PY'
import statistics, sys
rounds = sys.argv[1]
base = sys.argv[6] if len(sys.argv) > 6 and sys.argv[6] else "Debian"
def vals(s): return [None if x == "x" else float(x) for x in s.split()]  # None: a failed round
print(f"rstream on rxe, {rounds} rounds each, alternating; us per transfer (median), ratio ours/{base}")
print(f"{'test':<34}{base:>10}{'ours':>10}{'min':>7}{'median':>8}{'max':>7}")
for name, c, o in (("64 KiB transfers (-S 65536 -C 2000)", sys.argv[2], sys.argv[3]),
                   ("64 B ping-pong (-S 64 -I 10000)", sys.argv[4], sys.argv[5])):
    c, o = vals(c), vals(o)
    rs = [a / b for a, b in zip(o, c) if a is not None and b]  # round i against round i
    c, o = [v for v in c if v is not None], [v for v in o if v is not None]
    if not rs:
        print(f"{name:<34}{'n/a':>10}{'n/a':>10}"); continue
    print(f"{name:<34}{statistics.median(c):>10.1f}{statistics.median(o):>10.1f}"
          f"{min(rs):>7.2f}{statistics.median(rs):>8.2f}{max(rs):>7.2f}")
PY
exit $failed

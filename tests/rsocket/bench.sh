#!/bin/bash
# make bench, rsockets part: Debian's rstream with 64 KiB transfers over
# rsockets on the soft RDMA fabric against the same program over kernel TCP
# (`rstream -T s`) on the same host. The two alternate for ROUNDS rounds (a
# shared machine's speed drifts between runs; a single pair of runs can be off
# by 2x), and the table shows each side's median and the min/median/max of the
# per-round ratios. Timings are reported, never asserted. The soft fabric's
# streams between two processes of one host carry their frames through
# shared-memory rings; the rows marked "TCP links" run rsockets with
# SOFTVERBS_LOCAL=0 (softverbs over loopback TCP links), so the same-host
# path's gain is measured in the same run.
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/soft/lib.sh
L=$PWD/build/bin/rdmacm-soft
out=build/bench; mkdir -p "$out"
A=127.0.0.1
COUNT=${COUNT:-20000}
ITER=${ITER:-5000}
ROUNDS=${ROUNDS:-5}
port=8401

run() { # NAME "args" [SOFTVERBS_LOCAL]: client output in $out/NAME.txt
	local name=$1 loc=${3:-1}
	SOFTVERBS_LOCAL=$loc timeout 180 "$L" rstream -p "$port" $2 > "$out/$name.server.txt" 2>&1 &
	local spid=$!
	wait_port "$port"
	SOFTVERBS_LOCAL=$loc timeout 180 "$L" rstream -s $A -p "$port" $2 > "$out/$name.txt" 2>&1
	wait $spid 2>/dev/null
	port=$((port + 1))
}
# rstream's columns: name bytes xfers iters total time Gb/sec usec/xfer
field() { awk -v n="$2" '$1 == "custom" {print $n}' "$1"; }

: > "$out/rstream-rounds.txt"
for i in $(seq "$ROUNDS"); do
	run rs_bw "-S 65536 -C $COUNT"
	run tcp_bw "-T s -S 65536 -C $COUNT"
	run rs_lat "-S 65536 -I $ITER -C 1"
	run tcp_lat "-T s -S 65536 -I $ITER -C 1"
	run rsl_bw "-S 65536 -C $COUNT" 0
	run rsl_lat "-S 65536 -I $ITER -C 1" 0
	# a run without a result row leaves "-" in its column
	rb=$(field "$out/rs_bw.txt" 7) tb=$(field "$out/tcp_bw.txt" 7)
	rl=$(field "$out/rs_lat.txt" 8) tl=$(field "$out/tcp_lat.txt" 8)
	xb=$(field "$out/rsl_bw.txt" 7) xl=$(field "$out/rsl_lat.txt" 8)
	echo "$i ${rb:--} ${tb:--} ${rl:--} ${tl:--} ${xb:--} ${xl:--}" >> "$out/rstream-rounds.txt"
done

python3 - "$out/rstream-rounds.txt" "$COUNT" "$ITER" <<'EOF'
import statistics, sys
path, count, iters = sys.argv[1:]
rows = [l.split() for l in open(path)]
def num(v):
    try:
        return float(v)
    except ValueError:
        return None
def col(i):
    return [num(r[i]) if len(r) == 7 else None for r in rows]
def line(name, a, b):
    ratios = [x / y for x, y in zip(a, b) if x is not None and y]
    if not rows or len(ratios) != len(rows):
        print('%-40s %12s %12s  %s' % (name, 'n/a', 'n/a', 'a run failed: see build/bench/rstream-rounds.txt'))
        return
    print('%-40s %12.2f %12.2f  %.2f / %.2f / %.2f' % (name, statistics.median(a), statistics.median(b),
          min(ratios), statistics.median(ratios), max(ratios)))
print('%-40s %12s %12s  %s' % ('rstream, 64 KiB transfers (%d rounds)' % len(rows), 'rsockets', 'TCP (-T s)', 'ratio min / median / max'))
line('bandwidth (%s xfers, Gb/s)' % count, col(1), col(2))
line('latency (%s round trips, us/xfer)' % iters, col(3), col(4))
line('bandwidth, TCP links (SOFTVERBS_LOCAL=0)', col(5), col(2))
line('latency, TCP links (SOFTVERBS_LOCAL=0)', col(6), col(4))
EOF

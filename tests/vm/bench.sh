#!/bin/bash
# `make bench-vm`: Debian's librdmacm against ours on the kernel CM (rxe),
# INSIDE one guest boot (tests/vm/run-in-guest.sh).  Rounds alternate the
# libraries (C, ours, C, ours, ...); each run is
#   cmtime: server `cmtime -b IP`, client `cmtime -s IP -c $CONNS`
#           -> every step's "total ms" from the client's table
#   rping:  server `rping -s -a IP -C $PINGS`, client `rping -c -a IP -C $PINGS`
#           -> the client's wall time
# and the same library is used on both sides.  Prints per step the ratio
# ours/C (min/median/max over the rounds, round i of ours against round i of
# C) and the absolute medians.  Timings are reported, never asserted; the
# exit status is non-zero only if a program failed (either library).
# Knobs: BENCH_ROUNDS (5), BENCH_CONNS (100), BENCH_PINGS (1000),
# BENCH_RESULTS (raw data + logs; default /tmp/bench-vm), BENCH_NOASLR=1
# (every program under `setarch -R`, both libraries: qemu's TCG keys its
# translated code by virtual address, so with address randomisation each new
# process translates every library function again on its first call, which
# costs the bigger library more; without it, later processes reuse the
# translations made by the warm-up and the table compares steady speed),
# BENCH_BASE (a librdmacm directory to use as "C" instead of Debian's: an A/B
# of two builds of ours).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
IP=${QRXE_IP:?run inside tests/vm/run-in-guest.sh}
ROUNDS=${BENCH_ROUNDS:-5}
CONNS=${BENCH_CONNS:-100}
PINGS=${BENCH_PINGS:-1000}
RES=${BENCH_RESULTS:-/tmp/bench-vm}
OURS=$ROOT/build/lib
T_CMTIME=60 T_RPING=180
SETARCH=""
[ "${BENCH_NOASLR:-0}" = 1 ] && SETARCH="setarch -R"
mkdir -p "$RES"
DATA=$RES/data.txt       # "lib round step value unit" lines
: >"$DATA"
: >"$RES/bench.log"
fails=0
say() { echo "$*" | tee -a "$RES/bench.log"; }
now() { date +%s.%N; }
if [ -n "${BENCH_BASE:-}" ] && [ ! -e "$BENCH_BASE/librdmacm.so.1" ]; then
	echo "bench-vm: BENCH_BASE=$BENCH_BASE has no librdmacm.so.1 (in the guest)" >&2
	exit 2
fi
libenv() {
	if [ "$1" = ours ]; then echo "LD_LIBRARY_PATH=$OURS"
	elif [ -n "${BENCH_BASE:-}" ]; then echo "LD_LIBRARY_PATH=$BENCH_BASE"
	else echo "-u LD_LIBRARY_PATH"; fi
}

. "$ROOT/tests/vm/lib.sh" # wait_listen
# Reaps server $1 (started under `timeout -k 5`, so every wait is bounded);
# $2=1: stop it first (cmtime's server never exits on its own, and a server
# whose client failed may wait for a peer that never comes).  Status: the
# server's own, or 0 if it was still running when stopped.
stop_server() {
	local pid=$1 stop=$2
	if [ "$stop" = 1 ] && kill -0 "$pid" 2>/dev/null; then
		kill "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
		return 0
	fi
	wait "$pid"
}

# run LIB ROUND NAME TIMEOUT SERVER-CMD CLIENT-CMD PERSISTENT -> sets crc, src, wall
run_pair() {
	local lib=$1 round=$2 name=$3 t=$4 srv=$5 cli=$6 persistent=$7 sp t0 t1 tag=$3.$1.$2
	env $(libenv "$lib") timeout -k 5 "$t" $SETARCH $srv >"$RES/$tag.srv" 2>&1 &
	sp=$!
	if ! wait_listen "${srv%% *}"; then
		say "  ($tag: the server did not listen within 10 s; starting the client anyway)"
	fi
	t0=$(now)
	env $(libenv "$lib") timeout -k 5 "$t" $SETARCH $cli >"$RES/$tag.cli" 2>&1
	crc=$?
	t1=$(now)
	wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b-a}')
	if [ "$crc" != 0 ]; then persistent=1; fi
	stop_server "$sp" "$persistent"
	src=$?
	if [ "$crc" != 0 ] || [ "$src" != 0 ]; then
		fails=$((fails + 1))
		say "FAIL $name ($lib, round $round): client rc=$crc, server rc=$src (124 = timeout)"
		sed 's/^/    | client: /' "$RES/$tag.cli" | tail -n 15 | tee -a "$RES/bench.log"
		sed 's/^/    | server: /' "$RES/$tag.srv" | tail -n 15 | tee -a "$RES/bench.log"
		return 1
	fi
	return 0
}

bench_cmtime() {  # LIB ROUND
	local n
	run_pair "$1" "$2" cmtime $T_CMTIME "cmtime -b $IP" "cmtime -s $IP -c $CONNS" 1 || return
	# "step              total ms     max ms     min us  us / conn"
	# "create id    :        1.70       0.17       6.00      16.95"
	n=$(awk -v lib="$1" -v r="$2" -F: '
		/^step +total ms/ {t=1; next}
		t && NF == 2 { name=$1; sub(/ +$/, "", name); gsub(/ /, "_", name)
		               split($2, v, " "); print lib, r, "cmtime:" name, v[1], "ms"; n++ }
		END {exit n == 0}' "$RES/cmtime.$1.$2.cli" | tee -a "$DATA" | wc -l)
	if [ "$n" = 0 ]; then
		fails=$((fails + 1))
		say "FAIL cmtime ($1, round $2): no step table in the client's output"
	fi
	say "  cmtime -c $CONNS ($1, round $2, client wall ${wall} s): $(awk -v l="$1" -v r="$2" '$1==l && $2==r && $3 ~ /^cmtime:/ {sub(/^cmtime:/, "", $3); printf "%s %s  ", $3, $4}' "$DATA")"
}

bench_rping() {  # LIB ROUND
	run_pair "$1" "$2" rping $T_RPING "rping -s -a $IP -C $PINGS" "rping -c -a $IP -C $PINGS" 0 || return
	echo "$1 $2 rping_wall $wall s" >>"$DATA"
	say "  rping -C $PINGS ($1, round $2): client wall ${wall} s"
}

say "bench-vm: kernel $(uname -r), devices: $(ls /sys/class/infiniband | tr '\n' ' ')ip $IP, $(nproc) vCPUs; rounds $ROUNDS, cmtime -c $CONNS, rping -C $PINGS${SETARCH:+; address randomisation off ($SETARCH)}"
if [ -n "${BENCH_BASE:-}" ]; then c_lib=$(readlink -f "$BENCH_BASE/librdmacm.so.1")
else c_lib="Debian's $(readlink -f /usr/lib/x86_64-linux-gnu/librdmacm.so.1)"; fi
say "  C = $c_lib; ours = $OURS/librdmacm.so.1"
tb=$(now)
# Warm-up (not counted): binaries and libraries come over 9p on first use.
for lib in C ours; do
	run_pair "$lib" 0 cmtime $T_CMTIME "cmtime -b $IP" "cmtime -s $IP -c 10" 1 &&
		say "  warm-up cmtime -c 10 ($lib): ok, not counted"
done
for r in $(seq "$ROUNDS"); do
	for lib in C ours; do
		bench_cmtime "$lib" "$r"
		bench_rping "$lib" "$r"
	done
done

# The table: per step, ratio ours/C of the same round, min/median/max, and
# the medians of each library.
say ""
[ -n "${BENCH_BASE:-}" ] && say "(\"C\" below is $BENCH_BASE, not Debian's library)"
say "ours/C over $ROUNDS rounds (ratio < 1: ours faster); medians in ms (cmtime: step total), s (rping: client wall)"
awk '
	function median(a, n,   i, j, t) {
		for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
		return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
	}
	{ v[$1, $2, $3] = $4; unit[$3] = $5; if (!($3 in seen)) { seen[$3] = 1; order[++ns] = $3 } rounds[$2] = 1 }
	END {
		printf "| %-22s | %10s | %13s | %10s | %11s | %11s | %s |\n", "step", "ours/C min", "ours/C median", "ours/C max", "C median", "ours median", "rounds"
		printf "|%s|%s|%s|%s|%s|%s|%s|\n", "------------------------", "-----------:", "--------------:", "-----------:", "------------:", "------------:", "---"
		for (s = 1; s <= ns; s++) {
			st = order[s]; nr = nc = no = 0
			for (r in rounds) {
				if ((("C", r, st) in v)) c[++nc] = v["C", r, st]
				if ((("ours", r, st) in v)) o[++no] = v["ours", r, st]
				if ((("C", r, st) in v) && (("ours", r, st) in v) && v["C", r, st] > 0)
					q[++nr] = v["ours", r, st] / v["C", r, st]
			}
			name = st; sub(/^cmtime:/, "cmtime ", name); gsub(/_/, " ", name)
			if (st == "rping_wall") name = "rping wall"
			if (nr) { mn = mx = q[1]; for (i = 2; i <= nr; i++) { if (q[i] < mn) mn = q[i]; if (q[i] > mx) mx = q[i] }
			          printf "| %-22s | %10.2f | %13.2f | %10.2f |", name, mn, median(q, nr), mx }
			else printf "| %-22s | %10s | %13s | %10s |", name, "-", "-", "-"
			printf " %8.2f %s | %8.2f %s | %d |\n", nc ? median(c, nc) : 0, unit[st], no ? median(o, no) : 0, unit[st], nr
			delete c; delete o; delete q
		}
	}' "$DATA" | tee -a "$RES/bench.log"
say ""
say "bench-vm: $(awk -v a="$tb" -v b="$(now)" 'BEGIN{printf "%.0f", b-a}') s in the guest; $fails failed run(s)"
[ "$fails" -eq 0 ]

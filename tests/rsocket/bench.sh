#!/bin/bash
# make bench, rsockets part: Debian's rstream with 64 KiB transfers over
# rsockets on the soft RDMA fabric against the same program over kernel TCP
# (`rstream -T s`) on the same host. Prints a table of ratios; timings are
# reported, never asserted.
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/soft/lib.sh
L=$PWD/build/bin/rdmacm-soft
out=build/bench; mkdir -p "$out"
A=127.0.0.1
COUNT=${COUNT:-20000}
ITER=${ITER:-5000}

run() { # NAME PORT "args": client output in $out/NAME.txt
	local name=$1 port=$2
	timeout 180 "$L" rstream -p "$port" $3 > "$out/$name.server.txt" 2>&1 &
	local spid=$!
	wait_port "$port"
	timeout 180 "$L" rstream -s $A -p "$port" $3 > "$out/$name.txt" 2>&1
	wait $spid 2>/dev/null
}
# columns: name bytes xfers iters total time Gb/sec usec/xfer
gbps() { awk '$1 == "custom" {print $7}' "$1"; }
usec() { awk '$1 == "custom" {print $8}' "$1"; }
r() { python3 -c "import sys; a,b=sys.argv[1:]; print('%.2f' % (float(a)/float(b)) if a and b and float(b) else 'n/a')" "$1" "$2"; }

run rs_bw 8401 "-S 65536 -C $COUNT"
run tcp_bw 8402 "-T s -S 65536 -C $COUNT"
run rs_lat 8403 "-S 65536 -I $ITER -C 1"
run tcp_lat 8404 "-T s -S 65536 -I $ITER -C 1"

rb=$(gbps "$out/rs_bw.txt"); tb=$(gbps "$out/tcp_bw.txt")
rl=$(usec "$out/rs_lat.txt"); tl=$(usec "$out/tcp_lat.txt")
printf '%-40s %12s %12s %8s\n' "rstream, 64 KiB transfers" "rsockets" "TCP (-T s)" "ratio"
printf '%-40s %12s %12s %8s\n' "bandwidth ($COUNT xfers, Gb/s)" "${rb:-n/a}" "${tb:-n/a}" "$(r "$rb" "$tb")"
printf '%-40s %12s %12s %8s\n' "latency ($ITER round trips, us/xfer)" "${rl:-n/a}" "${tl:-n/a}" "$(r "$rl" "$tl")"

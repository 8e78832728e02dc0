#!/bin/bash
# make bench: the soft fabric against the floor of the same host, in one run.
#   ib_send_lat -R (64 B)  vs  sockperf TCP ping-pong (64 B)     goal: <= 1.5x
#     (both busy-poll: perftest spins on its CQ, sockperf --nonblocked on recv; a
#     blocking TCP floor would add a scheduler wake-up per message and flatter us)
#   ib_write_bw -R (64 KiB) vs iperf3 TCP stream (64 KiB writes)  goal: >= 0.7x and >= 2 GB/s
#   ib_read_lat -R (2 B)   (reported; compared with the TCP round trip)
#   cmtime -c 1000         goal: <= 1 ms per connection, no failure
#   the same ib_write_bw and ib_send_lat over RoCEv2 (SOFTVERBS_WIRE=roce, both peers on
#     127.0.0.1: one owns UDP 4791 and hands the other its packets)
#                          goals: write >= 1 GB/s, send latency <= 2x the TCP floor
# Prints a table of ratios; timings are reported, never asserted.
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/soft/lib.sh
L=$PWD/build/bin/rdmacm-soft
out=build/bench; mkdir -p "$out"
A=127.0.0.1
ITER=${ITER:-20000}

pair() { # NAME PORT "server" "client": client output in $out/NAME.txt
	local name=$1 port=$2
	timeout 120 $3 > "$out/$name.server.txt" 2>&1 &
	local spid=$!
	wait_port "$port"
	timeout 120 $4 > "$out/$name.txt" 2>&1
	wait $spid 2>/dev/null
}
col() { # FILE N: field N of perftest's result row (the numeric row after the #bytes header)
	awk -v n="$2" '$1 ~ /^#bytes/ {h=1; next} h && $1 ~ /^[0-9]+$/ {v=$n} END {print v}' "$1"
}

pair send_lat 7601 "$L ib_send_lat -R -p 7601 -s 64 -n $ITER" "$L ib_send_lat -R -p 7601 -s 64 -n $ITER $A"
pair write_bw 7602 "$L ib_write_bw -R -p 7602 -s 65536 -n 20000" "$L ib_write_bw -R -p 7602 -s 65536 -n 20000 $A"
pair read_lat 7603 "$L ib_read_lat -R -p 7603 -n $ITER" "$L ib_read_lat -R -p 7603 -n $ITER $A"
timeout 120 "$L" cmtime -b $A -p 7604 > "$out/cmtime.server.txt" 2>&1 &
cm=$!; wait_port 7604
timeout 120 "$L" cmtime -s $A -p 7604 -c 1000 > "$out/cmtime.txt" 2>&1; cmrc=$?
kill $cm 2>/dev/null; wait $cm 2>/dev/null
R="env SOFTVERBS_WIRE=roce $L"
pair roce_send_lat 7607 "$R ib_send_lat -R -p 7607 -s 64 -n $ITER" "$R ib_send_lat -R -p 7607 -s 64 -n $ITER $A"
pair roce_write_bw 7608 "$R ib_write_bw -R -p 7608 -s 65536 -n 5000" "$R ib_write_bw -R -p 7608 -s 65536 -n 5000 $A"

sockperf sr --tcp --nonblocked -i $A -p 7605 > "$out/sockperf.server.txt" 2>&1 &
sp=$!; wait_port 7605
sockperf pp --tcp --nonblocked -i $A -p 7605 -m 64 -t 5 > "$out/sockperf.txt" 2>&1
kill $sp 2>/dev/null; wait $sp 2>/dev/null
iperf3 -s -1 -p 7606 > /dev/null 2>&1 &
ip=$!; wait_port 7606
iperf3 -c $A -p 7606 -l 64K -t 5 -J > "$out/iperf3.json" 2>/dev/null
wait $ip 2>/dev/null

# latency rows: #bytes #iter t_min t_max t_typical t_avg ...; bandwidth: #bytes #iter peak average rate
lat=$(col "$out/send_lat.txt" 6)
lat_typ=$(col "$out/send_lat.txt" 5)
bw=$(col "$out/write_bw.txt" 4)
rlat=$(col "$out/read_lat.txt" 6)
roce_lat=$(col "$out/roce_send_lat.txt" 6)
roce_bw=$(col "$out/roce_write_bw.txt" 4)
tcp_lat=$(sed -n 's/.*Latency is \([0-9.]*\) usec.*/\1/p' "$out/sockperf.txt" | tail -1)
tcp_bw=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"]/8e6)' "$out/iperf3.json" 2>/dev/null)
# cmtime rows: "connect      :  total-ms  max-ms  min-us  us/conn" (the ':' is a field of its own)
cm_row=$(awk '$1 == "connect" {sub(/^[^:]*:/, ""); print $1, $4}' "$out/cmtime.txt")
cm_total=${cm_row% *}; cm_per=${cm_row#* }

r() { python3 -c "import sys; a,b=sys.argv[1:]; print('%.2f' % (float(a)/float(b)) if a and b and float(b) else 'n/a')" "$1" "$2"; }
printf '%-34s %12s %12s %8s  %s\n' "measure" "soft fabric" "floor" "ratio" "goal"
printf '%-34s %12s %12s %8s  %s\n' "send latency 64 B, avg (us)" "${lat:-n/a}" "${tcp_lat:-n/a}" "$(r "$lat" "$tcp_lat")" "<= 1.5 (TCP ping-pong, busy-polled)"
printf '%-34s %12s %12s %8s  %s\n' "send latency 64 B, typical (us)" "${lat_typ:-n/a}" "${tcp_lat:-n/a}" "$(r "$lat_typ" "$tcp_lat")" ""
printf '%-34s %12s %12s %8s  %s\n' "RDMA write 64 KiB (MB/s)" "${bw:-n/a}" "${tcp_bw%.*}" "$(r "$bw" "$tcp_bw")" ">= 0.7 and >= 2000 MB/s"
printf '%-34s %12s %12s %8s  %s\n' "RDMA read latency, avg (us)" "${rlat:-n/a}" "${tcp_lat:-n/a}" "$(r "$rlat" "$tcp_lat")" "(reported)"
printf '%-34s %12s %12s %8s  %s\n' "RoCEv2 send latency 64 B, avg (us)" "${roce_lat:-n/a}" "${tcp_lat:-n/a}" "$(r "$roce_lat" "$tcp_lat")" "<= 2 (TCP ping-pong)"
printf '%-34s %12s %12s %8s  %s\n' "RoCEv2 RDMA write 64 KiB (MB/s)" "${roce_bw:-n/a}" "${tcp_bw%.*}" "$(r "$roce_bw" "$tcp_bw")" ">= 1000 MB/s (stream path: ${bw:-n/a})"
printf '%-34s %12s %12s %8s  %s\n' "cmtime -c 1000 connect (us/conn)" "${cm_per:-n/a}" "1000" "$(r "$cm_per" 1000)" "<= 1 (exit $cmrc)"

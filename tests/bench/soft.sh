#!/bin/bash
# make bench: the soft fabric against the floor of the same host, in one run.
#   ib_send_lat -R (64 B)  vs  sockperf TCP ping-pong (64 B, busy-polled)  goal: <= 0.4x and
#     <= 1 us; UCX's tag latency beside it (ucx_perftest, the moonshot)
#   ib_write_bw -R (64 KiB) vs a 64 KiB memcpy between two buffers (tests/bench/copy_floor.c)
#     goal: >= 0.5x, and >= UCX's 64 KiB tag bandwidth; process_vm_writev's rate beside it
#     (the one copy softverbs' same-host WRITE makes)
#   ib_read_lat -R (2 B)   (reported; compared with the TCP round trip)
#   cmtime -c 1000         goal: <= 1 ms per connection, no failure
#   the same ib_write_bw and ib_send_lat over RoCEv2 (SOFTVERBS_WIRE=roce, both peers on
#     127.0.0.1: one owns UDP 4791 and hands the other its packets)
#                          goals: write >= 1 GB/s, send latency <= 2x the TCP floor
#   ib_send_bw -R (64 KiB) beside ib_write_bw: SEND's two copies through the same-host ring
#     against WRITE's one process_vm_writev
#   rstream 64 B latency vs rstream -T s (kernel TCP); riostream 64 B latency (goal: <= 1.5x
#     rstream's) and 64 KiB bandwidth; udpong 64 B one way, and echoed against udpong -T s
#     (kernel UDP) (rstream's 64 KiB rows, against kernel TCP over several rounds:
#     tests/rsocket/bench.sh)
#   ucx_perftest (ucx-utils): tag latency and bandwidth, UCX's choice of transports, and its
#     posix shared-memory transport's 64 B active-message latency and 64 KiB put bandwidth;
#     tag latency and bandwidth over the soft fabric (UCX_TLS=rc_verbs,ud_verbs under
#     rdmacm-soft) beside UCX's own tcp transport
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
pair send_bw 7609 "$L ib_send_bw -R -p 7609 -s 65536 -n 20000" "$L ib_send_bw -R -p 7609 -s 65536 -n 20000 $A"
pair read_lat 7603 "$L ib_read_lat -R -p 7603 -n $ITER" "$L ib_read_lat -R -p 7603 -n $ITER $A"
timeout 120 "$L" cmtime -b $A -p 7604 > "$out/cmtime.server.txt" 2>&1 &
cm=$!; wait_port 7604
timeout 120 "$L" cmtime -s $A -p 7604 -c 1000 > "$out/cmtime.txt" 2>&1; cmrc=$?
kill $cm 2>/dev/null; wait $cm 2>/dev/null
R="env SOFTVERBS_WIRE=roce $L"
pair roce_send_lat 7607 "$R ib_send_lat -R -p 7607 -s 64 -n $ITER" "$R ib_send_lat -R -p 7607 -s 64 -n $ITER $A"
pair roce_write_bw 7608 "$R ib_write_bw -R -p 7608 -s 65536 -n 5000" "$R ib_write_bw -R -p 7608 -s 65536 -n 5000 $A"

# rsockets: PROG's server and client (the server exits too)
rs() { # NAME PORT PROG "args" [launcher]
	local run=${5-$L}
	pair "$1" "$2" "$run $3 -p $2 $4" "$run $3 -s $A -p $2 $4"
}
rs rstream_lat 7613 rstream "-S 64 -C 1 -I 20000"
rs tcp_rstream_lat 7615 rstream "-T s -S 64 -C 1 -I 20000" ""
rs riostream_lat 7617 riostream "-S 64 -C 1 -I 20000"
rs riostream_bw 7618 riostream "-S 65536 -C 20000"
udpong_pair() { # NAME PORT LAUNCHER "options": 20000 64-byte datagrams (the server never exits)
	timeout 60 $3 udpong -b $A -p "$2" $4 > "$out/$1.server.txt" 2>&1 &
	local up=$!
	wait_port "$2"
	timeout 60 $3 udpong -s $A -p "$2" $4 -S 64 -C 20000 > "$out/$1.txt" 2>&1
	kill $up 2>/dev/null; wait $up 2>/dev/null
}
udpong_pair udpong 7619 "$L" ""
udpong_pair udpong_echo 7610 "$L" "-T e"
udpong_pair udp_echo 7611 "" "-T s -T e"

cc -O2 -o "$out/copy_floor" tests/bench/copy_floor.c && "$out/copy_floor" > "$out/copy_floor.txt"
ucx() { # NAME PORT "client args" [launcher [env...]]
	command -v ucx_perftest > /dev/null || return 0
	local name=$1 port=$2 args=$3 run=${4:-}
	shift 3; [ $# -gt 0 ] && shift
	env "$@" timeout 60 $run ucx_perftest -p "$port" > "$out/$name.server.txt" 2>&1 &
	local s=$!
	wait_port "$port"
	env "$@" timeout 60 $run ucx_perftest $A -p "$port" $args > "$out/$name.txt" 2>&1
	wait $s 2>/dev/null
}
ucx ucx_tag_lat 7620 "-t tag_lat -s 64 -n 100000"
ucx ucx_tag_bw 7621 "-t tag_bw -s 65536 -n 20000"
ucx ucx_posix_am_lat 7622 "-x posix -d memory -t am_lat -s 64 -n 100000"
ucx ucx_posix_put_bw 7623 "-x posix -d memory -t put_bw -s 65536 -n 20000"
# UCX over the soft fabric's verbs transports, beside UCX's own tcp transport
ucx ucx_soft_tag_lat 7624 "-t tag_lat -s 64 -n 20000" "$L" UCX_TLS=rc_verbs,ud_verbs,self
ucx ucx_soft_tag_bw 7625 "-t tag_bw -s 65536 -n 5000" "$L" UCX_TLS=rc_verbs,ud_verbs,self
ucx ucx_tcp_tag_lat 7626 "-t tag_lat -s 64 -n 20000" "" UCX_TLS=tcp,self
ucx ucx_tcp_tag_bw 7627 "-t tag_bw -s 65536 -n 5000" "" UCX_TLS=tcp,self

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
send_bw=$(col "$out/send_bw.txt" 4)
rlat=$(col "$out/read_lat.txt" 6)
roce_lat=$(col "$out/roce_send_lat.txt" 6)
roce_bw=$(col "$out/roce_write_bw.txt" 4)
tcp_lat=$(sed -n 's/.*Latency is \([0-9.]*\) usec.*/\1/p' "$out/sockperf.txt" | tail -1)
tcp_bw=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"]/8e6)' "$out/iperf3.json" 2>/dev/null)
# cmtime rows: "connect      :  total-ms  max-ms  min-us  us/conn" (the ':' is a field of its own)
cm_row=$(awk '$1 == "connect" {sub(/^[^:]*:/, ""); print $1, $4}' "$out/cmtime.txt")
cm_total=${cm_row% *}; cm_per=${cm_row#* }

# rstream/riostream rows: name bytes xfers iters total time Gb/sec usec/xfer; udpong's lacks iters
rsv() { awk -v n="$2" '$1 == "custom" {print $n}' "$out/$1.txt"; }
rs_lat=$(rsv rstream_lat 8)
tcp_rs_lat=$(rsv tcp_rstream_lat 8)
rio_lat=$(rsv riostream_lat 8); rio_bw=$(rsv riostream_bw 7)
ud_lat=$(rsv udpong 7); ud_echo=$(rsv udpong_echo 7); udp_echo=$(rsv udp_echo 7)
memcpy_bw=$(awk '$1 == "memcpy" {print $2}' "$out/copy_floor.txt")
cma_bw=$(awk '$1 == "cma" {print $2}' "$out/copy_floor.txt")
# ucx_perftest's "Final:" row: iterations, latency 50%ile average overall (us), bandwidth
# average overall (MB/s), message rate
ucxv() { [ -e "$out/$1.txt" ] && awk -v n="$2" '$1 == "Final:" {print $n}' "$out/$1.txt"; }
ucx_lat=$(ucxv ucx_tag_lat 4); ucx_bw=$(ucxv ucx_tag_bw 6)
ucx_am=$(ucxv ucx_posix_am_lat 4); ucx_put=$(ucxv ucx_posix_put_bw 6)
us_lat=$(ucxv ucx_soft_tag_lat 4); us_bw=$(ucxv ucx_soft_tag_bw 6)
ut_lat=$(ucxv ucx_tcp_tag_lat 4); ut_bw=$(ucxv ucx_tcp_tag_bw 6)

r() { python3 -c "import sys; a,b=sys.argv[1:]; print('%.2f' % (float(a)/float(b)) if a and b and float(b) else 'n/a')" "$1" "$2"; }
printf '%-34s %12s %12s %8s  %s\n' "measure" "soft fabric" "floor" "ratio" "goal"
printf '%-34s %12s %12s %8s  %s\n' "send latency 64 B, avg (us)" "${lat:-n/a}" "${tcp_lat:-n/a}" "$(r "$lat" "$tcp_lat")" "<= 0.4 (TCP ping-pong, busy-polled) and <= 1 us"
printf '%-34s %12s %12s %8s  %s\n' "send latency 64 B, typical (us)" "${lat_typ:-n/a}" "${tcp_lat:-n/a}" "$(r "$lat_typ" "$tcp_lat")" ""
printf '%-34s %12s %12s %8s  %s\n' "  vs UCX tag latency 64 B (us)" "${lat:-n/a}" "${ucx_lat:-n/a}" "$(r "$lat" "$ucx_lat")" "moonshot: 1 (UCX posix am: ${ucx_am:-n/a} us)"
printf '%-34s %12s %12s %8s  %s\n' "RDMA write 64 KiB (MB/s)" "${bw:-n/a}" "${memcpy_bw:-n/a}" "$(r "$bw" "$memcpy_bw")" ">= 0.5 (memcpy 64 KiB; process_vm_writev: ${cma_bw:-n/a})"
printf '%-34s %12s %12s %8s  %s\n' "  vs UCX tag bandwidth 64 KiB" "${bw:-n/a}" "${ucx_bw%.*}" "$(r "$bw" "$ucx_bw")" ">= 1 (UCX posix put: ${ucx_put%.*} MB/s)"
printf '%-34s %12s %12s %8s  %s\n' "  vs iperf3 TCP (MB/s)" "${bw:-n/a}" "${tcp_bw%.*}" "$(r "$bw" "$tcp_bw")" "(reported)"
printf '%-34s %12s %12s %8s  %s\n' "SEND 64 KiB (MB/s)" "${send_bw:-n/a}" "${bw:-n/a}" "$(r "$send_bw" "$bw")" "(reported; vs the WRITE row: two copies through the ring against process_vm_writev's one)"
printf '%-34s %12s %12s %8s  %s\n' "RDMA read latency, avg (us)" "${rlat:-n/a}" "${tcp_lat:-n/a}" "$(r "$rlat" "$tcp_lat")" "(reported)"
printf '%-34s %12s %12s %8s  %s\n' "RoCEv2 send latency 64 B, avg (us)" "${roce_lat:-n/a}" "${tcp_lat:-n/a}" "$(r "$roce_lat" "$tcp_lat")" "<= 2 (TCP ping-pong)"
printf '%-34s %12s %12s %8s  %s\n' "RoCEv2 RDMA write 64 KiB (MB/s)" "${roce_bw:-n/a}" "${tcp_bw%.*}" "$(r "$roce_bw" "$tcp_bw")" ">= 1000 MB/s (stream path: ${bw:-n/a})"
printf '%-34s %12s %12s %8s  %s\n' "rstream 64 B latency (us)" "${rs_lat:-n/a}" "${tcp_rs_lat:-n/a}" "$(r "$rs_lat" "$tcp_rs_lat")" "(rstream -T s: kernel TCP)"
printf '%-34s %12s %12s %8s  %s\n' "riostream 64 B latency (us)" "${rio_lat:-n/a}" "${rs_lat:-n/a}" "$(r "$rio_lat" "$rs_lat")" "<= 1.5 (rstream over the fabric)"
printf '%-34s %12s %12s %8s  %s\n' "riostream 64 KiB bandwidth (Gb/s)" "${rio_bw:-n/a}" "" "" "(reported)"
printf '%-34s %12s %12s %8s  %s\n' "udpong 64 B (us/xfer)" "${ud_lat:-n/a}" "${tcp_lat:-n/a}" "$(r "$ud_lat" "$tcp_lat")" "(reported; TCP ping-pong)"
printf '%-34s %12s %12s %8s  %s\n' "udpong 64 B echo (us/xfer)" "${ud_echo:-n/a}" "${udp_echo:-n/a}" "$(r "$ud_echo" "$udp_echo")" "(reported; udpong -T s: kernel UDP)"
printf '%-34s %12s %12s %8s  %s\n' "UCX tag latency over soft0 (us)" "${us_lat:-n/a}" "${ut_lat:-n/a}" "$(r "$us_lat" "$ut_lat")" "(reported; UCX_TLS=rc_verbs,ud_verbs against UCX_TLS=tcp)"
printf '%-34s %12s %12s %8s  %s\n' "UCX tag bandwidth over soft0 (MB/s)" "${us_bw%.*}" "${ut_bw%.*}" "$(r "$us_bw" "$ut_bw")" "(reported; the same, 64 KiB)"
printf '%-34s %12s %12s %8s  %s\n' "cmtime -c 1000 connect (us/conn)" "${cm_per:-n/a}" "1000" "$(r "$cm_per" 1000)" "<= 1 (exit $cmrc)"

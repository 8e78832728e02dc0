#!/bin/bash
# Faults on the soft fabric: a peer killed mid-run is noticed (the survivor
# gets DISCONNECTED, flushes, and exits: bounded here by a 5 s wait), and many
# connect/disconnect cycles leave a server's fd count and RSS flat.
set -uo pipefail
cd "$(dirname "$0")/../.."
L=$PWD/build/bin/rdmacm-soft
out=build/soft-tests/faults; mkdir -p "$out"
. tests/soft/lib.sh
pass=0; fail=0
ok() { echo "PASS $1"; pass=$((pass+1)); }
bad() { echo "FAIL $1"; fail=$((fail+1)); }

# 1. kill -9 the rping client mid-run: the server must notice and exit.
RDMACM_RS_TRACE=$PWD/$out/kill.trace stdbuf -oL "$L" rping -s -a 127.0.0.1 -p 7321 -v -C 0 > "$out/kill.server.log" 2>&1 &
spid=$!
wait_port 7321
"$L" rping -c -a 127.0.0.1 -p 7321 -C 0 > "$out/kill.client.log" 2>&1 &
cpid=$!
# killed only once data flows (a loaded machine may take over a second to connect)
wait_output "$out/kill.server.log" "ping data" || bad "no ping data reached the rping server within 15 s"
kill -9 $cpid; wait $cpid 2>/dev/null
for _ in $(seq 50); do kill -0 $spid 2>/dev/null || break; sleep 0.1; done
if kill -0 $spid 2>/dev/null; then bad "rping server did not exit within 5 s of its peer's death"; kill -9 $spid
else
	wait $spid
	# rping's main thread may see the failed completion before its CM thread
	# reads DISCONNECTED; either is the survivor noticing, a hang is not.
	if grep -q 'event RDMA_CM_EVENT_DISCONNECTED' "$out/kill.trace" || grep -q 'completion failed status' "$out/kill.server.log"; then
		ok "survivor noticed its peer's death (DISCONNECTED or error completions) and exited"
	else bad "survivor exited without noticing its peer's death"; fi
fi

# 2. 1000 connections through one cmtime server: fds and RSS stay flat.
"$L" cmtime -b 127.0.0.1 -p 7322 > "$out/cycles.server.log" 2>&1 &
spid=$!
wait_port 7322
sample() { echo "$(ls /proc/$spid/fd | wc -l) $(awk '/VmRSS/ {print $2}' /proc/$spid/status)"; }
timeout 60 "$L" cmtime -s 127.0.0.1 -p 7322 -c 100 > /dev/null 2>&1
sleep 0.3; first=$(sample)
for i in $(seq 9); do timeout 60 "$L" cmtime -s 127.0.0.1 -p 7322 -c 100 > "$out/cycles.client.$i.log" 2>&1 || bad "cmtime round $i failed"; done
sleep 0.3; last=$(sample)
kill -9 $spid 2>/dev/null; wait $spid 2>/dev/null
set -- $first $last
echo "server after 100 connections: $1 fds, $2 kB RSS; after 1000: $3 fds, $4 kB RSS"
[ "$1" -eq "$3" ] && ok "fd count flat over 1000 connect/disconnect cycles ($1)" || bad "fd count grew from $1 to $3"
[ $(( $4 - $2 )) -lt 4096 ] && ok "RSS flat over 1000 cycles (+$(( $4 - $2 )) kB)" || bad "RSS grew by $(( $4 - $2 )) kB"

echo "faults: $pass passed, $fail failed"
[ $fail -eq 0 ]

#!/bin/bash
# Same-host links (softverbs/src/net/local.rs): the RC streams between two
# contexts of one network namespace go over an abstract unix socket
# (@softverbs.PORT), not loopback TCP, and fall back to TCP when the peer has
# no such name (SOFTVERBS_LOCAL=0) or when another user bound it. Each case is
# a Debian rping pair verifying its data (-V); while it runs, `ss` shows which
# kind of stream carries it.
set -uo pipefail
cd "$(dirname "$0")/../.."
L=$PWD/build/bin/rdmacm-soft
out=build/soft-tests/local; rm -rf "$out"; mkdir -p "$out"
. tests/soft/lib.sh
pass=0; fail=0
ok() { echo "PASS $1"; pass=$((pass+1)); }
bad() { echo "FAIL $1"; fail=$((fail+1)); }

# The program `timeout` runs (the launcher and stdbuf exec it).
child() { local c; for _ in $(seq 50); do c=$(pgrep -P "$1" | head -1); [ -n "$c" ] && { echo "$c"; return; }; sleep 0.1; done; }
# The softverbs endpoint port of process $1: its TCP listener other than the CM's ($2).
endpoint() { ss -ltnpH | awk -v p="pid=$1," -v cm=":$2\$" 'index($0, p) && $4 !~ cm {n = split($4, a, ":"); print a[n]; exit}'; }

# case NAME CM_PORT "server env" "client env" [squat]: sets $kind to what carried
# the data ("unix", "tcp", or "none") and $squat_out to the squatter's report.
kind=""; squat_out=""
run_case() {
	local name=$1 port=$2 senv=$3 cenv=$4 squat=${5:-}
	kind=none; squat_out=""
	env $senv timeout 60 stdbuf -oL "$L" rping -s -a 127.0.0.1 -p "$port" -V -C 3000 > "$out/$name.server.log" 2>&1 &
	local st=$!
	wait_port "$port"
	local spid; spid=$(child $st)
	local ep; ep=$(endpoint "$spid" "$port")
	if [ -z "$ep" ]; then bad "$name: no softverbs endpoint found for the server (pid $spid)"; kill $st; wait $st 2>/dev/null; return 1; fi
	local qt=""
	if [ -n "$squat" ]; then
		# Another user binds the name first (the server, SOFTVERBS_LOCAL=0, has none).
		setpriv --reuid=nobody --regid=nogroup --clear-groups /usr/bin/python3 - "$ep" 8 > "$out/$name.squatter.log" 2>&1 <<'EOF' &
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind('\0softverbs.' + sys.argv[1]); s.listen(8); s.settimeout(0.2)
print('listening', flush=True)
conns = got = 0
end = time.time() + float(sys.argv[2])
while time.time() < end:
    try:
        c, _ = s.accept()
    except socket.timeout:
        continue
    conns += 1
    c.settimeout(0.5)
    try:
        while time.time() < end:
            b = c.recv(65536)
            if not b:
                break
            got += len(b)
    except socket.timeout:
        pass
print('conns=%d bytes=%d' % (conns, got), flush=True)
EOF
		qt=$!
		wait_output "$out/$name.squatter.log" listening || true
	fi
	env $cenv timeout 60 stdbuf -oL "$L" rping -c -a 127.0.0.1 -p "$port" -V -v -C 3000 > "$out/$name.client.log" 2>&1 &
	local ct=$!
	wait_output "$out/$name.client.log" "ping data" || true
	local cpid; cpid=$(child $ct)
	ss -xapH > "$out/$name.unix.txt"; ss -tnpH > "$out/$name.tcp.txt"
	if grep "u_str ESTAB" "$out/$name.unix.txt" | grep -F "@softverbs.$ep " | grep -q "pid=$spid,"; then kind=unix
	elif grep -F "127.0.0.1:$ep " "$out/$name.tcp.txt" | grep -q "pid=$cpid,"; then kind=tcp; fi
	wait $ct; local crc=$?
	wait $st; local src=$?
	if [ -n "$qt" ]; then wait $qt; squat_out=$(tail -1 "$out/$name.squatter.log"); fi
	if [ $crc -ne 0 ] || [ $src -ne 0 ]; then
		bad "$name: rping client exit $crc, server exit $src"; tail -n 3 "$out/$name.client.log" "$out/$name.server.log"; return 1
	fi
	return 0
}

if run_case default 7331 "" ""; then
	[ "$kind" = unix ] && ok "same host: rping's data (verified) went over @softverbs.PORT, not TCP" || bad "same host: data went over $kind, not a unix stream"
fi
if run_case off 7332 "SOFTVERBS_LOCAL=0" "SOFTVERBS_LOCAL=0"; then
	[ "$kind" = tcp ] && ok "SOFTVERBS_LOCAL=0: rping's data (verified) went over TCP" || bad "SOFTVERBS_LOCAL=0: data went over $kind, not TCP"
fi
if run_case fallback 7333 "SOFTVERBS_LOCAL=0" ""; then
	[ "$kind" = tcp ] && ok "peer without the name: the client fell back to TCP (data verified)" || bad "peer without the name: data went over $kind, not TCP"
fi
if [ "$(id -u)" -eq 0 ] && command -v setpriv > /dev/null; then
	if run_case squatted 7334 "SOFTVERBS_LOCAL=0" "" squat; then
		[ "$kind" = tcp ] && ok "name bound by another user: the client used TCP (data verified)" || bad "name bound by another user: data went over $kind, not TCP"
		case $squat_out in
		*bytes=0) ok "the other user's listener received nothing ($squat_out)" ;;
		*) bad "the other user's listener got data or did not report: '$squat_out'" ;;
		esac
	fi
else
	echo "SKIP name bound by another user: needs root and setpriv to run the squatter as nobody"
fi

echo "local: $pass passed, $fail failed"
[ $fail -eq 0 ]

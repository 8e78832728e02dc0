#!/bin/bash
# UCX (Debian's ucx-utils, unmodified) on the soft fabric: ucx_info -d lists soft0's
# verbs transports, ucx_perftest pairs run over rc_verbs and ud_verbs (UCT active
# messages, RDMA put and get, atomic fetch-and-add; UCP tag matching over both), and
# io_demo connects through UCX's rdmacm connection manager, on 127.0.0.1 and between two
# network namespaces joined by a veth pair (root). UCX takes a device only if its node
# /dev/infiniband/<dev_name> exists: rdmacm-soft preloads softverbs/devnode for that.
# Prints PASS/FAIL lines and ends with "N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/soft/lib.sh
suite ucx ucx_perftest ucx-utils

if timeout 30 "$L" ucx_info -d > "$out/info.txt" 2>&1 \
	&& grep -A1 'Transport: rc_verbs' "$out/info.txt" | grep -q 'Device: soft0:1' \
	&& grep -A1 'Transport: ud_verbs' "$out/info.txt" | grep -q 'Device: soft0:1'; then
	ok "ucx_info -d lists rc_verbs and ud_verbs on soft0:1"
else ko "ucx_info -d" "no rc_verbs/ud_verbs on soft0:1" "$out/info.txt"; fi

# perf NAME PORT SERVER_NS CLIENT_NS ADDR "options" [env...]: a ucx_perftest pair (the
# server runs one test and exits); both exit 0 and the client prints its Final row.
perf() {
	local name=$1 port=$2 sns=$3 cns=$4 addr=$5 opts=$6; shift 6
	local sx=() cx=()
	[ -n "$sns" ] && sx=(ip netns exec "$sns")
	[ -n "$cns" ] && cx=(ip netns exec "$cns")
	"${sx[@]}" env "$@" timeout 60 "$L" ucx_perftest -p "$port" > "$out/$name.server.txt" 2>&1 &
	local spid=$!
	wait_port "$port" "$sns"
	# shellcheck disable=SC2086
	"${cx[@]}" env "$@" timeout 60 "$L" ucx_perftest "$addr" -p "$port" $opts > "$out/$name.txt" 2>&1
	local crc=$?
	wait $spid; local src=$?
	if [ $crc -eq 0 ] && [ $src -eq 0 ] && grep -q '^Final:' "$out/$name.txt"; then
		ok "$name ($(awk '$1 == "Final:" {print $4 " us, " $6 " MB/s"}' "$out/$name.txt"))"
	else ko "$name" "client exit $crc, server exit $src" "$out/$name.server.txt" "$out/$name.txt"; fi
}
A=127.0.0.1
TLS=UCX_TLS=rc_verbs,ud_verbs,self
perf rc_am_lat 7490 "" "" $A "-d soft0:1 -x rc_verbs -t am_lat -s 64 -n 5000"
perf ud_am_lat 7491 "" "" $A "-d soft0:1 -x ud_verbs -t am_lat -s 64 -n 5000"
perf rc_put_bw 7492 "" "" $A "-d soft0:1 -x rc_verbs -t put_bw -D zcopy -s 65536 -n 2000"
perf rc_get_bw 7493 "" "" $A "-d soft0:1 -x rc_verbs -t get -D zcopy -s 65536 -n 2000"
perf rc_fadd 7498 "" "" $A "-d soft0:1 -x rc_verbs -t fadd -n 2000"
perf tag_lat 7494 "" "" $A "-t tag_lat -s 64 -n 5000" $TLS
perf tag_bw 7495 "" "" $A "-t tag_bw -s 65536 -n 2000" $TLS

# demo NAME PORT SERVER_NS CLIENT_NS ADDR: UCX's io_demo, a UCP client/server connection over
# a socket address through UCX's rdmacm connection manager (the only one allowed), data
# over rc_verbs/ud_verbs, reads and writes of 64 B..64 KiB checked by both sides (-q). Its
# server never exits: stopped once the client is done. The client ends its 2000 operations
# with "Client exit with status 'OK'" and exit 0, and the server saw no data error.
demo() {
	local name=$1 port=$2 sns=$3 cns=$4 addr=$5 sx=() cx=()
	local e=(UCX_SOCKADDR_TLS_PRIORITY=rdmacm UCX_TLS=rc_verbs,ud_verbs)
	[ -n "$sns" ] && sx=(ip netns exec "$sns")
	[ -n "$cns" ] && cx=(ip netns exec "$cns")
	"${sx[@]}" env "${e[@]}" timeout 60 "$L" io_demo -p "$port" -d 64:65536 -q > "$out/$name.server.txt" 2>&1 &
	local spid=$!
	wait_port "$port" "$sns"
	"${cx[@]}" env "${e[@]}" timeout 60 "$L" io_demo -p "$port" -d 64:65536 -q -o read,write -i 2000 "$addr" > "$out/$name.txt" 2>&1
	local crc=$?
	kill $spid 2>/dev/null; wait $spid 2>/dev/null
	if [ $crc -eq 0 ] && grep -q "Client exit with status 'OK'" "$out/$name.txt" \
		&& ! grep -qiE 'corruption|fatal|assert' "$out/$name.server.txt"; then
		ok "$name (io_demo over rdmacm: 2000 reads and writes verified)"
	else ko "$name" "client exit $crc" "$out/$name.server.txt" "$out/$name.txt"; fi
}
demo io_demo 7499 "" "" $A

# Two network namespaces: the soft fabric between "hosts" (TCP links, not unix streams).
if [ "$(id -u)" -eq 0 ] && command -v ip > /dev/null; then
	na=rdmacmrs-ua-$$; nb=rdmacmrs-ub-$$
	trap 'ip netns del "$na" 2>/dev/null; ip netns del "$nb" 2>/dev/null' EXIT
	if ip netns add "$na" && ip netns add "$nb" && ip link add ua-$$ netns "$na" type veth peer name ub-$$ netns "$nb"; then
		ip -n "$na" addr add 10.78.0.1/24 dev ua-$$; ip -n "$na" link set ua-$$ up; ip -n "$na" link set lo up
		ip -n "$nb" addr add 10.78.0.2/24 dev ub-$$; ip -n "$nb" link set ub-$$ up; ip -n "$nb" link set lo up
		perf netns_rc_am_lat 7496 "$na" "$nb" 10.78.0.1 "-d soft0:1 -x rc_verbs -t am_lat -s 64 -n 2000"
		perf netns_tag_lat 7497 "$na" "$nb" 10.78.0.1 "-t tag_lat -s 64 -n 2000" $TLS
		demo netns_io_demo 7489 "$na" "$nb" 10.78.0.1
	else ko netns "cannot create namespaces"; fi
else echo "SKIP ucx between network namespaces (needs root and iproute2)"; fi

suite_end

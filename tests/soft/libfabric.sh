#!/bin/bash
# libfabric (Debian's libfabric-bin, unmodified) on the soft fabric: fi_info lists soft0
# for the verbs provider (msg, and rdm over verbs;ofi_rxm), and fi_pingpong pairs run every
# size over 127.0.0.1, both sides exiting 0, and once more at the largest message fi_info -v
# reports for soft0 (max_msg_size). Not between network namespaces: there libfabric's
# server, given no address, listens on 127.0.0.1 only (docs/compatibility.md, "The loopback
# address is soft0's").
# Prints PASS/FAIL lines and ends with "N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/soft/lib.sh
suite libfabric fi_pingpong libfabric-bin
# libfabric's crash handler writes its backtrace file into the working directory.
out=$PWD/$out L=$L; cd "$out" || exit 1

if timeout 30 "$L" fi_info -p verbs > "$out/info.txt" 2>&1 \
	&& grep -q 'domain: soft0$' "$out/info.txt" && grep -q 'FI_EP_MSG' "$out/info.txt" \
	&& grep -q 'provider: verbs;ofi_rxm' "$out/info.txt" && grep -q 'FI_EP_RDM' "$out/info.txt"; then
	ok "fi_info -p verbs lists soft0 (FI_EP_MSG, and FI_EP_RDM over verbs;ofi_rxm)"
else ko "fi_info -p verbs" "soft0 not listed for msg and rdm" "$out/info.txt"; fi

# ping NAME PORT SERVER_NS CLIENT_NS ADDR PROVIDER ENDPOINT LAST [options]: fi_pingpong's
# server and client; both exit 0, and the client's table reaches the size LAST.
ping() {
	local name=$1 port=$2 sns=$3 cns=$4 addr=$5 prov=$6 ep=$7 last=$8; shift 8
	local sx=() cx=()
	[ -n "$sns" ] && sx=(ip netns exec "$sns")
	[ -n "$cns" ] && cx=(ip netns exec "$cns")
	"${sx[@]}" timeout 60 "$L" fi_pingpong -p "$prov" -e "$ep" -B "$port" "$@" > "$out/$name.server.txt" 2>&1 &
	local spid=$!
	wait_port "$port" "$sns"
	"${cx[@]}" timeout 60 "$L" fi_pingpong -p "$prov" -e "$ep" -P "$port" "$@" "$addr" > "$out/$name.txt" 2>&1
	local crc=$?
	wait $spid; local src=$?
	if [ $crc -eq 0 ] && [ $src -eq 0 ] && grep -q "^$last " "$out/$name.txt"; then
		ok "fi_pingpong $name (every size to $last, both exit 0)"
	else ko "fi_pingpong $name" "client exit $crc, server exit $src, or no $last row" "$out/$name.server.txt" "$out/$name.txt"; fi
}
ping msg 7480 "" "" 127.0.0.1 verbs msg 1m
ping rdm 7481 "" "" 127.0.0.1 "verbs;ofi_rxm" rdm 1m

# What fi_info -v says of soft0's FI_EP_MSG domain holds: a message of max_msg_size goes
# through (fi_pingpong refuses larger ones itself).
timeout 30 "$L" fi_info -p verbs -t FI_EP_MSG -v > "$out/info-v.txt" 2>&1
max=$(awk '/max_msg_size:/ {print $2; exit}' "$out/info-v.txt")
if grep -q 'name: soft0$' "$out/info-v.txt" && [ -n "$max" ] && [ "$max" -ge 1048576 ] 2>/dev/null; then
	ping "msg-max_msg_size" 7482 "" "" 127.0.0.1 verbs msg "$((max >> 20))m" -S "$max" -I 2
else ko "fi_info -v" "no max_msg_size of 1 MiB or more for soft0" "$out/info-v.txt"; fi

suite_end

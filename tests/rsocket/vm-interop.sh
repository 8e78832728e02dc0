#!/bin/bash
# rsockets against Debian's librdmacm over real kernel RDMA, run inside the
# qemu guest of tests/vm (rxe, or siw with QRXE_RDMA=siw: iWARP's message mode):
#   make test-vm-rsocket      (logs in build/vm-results/rsocket)
# (about 10 minutes under TCG; tests/rsocket/build.sh first: the host builds the C checks)
# Each program runs Debian↔Debian first (the oracle), then ours↔ours, ours as
# server with Debian's client, and the reverse. A pair whose oracle fails is
# reported SKIP for the mixed pairs, and ours must still pass on both sides
# (Debian's datagram rsockets cannot work on RoCE: udpong on rxe fails
# "rconnect: No such file or directory", see docs/compatibility.md). The preloaded echo
# pairs our librspreload.so with Debian's. On siw (no UD QPs) datagram rsockets
# fail with both libraries ("Operation not supported"): there udpong with ours
# must print what it prints with Debian's, and the checks replace their
# datagram parts with that error's check (RS_TEST_NO_UD=1). Ends with "N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/vm/lib.sh
IP=${QRXE_IP:-10.10.10.1}
OURS=$PWD/build/lib
P_OURS=$OURS/librspreload.so
P_DEB=$(ls /usr/lib/*/rsocket/librspreload.so 2>/dev/null | head -1)
out=${RS_VM_OUT:-/tmp/rsocket-vm}; rm -rf "$out"; mkdir -p "$out"
pass=0; fail=0; skip=0; port=7600
NO_UD=0; [ "${QRXE_RDMA:-rxe}" = siw ] && NO_UD=1
UD_PROGS=" udpong "

envs() { [ "$1" = ours ] && echo "LD_LIBRARY_PATH=$OURS" || echo "RS_VM_DEBIAN=1"; }

# one NAME SRV CLI SERVER_EXITS "server args" "client args" [check]: a server/client pair
one() {
	local name=$1 sw=$2 cw=$3 exits=$4 sargs=$5 cargs=$6 check=${7:-}
	port=$((port+1))
	sargs=${sargs//@P/$port}; cargs=${cargs//@P/$port}
	env $(envs "$sw") timeout 90 $sargs > "$out/$name.$sw-$cw.server.log" 2>&1 &
	local spid=$!
	# the server's LISTEN cm_id; udpong never listens, and no ADDR_BOUND cm_id of it
	# shows in `rdma resource` with either library, but a datagram rsocket binds
	# its UDP side channel to its port
	local prog=${sargs%% *}
	if [ "$prog" = udpong ]; then
		wait_port "$port" || echo "    ($name: nothing bound on port $port after 10 s)"
	else
		wait_cm_id "$prog" LISTEN || echo "    ($name: no LISTEN cm_id of $prog after 10 s)"
	fi
	env $(envs "$cw") timeout 90 $cargs > "$out/$name.$sw-$cw.client.log" 2>&1
	local crc=$? src=0
	if [ "$exits" = 1 ]; then wait $spid; src=$?; else kill $spid 2>/dev/null; wait $spid 2>/dev/null; fi
	[ -n "$check" ] && [ $crc -eq 0 ] && ! eval "$check" && crc=99
	[ $crc -eq 0 ] && [ $src -eq 0 ]
}

quad() { # NAME SERVER_EXITS "server args" "client args" [check]
	local name=$1
	local oracle=1 s c
	if ! one "$name" debian debian "$2" "$3" "$4" "${5:-}"; then
		oracle=0
		if [ $NO_UD = 1 ] && [[ "$UD_PROGS" == *" $name "* ]]; then
			local d=$out/$name.debian-debian o=$out/$name.ours-ours
			if ! one "$name" ours ours "$2" "$3" "$4" "${5:-}" && [ -s $d.client.log ] &&
				cmp -s $d.client.log $o.client.log && cmp -s $d.server.log $o.server.log; then
				echo "PASS $name server ours, client ours: fails as with Debian's library, same output" \
					"(no UD QPs here): $(head -n 1 $o.client.log)"
				pass=$((pass+1))
			else
				echo "FAIL $name server ours, client ours: not the failure of Debian's pair (< Debian's, > ours)"
				diff $d.client.log $o.client.log | sed 's/^/    | /'; fail=$((fail+1))
			fi
			return
		fi
		echo "SKIP $name with Debian's library on either side: its own pair fails here:" \
			"$(head -n 1 "$out/$name.debian-debian.client.log" 2>/dev/null | head -c 120)"
		skip=$((skip+1))
	fi
	for s in ours debian; do for c in ours debian; do
		[ $s = debian ] && [ $c = debian ] && continue
		[ $oracle = 0 ] && [ $s$c != oursours ] && continue
		if one "$name" $s $c "$2" "$3" "$4" "${5:-}"; then echo "PASS $name server $s, client $c"; pass=$((pass+1))
		else
			echo "FAIL $name server $s, client $c"; fail=$((fail+1))
			tail -n 3 "$out/$name.$s-$c.server.log" "$out/$name.$s-$c.client.log" 2>/dev/null | sed 's/^/    | /'
		fi
	done; done
}

for a in "-T v -S 64 -C 1000" "-T v -S 65536 -C 200" "-T v -S 1048576 -C 20" "-T b -T v -S 4096 -C 500"; do
	quad "rstream[$a]" 1 "rstream -b $IP -p @P $a" "rstream -s $IP -p @P $a"
done
quad riostream 1 "riostream -b $IP -p @P -S 65536 -C 100" "riostream -s $IP -p @P -S 65536 -C 100"
quad udpong 0 "udpong -b $IP -p @P" "udpong -s $IP -p @P -S 1000 -C 500"
# rcopy maps the destination file shared: it must live on the guest's tmpfs, not
# on the 9p share of $out.
data=/tmp/rsocket-vm-data; mkdir -p "$data"
head -c 2000000 /dev/urandom > "$data/src.bin"
quad rcopy 0 "rcopy -p @P" "rcopy $data/src.bin $IP:$data/dst.bin -p @P" "cmp -s $data/src.bin $data/dst.bin && rm -f $data/dst.bin"

# The C checks of c-examples/rsocket over rxe: ours must pass. With RS_VM_DEBIAN_CHECKS=1
# Debian's library runs the same binary (same soname) too, reported but not counted
# (repoll is 1.5, absent from Debian 12's library; its duplex run does not finish):
# evidence when one of ours fails, not a check.
libs=ours; [ "${RS_VM_DEBIAN_CHECKS:-0}" = 1 ] && libs="ours debian"
for n in nonblock_connect rpoll_readiness shutdown_eof iomap_placement repoll dgram dgram_wakeup signal_eintr dgram_eintr sockopts keepalive duplex cycles peek; do
	[ -x build/rsocket/$n ] || { echo "FAIL $n: not built (tests/rsocket/build.sh)"; fail=$((fail+1)); continue; }
	for lib in $libs; do
		[ $lib = debian ] && [ $n = repoll ] && continue
		port=$((port+10)); log=$out/check.$n.$lib.log
		# Debian's runs only inform: a shorter bound (its duplex run does not finish)
		[ $lib = ours ] && t=180 || t=60
		env $(envs $lib) RS_TEST_ADDR=$IP RS_TEST_NO_UD=$NO_UD timeout $t build/rsocket/$n $port > "$log" 2>&1
		rc=$?
		okn=$(grep -c '^ok' "$log"); bad=$(grep -m1 '^FAIL' "$log")
		if [ $rc -eq 0 ] && [ -z "$bad" ]; then r=pass; else r="fails: ${bad:-exit $rc}"; fi
		if [ $lib = ours ]; then
			if [ "$r" = pass ]; then echo "PASS check $n, ours ($okn checks)"; pass=$((pass+1))
			else echo "FAIL check $n, ours: $r"; fail=$((fail+1)); tail -n 5 "$log" | sed 's/^/    | /'; fi
		else
			echo "INFO check $n, Debian's library: ${r/pass/passes} ($okn ok)"
		fi
	done
done

# the preload library: ours against Debian's, both ways
if [ -n "$P_DEB" ] && [ -x build/rsocket/echo ]; then
	for pair in "ours ours" "ours debian" "debian ours"; do
		set -- $pair
		[ $1 = ours ] && ps=$P_OURS || ps=$P_DEB
		[ $2 = ours ] && pc=$P_OURS || pc=$P_DEB
		port=$((port+1))
		env $(envs $1) LD_PRELOAD=$ps timeout 60 build/rsocket/echo server $port > "$out/echo.$1-$2.server.log" 2>&1 &
		spid=$!; wait_cm_id echo LISTEN || echo "    (echo server $1: no LISTEN cm_id after 10 s)"
		env $(envs $2) LD_PRELOAD=$pc timeout 60 build/rsocket/echo client $IP $port 3000000 > "$out/echo.$1-$2.client.log" 2>&1
		crc=$?; wait $spid; src=$?
		if [ $crc -eq 0 ] && [ $src -eq 0 ]; then echo "PASS preload echo server $1, client $2"; pass=$((pass+1))
		else
			echo "FAIL preload echo server $1, client $2 (client $crc, server $src)"; fail=$((fail+1))
			tail -n 3 "$out/echo.$1-$2.server.log" "$out/echo.$1-$2.client.log" | sed 's/^/    | /'
		fi
	done
fi
echo "rsocket interop: $pass passed, $fail failed, $skip skipped (logs in $out)"
[ $fail -eq 0 ]

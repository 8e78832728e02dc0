#!/bin/bash
# Debian's unmodified RDMA programs on the soft fabric, over 127.0.0.1, each
# pair under a timeout: server in the background, client in the foreground.
#   tests/soft/run.sh [name ...]    (default: every pair)
#   SOFT_WIRE=roce tests/soft/run.sh   the same pairs over RoCEv2 (SOFTVERBS_WIRE=roce):
#       server and client each in a network namespace of its own, joined by a veth pair;
#       needs root
#   SOFTVERBS_SHM=0 tests/soft/run.sh   the same pairs with softverbs' same-host shared memory
#       off (frames over the unix sockets, one-sided operations through the responder)
#   SOFT_WIRE=roce-lo tests/soft/run.sh   the same over RoCEv2 on 127.0.0.1 (in a network
#       namespace of their own): one of the two processes owns UDP 4791 there and hands the
#       other its packets (roce/share.rs); needs root
set -uo pipefail
cd "$(dirname "$0")/../.."
L=$PWD/build/bin/rdmacm-soft
shm_off=; [ "${SOFTVERBS_SHM:-}" = 0 ] && shm_off=1
out=build/soft-tests${SOFT_WIRE:+-$SOFT_WIRE}${shm_off:+-shm-off}; rm -rf "$out"; mkdir -p "$out"
. tests/soft/lib.sh
pass=0; fail=0; only=("$@")
SP=() CP=() NS=
A=127.0.0.1
if [ "${SOFT_WIRE:-}" = roce-lo ]; then
	# A namespace of their own: the process owning 127.0.0.1:4791 hands the others their
	# packets, and a soft-fabric process of another suite (running at the same time in
	# make check's other lane) must neither be that owner nor be handed anything.
	if [ "$(id -u)" -ne 0 ]; then echo "soft (roce-lo): needs root (a network namespace)"; echo "soft: 0 passed, 1 failed"; exit 1; fi
	nl=rdmacmrs-rl-$$
	trap 'ip netns del $nl 2>/dev/null' EXIT
	ip netns add $nl && ip -n $nl link set lo up || { echo "soft (roce-lo): cannot create a namespace"; exit 1; }
	SP=(ip netns exec $nl env SOFTVERBS_WIRE=roce) CP=("${SP[@]}") NS=$nl
elif [ "${SOFT_WIRE:-}" = roce ]; then
	if [ "$(id -u)" -ne 0 ]; then echo "soft (RoCEv2): needs root (network namespaces)"; echo "soft: 0 passed, 1 failed"; exit 1; fi
	na=rdmacmrs-ra-$$ nb=rdmacmrs-rb-$$
	trap 'ip netns del $na 2>/dev/null; ip netns del $nb 2>/dev/null' EXIT
	ip netns add $na && ip netns add $nb || { echo "soft (RoCEv2): cannot create namespaces"; exit 1; }
	ip link add ra-$$ netns $na type veth peer name rb-$$ netns $nb
	ip -n $na addr add 10.66.0.1/24 dev ra-$$; ip -n $na link set ra-$$ up; ip -n $na link set lo up
	ip -n $nb addr add 10.66.0.2/24 dev rb-$$; ip -n $nb link set rb-$$ up; ip -n $nb link set lo up
	ip -n $na route add 224.0.0.0/4 dev ra-$$; ip -n $nb route add 224.0.0.0/4 dev rb-$$
	SP=(ip netns exec $na env SOFTVERBS_WIRE=roce) CP=(ip netns exec $nb env SOFTVERBS_WIRE=roce) NS=$na
	A=10.66.0.1 B=10.66.0.2
fi

want() { [ ${#only[@]} -eq 0 ] && return 0; local n; for n in "${only[@]}"; do [ "$n" = "$1" ] && return 0; done; return 1; }

# pair NAME SERVER_EXITS(1|0) PORT|out:TEXT "server command" "client command" [check-regex-in-client-output]
# The client starts once the server listens on PORT, or once its output has a
# line with TEXT (mckey's receiver listens on no port: it joins a group).
pair() {
	local name=$1 exits=$2 port=$3 srv=$4 cli=$5 check=${6:-}
	want "$name" || return 0
	timeout 60 "${SP[@]}" stdbuf -oL "$L" $srv > "$out/$name.server.log" 2>&1 &
	local spid=$!
	case $port in
	out:*) wait_output "$out/$name.server.log" "${port#out:}" || sleep 1 ;;
	*) wait_port "$port" $NS ;;
	esac
	timeout 60 "${CP[@]}" "$L" $cli > "$out/$name.client.log" 2>&1
	local crc=$? src=0
	if [ "$exits" = 1 ]; then
		wait $spid; src=$?
	else
		kill $spid 2>/dev/null; wait $spid 2>/dev/null
	fi
	local why=""
	[ $crc -ne 0 ] && why="client exit $crc"
	[ $src -ne 0 ] && why="$why server exit $src"
	if [ -z "$why" ] && [ -n "$check" ] && ! grep -Eq "$check" "$out/$name.client.log"; then why="client output lacks /$check/"; fi
	if [ -z "$why" ]; then echo "PASS $name"; pass=$((pass+1))
	else
		echo "FAIL $name: $why"; fail=$((fail+1))
		echo "--- server:"; tail -5 "$out/$name.server.log"; echo "--- client:"; tail -5 "$out/$name.client.log"
	fi
}

pair rping 1 7301 "rping -s -a $A -p 7301 -v -C 100" "rping -c -a $A -p 7301 -v -C 100" "ping data: rdma-ping-99"
# -q: rping's own QP, moved by rdma_init_qp_attr, connected with rdma_establish
pair rping-q 1 7313 "rping -s -q -a $A -p 7313 -v -C 10" "rping -c -q -a $A -p 7313 -v -C 10" "ping data: rdma-ping-9"
pair udaddy 1 7174 "udaddy" "udaddy -s $A" "test complete"
pair mckey 1 "out:receiving data transfers" "mckey -m 239.1.1.1 -b $A" "mckey -m 239.1.1.1 -b ${B:-$A} -s" "test complete"
pair ucmatose 1 7303 "ucmatose -p 7303 -c 10" "ucmatose -s $A -p 7303 -c 10" "test complete"
pair cmtime 0 7304 "cmtime -b $A -p 7304" "cmtime -s $A -p 7304 -c 100" "connect"
pair rdma_server 1 7305 "rdma_server -p 7305" "rdma_client -s $A -p 7305" "end 0"
pair rdma_xserver 1 7306 "rdma_xserver -p 7306" "rdma_xclient -s $A -p 7306" "end 0"
pair ib_send_lat 1 7307 "ib_send_lat -R -p 7307" "ib_send_lat -R -p 7307 $A" "t_avg"
pair ib_write_bw 1 7308 "ib_write_bw -R -p 7308" "ib_write_bw -R -p 7308 $A" "BW average"
pair ib_read_lat 1 7309 "ib_read_lat -R -p 7309" "ib_read_lat -R -p 7309 $A" "t_avg"
pair ib_send_bw_ud 1 7310 "ib_send_bw -R -c UD -p 7310" "ib_send_bw -R -c UD -p 7310 $A" "BW average"
# RNR across a connection: a SEND with no receive posted fails with rnr_retry 0 and
# waits (RNR NAKs over RoCEv2, parked over streams) with 7 (tests/soft/rnr_pair.c).
if want rnr_pair; then
	if cc -Wall -Wextra -Werror -O1 -Iinclude -Ic-examples -o "$out/rnr_pair" tests/soft/rnr_pair.c -Lbuild/lib -lrdmacm -libverbs \
		-Wl,-rpath-link,build/lib > "$out/rnr_pair.build" 2>&1; then
		pair rnr_pair 1 7315 "$PWD/$out/rnr_pair server $A 7315" "$PWD/$out/rnr_pair client $A 7315" "rnr_pair: ok"
	else echo "FAIL rnr_pair: does not build"; cat "$out/rnr_pair.build"; fail=$((fail+1)); fi
fi
# A disconnect does not overtake the data sent before it: a server stopped while the
# client takes its message and disconnects still sees its send succeed once woken, after
# DISCONNECTED and its own rdma_disconnect (tests/soft/disc_pair.c).
if want disc_pair; then
	if cc -Wall -Wextra -Werror -O1 -Iinclude -Ic-examples -o "$out/disc_pair" tests/soft/disc_pair.c -Lbuild/lib -lrdmacm -libverbs \
		-Wl,-rpath-link,build/lib > "$out/disc_pair.build" 2>&1; then
		pair disc_pair 1 7319 "$PWD/$out/disc_pair server $A 7319" "$PWD/$out/disc_pair client $A 7319" "disc_pair: ok"
	else echo "FAIL disc_pair: does not build"; cat "$out/disc_pair.build"; fail=$((fail+1)); fi
fi

if [ -n "${SOFT_WIRE:-}" ]; then
	# Verbs-only pairs (QP numbers over their own TCP), the wire chosen by softverbs.
	pair ibv_rc_pingpong 1 18515 "ibv_rc_pingpong -g 0 -s 65536 -n 50" "ibv_rc_pingpong -g 0 -s 65536 -n 50 $A" "iters in"
	pair ibv_ud_pingpong 1 18515 "ibv_ud_pingpong -g 0 -s 1024 -n 50" "ibv_ud_pingpong -g 0 -s 1024 -n 50 $A" "iters in"
	pair ib_atomic_lat 1 18515 "ib_atomic_lat -x 0 -n 500" "ib_atomic_lat -x 0 -n 500 $A" "t_avg"
	# Two servers of one namespace share its UDP 4791 (one owns it and hands the other
	# its packets, roce/share.rs); both are reached at once.
	if want two_servers; then
		local_pids=()
		for p in 7401 7402; do timeout 60 "${SP[@]}" "$L" rping -s -a $A -p $p -v -C 20 > "$out/two-$p.server.log" 2>&1 & local_pids+=($!); done
		wait_port 7401 $NS; wait_port 7402 $NS
		for p in 7401 7402; do timeout 60 "${CP[@]}" "$L" rping -c -a $A -p $p -v -C 20 > "$out/two-$p.client.log" 2>&1 & local_pids+=($!); done
		rcs=""; for p in "${local_pids[@]}"; do wait "$p"; rcs="$rcs $?"; done
		if [ "$rcs" = " 0 0 0 0" ] && grep -q "rdma-ping-19" "$out/two-7401.client.log" && grep -q "rdma-ping-19" "$out/two-7402.client.log"; then
			echo "PASS two_servers"; pass=$((pass+1))
		else
			echo "FAIL two_servers: exits (servers, clients)$rcs"; fail=$((fail+1)); tail -n 3 "$out"/two-*.log
		fi
	fi
	echo "soft ($SOFT_WIRE): $pass passed, $fail failed"
	[ $fail -eq 0 ]
	exit
fi

# One-sided operations with the target stopped, and the access errors, over the same-host
# path (tests/soft/onesided_pair.c); "refuse": the kernel refuses it (the target is not
# dumpable), so the same requests take the stream path; "off" with SOFTVERBS_SHM=0: the
# path is switched off (the target dumpable: only the switch keeps the copy away).
if want onesided || want onesided_refused || want onesided_shm_off; then
	if cc -Wall -Wextra -Werror -O1 -Iinclude -Ic-examples -o "$out/onesided_pair" tests/soft/onesided_pair.c -Lbuild/lib -lrdmacm -libverbs \
		-Wl,-rpath-link,build/lib > "$out/onesided.build" 2>&1; then
		# (With the shared memory off the target's CPU is needed: only the refused form holds.)
		[ -z "$shm_off" ] && pair onesided 1 7316 "$PWD/$out/onesided_pair server $A 7316" "$PWD/$out/onesided_pair client $A 7316" "onesided_pair: ok"
		pair onesided_refused 1 7317 "$PWD/$out/onesided_pair server $A 7317 refuse" "$PWD/$out/onesided_pair client $A 7317 refuse" "onesided_pair: ok"
		SP=(env SOFTVERBS_SHM=0) CP=(env SOFTVERBS_SHM=0)
		pair onesided_shm_off 1 7318 "$PWD/$out/onesided_pair server $A 7318 off" "$PWD/$out/onesided_pair client $A 7318 off" "onesided_pair: ok"
		SP=() CP=()
	else echo "FAIL onesided: does not build"; cat "$out/onesided.build"; fail=$((fail+1)); fi
fi

# An IPv6 wildcard listener without AFONLY hears IPv4 clients too, as the
# kernel CM's does (Debian's programs on rxe, tests/vm). That is AFONLY's
# default only while net.ipv6.bindv6only is 0.
if [ "$(cat /proc/sys/net/ipv6/bindv6only 2>/dev/null)" = 1 ]; then
	echo "SKIP rping_dualstack udaddy_dualstack dualstack: net.ipv6.bindv6only=1 makes IPv6 ids AFONLY"
else
	pair rping_dualstack 1 7311 "rping -s -a :: -p 7311 -v -C 10" "rping -c -a $A -p 7311 -v -C 10" "ping data: rdma-ping-9"
	pair udaddy_dualstack 1 7174 "udaddy -b ::" "udaddy -s $A" "test complete"
	# The addresses such a request shows on the new id (IPv4, as the kernel
	# CM fills them from the request), RC and SIDR: stdout as Debian's
	# library printed it on rxe.
	if want dualstack; then
		if ! cc -Wall -Wextra -Werror -O1 -Iinclude -Ic-examples -o "$out/dualstack" tests/soft/dualstack.c -Lbuild/lib -lrdmacm -libverbs \
			-Wl,-rpath-link,build/lib > "$out/dualstack.build" 2>&1; then
			echo "FAIL dualstack: does not build"; cat "$out/dualstack.build"; fail=$((fail+1))
		else
			timeout 60 "$L" "$out/dualstack" $A > "$out/dualstack.log" 2> "$out/dualstack.err"
			rc=$?
			if [ $rc -eq 0 ] && diff -u tests/soft/dualstack.rxe.txt "$out/dualstack.log" > "$out/dualstack.diff"; then
				echo "PASS dualstack"; pass=$((pass+1))
			else
				echo "FAIL dualstack: exit $rc; its stdout against tests/soft/dualstack.rxe.txt:"
				diff -u tests/soft/dualstack.rxe.txt "$out/dualstack.log"; fail=$((fail+1))
			fi
		fi
	fi
fi

echo "soft${shm_off:+ (SOFTVERBS_SHM=0)}: $pass passed, $fail failed"
[ $fail -eq 0 ]

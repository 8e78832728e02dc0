#!/bin/bash
# rping, udaddy and ucmatose between two network namespaces joined by a veth
# pair: the soft fabric across "hosts". The addresses exist only inside the
# namespaces this script makes (and removes). Needs root.
set -uo pipefail
cd "$(dirname "$0")/../.."
L=$PWD/build/bin/rdmacm-soft
out=build/soft-tests/netns; mkdir -p "$out"
. tests/soft/lib.sh
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null; then echo "netns: needs root and iproute2"; echo "0 passed, 1 failed"; exit 1; fi
a=rdmacmrs-a-$$; b=rdmacmrs-b-$$
cleanup() { ip netns del "$a" 2>/dev/null; ip netns del "$b" 2>/dev/null; }
trap cleanup EXIT
ip netns add "$a" && ip netns add "$b" || { echo "netns: cannot create namespaces"; echo "0 passed, 1 failed"; exit 1; }
ip link add va-$$ netns "$a" type veth peer name vb-$$ netns "$b"
ip -n "$a" addr add 10.77.0.1/24 dev va-$$; ip -n "$a" link set va-$$ up; ip -n "$a" link set lo up
ip -n "$b" addr add 10.77.0.2/24 dev vb-$$; ip -n "$b" link set vb-$$ up; ip -n "$b" link set lo up
S=10.77.0.1
pass=0; fail=0
pair() {
	local name=$1 port=$2 srv=$3 cli=$4
	ip netns exec "$a" timeout 60 "$L" $srv > "$out/$name.server.log" 2>&1 &
	local spid=$!
	wait_port "$port" "$a"
	ip netns exec "$b" timeout 60 "$L" $cli > "$out/$name.client.log" 2>&1
	local crc=$?; wait $spid; local src=$?
	if [ $crc -eq 0 ] && [ $src -eq 0 ]; then echo "PASS netns $name"; pass=$((pass+1))
	else echo "FAIL netns $name: client $crc server $src"; fail=$((fail+1)); tail -n 3 "$out/$name.server.log" "$out/$name.client.log"; fi
}
pair rping 7174 "rping -s -a $S -v -C 20" "rping -c -a $S -v -C 20"
pair udaddy 7174 "udaddy" "udaddy -s $S"
pair ucmatose 7471 "ucmatose -c 4" "ucmatose -s $S -c 4"
# An address nobody answers (TEST-NET-1): b's default route points into a,
# which does not forward, so the probe's packets die inside our namespaces.
ip -n "$b" route add default via $S
if ip netns exec "$b" env RDMA_TEST_UNREACHABLE=192.0.2.1 bash c-examples/run-device.sh --lib build/lib \
	--launcher "$L" --expect rxe 10.77.0.2 dev_unreachable > "$out/unreachable.log" 2>&1; then
	echo "PASS netns dev_unreachable (ADDR_ERROR -ETIMEDOUT, as rxe)"; pass=$((pass+1))
else echo "FAIL netns dev_unreachable"; tail -n 20 "$out/unreachable.log"; fail=$((fail+1)); fi

# A host that vanishes from an idle connection: its link goes down, then its
# process dies (no FIN or RST gets through). Only the CM's TCP keepalive can
# notice; the survivor must get DISCONNECTED (about 25 s; 60 s allowed).
if cc -Wall -Wextra -Werror -O1 -Iinclude -Ic-examples -o "$out/idle_peer" tests/soft/idle_peer.c -Lbuild/lib -lrdmacm -libverbs \
	-Wl,-rpath-link,build/lib > "$out/idle_peer.build" 2>&1; then
	ip netns exec "$a" timeout 90 "$L" "$out/idle_peer" server $S 7475 60 > "$out/vanish.server.log" 2>&1 &
	spid=$!
	wait_port 7475 "$a"
	ip netns exec "$b" timeout 90 "$L" "$out/idle_peer" client $S 7475 > "$out/vanish.client.log" 2>&1 &
	cpid=$!
	for _ in $(seq 100); do
		grep -q established "$out/vanish.server.log" && grep -q established "$out/vanish.client.log" && break
		sleep 0.1
	done
	ip -n "$b" link set vb-$$ down
	# $cpid is timeout (ip netns exec execs it), which runs idle_peer in a
	# process group of its own: kill the group, or idle_peer lives on (in
	# pause(), holding whatever fds the test run had, such as a lock).
	kill -9 -- -$cpid; wait $cpid 2>/dev/null
	wait $spid; src=$?
	if [ $src -eq 0 ]; then echo "PASS netns vanished host: $(tail -n 1 "$out/vanish.server.log")"; pass=$((pass+1))
	else echo "FAIL netns vanished host (server exit $src)"; tail -n 3 "$out/vanish.server.log" "$out/vanish.client.log"; fail=$((fail+1)); fi
	ip -n "$b" link set vb-$$ up
else echo "FAIL netns vanished host: idle_peer does not build"; cat "$out/idle_peer.build"; fail=$((fail+1)); fi

echo "netns: $pass passed, $fail failed"
[ $fail -eq 0 ]

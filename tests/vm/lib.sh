# Helpers for scripts that run inside the tests/vm guest (sourced).

# Waits (up to 10 s) until the kernel lists a cm_id of program $1 in state $2
# (LISTEN; "" = any state): the kernel CM opens no TCP port a client could wait
# for, and a loaded host must not start a client early.
wait_cm_id() {
	local i
	for i in $(seq 100); do
		rdma resource show cm_id 2>/dev/null | grep -q "state ${2:-[A-Z_]*} .*comm $1 " && return 0
		sleep 0.1
	done
	return 1
}

wait_listen() { wait_cm_id "$1" LISTEN; }

# wait_port PORT|- [NETNS]: waits (up to 10 s) until a TCP or UDP port is bound,
# so a loaded machine does not start a client before its server listens (a
# server that listens on a socket before it makes any cm_id: qperf, the soft
# fabric's CM). Fails after the 10 s.
wait_port() {
	local port=$1 ns=${2:-} i
	[ "$port" = - ] && { sleep 0.5; return; }
	for i in $(seq 100); do
		if [ -n "$ns" ]; then ip netns exec "$ns" ss -Hlntu 2>/dev/null; else ss -Hlntu 2>/dev/null; fi \
			| awk '{print $5}' | grep -q ":$port\$" && return 0
		sleep 0.1
	done
	return 1
}

# Waits (up to 15 s) until file $1 has a line containing $2: mckey's receiver
# says "receiving data transfers" once its join completed; a sender that starts
# earlier sends into a group nobody receives from yet.
wait_output() {
	local i
	for i in $(seq 150); do
		grep -q -F "$2" "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

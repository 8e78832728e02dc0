# Shared by the soft-fabric test scripts.

. "$(dirname "${BASH_SOURCE[0]}")/../vm/lib.sh"   # wait_output

# wait_port PORT|- [NETNS]: waits (up to 10 s) until a TCP or UDP port is bound,
# so a loaded machine does not start a client before its server listens.
wait_port() {
	local port=$1 ns=${2:-} i
	[ "$port" = - ] && { sleep 0.5; return; }
	for i in $(seq 100); do
		if [ -n "$ns" ]; then ip netns exec "$ns" ss -Hlntu 2>/dev/null; else ss -Hlntu 2>/dev/null; fi \
			| awk '{print $5}' | grep -q ":$port\$" && return
		sleep 0.1
	done
}

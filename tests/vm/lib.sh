# Helpers for scripts that run inside the tests/vm guest (sourced).

# Waits (at most 10 s) until the kernel lists a listening cm_id of program $1
# (the kernel CM opens no TCP port a client could wait for).
wait_listen() {
	local end=$((SECONDS + 10))
	while [ $SECONDS -lt $end ]; do
		rdma resource show cm_id 2>/dev/null | grep -q "state LISTEN .*comm $1 " && return 0
		sleep 0.1
	done
	return 1
}

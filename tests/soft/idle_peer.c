/* One side of an idle RC connection, for netns.sh's "vanished host" check.
 *   idle_peer server IP PORT SECONDS   listens, accepts one connection, prints
 *       "established", then waits (at most SECONDS) for the next CM event on
 *       the idle connection; exit 0 if it is DISCONNECTED.
 *   idle_peer client IP PORT           connects, prints "established" and
 *       sleeps until killed.
 * Nothing is sent on the connection: only the CM can notice that the peer's
 * host went away. */
#include "pair.h" /* ch, die, next, expect */

static void make_qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr a = { .cap = { 4, 4, 1, 1, 0 }, .qp_type = IBV_QPT_RC };

	if (rdma_create_qp(id, NULL, &a))
		die("rdma_create_qp");
}

int main(int argc, char **argv)
{
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP }, *ai;
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1, .retry_count = 7 };
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id, *conn;
	long long t0;
	int server;

	if (argc < 4 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
		fprintf(stderr, "usage: %s server IP PORT SECONDS | client IP PORT\n", argv[0]);
		return 2;
	}
	server = !strcmp(argv[1], "server");
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (server)
		hints.ai_flags = RAI_PASSIVE;
	if (rdma_getaddrinfo(argv[2], argv[3], &hints, &ai))
		die("rdma_getaddrinfo");
	if (!(ch = rdma_create_event_channel()) || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		die("create");
	if (server) {
		if (rdma_bind_addr(id, ai->ai_src_addr) || rdma_listen(id, 1))
			die("listen");
		ev = expect(RDMA_CM_EVENT_CONNECT_REQUEST, 30000);
		conn = ev->id;
		rdma_ack_cm_event(ev);
		make_qp(conn);
		if (rdma_accept(conn, &cp))
			die("rdma_accept");
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_ESTABLISHED, 30000));
		printf("established\n");
		t0 = now_ms();
		ev = next(atoi(argv[4]) * 1000);
		printf("%s after %lld s\n", ev ? rdma_event_str(ev->event) : "no event", (now_ms() - t0) / 1000);
		return !(ev && ev->event == RDMA_CM_EVENT_DISCONNECTED);
	}
	if (rdma_resolve_addr(id, NULL, ai->ai_dst_addr, 2000))
		die("rdma_resolve_addr");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ADDR_RESOLVED, 5000));
	if (rdma_resolve_route(id, 2000))
		die("rdma_resolve_route");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ROUTE_RESOLVED, 5000));
	make_qp(id);
	if (rdma_connect(id, &cp))
		die("rdma_connect");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ESTABLISHED, 30000));
	printf("established\n");
	for (;;)
		pause();
}

/* An IPv6 wildcard listener without RDMA_OPTION_ID_AFONLY and an IPv4 client.
 *   dualstack IPV4_ADDR [PORT=7312]
 * For RDMA_PS_TCP, then RDMA_PS_UDP (SIDR): a listener bound to [::]:PORT
 * (AFONLY left to net.ipv6.bindv6only, which must be 0), a client that
 * resolves IPV4_ADDR:PORT and connects. The kernel CM hands such a listener
 * the request (cma_match_private_data) and fills the new id's addresses from
 * the request's header, so both are IPv4 (cma_save_ip4_info): the local one
 * is IPV4_ADDR:PORT, the peer the client's own address. The request is then
 * rejected. stdout must equal dualstack.rxe.txt, what Debian's library
 * printed on rxe in tests/vm. */
#include "dev.h" /* c-examples: events, checks, address parsing */

static const char *family(const struct sockaddr *sa)
{
	switch (sa->sa_family) {
	case AF_INET: return "AF_INET";
	case AF_INET6: return "AF_INET6";
	default: return "another family";
	}
}

/* The same family, address and port. */
static int same(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return 0;
	if (a->sa_family == AF_INET) {
		const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;

		return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
	}
	if (a->sa_family == AF_INET6) {
		const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;

		return x->sin6_port == y->sin6_port && !memcmp(&x->sin6_addr, &y->sin6_addr, 16);
	}
	return 0;
}

static void round_ps(enum rdma_port_space ps, const char *name)
{
	struct dev_pair p = { 0 };
	struct sockaddr_in6 any = { .sin6_family = AF_INET6, .sin6_port = htons(dev_port) };
	struct rdma_conn_param cp;
	struct rdma_cm_event *ev;
	struct sockaddr *local, *peer;

	printf("-- %s\n", name);
	p.pch = dev_channel();
	p.ach = dev_channel();
	if (DEV_CALL(rdma_create_id(p.pch, &p.listen, NULL, ps), "passive: rdma_create_id") ||
	    DEV_CALL(rdma_bind_addr(p.listen, (struct sockaddr *)&any), "passive: rdma_bind_addr [::]") ||
	    DEV_CALL(rdma_listen(p.listen, 4), "passive: rdma_listen"))
		goto out;
	if (DEV_CALL(rdma_create_id(p.ach, &p.active, NULL, ps), "active: rdma_create_id") ||
	    DEV_CALL(rdma_resolve_addr(p.active, NULL, dev_sa(), DEV_RESOLVE_MS), "active: rdma_resolve_addr") ||
	    dev_expect(p.ach, DEV_ACTIVE, RDMA_CM_EVENT_ADDR_RESOLVED) ||
	    DEV_CALL(rdma_resolve_route(p.active, DEV_RESOLVE_MS), "active: rdma_resolve_route") ||
	    dev_expect(p.ach, DEV_ACTIVE, RDMA_CM_EVENT_ROUTE_RESOLVED))
		goto out;
	dev_conn_param(&cp, NULL);
	cp.qp_num = 0x123;
	if (DEV_CALL(rdma_connect(p.active, &cp), "active: rdma_connect"))
		goto out;
	ev = dev_get(p.pch, DEV_PASSIVE, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
	if (!ev || ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
		dev_ack(ev);
		goto out;
	}
	p.child = ev->id;
	local = rdma_get_local_addr(p.child);
	peer = rdma_get_peer_addr(p.child);
	printf("passive: new id local %s, peer %s; listener still %s\n", family(local), family(peer),
	       family(rdma_get_local_addr(ev->listen_id)));
	check(same(local, dev_sa()), "passive: the new id's local address is the one the client resolved");
	check(same(peer, rdma_get_local_addr(p.active)), "passive: the new id's peer is the client's address");
	CHECK(rdma_get_dst_port(p.child) == rdma_get_src_port(p.active), "passive: rdma_get_dst_port is the client's port",
	      "%d, client %d", ntohs(rdma_get_dst_port(p.child)), ntohs(rdma_get_src_port(p.active)));
	DEV_CALL(rdma_reject(p.child, NULL, 0), "passive: rdma_reject");
	dev_ack(ev);
	/* REJECTED (RC) or UNREACHABLE (SIDR): the answer, whichever it is. */
	dev_ack(dev_get(p.ach, DEV_ACTIVE, -1, 1));
out:
	dev_seq_print(DEV_ACTIVE);
	dev_seq_print(DEV_PASSIVE);
	dev_teardown(&p);
}

int main(int argc, char **argv)
{
	FILE *f = fopen("/proc/sys/net/ipv6/bindv6only", "r");
	int v6only = 0;

	if (f && fscanf(f, "%d", &v6only) != 1)
		v6only = 0;
	if (f)
		fclose(f);
	if (v6only)
		skip("net.ipv6.bindv6only=1: an IPv6 id is AFONLY by default");
	dev_args(argc, argv, 7312);
	if (dev_sa()->sa_family != AF_INET)
		dev_usage(argv[0]);
	round_ps(RDMA_PS_TCP, "RDMA_PS_TCP");
	round_ps(RDMA_PS_UDP, "RDMA_PS_UDP");
	return check_failures ? 1 : 0;
}

/* What the soft-fabric pair programs (rnr_pair, disc_pair, onesided_pair, idle_peer)
 * share: one event channel, bounded waits for CM events, a connect that tries again while
 * the server is still tearing down the previous connection (REJECTED), and for the
 * programs that make one RC QP per connection, that QP's resources and a bounded poll. */
#ifndef SOFT_PAIR_H
#define SOFT_PAIR_H
#include "dev.h" /* c-examples: fatal, dev_wait, now_ms, sleep_ms */

static struct rdma_event_channel *ch;

static void die(const char *what)
{
	fatal("%s: %s", what, strerror(errno));
}

/* The next event within ms, or NULL (a timeout). */
static struct rdma_cm_event *next(int ms)
{
	struct rdma_cm_event *ev;
	int r = dev_wait(ch, ms, &ev);

	if (r < 0)
		die("rdma_get_cm_event");
	return r ? NULL : ev;
}

static struct rdma_cm_event *expect(enum rdma_cm_event_type t, int ms)
{
	struct rdma_cm_event *ev = next(ms);

	if (!ev || ev->event != t)
		fatal("wanted %s, got %s", rdma_event_str(t), ev ? rdma_event_str(ev->event) : "nothing");
	return ev;
}

/* rdma_connect until ESTABLISHED (returned, not acked); REJECTED means the server has
 * not yet taken the previous connection down: again in 200 ms, 20 times at most. */
static __attribute__((unused)) struct rdma_cm_event *connect_established(struct rdma_cm_id *id,
									 struct rdma_conn_param *cp)
{
	for (int tries = 0;; tries++) {
		struct rdma_cm_event *ev;

		if (rdma_connect(id, cp))
			die("rdma_connect");
		if (!(ev = next(15000)))
			fatal("no answer to the connect");
		if (ev->event == RDMA_CM_EVENT_ESTABLISHED)
			return ev;
		if (ev->event != RDMA_CM_EVENT_REJECTED || tries == 20)
			fatal("connect: %s", rdma_event_str(ev->event));
		rdma_ack_cm_event(ev);
		sleep_ms(200);
	}
}

/* The address of IP PORT (passive for a server), with stdout line-buffered and the event
 * channel made. */
static __attribute__((unused)) struct rdma_addrinfo *pair_start(const char *ip, const char *port, int server)
{
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP }, *ai;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (server)
		hints.ai_flags = RAI_PASSIVE;
	if (rdma_getaddrinfo(ip, port, &hints, &ai))
		die("rdma_getaddrinfo");
	if (!(ch = rdma_create_event_channel()))
		die("rdma_create_event_channel");
	return ai;
}

/* main() of a pair program taking "server|client IP PORT": runs one side, prints
 * "NAME: ok" or "NAME: FAILED", exits 0 when that side's checks held. */
static __attribute__((unused)) int pair_main(int argc, char **argv, const char *name,
					     int (*server)(struct rdma_addrinfo *), int (*client)(struct rdma_addrinfo *))
{
	int srv, fails;

	if (argc != 4 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
		fprintf(stderr, "usage: %s server|client IP PORT\n", argv[0]);
		return 2;
	}
	srv = !strcmp(argv[1], "server");
	fails = srv ? server(pair_start(argv[2], argv[3], 1)) : client(pair_start(argv[2], argv[3], 0));
	printf("%s: %s\n", name, fails ? "FAILED" : "ok");
	return fails != 0;
}

/* A connection's RC QP (4 WRs each way) with its own PD, CQ and a registered buffer. */
struct conn {
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	char buf[4096];
};

static __attribute__((unused)) void make_conn_qp(struct conn *c)
{
	struct ibv_qp_init_attr a = { .cap = { 4, 4, 1, 1, 0 }, .qp_type = IBV_QPT_RC };

	if (!(c->pd = ibv_alloc_pd(c->id->verbs)) || !(c->cq = ibv_create_cq(c->id->verbs, 8, NULL, NULL, 0)))
		die("ibv_alloc_pd/ibv_create_cq");
	if (!(c->mr = ibv_reg_mr(c->pd, c->buf, sizeof(c->buf), IBV_ACCESS_LOCAL_WRITE)))
		die("ibv_reg_mr");
	a.send_cq = a.recv_cq = c->cq;
	if (rdma_create_qp(c->id, c->pd, &a))
		die("rdma_create_qp");
}

static __attribute__((unused)) void drop_conn(struct conn *c)
{
	rdma_destroy_qp(c->id);
	ibv_dereg_mr(c->mr);
	ibv_destroy_cq(c->cq);
	ibv_dealloc_pd(c->pd);
	rdma_destroy_id(c->id);
}

/* A client's id resolved to ai's destination, with its QP (not yet connected). */
static __attribute__((unused)) void resolve_conn(struct conn *c, struct rdma_addrinfo *ai)
{
	if (rdma_create_id(ch, &c->id, NULL, RDMA_PS_TCP) || rdma_resolve_addr(c->id, NULL, ai->ai_dst_addr, 2000))
		die("rdma_resolve_addr");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ADDR_RESOLVED, 5000));
	if (rdma_resolve_route(c->id, 2000))
		die("rdma_resolve_route");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ROUTE_RESOLVED, 5000));
	make_conn_qp(c);
}

/* One completion within ms: its status, or -1. */
static __attribute__((unused)) int poll1(struct conn *c, int ms, struct ibv_wc *wc)
{
	long long until = now_ms() + ms;

	while (now_ms() < until) {
		int n = ibv_poll_cq(c->cq, 1, wc);

		if (n < 0)
			die("ibv_poll_cq");
		if (n)
			return wc->status;
		sleep_ms(1);
	}
	return -1;
}
#endif

/* A disconnect does not overtake the data sent before it, as a pair of processes:
 *   disc_pair server IP PORT   accepts, sends one message, stops itself (SIGSTOP)
 *   disc_pair client IP PORT   receives it, disconnects, then wakes the server
 * The client's ACK of that message and its DREQ both reach the stopped server. Woken,
 * the server waits for DISCONNECTED, moves its QP to ERR with rdma_disconnect (as
 * libfabric does), and only then polls: its send must have completed successfully, not
 * been flushed. On a NIC the ACK was taken while the process slept; the soft fabric's
 * CM connection is not the data's, and its DREQ once overtook the ACK (fi_pingpong).
 * Exit 0 when that held. */
#include <signal.h>
#include <unistd.h>
#include "pair.h" /* ch, die, expect, connect_established */

struct conn {
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	char buf[64];
};

static void make_qp(struct conn *c)
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

static void drop(struct conn *c)
{
	rdma_destroy_qp(c->id);
	ibv_dereg_mr(c->mr);
	ibv_destroy_cq(c->cq);
	ibv_dealloc_pd(c->pd);
	rdma_destroy_id(c->id);
}

/* One completion within ms, or -1. */
static int poll1(struct conn *c, int ms, struct ibv_wc *wc)
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

static int server(struct rdma_addrinfo *ai)
{
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1, .retry_count = 7,
				      .rnr_retry_count = 7 };
	struct ibv_sge sge;
	struct ibv_send_wr wr = { .wr_id = 5, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	struct rdma_cm_id *lid;
	struct rdma_cm_event *ev;
	struct conn c;
	struct ibv_wc wc;
	int pid = getpid(), got;

	if (rdma_create_id(ch, &lid, NULL, RDMA_PS_TCP) || rdma_bind_addr(lid, ai->ai_src_addr) || rdma_listen(lid, 1))
		die("listen");
	ev = expect(RDMA_CM_EVENT_CONNECT_REQUEST, 30000);
	c = (struct conn){ .id = ev->id };
	rdma_ack_cm_event(ev);
	make_qp(&c);
	cp.private_data = &pid;
	cp.private_data_len = sizeof(pid);
	if (rdma_accept(c.id, &cp))
		die("rdma_accept");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ESTABLISHED, 15000));
	memset(c.buf, 0x5a, sizeof(c.buf));
	sge = (struct ibv_sge){ (uintptr_t)c.buf, sizeof(c.buf), c.mr->lkey };
	if (ibv_post_send(c.id->qp, &wr, &bad))
		die("ibv_post_send");
	raise(SIGSTOP); /* every thread, until the client has disconnected */
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_DISCONNECTED, 15000));
	if (rdma_disconnect(c.id))
		die("rdma_disconnect");
	got = poll1(&c, 5000, &wc);
	printf("server: send %s\n", got < 0 ? "no completion" : ibv_wc_status_str(got));
	drop(&c);
	rdma_destroy_id(lid);
	return got != IBV_WC_SUCCESS;
}

static int client(struct rdma_addrinfo *ai)
{
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1, .retry_count = 7,
				      .rnr_retry_count = 7 };
	struct ibv_sge sge;
	struct ibv_recv_wr wr = { .wr_id = 6, .sg_list = &sge, .num_sge = 1 }, *bad;
	struct rdma_cm_event *ev;
	struct conn c = { 0 };
	struct ibv_wc wc;
	int pid = 0, got;

	if (rdma_create_id(ch, &c.id, NULL, RDMA_PS_TCP) || rdma_resolve_addr(c.id, NULL, ai->ai_dst_addr, 2000))
		die("rdma_resolve_addr");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ADDR_RESOLVED, 5000));
	if (rdma_resolve_route(c.id, 2000))
		die("rdma_resolve_route");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ROUTE_RESOLVED, 5000));
	make_qp(&c);
	sge = (struct ibv_sge){ (uintptr_t)c.buf, sizeof(c.buf), c.mr->lkey };
	if (ibv_post_recv(c.id->qp, &wr, &bad))
		die("ibv_post_recv");
	ev = connect_established(c.id, &cp);
	if (ev->param.conn.private_data_len >= sizeof(pid))
		memcpy(&pid, ev->param.conn.private_data, sizeof(pid));
	rdma_ack_cm_event(ev);
	if (pid <= 0)
		fatal("no server pid in the REP");
	got = poll1(&c, 15000, &wc);
	printf("client: receive %s\n", got < 0 ? "no completion" : ibv_wc_status_str(got));
	if (rdma_disconnect(c.id))
		die("rdma_disconnect");
	drop(&c);
	/* The DREQ went out with the disconnect; give it time to arrive before the wake-up. */
	sleep_ms(200);
	if (kill(pid, SIGCONT))
		die("kill(SIGCONT)");
	return got != IBV_WC_SUCCESS;
}

int main(int argc, char **argv)
{
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP }, *ai;
	int srv, fails;

	if (argc != 4 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
		fprintf(stderr, "usage: %s server|client IP PORT\n", argv[0]);
		return 2;
	}
	srv = !strcmp(argv[1], "server");
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (srv)
		hints.ai_flags = RAI_PASSIVE;
	if (rdma_getaddrinfo(argv[2], argv[3], &hints, &ai))
		die("rdma_getaddrinfo");
	if (!(ch = rdma_create_event_channel()))
		die("rdma_create_event_channel");
	fails = srv ? server(ai) : client(ai);
	printf("%s\n", fails ? "disc_pair: FAILED" : "disc_pair: ok");
	return fails != 0;
}

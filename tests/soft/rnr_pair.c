/* RNR (receiver not ready) across a connection, as a pair of processes:
 *   rnr_pair server IP PORT      accepts two connections and posts no receive
 *                                 on the first; on the second it posts one 300 ms
 *                                 after ESTABLISHED and checks what lands in it
 *   rnr_pair client IP PORT      connects twice and sends one message each time
 * First connection, rnr_retry_count 0: the SEND finds no receive, and the
 * client's completion is IBV_WC_RNR_RETRY_EXC_ERR (one RNR NAK, no retry).
 * Second, rnr_retry_count 7: the SEND is refused until the receive is posted,
 * then completes with IBV_WC_SUCCESS and its bytes arrive intact.
 * Both sides ask for the same rnr_retry_count (the IB CM gives the active side
 * the REP's and the passive side the REQ's). Exit 0 when everything held. */
#include "pair.h" /* ch, die, expect, connect_established, conn, make_conn_qp, resolve_conn, poll1, pair_main */

static void end(struct conn *c, int active)
{
	if (active && rdma_disconnect(c->id))
		die("rdma_disconnect");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_DISCONNECTED, 15000));
	drop_conn(c);
}

/* The message of round r: 3000 bytes (several packets at a 1024-byte MTU). */
static void fill(char *b, int r)
{
	for (int i = 0; i < 3000; i++)
		b[i] = (char)(i * 7 + r);
}

static int server(struct rdma_addrinfo *ai)
{
	struct rdma_cm_id *lid;
	int fails = 0;

	if (rdma_create_id(ch, &lid, NULL, RDMA_PS_TCP) || rdma_bind_addr(lid, ai->ai_src_addr) || rdma_listen(lid, 2))
		die("listen");
	for (int r = 0; r < 2; r++) {
		struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1, .retry_count = 7,
					      .rnr_retry_count = r ? 7 : 0 };
		struct rdma_cm_event *ev = expect(RDMA_CM_EVENT_CONNECT_REQUEST, 30000);
		struct conn c = { .id = ev->id };
		struct ibv_wc wc;
		char want[3000];

		rdma_ack_cm_event(ev);
		make_conn_qp(&c);
		if (rdma_accept(c.id, &cp))
			die("rdma_accept");
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_ESTABLISHED, 15000));
		if (r) {
			struct ibv_sge sge = { (uintptr_t)c.buf, sizeof(c.buf), c.mr->lkey };
			struct ibv_recv_wr wr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1 }, *bad;

			sleep_ms(300);
			if (ibv_post_recv(c.id->qp, &wr, &bad))
				die("ibv_post_recv");
			fill(want, 1);
			if (poll1(&c, 15000, &wc) != IBV_WC_SUCCESS || wc.byte_len != 3000 || memcmp(c.buf, want, 3000)) {
				printf("round 2: receive status %s, %u bytes%s\n", ibv_wc_status_str(wc.status), wc.byte_len,
				       memcmp(c.buf, want, 3000) ? ", data differs" : "");
				fails++;
			} else {
				printf("round 2: received 3000 bytes intact\n");
			}
		}
		end(&c, 0);
	}
	rdma_destroy_id(lid);
	return fails;
}

static int client(struct rdma_addrinfo *ai)
{
	int fails = 0;

	for (int r = 0; r < 2; r++) {
		struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1, .retry_count = 7,
					      .rnr_retry_count = r ? 7 : 0 };
		struct ibv_sge sge;
		struct ibv_send_wr wr = { .wr_id = 9, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_SIGNALED }, *bad;
		struct conn c = { 0 };
		struct ibv_wc wc;
		int want = r ? IBV_WC_SUCCESS : IBV_WC_RNR_RETRY_EXC_ERR, got;
		long long t0;

		resolve_conn(&c, ai);
		/* Round 2 may find the server still tearing round 1 down. */
		rdma_ack_cm_event(connect_established(c.id, &cp));
		fill(c.buf, r);
		sge = (struct ibv_sge){ (uintptr_t)c.buf, 3000, c.mr->lkey };
		t0 = now_ms();
		if (ibv_post_send(c.id->qp, &wr, &bad))
			die("ibv_post_send");
		got = poll1(&c, 20000, &wc);
		printf("round %d (rnr_retry_count %d): send %s after %lld ms\n", r + 1, r ? 7 : 0,
		       got < 0 ? "no completion" : ibv_wc_status_str(got), now_ms() - t0);
		if (got != want) {
			printf("  wanted %s\n", ibv_wc_status_str(want));
			fails++;
		}
		end(&c, 1);
	}
	return fails;
}

int main(int argc, char **argv)
{
	return pair_main(argc, argv, "rnr_pair", server, client);
}

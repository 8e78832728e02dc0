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
#include "pair.h" /* ch, die, expect, connect_established, conn, make_conn_qp, resolve_conn, poll1, pair_main */

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
	make_conn_qp(&c);
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
	drop_conn(&c);
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

	resolve_conn(&c, ai);
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
	drop_conn(&c);
	/* The DREQ went out with the disconnect; give it time to arrive before the wake-up. */
	sleep_ms(200);
	if (kill(pid, SIGCONT))
		die("kill(SIGCONT)");
	return got != IBV_WC_SUCCESS;
}

int main(int argc, char **argv)
{
	return pair_main(argc, argv, "disc_pair", server, client);
}

/* softverbs behaviour tests: verbs + the CM hook only, two contexts in one process over
 * the loopback. Prints PASS/FAIL per test and "N passed, M failed". */
#include <dirent.h>
#include <malloc.h>
#include "harness.h"
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/ioctl.h>
#include <linux/sockios.h>
#include <stddef.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/ib_user_sa.h>
/* libibverbs exports it; no installed header declares it */
void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src);

#define RW (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

static int t_device_and_port(void)
{
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	CHECK(l && n == 1 && l[1] == NULL, "device list");
	CHECK(!strcmp(ibv_get_device_name(l[0]), "soft0"), "name");
	CHECK(l[0]->node_type == IBV_NODE_CA && l[0]->transport_type == IBV_TRANSPORT_IB, "types");
	struct ibv_device *d = l[0];
	free(l); /* qperf style */
	struct ibv_context *c = ibv_open_device(d);
	CHECK(c, "open");
	struct ibv_device_attr da;
	CHECK(!ibv_query_device(c, &da), "query_device");
	CHECK(da.max_qp_rd_atom >= 16 && da.max_qp_init_rd_atom >= 16 && da.vendor_id == 0 && da.phys_port_cnt == 1, "device attr");
	struct ibv_port_attr pa;
	CHECK(!ibv_query_port(c, 1, &pa), "query_port");
	/* active_mtu follows the links of the RoCEv2 endpoint (1024 on a 1500-byte link) */
	CHECK(pa.state == IBV_PORT_ACTIVE && pa.max_mtu == IBV_MTU_4096 && pa.active_mtu >= IBV_MTU_256 &&
	      pa.active_mtu <= IBV_MTU_4096 && pa.link_layer == IBV_LINK_LAYER_ETHERNET, "port attr");
	CHECK(pa.gid_tbl_len >= 1 && pa.lid != 0, "gid table / lid");
	int has_lo = 0;
	for (int i = 0; i < pa.gid_tbl_len; i++) {
		union ibv_gid g;
		CHECK(!ibv_query_gid(c, 1, i, &g), "query_gid %d", i);
		static const uint8_t lo[16] = { 0,0,0,0,0,0,0,0,0,0,0xff,0xff,127,0,0,1 };
		if (!memcmp(g.raw, lo, 16)) has_lo = 1;
		struct ibv_gid_entry ge;
		CHECK(!ibv_query_gid_ex(c, 1, i, &ge, 0) && ge.gid_type == IBV_GID_TYPE_ROCE_V2, "gid_ex %d", i);
	}
	CHECK(has_lo, "127.0.0.1 in GID table");
	union ibv_gid g;
	CHECK(ibv_query_gid(c, 1, pa.gid_tbl_len, &g) == -1, "gid past table");
	uint16_t pkey;
	CHECK(!ibv_query_pkey(c, 1, 0, &pkey) && pkey == 0xffff, "pkey");
	CHECK(ibv_query_port(c, 2, &pa) != 0, "port 2");
	CHECK(c->async_fd >= 0 && c->num_comp_vectors >= 1, "context fields");
	CHECK(!ibv_close_device(c), "close");
	CHECK(!strcmp(ibv_wc_status_str(IBV_WC_WR_FLUSH_ERR), "Work Request Flushed Error"), "wc_status_str");
	return 0;
}

static int t_rc_send_recv(void)
{
	struct ep a, b;
	CHECK(!rc_pair(&a, &b, RW, 7, 12), "setup");
	strcpy(a.buf, "hello soft rdma");
	CHECK(!post_recv(&b, 77, 100, 1000), "post_recv");
	CHECK(!post_send_op(&a, 1, IBV_WR_SEND_WITH_IMM, 0, 16, 0, 0, htonl(0x1234), 0), "post_send");
	struct ibv_wc wc[2];
	CHECK(poll_n(b.cq, wc, 1) == 1, "recv completion");
	CHECK(wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_RECV && wc[0].byte_len == 16, "recv wc %d %d %d", wc[0].status, wc[0].opcode, wc[0].byte_len);
	CHECK(wc[0].wr_id == 77 && (wc[0].wc_flags & IBV_WC_WITH_IMM) && ntohl(wc[0].imm_data) == 0x1234, "imm");
	CHECK(wc[0].qp_num == b.qp->qp_num, "qp_num");
	CHECK(!strcmp(b.buf + 100, "hello soft rdma"), "data");
	CHECK(poll_n(a.cq, wc, 1) == 1 && wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_SEND && wc[0].wr_id == 1, "send wc");
	/* in-order delivery of many messages, unsignaled ones produce nothing */
	for (int i = 0; i < 20; i++)
		CHECK(!post_recv(&b, 1000 + i, 2000 + i * 8, 8), "recv %d", i);
	for (int i = 0; i < 20; i++) {
		memcpy(a.buf + 64 + i * 8, &i, sizeof(i));
		struct ibv_sge s = { (uintptr_t)a.buf + 64 + i * 8, 4, a.mr->lkey };
		struct ibv_send_wr wr = { .wr_id = i, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
					  .send_flags = i == 19 ? IBV_SEND_SIGNALED : 0 }, *bad;
		CHECK(!ibv_post_send(a.qp, &wr, &bad), "send %d", i);
	}
	struct ibv_wc many[20];
	CHECK(poll_n(b.cq, many, 20) == 20, "20 receives");
	for (int i = 0; i < 20; i++) {
		int v;
		memcpy(&v, b.buf + 2000 + i * 8, 4);
		CHECK(many[i].wr_id == (uint64_t)(1000 + i) && v == i, "order %d", i);
	}
	CHECK(poll_n(a.cq, wc, 1) == 1 && wc[0].wr_id == 19, "only the signaled send completes");
	usleep(20000);
	CHECK(ibv_poll_cq(a.cq, 1, wc) == 0, "no extra completions");
	ep_fini(&a);
	ep_fini(&b);
	return 0;
}

static int t_rc_write_read(void)
{
	struct ep a, b;
	CHECK(!rc_pair(&a, &b, RW, 7, 12), "setup");
	for (int i = 0; i < 4096; i++) a.buf[i] = (char)i;
	CHECK(!post_send_op(&a, 1, IBV_WR_RDMA_WRITE, 0, 4096, (uintptr_t)b.buf + 8192, b.mr->rkey, 0, 0), "write");
	struct ibv_wc wc;
	CHECK(poll_n(a.cq, &wc, 1) == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE, "write wc %d", wc.status);
	CHECK(!memcmp(b.buf + 8192, a.buf, 4096), "written data");
	CHECK(ibv_poll_cq(b.cq, 1, &wc) == 0, "no responder completion for WRITE");
	/* write with imm consumes a receive */
	CHECK(!post_recv(&b, 5, 0, 16), "recv");
	CHECK(!post_send_op(&a, 2, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 100, (uintptr_t)b.buf + 20000, b.mr->rkey, htonl(99), 0), "write imm");
	CHECK(poll_n(b.cq, &wc, 1) == 1 && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM && wc.byte_len == 100 && ntohl(wc.imm_data) == 99 && wc.wr_id == 5, "write_imm wc");
	CHECK(!memcmp(b.buf + 20000, a.buf, 100), "write_imm data");
	CHECK(poll_n(a.cq, &wc, 1) == 1 && wc.status == 0, "write_imm send wc");
	/* read */
	memset(b.buf + 30000, 0x5a, 3000);
	CHECK(!post_send_op(&a, 3, IBV_WR_RDMA_READ, 40000, 3000, (uintptr_t)b.buf + 30000, b.mr->rkey, 0, 0), "read");
	CHECK(poll_n(a.cq, &wc, 1) == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ && wc.byte_len == 3000, "read wc %d", wc.status);
	for (int i = 0; i < 3000; i++) CHECK((unsigned char)a.buf[40000 + i] == 0x5a, "read data %d", i);
	/* several reads in flight (more than max_rd_atomic = 4) */
	for (int i = 0; i < 10; i++)
		CHECK(!post_send_op(&a, 100 + i, IBV_WR_RDMA_READ, 50000 + i * 16, 16, (uintptr_t)b.buf + 30000, b.mr->rkey, 0, 0), "read %d", i);
	struct ibv_wc w10[10];
	CHECK(poll_n(a.cq, w10, 10) == 10, "10 reads");
	for (int i = 0; i < 10; i++) CHECK(w10[i].status == 0 && w10[i].wr_id == (uint64_t)(100 + i), "read %d in order", i);
	ep_fini(&a);
	ep_fini(&b);
	return 0;
}

static int t_atomics(void)
{
	struct ep a, b;
	CHECK(!rc_pair(&a, &b, RW, 7, 12), "setup");
	uint64_t *target = (uint64_t *)(b.buf + 64);
	*target = 10;
	struct ibv_sge s = { (uintptr_t)a.buf, 8, a.mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.wr.atomic.remote_addr = (uintptr_t)target;
	wr.wr.atomic.rkey = b.mr->rkey;
	wr.wr.atomic.compare_add = 5;
	CHECK(!ibv_post_send(a.qp, &wr, &bad), "faa");
	struct ibv_wc wc;
	CHECK(poll_n(a.cq, &wc, 1) == 1 && wc.status == 0 && wc.opcode == IBV_WC_FETCH_ADD, "faa wc %d", wc.status);
	CHECK(*(uint64_t *)a.buf == 10 && *target == 15, "faa values %lu %lu", *(uint64_t *)a.buf, *target);
	wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
	wr.wr.atomic.compare_add = 15;
	wr.wr.atomic.swap = 99;
	CHECK(!ibv_post_send(a.qp, &wr, &bad), "cas");
	CHECK(poll_n(a.cq, &wc, 1) == 1 && wc.status == 0 && wc.opcode == IBV_WC_COMP_SWAP, "cas wc");
	CHECK(*(uint64_t *)a.buf == 15 && *target == 99, "cas swapped");
	wr.wr.atomic.compare_add = 1; /* mismatch: no swap */
	wr.wr.atomic.swap = 7;
	CHECK(!ibv_post_send(a.qp, &wr, &bad), "cas2");
	CHECK(poll_n(a.cq, &wc, 1) == 1 && wc.status == 0, "cas2 wc");
	CHECK(*(uint64_t *)a.buf == 99 && *target == 99, "cas not swapped");
	/* misaligned: remote access error */
	wr.wr.atomic.remote_addr = (uintptr_t)target + 4;
	CHECK(!ibv_post_send(a.qp, &wr, &bad), "cas misaligned");
	CHECK(poll_n(a.cq, &wc, 1) == 1 && wc.status == IBV_WC_REM_ACCESS_ERR, "misaligned -> REM_ACCESS_ERR (%d)", wc.status);
	ep_fini(&a);
	ep_fini(&b);
	return 0;
}

static int t_protection(void)
{
	struct ibv_wc wc;
	/* 1: unknown rkey */
	struct ep a, b;
	CHECK(!rc_pair(&a, &b, RW, 7, 12), "setup");
	memset(b.buf, 0x11, b.len);
	memset(a.buf, 0x22, 4096);
	CHECK(!post_send_op(&a, 1, IBV_WR_RDMA_WRITE, 0, 64, (uintptr_t)b.buf, b.mr->rkey ^ 0x5555, 0, 0), "post");
	CHECK(poll_n(a.cq, &wc, 1) == 1 && wc.status == IBV_WC_REM_ACCESS_ERR, "bad rkey -> REM_ACCESS_ERR (%d)", wc.status);
	CHECK(a.qp->state == IBV_QPS_ERR, "requester QP in ERR");
	for (size_t i = 0; i < b.len; i++) CHECK((unsigned char)b.buf[i] == 0x11, "target untouched");
	ep_fini(&a);
	ep_fini(&b);
	/* 2: out of bounds */
	CHECK(!rc_pair(&a, &b, RW, 7, 12), "setup2");
	memset(b.buf, 0x11, b.len);
	CHECK(!post_send_op(&a, 1, IBV_WR_RDMA_WRITE, 0, 64, (uintptr_t)b.buf + b.len - 32, b.mr->rkey, 0, 0), "post2");
	CHECK(poll_n(a.cq, &wc, 1) == 1 && wc.status == IBV_WC_REM_ACCESS_ERR, "oob -> REM_ACCESS_ERR (%d)", wc.status);
	for (size_t i = 0; i < b.len; i++) CHECK((unsigned char)b.buf[i] == 0x11, "target untouched 2");
	ep_fini(&a);
	ep_fini(&b);
	/* 3: MR without REMOTE_WRITE; read from MR without REMOTE_READ; deregistered MR */
	CHECK(!rc_pair(&a, &b, RW, 7, 12), "setup3");
	char *other = calloc(1, 4096);
	struct ibv_mr *ro = ibv_reg_mr(b.pd, other, 4096, IBV_ACCESS_REMOTE_READ);
	CHECK(ro, "reg ro");
	CHECK(!post_send_op(&a, 1, IBV_WR_RDMA_WRITE, 0, 64, (uintptr_t)other, ro->rkey, 0, 0), "post3");
	CHECK(poll_n(a.cq, &wc, 1) == 1 && wc.status == IBV_WC_REM_ACCESS_ERR, "no REMOTE_WRITE -> REM_ACCESS_ERR (%d)", wc.status);
	for (int i = 0; i < 4096; i++) CHECK(other[i] == 0, "ro untouched");
	ibv_dereg_mr(ro);
	free(other);
	ep_fini(&a);
	ep_fini(&b);
	CHECK(!rc_pair(&a, &b, RW, 7, 12), "setup4");
	uint32_t rkey = b.mr->rkey;
	ibv_dereg_mr(b.mr);
	b.mr = NULL;
	CHECK(!post_send_op(&a, 1, IBV_WR_RDMA_READ, 0, 64, (uintptr_t)b.buf, rkey, 0, 0), "post4");
	CHECK(poll_n(a.cq, &wc, 1) == 1 && wc.status == IBV_WC_REM_ACCESS_ERR, "deregistered -> REM_ACCESS_ERR (%d)", wc.status);
	ep_fini(&a);
	ep_fini(&b);
	/* 5: bad local lkey -> LOC_PROT_ERR */
	CHECK(!rc_pair(&a, &b, RW, 7, 12), "setup5");
	struct ibv_sge s = { (uintptr_t)a.buf, 16, a.mr->lkey + 1 };
	struct ibv_send_wr wr = { .wr_id = 9, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND }, *bad;
	CHECK(!ibv_post_send(a.qp, &wr, &bad), "post5");
	CHECK(poll_n(a.cq, &wc, 1) == 1 && wc.status == IBV_WC_LOC_PROT_ERR && wc.wr_id == 9, "bad lkey -> LOC_PROT_ERR (%d)", wc.status);
	ep_fini(&a);
	ep_fini(&b);
	return 0;
}

static int t_rnr(void)
{
	struct ep a, b;
	struct ibv_wc wc;
	/* rnr_retry 0, min_rnr_timer 1 (10 us): error quickly */
	CHECK(!rc_pair(&a, &b, RW, 0, 1), "setup");
	CHECK(!post_send_op(&a, 1, IBV_WR_SEND, 0, 8, 0, 0, 0, 0), "send");
	CHECK(poll_n(a.cq, &wc, 1) == 1 && wc.status == IBV_WC_RNR_RETRY_EXC_ERR, "RNR_RETRY_EXC_ERR (%d)", wc.status);
	ep_fini(&a);
	ep_fini(&b);
	/* rnr_retry 7: waits for the receive */
	CHECK(!rc_pair(&a, &b, RW, 7, 1), "setup2");
	strcpy(a.buf, "late");
	CHECK(!post_send_op(&a, 1, IBV_WR_SEND, 0, 5, 0, 0, 0, 0), "send2");
	usleep(100000);
	CHECK(ibv_poll_cq(a.cq, 1, &wc) == 0, "still waiting");
	CHECK(!post_recv(&b, 3, 0, 64), "recv");
	CHECK(poll_n(b.cq, &wc, 1) == 1 && wc.status == 0 && !strcmp(b.buf, "late"), "delivered late");
	CHECK(poll_n(a.cq, &wc, 1) == 1 && wc.status == 0, "send completes");
	ep_fini(&a);
	ep_fini(&b);
	return 0;
}

static int t_err_flush_event(void)
{
	struct ep a, b;
	CHECK(!rc_pair(&a, &b, RW, 7, 12), "setup");
	CHECK(!post_recv(&b, 42, 0, 64), "recv");
	CHECK(!ibv_req_notify_cq(b.cq, 0), "arm");
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_ERR };
	CHECK(!ibv_modify_qp(b.qp, &at, IBV_QP_STATE), "to ERR");
	CHECK(b.qp->state == IBV_QPS_ERR, "state field");
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	CHECK(!ibv_get_cq_event(b.ch, &ev_cq, &ev_ctx), "cq event");
	CHECK(ev_cq == b.cq && ev_ctx == &b, "event cq");
	struct ibv_wc wc;
	CHECK(ibv_poll_cq(b.cq, 1, &wc) == 1 && wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 42, "flushed recv");
	ibv_ack_cq_events(b.cq, 1);
	/* receives posted in ERR are flushed too */
	CHECK(!post_recv(&b, 43, 0, 64), "recv in ERR");
	CHECK(ibv_poll_cq(b.cq, 1, &wc) == 1 && wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 43, "flushed late recv");
	/* ERR -> RESET -> INIT works again */
	at.qp_state = IBV_QPS_RESET;
	CHECK(!ibv_modify_qp(b.qp, &at, IBV_QP_STATE), "to RESET");
	CHECK(!to_init(&b, RW), "to INIT again");
	ep_fini(&a);
	ep_fini(&b);
	return 0;
}

static void on_alarm(int s) { (void)s; }

static void *blocked_reader(void *arg)
{
	struct ep *e = arg;
	struct ibv_cq *c;
	void *x;
	ibv_get_cq_event(e->ch, &c, &x);
	return NULL;
}

static int t_cq_event_semantics(void)
{
	struct ep a, b;
	CHECK(!rc_pair(&a, &b, RW, 7, 12), "setup");
	/* EINTR from a signal without SA_RESTART (qperf) */
	struct sigaction sa = { .sa_handler = on_alarm };
	sigaction(SIGALRM, &sa, NULL);
	alarm(1);
	struct ibv_cq *c;
	void *x;
	errno = 0;
	int r = ibv_get_cq_event(a.ch, &c, &x);
	CHECK(r == -1 && errno == EINTR, "EINTR (r=%d errno=%d)", r, errno);
	/* pthread_cancel while blocked (rping) */
	pthread_t t;
	pthread_create(&t, NULL, blocked_reader, &a);
	usleep(50000);
	pthread_cancel(t);
	void *ret;
	pthread_join(t, &ret);
	CHECK(ret == PTHREAD_CANCELED, "cancelled");
	/* solicited-only arming: an unsolicited receive raises no event */
	CHECK(!post_recv(&b, 1, 0, 64) && !post_recv(&b, 2, 64, 64), "recvs");
	CHECK(!ibv_req_notify_cq(b.cq, 1), "arm solicited");
	CHECK(!post_send_op(&a, 1, IBV_WR_SEND, 0, 8, 0, 0, 0, 0), "send");
	struct ibv_wc wc;
	CHECK(poll_n(b.cq, &wc, 1) == 1, "recv 1");
	int fl = fcntl(b.ch->fd, F_GETFL);
	fcntl(b.ch->fd, F_SETFL, fl | O_NONBLOCK);
	CHECK(ibv_get_cq_event(b.ch, &c, &x) == -1 && errno == EAGAIN, "no event for unsolicited");
	CHECK(!post_send_op(&a, 2, IBV_WR_SEND, 0, 8, 0, 0, 0, IBV_SEND_SOLICITED), "send solicited");
	CHECK(poll_n(b.cq, &wc, 1) == 1, "recv 2");
	CHECK(!ibv_get_cq_event(b.ch, &c, &x) && c == b.cq, "event for solicited");
	ibv_ack_cq_events(b.cq, 1);
	/* destroy purges an unread event */
	CHECK(!post_recv(&b, 3, 0, 64), "recv3");
	CHECK(!ibv_req_notify_cq(b.cq, 0), "arm");
	CHECK(!post_send_op(&a, 3, IBV_WR_SEND, 0, 8, 0, 0, 0, 0), "send3");
	CHECK(poll_n(b.cq, &wc, 1) == 1, "recv 3");
	CHECK(ibv_destroy_cq(b.cq) == EBUSY, "destroy_cq with QP: EBUSY");
	CHECK(ibv_destroy_comp_channel(b.ch) == EBUSY, "destroy channel with CQ: EBUSY");
	ibv_destroy_qp(b.qp);
	b.qp = NULL;
	CHECK(!ibv_destroy_cq(b.cq), "destroy_cq with an unread event does not wait");
	b.cq = NULL;
	CHECK(ibv_get_cq_event(b.ch, &c, &x) == -1 && errno == EAGAIN, "purged");
	ep_fini(&a);
	ep_fini(&b);
	return 0;
}

static int t_inline_and_bad_input(void)
{
	struct ep a, b;
	CHECK(!ep_init(&a, IBV_QPT_RC, RW, 4096, NULL), "init");
	/* max_inline_data 0 requested, 16 inline bytes still accepted (rdma_xclient): rxe's
	 * rule, 16 bytes per send SGE at least, and no more than that (UCX sends whatever fits
	 * the granted size inline, to receive buffers of 8 KiB) */
	struct ibv_qp_init_attr ia = { .send_cq = a.cq, .recv_cq = a.cq, .cap = { 2, 2, 1, 1, 0 }, .qp_type = IBV_QPT_RC };
	struct ibv_qp *q = ibv_create_qp(a.pd, &ia);
	CHECK(q && ia.cap.max_inline_data == 16, "inline granted %u for 0 asked, 1 SGE", ia.cap.max_inline_data);
	ibv_destroy_qp(q);
	struct ibv_qp_init_attr ib = { .send_cq = a.cq, .recv_cq = a.cq, .cap = { 2, 2, 5, 1, 64 }, .qp_type = IBV_QPT_RC };
	q = ibv_create_qp(a.pd, &ib);
	CHECK(q && ib.cap.max_inline_data == 80, "inline granted %u for 64 asked, 5 SGEs", ib.cap.max_inline_data);
	ibv_destroy_qp(q);
	struct ibv_qp_init_attr ic = { .send_cq = a.cq, .recv_cq = a.cq, .cap = { 2, 2, 1, 1, 1000 }, .qp_type = IBV_QPT_RC };
	q = ibv_create_qp(a.pd, &ic);
	CHECK(q && ic.cap.max_inline_data == 1000, "inline granted %u for 1000 asked", ic.cap.max_inline_data);
	ibv_destroy_qp(q);
	/* verbs-boundary errors */
	errno = 0;
	CHECK(!ibv_alloc_pd(NULL) && errno == EINVAL, "alloc_pd(NULL)");
	CHECK(!ibv_reg_mr(a.pd, a.buf, 64, IBV_ACCESS_REMOTE_WRITE) && errno == EINVAL, "REMOTE_WRITE without LOCAL_WRITE");
	struct ibv_mr *m = ibv_reg_mr(a.pd, a.buf, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
	CHECK(m, "optional access bits ignored");
	/* memory that is not mapped cannot be registered (the kernel cannot pin it) */
	void *hole = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(hole != MAP_FAILED && munmap((char *)hole + 4096, 4096) == 0, "a page with an unmapped neighbour");
	errno = 0;
	CHECK(!ibv_reg_mr(a.pd, hole, 8192, IBV_ACCESS_LOCAL_WRITE) && errno == EFAULT, "reg_mr over a hole: EFAULT");
	struct ibv_mr *ok1 = ibv_reg_mr(a.pd, hole, 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK(ok1, "reg_mr of the mapped page");
	ibv_dereg_mr(ok1);
	munmap(hole, 4096);
	/* write access needs writable pages (the kernel pins them for writing: EFAULT on rxe) */
	void *ro = mmap(NULL, 8192, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(ro != MAP_FAILED && mprotect((char *)ro + 4096, 4096, PROT_NONE) == 0, "read-only and PROT_NONE pages");
	errno = 0;
	CHECK(!ibv_reg_mr(a.pd, ro, 4096, IBV_ACCESS_LOCAL_WRITE) && errno == EFAULT, "read-only, LOCAL_WRITE: EFAULT");
	errno = 0;
	CHECK(!ibv_reg_mr(a.pd, ro, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) && errno == EFAULT,
	      "read-only, REMOTE_WRITE: EFAULT");
	struct ibv_mr *rom = ibv_reg_mr(a.pd, ro, 4096, IBV_ACCESS_REMOTE_READ);
	CHECK(rom, "read-only, REMOTE_READ");
	errno = 0;
	CHECK(ibv_rereg_mr(rom, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE) == IBV_REREG_MR_ERR_CMD &&
	      errno == EFAULT, "rereg of a read-only MR to LOCAL_WRITE: EFAULT");
	CHECK(ibv_dereg_mr(rom) == 0, "the MR is still registered");
	struct ibv_mr *none = ibv_reg_mr(a.pd, (char *)ro + 4096, 4096, 0);
	CHECK(none, "PROT_NONE, no access (the kernel takes it too)");
	ibv_dereg_mr(none);
	errno = 0;
	CHECK(!ibv_reg_mr(a.pd, (char *)ro + 4096, 4096, IBV_ACCESS_REMOTE_READ) && errno == EFAULT,
	      "PROT_NONE, REMOTE_READ: EFAULT (the kernel takes it; a peer's read would fault here)");
	munmap(ro, 8192);
	CHECK(ibv_dealloc_pd(a.pd) == EBUSY, "dealloc_pd with MR: EBUSY");
	ibv_dereg_mr(m);
	struct ibv_send_wr wr = { .opcode = IBV_WR_SEND }, *bad = NULL;
	CHECK(ibv_post_send(a.qp, &wr, &bad) == EINVAL && bad == &wr, "post_send in RESET");
	struct ibv_recv_wr rw = { .num_sge = 0 }, *rbad = NULL;
	CHECK(ibv_post_recv(a.qp, &rw, &rbad) == EINVAL && rbad == &rw, "post_recv in RESET");
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_RTS };
	CHECK(ibv_modify_qp(a.qp, &at, IBV_QP_STATE) == EINVAL, "RESET->RTS");
	at.qp_state = IBV_QPS_INIT;
	CHECK(ibv_modify_qp(a.qp, &at, IBV_QP_STATE | IBV_QP_PORT) == EINVAL, "INIT without required mask");
	CHECK(!to_init(&a, RW), "to INIT");
	struct ibv_sge sg[8];
	for (int i = 0; i < 8; i++) { sg[i].addr = (uintptr_t)a.buf; sg[i].length = 1; sg[i].lkey = a.mr->lkey; }
	struct ibv_recv_wr r2 = { .wr_id = 1, .sg_list = sg, .num_sge = 8 };
	CHECK(ibv_post_recv(a.qp, &r2, &rbad) == EINVAL && rbad == &r2, "too many recv SGEs");
	/* connected for inline send checks */
	CHECK(!ep_init(&b, IBV_QPT_RC, RW, 4096, NULL), "init b");
	CHECK(!publish(&a, &b) && !publish(&b, &a) && !to_init(&b, RW), "b init");
	CHECK(!to_rtr(&a, &b, 12) && !to_rtr(&b, &a, 12) && !to_rts(&a, 7) && !to_rts(&b, 7), "connect");
	struct ibv_send_wr sw = { .wr_id = 5, .sg_list = sg, .num_sge = 8, .opcode = IBV_WR_SEND };
	CHECK(ibv_post_send(a.qp, &sw, &bad) == EINVAL && bad == &sw, "too many send SGEs");
	sw.opcode = 77;
	sw.num_sge = 1;
	CHECK(ibv_post_send(a.qp, &sw, &bad) == EINVAL, "bad opcode");
	char tmp[16] = "inline-data-123";
	struct ibv_sge is = { (uintptr_t)tmp, 16, 0 };
	CHECK(!post_recv(&b, 7, 0, 64), "recv");
	struct ibv_send_wr iw = { .wr_id = 6, .sg_list = &is, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED };
	CHECK(!ibv_post_send(a.qp, &iw, &bad), "inline send with lkey 0");
	memset(tmp, 0, sizeof(tmp)); /* buffer reusable at once */
	struct ibv_wc wc;
	CHECK(poll_n(b.cq, &wc, 1) == 1 && wc.status == 0 && !strcmp(b.buf, "inline-data-123"), "inline delivered");
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK(!ibv_query_qp(a.qp, &qa, IBV_QP_CAP, &qi) && qa.cap.max_inline_data >= 16, "inline size queried");
	size_t too_big = qa.cap.max_inline_data + 1;
	char *big = calloc(1, too_big);
	struct ibv_sge bs = { (uintptr_t)big, (uint32_t)too_big, 0 };
	iw.sg_list = &bs;
	CHECK(ibv_post_send(a.qp, &iw, &bad) == EINVAL, "inline too large");
	free(big);
	ep_fini(&a);
	ep_fini(&b);
	return 0;
}

static int ud_ep(struct ep *e, int block_self)
{
	memset(e, 0, sizeof(*e));
	e->ctx = open_soft();
	e->pd = ibv_alloc_pd(e->ctx);
	e->cq = ibv_create_cq(e->ctx, 64, NULL, NULL, 0);
	e->len = 8192;
	e->buf = calloc(1, e->len);
	e->mr = ibv_reg_mr(e->pd, e->buf, e->len, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp_init_attr_ex ia = { .send_cq = e->cq, .recv_cq = e->cq,
		.cap = { 16, 16, 1, 1, 0 }, .qp_type = IBV_QPT_UD, .comp_mask = IBV_QP_INIT_ATTR_PD, .pd = e->pd };
	if (block_self) {
		ia.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
		ia.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;
	}
	e->qp = ibv_create_qp_ex(e->ctx, &ia);
	if (!e->qp || to_init(e, 0)) return -1;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR };
	if (ibv_modify_qp(e->qp, &a, IBV_QP_STATE)) return -1;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	return ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

static int ud_send(struct ep *from, struct ibv_ah *ah, uint32_t qpn, uint32_t len, uint32_t imm)
{
	struct ibv_sge s = { (uintptr_t)from->buf, len, from->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM,
				  .send_flags = IBV_SEND_SIGNALED, .imm_data = imm }, *bad;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = qpn;
	wr.wr.ud.remote_qkey = 0x11111111;
	return ibv_post_send(from->qp, &wr, &bad);
}

static int t_ud(void)
{
	struct ep a, b;
	CHECK(!ud_ep(&a, 0) && !ud_ep(&b, 0), "setup");
	CHECK(!publish(&b, &a), "publish");
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1 };
	ibv_query_gid(b.ctx, 1, 0, &aa.grh.dgid);
	struct ibv_ah *ah = ibv_create_ah(a.pd, &aa);
	CHECK(ah, "ah");
	CHECK(!post_recv(&b, 11, 0, 40 + 100), "recv");
	strcpy(a.buf, "datagram!");
	CHECK(!ud_send(&a, ah, b.qp->qp_num, 10, htonl(7)), "send");
	struct ibv_wc wc;
	CHECK(poll_n(a.cq, &wc, 1) == 1 && wc.status == 0 && wc.opcode == IBV_WC_SEND, "send wc");
	CHECK(poll_n(b.cq, &wc, 1) == 1 && wc.status == 0, "recv wc");
	CHECK(wc.byte_len == 50 && (wc.wc_flags & IBV_WC_GRH) && (wc.wc_flags & IBV_WC_WITH_IMM) && ntohl(wc.imm_data) == 7, "wc fields %u %x", wc.byte_len, wc.wc_flags);
	CHECK(wc.src_qp == a.qp->qp_num, "src_qp");
	CHECK(!strcmp(b.buf + 40, "datagram!"), "payload after GRH");
	struct ibv_grh *grh = (struct ibv_grh *)b.buf;
	union ibv_gid ag;
	ibv_query_gid(a.ctx, 1, 0, &ag);
	CHECK(!memcmp(&grh->sgid, &ag, 16) && (ntohl(grh->version_tclass_flow) >> 28) == 6, "GRH sgid/version");
	/* reply without the CM: AH from the completion */
	struct ibv_ah *back = ibv_create_ah_from_wc(b.pd, &wc, grh, 1);
	CHECK(back, "ah_from_wc");
	CHECK(!post_recv(&a, 12, 0, 40 + 100), "recv a");
	strcpy(b.buf + 1000, "pong");
	struct ibv_sge s = { (uintptr_t)b.buf + 1000, 5, b.mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 2, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND }, *bad;
	wr.wr.ud.ah = back;
	wr.wr.ud.remote_qpn = wc.src_qp;
	wr.wr.ud.remote_qkey = 0x11111111;
	CHECK(!ibv_post_send(b.qp, &wr, &bad), "reply");
	CHECK(poll_n(a.cq, &wc, 1) == 1 && wc.status == 0 && !strcmp(a.buf + 40, "pong"), "reply received");
	/* wrong qkey: dropped */
	CHECK(!post_recv(&b, 13, 0, 140), "recv 3");
	struct ibv_sge s2 = { (uintptr_t)a.buf, 4, a.mr->lkey };
	struct ibv_send_wr w2 = { .wr_id = 3, .sg_list = &s2, .num_sge = 1, .opcode = IBV_WR_SEND }, *b2;
	w2.wr.ud.ah = ah;
	w2.wr.ud.remote_qpn = b.qp->qp_num;
	w2.wr.ud.remote_qkey = 0x22222222;
	CHECK(!ibv_post_send(a.qp, &w2, &b2), "bad qkey send");
	usleep(50000);
	CHECK(ibv_poll_cq(b.cq, 1, &wc) == 0, "bad qkey dropped");
	/* receive buffer without room for the GRH: LOC_LEN_ERR */
	CHECK(!ud_send(&a, ah, b.qp->qp_num, 200, 0), "too long for buffer");
	CHECK(poll_n(b.cq, &wc, 1) == 1 && wc.status == IBV_WC_LOC_LEN_ERR, "LOC_LEN_ERR (%d)", wc.status);
	ibv_destroy_ah(ah);
	ibv_destroy_ah(back);
	ep_fini(&a);
	ep_fini(&b);
	return 0;
}

static int t_mcast(void)
{
	struct ep s, r1, r2;
	CHECK(!ud_ep(&s, 1) && !ud_ep(&r1, 0) && !ud_ep(&r2, 0), "setup");
	union ibv_gid mgid = { .raw = { 0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 239, 1, 2, (uint8_t)getpid() } };
	CHECK(ibv_attach_mcast(r1.qp, &mgid, 0) == 0 && ibv_attach_mcast(r2.qp, &mgid, 0) == 0, "attach");
	CHECK(ibv_attach_mcast(s.qp, &mgid, 0) == 0, "attach sender (blocked self loopback)");
	union ibv_gid notm = { .raw = { 1 } };
	CHECK(ibv_attach_mcast(r1.qp, &notm, 0) == EINVAL, "non-multicast gid");
	CHECK(!post_recv(&r1, 1, 0, 200) && !post_recv(&r2, 2, 0, 200) && !post_recv(&s, 3, 0, 200), "recvs");
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1 };
	aa.grh.dgid = mgid;
	struct ibv_ah *ah = ibv_create_ah(s.pd, &aa);
	strcpy(s.buf, "to all");
	CHECK(!ud_send(&s, ah, 0xffffff, 7, 0), "send");
	struct ibv_wc wc;
	CHECK(poll_n(r1.cq, &wc, 1) == 1 && wc.status == 0 && !strcmp(r1.buf + 40, "to all") && wc.src_qp == s.qp->qp_num, "r1 got it");
	CHECK(poll_n(r2.cq, &wc, 1) == 1 && wc.status == 0 && !strcmp(r2.buf + 40, "to all"), "r2 got it");
	struct ibv_grh *g = (struct ibv_grh *)r1.buf;
	CHECK(!memcmp(&g->dgid, &mgid, 16), "GRH dgid = group");
	CHECK(poll_n(s.cq, &wc, 1) == 1 && wc.opcode == IBV_WC_SEND, "send completion only");
	usleep(50000);
	CHECK(ibv_poll_cq(s.cq, 1, &wc) == 0, "no self loopback");
	CHECK(!ibv_detach_mcast(r2.qp, &mgid, 0), "detach");
	CHECK(!post_recv(&r2, 4, 0, 200) && !post_recv(&r1, 5, 0, 200), "recvs 2");
	CHECK(!ud_send(&s, ah, 0xffffff, 7, 0), "send 2");
	CHECK(poll_n(r1.cq, &wc, 1) == 1, "r1 again");
	usleep(50000);
	CHECK(ibv_poll_cq(r2.cq, 1, &wc) == 0, "detached r2 got nothing");
	ibv_destroy_ah(ah);
	ep_fini(&s);
	ep_fini(&r1);
	ep_fini(&r2);
	return 0;
}

static int t_srq_and_async(void)
{
	struct ibv_context *ctx = open_soft();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	CHECK(srq, "srq");
	struct ep a, b;
	CHECK(!ep_init(&a, IBV_QPT_RC, RW, 4096, NULL), "a");
	CHECK(!ep_init_ctx(&b, ctx, pd, IBV_QPT_RC, 4096, srq), "b on srq");
	CHECK(!publish(&a, &b) && !publish(&b, &a) && !to_init(&a, RW) && !to_init(&b, RW), "init");
	CHECK(!to_rtr(&a, &b, 12) && !to_rtr(&b, &a, 12) && !to_rts(&a, 7) && !to_rts(&b, 7), "connect");
	char *rb = calloc(1, 4096);
	struct ibv_mr *rmr = ibv_reg_mr(pd, rb, 4096, IBV_ACCESS_LOCAL_WRITE);
	for (int i = 0; i < 4; i++) {
		struct ibv_sge s = { (uintptr_t)rb + i * 64, 64, rmr->lkey };
		struct ibv_recv_wr w = { .wr_id = 500 + i, .sg_list = &s, .num_sge = 1 }, *bad;
		CHECK(!ibv_post_srq_recv(srq, &w, &bad), "srq recv");
	}
	struct ibv_srq_attr lim = { .srq_limit = 3 };
	CHECK(!ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT), "arm limit");
	strcpy(a.buf, "via srq");
	CHECK(!post_send_op(&a, 1, IBV_WR_SEND, 0, 8, 0, 0, 0, 0), "send");
	struct ibv_wc wc;
	CHECK(poll_n(b.cq, &wc, 1) == 1 && wc.status == 0 && wc.wr_id == 500 && wc.qp_num == b.qp->qp_num && !strcmp(rb, "via srq"), "srq completion");
	CHECK(!post_send_op(&a, 2, IBV_WR_SEND, 0, 8, 0, 0, 0, 0), "send 2");
	CHECK(poll_n(b.cq, &wc, 1) == 1 && wc.wr_id == 501, "srq completion 2");
	struct ibv_async_event ev;
	CHECK(!ibv_get_async_event(ctx, &ev), "async event");
	CHECK(ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && ev.element.srq == srq, "limit event (%d)", ev.event_type);
	ibv_ack_async_event(&ev);
	struct ibv_srq_attr q;
	CHECK(!ibv_query_srq(srq, &q) && q.max_wr >= 16 && q.srq_limit == 0, "query srq");
	CHECK(ibv_destroy_srq(srq) == EBUSY, "srq in use");
	ibv_destroy_qp(b.qp);
	b.qp = NULL;
	CHECK(!ibv_destroy_srq(srq), "destroy srq");
	ibv_dereg_mr(rmr);
	free(rb);
	ibv_dereg_mr(b.mr);
	ibv_destroy_cq(b.cq);
	free(b.buf);
	ep_fini(&a);
	CHECK(!ibv_dealloc_pd(pd) && !ibv_close_device(ctx), "cleanup");
	return 0;
}

static int t_registry_without_hook(void)
{
	/* verbs-only programs (perftest, qperf) on one host: no add_peer call at all */
	struct ep a, b;
	CHECK(!ep_init(&a, IBV_QPT_RC, RW, 4096, NULL) && !ep_init(&b, IBV_QPT_RC, RW, 4096, NULL), "init");
	CHECK(!to_init(&a, RW) && !to_init(&b, RW), "INIT");
	CHECK(!to_rtr(&a, &b, 12) && !to_rtr(&b, &a, 12) && !to_rts(&a, 7) && !to_rts(&b, 7), "connect");
	strcpy(a.buf, "no cm");
	CHECK(!post_recv(&b, 1, 0, 64), "recv");
	CHECK(!post_send_op(&a, 1, IBV_WR_SEND, 0, 6, 0, 0, 0, 0), "send");
	struct ibv_wc wc;
	CHECK(poll_n(b.cq, &wc, 1) == 1 && wc.status == 0 && !strcmp(b.buf, "no cm"), "delivered via registry");
	/* LID routing (qperf: is_global = 0) */
	struct ep c, d;
	CHECK(!ep_init(&c, IBV_QPT_RC, RW, 4096, NULL) && !ep_init(&d, IBV_QPT_RC, RW, 4096, NULL), "init2");
	CHECK(!to_init(&c, RW) && !to_init(&d, RW), "INIT2");
	struct ibv_port_attr pd_attr;
	ibv_query_port(d.ctx, 1, &pd_attr);
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_2048, .dest_qp_num = d.qp->qp_num,
				  .max_dest_rd_atomic = 1, .min_rnr_timer = 12 };
	at.ah_attr.dlid = pd_attr.lid;
	at.ah_attr.port_num = 1;
	CHECK(!ibv_modify_qp(c.qp, &at, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER), "RTR by LID");
	CHECK(!to_rtr(&d, &c, 12) && !to_rts(&c, 7) && !to_rts(&d, 7), "rest");
	CHECK(!post_recv(&d, 1, 0, 64), "recv2");
	CHECK(!post_send_op(&c, 1, IBV_WR_SEND, 0, 6, 0, 0, 0, 0), "send2");
	CHECK(poll_n(d.cq, &wc, 1) == 1 && wc.status == 0, "delivered by LID");
	ep_fini(&a);
	ep_fini(&b);
	ep_fini(&c);
	ep_fini(&d);
	return 0;
}

static int t_hook_layout(void)
{
	/* the same numbers rdma-abi/src/softverbs.rs asserts for its Rust mirror */
	_Static_assert(sizeof(struct softverbs_cm_ops) == 80, "size");
	_Static_assert(offsetof(struct softverbs_cm_ops, version) == 4, "version");
	_Static_assert(offsetof(struct softverbs_cm_ops, qp_endpoint) == 8, "qp_endpoint");
	_Static_assert(offsetof(struct softverbs_cm_ops, add_peer) == 16, "add_peer");
	_Static_assert(offsetof(struct softverbs_cm_ops, ctx_endpoint) == 24, "ctx_endpoint");
	_Static_assert(offsetof(struct softverbs_cm_ops, roce_mode) == 32, "roce_mode");
	_Static_assert(offsetof(struct softverbs_cm_ops, mad_fd) == 40, "mad_fd");
	_Static_assert(offsetof(struct softverbs_cm_ops, mad_recv) == 48, "mad_recv");
	_Static_assert(offsetof(struct softverbs_cm_ops, mad_send) == 56, "mad_send");
	_Static_assert(offsetof(struct softverbs_cm_ops, roce_service) == 64, "roce_service");
	_Static_assert(offsetof(struct softverbs_cm_ops, ctx_drain) == 72, "ctx_drain");
	const struct softverbs_cm_ops *ops = softverbs_cm_ops();
	CHECK(ops && ops == cm_ops() && ops->size == sizeof(*ops) && ops->version == SOFTVERBS_CM_OPS_VERSION, "ops table");
	struct ep a;
	CHECK(!ep_init(&a, IBV_QPT_RC, 0, 4096, NULL), "init");
	struct sockaddr_storage ss;
	CHECK(ops->qp_endpoint(a.qp, NULL, &ss) == 0 && (ss.ss_family == AF_INET || ss.ss_family == AF_INET6), "endpoint");
	CHECK(ops->qp_endpoint(NULL, NULL, &ss) == EINVAL, "NULL qp");
	struct sockaddr_storage cs;
	CHECK(ops->ctx_endpoint(a.qp->context, NULL, &cs) == 0 && memcmp(&cs, &ss, sizeof(ss)) == 0,
	      "ctx_endpoint equals the endpoint of the context's QPs");
	CHECK(ops->ctx_endpoint(NULL, NULL, &cs) == EINVAL, "NULL context");
	union ibv_gid g = { .raw = { 0 } };
	CHECK(ops->add_peer(a.ctx, &g, 5, NULL, 0) == EINVAL, "NULL addr");
	CHECK(ops->add_peer(a.ctx, &g, 0x1000000, (struct sockaddr *)&ss, sizeof(ss)) == EINVAL, "qpn > 24 bits");
	int mode = -1, fd = -1;
	struct sockaddr_in lo = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001) };
	CHECK(ops->roce_mode(a.ctx, (struct sockaddr *)&lo, sizeof(lo), &mode) == 0 && mode >= 0 && mode <= 2, "roce_mode");
	CHECK(ops->roce_mode(a.ctx, (struct sockaddr *)&lo, sizeof(lo), NULL) == EINVAL, "roce_mode NULL out");
	unsigned char mad[256] = { 0 };
	if (mode == 0) {
		CHECK(ops->mad_fd(a.ctx, &fd) == ENETUNREACH, "no RoCEv2: no MAD fd");
		CHECK(ops->mad_send(a.ctx, (struct sockaddr *)&lo, (struct sockaddr *)&lo, sizeof(lo), mad) == ENETUNREACH, "no RoCEv2: no MAD send");
	} else {
		CHECK(ops->mad_fd(a.ctx, &fd) == 0 && fd >= 0, "MAD fd");
		CHECK(ops->mad_recv(a.ctx, mad, NULL, NULL) == EAGAIN, "no MAD waits");
	}
	CHECK(ops->mad_recv(NULL, mad, NULL, NULL) == EINVAL, "mad_recv NULL context");
	CHECK(ops->roce_service(a.ctx, 0x10600001234ull, 1) == 0 && ops->roce_service(a.ctx, 0x10600001234ull, 0) == 0, "roce_service");
	CHECK(ops->roce_service(NULL, 1, 1) == EINVAL, "roce_service NULL context");
	CHECK(ops->size >= offsetof(struct softverbs_cm_ops, ctx_drain) + sizeof(ops->ctx_drain) && ops->ctx_drain(a.ctx) == 0, "ctx_drain");
	CHECK(ops->ctx_drain(NULL) == EINVAL, "ctx_drain NULL context");
	ep_fini(&a);
	return 0;
}

static void put32(unsigned char *p, uint32_t v)
{
	v = htonl(v);
	memcpy(p, &v, 4);
}

static void put64(unsigned char *p, uint64_t v)
{
	put32(p, (uint32_t)(v >> 32));
	put32(p + 4, (uint32_t)v);
}

static uint32_t get32(const unsigned char *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return ntohl(v);
}

/* A frame header of the soft wire format (src/net/frame.rs). */
static void put_hdr(unsigned char *h, int op, uint32_t dst, uint32_t src, uint32_t psn, uint32_t rkey,
		    uint64_t raddr, uint64_t aux)
{
	memset(h, 0, 96);
	h[0] = 0x53; h[1] = 0x56; h[2] = 1; h[3] = (unsigned char)op;
	put32(h + 8, dst);
	put32(h + 12, src);
	put32(h + 16, psn);
	put32(h + 24, rkey);
	put64(h + 32, raddr);
	put64(h + 40, aux);
}

static int t_garbage_frames(void)
{
	/* random bytes at a live endpoint (UDP and TCP) are dropped; the context keeps working */
	struct ep a, b;
	CHECK(!rc_pair(&a, &b, RW, 7, 12), "setup");
	struct sockaddr_storage ss;
	CHECK(!cm_ops()->qp_endpoint(b.qp, NULL, &ss), "endpoint");
	socklen_t len = ss.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
	unsigned seed = 12345;
	char junk[2048];
	int u = socket(ss.ss_family, SOCK_DGRAM, 0);
	for (int i = 0; i < 2000; i++) {
		size_t n = rand_r(&seed) % sizeof(junk);
		for (size_t k = 0; k < n; k++) junk[k] = (char)rand_r(&seed);
		if (i % 3 == 0 && n >= 4) { junk[0] = 0x53; junk[1] = 0x56; junk[2] = 1; } /* valid prefix */
		sendto(u, junk, n, 0, (struct sockaddr *)&ss, len);
	}
	close(u);
	for (int i = 0; i < 20; i++) {
		int t = socket(ss.ss_family, SOCK_STREAM, 0);
		CHECK(!connect(t, (struct sockaddr *)&ss, len), "tcp connect");
		size_t n = 1 + rand_r(&seed) % sizeof(junk);
		for (size_t k = 0; k < n; k++) junk[k] = (char)rand_r(&seed);
		if (i % 2) { junk[0] = 0x53; junk[1] = 0x56; junk[2] = 1; junk[3] = 1; }
		(void)!write(t, junk, n);
		close(t);
	}
	/* an accepted stream must start with its Hello: a first frame of another kind (a SEND
	 * announcing 8 MiB) is refused at its header, before any payload is buffered */
	{
		unsigned char h[96];
		put_hdr(h, 2 /* SEND */, b.qp->qp_num, 0, 0, 0, 0, 0);
		put32(h + 56, 8u << 20); /* payload length */
		int t = socket(ss.ss_family, SOCK_STREAM, 0);
		CHECK(!connect(t, (struct sockaddr *)&ss, len), "tcp connect");
		CHECK(write(t, h, sizeof(h)) == (ssize_t)sizeof(h), "a SEND header as the first frame");
		struct pollfd pf = { .fd = t, .events = POLLIN };
		char c;
		CHECK(poll(&pf, 1, 2000) == 1 && read(t, &c, 1) <= 0, "closed at the header, not waiting for its payload");
		close(t);
	}
	usleep(100000);
	strcpy(a.buf, "still alive");
	CHECK(!post_recv(&b, 1, 0, 64), "recv");
	CHECK(!post_send_op(&a, 1, IBV_WR_SEND, 0, 12, 0, 0, 0, 0), "send");
	struct ibv_wc wc;
	CHECK(poll_n(b.cq, &wc, 1) == 1 && wc.status == 0 && !strcmp(b.buf, "still alive"), "works after garbage");
	ep_fini(&a);
	ep_fini(&b);
	return 0;
}

static int t_cq_overrun(void)
{
	struct ibv_context *ctx = open_soft();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 1, NULL, NULL, 0);
	CHECK(cq && cq->cqe >= 1, "cq");
	struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .cap = { 4, 4, 1, 1, 0 }, .qp_type = IBV_QPT_RC };
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	struct ep e = { .ctx = ctx, .qp = qp };
	CHECK(qp && !to_init(&e, 0), "qp");
	struct ibv_recv_wr wr = { .wr_id = 1 }, *bad;
	for (int i = 0; i < 3; i++) CHECK(!ibv_post_recv(qp, &wr, &bad), "recv %d", i);
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_ERR };
	CHECK(!ibv_modify_qp(qp, &at, IBV_QP_STATE), "ERR");
	struct ibv_async_event ev;
	CHECK(!ibv_get_async_event(ctx, &ev) && ev.event_type == IBV_EVENT_CQ_ERR && ev.element.cq == cq, "CQ_ERR event");
	ibv_ack_async_event(&ev);
	CHECK(cq->async_events_completed == 1, "async ack counted");
	struct ibv_wc wc[4];
	CHECK(ibv_poll_cq(cq, 4, wc) == 1, "only cqe entries kept");
	CHECK(!ibv_destroy_qp(qp) && !ibv_destroy_cq(cq) && !ibv_dealloc_pd(pd) && !ibv_close_device(ctx), "cleanup");
	return 0;
}

static int t_kern_copies(void)
{
	/* our byte-offset copies match the kernel headers */
	_Static_assert(sizeof(struct ib_uverbs_qp_attr) == 144, "qp_attr");
	_Static_assert(offsetof(struct ib_uverbs_qp_attr, ah_attr) == 40, "ah");
	_Static_assert(offsetof(struct ib_uverbs_qp_attr, max_send_wr) == 104, "cap");
	_Static_assert(offsetof(struct ib_uverbs_qp_attr, alt_timeout) == 138, "alt_timeout");
	_Static_assert(sizeof(struct ib_user_path_rec) == 64, "path");
	_Static_assert(offsetof(struct ib_user_path_rec, mtu) == 48, "mtu");
	struct ib_uverbs_qp_attr k;
	memset(&k, 0, sizeof(k));
	k.qp_state = 3; k.qkey = 0x1234; k.dest_qp_num = 77; k.ah_attr.dlid = 9; k.ah_attr.grh.sgid_index = 2;
	k.max_inline_data = 64; k.rnr_retry = 7; k.alt_timeout = 5;
	struct ibv_qp_attr a;
	ibv_copy_qp_attr_from_kern(&a, &k);
	CHECK(a.qp_state == 3 && a.qkey == 0x1234 && a.dest_qp_num == 77 && a.ah_attr.dlid == 9 && a.ah_attr.grh.sgid_index == 2, "qp attr");
	CHECK(a.cap.max_inline_data == 64 && a.rnr_retry == 7 && a.alt_timeout == 5, "qp attr tail");
	return 0;
}

/* Two connected RC endpoints with `len`-byte buffers. */
static int rc_pair_len(struct ep *a, struct ep *b, size_t len)
{
	if (ep_init(a, IBV_QPT_RC, RW, len, NULL) || ep_init(b, IBV_QPT_RC, RW, len, NULL))
		return -1;
	return rc_connect(a, b, RW, 7, 12);
}

static void pattern(char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++) p[i] = (char)(seed + i * 2654435761u + (i >> 13));
}

static int t_bulk(void)
{
	/* large messages: payloads leave straight from the MR and large WRITEs land straight in
	 * the target MR; data, order and protection must be as for small ones */
	const size_t MB = 1 << 20;
	struct ep a, b;
	struct ibv_wc wc[16];
	CHECK(!rc_pair_len(&a, &b, 8 * MB), "setup");
	pattern(a.buf, 8 * MB, 1);
	/* 16 WRITEs of 256 KiB, each from two SGEs split at an odd offset, all in flight */
	for (int i = 0; i < 16; i++) {
		size_t off = (size_t)i * 256 * 1024;
		struct ibv_sge s[2] = { { (uintptr_t)a.buf + off, 100001, a.mr->lkey },
					{ (uintptr_t)a.buf + off + 100001, 256 * 1024 - 100001, a.mr->lkey } };
		struct ibv_send_wr wr = { .wr_id = i, .sg_list = s, .num_sge = 2, .opcode = IBV_WR_RDMA_WRITE,
					  .send_flags = IBV_SEND_SIGNALED }, *bad;
		wr.wr.rdma.remote_addr = (uintptr_t)b.buf + off;
		wr.wr.rdma.rkey = b.mr->rkey;
		CHECK(!ibv_post_send(a.qp, &wr, &bad), "write %d", i);
	}
	CHECK(poll_n(a.cq, wc, 16) == 16, "16 write completions");
	for (int i = 0; i < 16; i++)
		CHECK(wc[i].status == 0 && wc[i].wr_id == (uint64_t)i && wc[i].opcode == IBV_WC_RDMA_WRITE, "write wc %d: %d", i, wc[i].status);
	CHECK(!memcmp(a.buf, b.buf, 4 * MB), "4 MiB written");
	/* WRITE_WITH_IMM of 1 MiB */
	CHECK(!post_recv(&b, 50, 0, 0), "recv for imm");
	CHECK(!post_send_op(&a, 20, IBV_WR_RDMA_WRITE_WITH_IMM, 4 * MB, MB, (uintptr_t)b.buf + 4 * MB, b.mr->rkey, htonl(7), 0), "write imm");
	CHECK(poll_n(b.cq, wc, 1) == 1 && wc[0].status == 0 && wc[0].byte_len == MB && wc[0].opcode == IBV_WC_RECV_RDMA_WITH_IMM, "imm wc");
	CHECK(poll_n(a.cq, wc, 1) == 1 && wc[0].status == 0, "imm send wc");
	CHECK(!memcmp(a.buf + 4 * MB, b.buf + 4 * MB, MB), "imm data");
	/* large WRITE_WITH_IMMs and receives: the first of two finds the only receive (and may
	 * land straight in the MR), the second waits until its own is posted, and one that
	 * finds none at all waits too (rnr_retry 7: for ever); data and order as posted */
	const uint32_t Q = 256 * 1024;
	pattern(a.buf + 4 * MB, 3 * Q, 4);
	CHECK(!post_recv(&b, 52, 0, 0), "one recv");
	for (int i = 0; i < 3; i++)
		CHECK(!post_send_op(&a, 23 + i, IBV_WR_RDMA_WRITE_WITH_IMM, 4 * MB + i * Q, Q,
				    (uintptr_t)b.buf + 4 * MB + i * Q, b.mr->rkey, htonl(8 + i), 0), "write imm %d", i);
	CHECK(poll_n(b.cq, wc, 1) == 1 && wc[0].status == 0 && wc[0].wr_id == 52 && ntohl(wc[0].imm_data) == 8 &&
	      wc[0].byte_len == Q, "first imm wc");
	usleep(50000);
	CHECK(ibv_poll_cq(b.cq, 1, wc) == 0, "no completion without a receive");
	CHECK(!post_recv(&b, 53, 0, 0) && !post_recv(&b, 54, 0, 0), "two recvs");
	CHECK(poll_n(b.cq, wc, 2) == 2 && wc[0].status == 0 && wc[0].wr_id == 53 && ntohl(wc[0].imm_data) == 9 &&
	      wc[1].status == 0 && wc[1].wr_id == 54 && ntohl(wc[1].imm_data) == 10, "later imm wcs");
	CHECK(poll_n(a.cq, wc, 3) == 3 && !wc[0].status && !wc[1].status && !wc[2].status, "imm send wcs");
	CHECK(!memcmp(a.buf + 4 * MB, b.buf + 4 * MB, 3 * Q), "imm data, three");
	/* SEND of 1 MiB + 3 into a three-SGE receive */
	pattern(a.buf, MB + 3, 2);
	struct ibv_sge rs[3] = { { (uintptr_t)b.buf + 5 * MB, 1000, b.mr->lkey },
				 { (uintptr_t)b.buf + 6 * MB, MB - 1000, b.mr->lkey },
				 { (uintptr_t)b.buf + 7 * MB, 100, b.mr->lkey } };
	struct ibv_recv_wr rw = { .wr_id = 51, .sg_list = rs, .num_sge = 3 }, *rbad;
	CHECK(!ibv_post_recv(b.qp, &rw, &rbad), "recv 3 sge");
	CHECK(!post_send_op(&a, 21, IBV_WR_SEND, 0, MB + 3, 0, 0, 0, 0), "big send");
	CHECK(poll_n(b.cq, wc, 1) == 1 && wc[0].status == 0 && wc[0].byte_len == MB + 3, "big recv wc %d", wc[0].status);
	CHECK(!memcmp(b.buf + 5 * MB, a.buf, 1000) && !memcmp(b.buf + 6 * MB, a.buf + 1000, MB - 1000) &&
	      !memcmp(b.buf + 7 * MB, a.buf + MB, 3), "big send data");
	CHECK(poll_n(a.cq, wc, 1) == 1 && wc[0].status == 0, "big send wc");
	/* READ of 2 MiB */
	pattern(b.buf + 2 * MB, 2 * MB, 3);
	CHECK(!post_send_op(&a, 22, IBV_WR_RDMA_READ, 6 * MB, 2 * MB, (uintptr_t)b.buf + 2 * MB, b.mr->rkey, 0, 0), "big read");
	CHECK(poll_n(a.cq, wc, 1) == 1 && wc[0].status == 0 && wc[0].byte_len == 2 * MB, "big read wc %d", wc[0].status);
	CHECK(!memcmp(a.buf + 6 * MB, b.buf + 2 * MB, 2 * MB), "big read data");
	/* a large WRITE with a bad rkey: NAK, nothing touched */
	memset(b.buf, 0x11, 8 * MB);
	CHECK(!post_send_op(&a, 23, IBV_WR_RDMA_WRITE, 0, 512 * 1024, (uintptr_t)b.buf, b.mr->rkey ^ 0x100, 0, 0), "bad rkey");
	CHECK(poll_n(a.cq, wc, 1) == 1 && wc[0].status == IBV_WC_REM_ACCESS_ERR, "big bad rkey -> REM_ACCESS_ERR (%d)", wc[0].status);
	for (size_t i = 0; i < 8 * MB; i++) CHECK((unsigned char)b.buf[i] == 0x11, "untouched at %zu", i);
	ep_fini(&a);
	ep_fini(&b);
	/* one byte past the MR: NAK, nothing touched */
	CHECK(!rc_pair_len(&a, &b, 2 * MB), "setup2");
	memset(b.buf, 0x11, 2 * MB);
	CHECK(!post_send_op(&a, 1, IBV_WR_RDMA_WRITE, 0, MB, (uintptr_t)b.buf + MB + 1, b.mr->rkey, 0, 0), "oob");
	CHECK(poll_n(a.cq, wc, 1) == 1 && wc[0].status == IBV_WC_REM_ACCESS_ERR, "big oob -> REM_ACCESS_ERR (%d)", wc[0].status);
	for (size_t i = 0; i < 2 * MB; i++) CHECK((unsigned char)b.buf[i] == 0x11, "untouched 2 at %zu", i);
	ep_fini(&a);
	ep_fini(&b);
	return 0;
}

static int t_inline_bulk(void)
{
	/* 32 inline 64 KiB WRITEs (2 MiB, more than the socket takes at once; half of them
	 * gathered from three SGEs) from one unregistered buffer that is overwritten after every post: each must arrive as it was
	 * when posted, whether it left during the post or waited (copied) behind the others */
	const uint32_t K64 = 64 * 1024;
	struct ep a, b;
	struct ibv_wc wc[32];
	ep_inline = K64;
	int r = rc_pair_len(&a, &b, 64 * (size_t)K64);
	ep_inline = 0;
	CHECK(!r, "setup");
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK(!ibv_query_qp(a.qp, &qa, IBV_QP_CAP, &qi) && qa.cap.max_inline_data >= K64, "RC inline %u", qa.cap.max_inline_data);
	char *scratch = malloc(K64 + 1), *want = malloc(32 * (size_t)K64);
	for (int i = 0; i < 32; i++) {
		pattern(scratch, K64, 100 + i);
		memcpy(want + (size_t)i * K64, scratch, K64);
		/* odd writes in three pieces, one of them empty: one sendmsg of several parts */
		struct ibv_sge s[3] = { { (uintptr_t)scratch, K64, 0 } };
		int nsge = 1;
		if (i & 1) {
			s[0].length = 1000;
			s[1] = (struct ibv_sge){ (uintptr_t)scratch + 1000, 0, 0 };
			s[2] = (struct ibv_sge){ (uintptr_t)scratch + 1000, K64 - 1000, 0 };
			nsge = 3;
		}
		struct ibv_send_wr wr = { .wr_id = i, .sg_list = s, .num_sge = nsge, .opcode = IBV_WR_RDMA_WRITE,
					  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE }, *bad;
		wr.wr.rdma.remote_addr = (uintptr_t)b.buf + (size_t)i * K64;
		wr.wr.rdma.rkey = b.mr->rkey;
		CHECK(!ibv_post_send(a.qp, &wr, &bad), "inline write %d", i);
		memset(scratch, 0xee, K64);
	}
	CHECK(poll_n(a.cq, wc, 32) == 32, "32 inline completions");
	for (int i = 0; i < 32; i++)
		CHECK(wc[i].status == 0 && wc[i].wr_id == (uint64_t)i && wc[i].byte_len == K64, "inline wc %d: %d", i, wc[i].status);
	for (int i = 0; i < 32; i++)
		CHECK(!memcmp(b.buf + (size_t)i * K64, want + (size_t)i * K64, K64), "inline write %d data as posted", i);
	/* posted in SQD, it leaves only back in RTS, long after its buffer changed */
	struct ibv_qp_attr st = { .qp_state = IBV_QPS_SQD };
	CHECK(!ibv_modify_qp(a.qp, &st, IBV_QP_STATE), "to SQD");
	pattern(scratch, K64, 7);
	memcpy(want, scratch, K64);
	struct ibv_sge s = { (uintptr_t)scratch, K64, 0 };
	struct ibv_send_wr wr = { .wr_id = 40, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE }, *bad;
	wr.wr.rdma.remote_addr = (uintptr_t)b.buf + 32 * (size_t)K64;
	wr.wr.rdma.rkey = b.mr->rkey;
	/* ... chained before a WR that is refused: the first stays posted, with its data */
	struct ibv_sge big = { (uintptr_t)scratch, K64 + 1, 0 };
	struct ibv_send_wr refused = { .wr_id = 41, .sg_list = &big, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				       .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE };
	refused.wr.rdma = wr.wr.rdma;
	wr.next = &refused;
	CHECK(ibv_post_send(a.qp, &wr, &bad) == EINVAL && bad == &refused, "inline write in SQD, then one refused");
	memset(scratch, 0xee, K64);
	usleep(20000);
	CHECK(ibv_poll_cq(a.cq, 1, wc) == 0, "nothing leaves in SQD");
	st.qp_state = IBV_QPS_RTS;
	CHECK(!ibv_modify_qp(a.qp, &st, IBV_QP_STATE), "back to RTS");
	CHECK(poll_n(a.cq, wc, 1) == 1 && wc[0].status == 0 && wc[0].wr_id == 40, "SQD inline completion: %d %d", (int)wc[0].status, (int)wc[0].wr_id);
	CHECK(!memcmp(b.buf + 32 * (size_t)K64, want, K64), "SQD inline data as posted");
	usleep(20000);
	CHECK(ibv_poll_cq(a.cq, 1, wc) == 0, "the refused WR never completes");
	free(scratch);
	free(want);
	ep_fini(&a);
	ep_fini(&b);
	return 0;
}

/* Sockets (of any kind) this process holds. */
static int count_sockets(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	char path[300], target[64];
	int n = 0;
	if (!d) return -1;
	while ((e = readdir(d))) {
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		ssize_t k = readlink(path, target, sizeof(target) - 1);
		if (k > 0) { target[k] = 0; n += !strncmp(target, "socket:", 7); }
	}
	closedir(d);
	return n;
}

/* Both sides reap their send and their receive; each receive carried `round`. */
static int reap_round(struct ep *a, struct ep *b, int round)
{
	struct ibv_wc wc[2];
	CHECK(poll_n(a->cq, wc, 2) == 2 && wc[0].status == IBV_WC_SUCCESS && wc[1].status == IBV_WC_SUCCESS, "a's completions");
	CHECK(poll_n(b->cq, wc, 2) == 2 && wc[0].status == IBV_WC_SUCCESS && wc[1].status == IBV_WC_SUCCESS, "b's completions");
	int va, vb;
	memcpy(&va, a->buf + 4096, 4);
	memcpy(&vb, b->buf + 4096, 4);
	CHECK(va == round && vb == round, "round %d carried %d / %d", round, va, vb);
	return 0;
}

/* One round: each side posts a receive, then both send at once (each before the other's
 * first frame could arrive), then both reap. */
static int both_send(struct ep *a, struct ep *b, int round)
{
	CHECK(!post_recv(a, 100 + round, 4096, 64) && !post_recv(b, 100 + round, 4096, 64), "recvs");
	memcpy(a->buf, &round, sizeof(round));
	memcpy(b->buf, &round, sizeof(round));
	CHECK(!post_send_op(a, round, IBV_WR_SEND, 0, 4, 0, 0, 0, IBV_SEND_SIGNALED) &&
	      !post_send_op(b, round, IBV_WR_SEND, 0, 4, 0, 0, 0, IBV_SEND_SIGNALED), "sends");
	return reap_round(a, b, round);
}

struct racer {
	struct ep *e;
	int *gate;
	int rc;
};

static void *race_send(void *arg)
{
	struct racer *r = arg;
	/* both threads wait here for each other (yielding: on a busy machine they may share a
	 * CPU), so each posts before the other's Hello can arrive */
	__atomic_add_fetch(r->gate, 1, __ATOMIC_SEQ_CST);
	while (__atomic_load_n(r->gate, __ATOMIC_SEQ_CST) < 2)
		sched_yield();
	r->rc = post_send_op(r->e, 0, IBV_WR_SEND, 0, 4, 0, 0, 0, IBV_SEND_SIGNALED);
	return NULL;
}

static int t_simultaneous_open(void)
{
	/* Both QPs of a pair transmit first at once: each opens a stream to the other's
	 * context. Once idle, the pair must settle on one of them (the one opened to the
	 * lower listening endpoint) and close the other, without losing a message.
	 * The first sends are posted from two threads at the same instant (posted one after
	 * the other, b's context often takes a's stream before b's post looks for it), with
	 * no receive posted yet: RNR keeps them in flight, so neither side can settle before
	 * the two streams are counted. */
	double give_up = now_s() + 30;
	int attempt;
	const int first = 1000; /* not 0: the receive buffers start zeroed */
	for (attempt = 0; attempt < 100 && now_s() < give_up; attempt++) {
		struct ep a, b;
		CHECK(!rc_pair(&a, &b, RW, 7, 1), "setup");
		int s0 = count_sockets(), s1 = -1, s2 = -1, gate = 0;
		struct racer ra = { &a, &gate, -1 }, rb = { &b, &gate, -1 };
		pthread_t t;
		memcpy(a.buf, &first, sizeof(first));
		memcpy(b.buf, &first, sizeof(first));
		CHECK(!pthread_create(&t, NULL, race_send, &rb), "thread");
		race_send(&ra);
		pthread_join(t, NULL);
		CHECK(!ra.rc && !rb.rc, "first sends");
		for (int i = 0; i < 20 && s1 != s0 + 4; i++) { usleep(5000); s1 = count_sockets(); }
		CHECK(!post_recv(&a, 100, 4096, 64) && !post_recv(&b, 100, 4096, 64), "first recvs");
		CHECK(!reap_round(&a, &b, first), "first round");
		if (s1 != s0 + 4) {
			/* one side took the other's stream first: nothing to settle; try again */
			ep_fini(&a);
			ep_fini(&b);
			continue;
		}
		for (int r = 1; r <= 20; r++)
			CHECK(!both_send(&a, &b, r), "round %d", r);
		for (int i = 0; i < 200 && s2 != s0 + 2; i++) { usleep(10000); s2 = count_sockets(); }
		CHECK(s2 == s0 + 2, "two streams (%d sockets) did not settle on one: %d sockets", s1 - s0, s2 - s0);
		for (int r = 21; r <= 40; r++)
			CHECK(!both_send(&a, &b, r), "round %d on the kept stream", r);
		ep_fini(&a);
		ep_fini(&b);
		return 0;
	}
	CHECK(0, "the two QPs never opened streams at once in %d attempts: the check did not run", attempt);
	return 1;
}

static int t_poll_then_idle(void)
{
	/* b busy-polls while messages arrive (its progress thread steps aside), then stops
	 * polling: its progress thread must serve a READ again, and wake an event waiter */
	struct ep a, b;
	struct ibv_wc wc;
	CHECK(!rc_pair(&a, &b, RW, 7, 12), "setup");
	for (int i = 0; i < 200; i++) {
		CHECK(!post_recv(&b, i, 0, 64), "recv %d", i);
		CHECK(!post_send_op(&a, i, IBV_WR_SEND, 0, 8, 0, 0, 0, 0), "send %d", i);
		double end = now_s() + 5;
		int r;
		while ((r = ibv_poll_cq(b.cq, 1, &wc)) == 0 && now_s() < end)
			;
		CHECK(r == 1 && wc.status == 0, "busy-polled recv %d", i);
		CHECK(poll_n(a.cq, &wc, 1) == 1 && wc.status == 0, "send wc %d", i);
	}
	/* b idle now: a's READ needs b's progress thread */
	memset(b.buf + 1000, 0x42, 100);
	double t0 = now_s();
	CHECK(!post_send_op(&a, 500, IBV_WR_RDMA_READ, 2000, 100, (uintptr_t)b.buf + 1000, b.mr->rkey, 0, 0), "read");
	CHECK(poll_n(a.cq, &wc, 1) == 1 && wc.status == 0 && a.buf[2000] == 0x42, "read served by b's idle side");
	CHECK(now_s() - t0 < 0.5, "served promptly (%.3f s)", now_s() - t0);
	/* b blocks for a CQ event */
	CHECK(!ibv_req_notify_cq(b.cq, 0), "arm");
	CHECK(!post_recv(&b, 600, 0, 64), "recv");
	CHECK(!post_send_op(&a, 600, IBV_WR_SEND, 0, 8, 0, 0, 0, 0), "send");
	struct ibv_cq *ecq;
	void *ectx;
	CHECK(!ibv_get_cq_event(b.ch, &ecq, &ectx) && ecq == b.cq, "event");
	ibv_ack_cq_events(b.cq, 1);
	CHECK(poll_n(b.cq, &wc, 1) == 1 && wc.wr_id == 600, "evented recv");
	CHECK(poll_n(a.cq, &wc, 1) == 1 && wc.status == 0, "send wc");
	ep_fini(&a);
	ep_fini(&b);
	return 0;
}

static double cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int t_idle_no_spin(void)
{
	/* after busy-polled traffic stops, the process must go quiet: the progress threads
	 * sleep (epoll_wait), nothing spins, and held ACKs still reach the requester */
	struct ep a, b;
	struct ibv_wc wc;
	CHECK(!rc_pair(&a, &b, RW, 7, 12), "setup");
	for (int i = 0; i < 300; i++) {
		CHECK(!post_recv(&b, i, 0, 64), "recv %d", i);
		CHECK(!post_send_op(&a, i, IBV_WR_SEND, 0, 8, 0, 0, 0, 0), "send %d", i);
		double end = now_s() + 5;
		int r;
		while ((r = ibv_poll_cq(b.cq, 1, &wc)) == 0 && now_s() < end)
			;
		CHECK(r == 1 && wc.status == 0, "recv %d", i);
		while ((r = ibv_poll_cq(a.cq, 1, &wc)) == 0 && now_s() < end)
			;
		CHECK(r == 1 && wc.status == 0, "send wc %d", i);
	}
	/* one more exchange whose ACK b may hold, then nobody polls b again */
	CHECK(!post_recv(&b, 1000, 0, 64), "recv");
	CHECK(!post_send_op(&a, 1000, IBV_WR_SEND, 0, 8, 0, 0, 0, 0), "send");
	double end = now_s() + 5;
	int r;
	while ((r = ibv_poll_cq(b.cq, 1, &wc)) == 0 && now_s() < end)
		;
	CHECK(r == 1, "last recv");
	/* a's send completion needs b's ACK: a polls slowly (not busy) */
	CHECK(poll_n(a.cq, &wc, 1) == 1 && wc.status == 0 && wc.wr_id == 1000, "held ACK delivered");
	usleep(50000);
	double c0 = cpu_s(), t0 = now_s();
	usleep(400000);
	double used = (cpu_s() - c0) / (now_s() - t0);
	CHECK(used < 0.05, "idle process uses %.1f%% CPU", used * 100);
	ep_fini(&a);
	ep_fini(&b);
	return 0;
}

#define TH_N 2000
struct th_arg { struct ep *e; int active; int bad; };

static int th_wait(struct ibv_cq *cq, struct ibv_wc *wc, double end)
{
	int r;
	while ((r = ibv_poll_cq(cq, 1, wc)) == 0 && now_s() < end)
		;
	return r;
}

static void *th_run(void *p)
{
	/* ping-pong on one QP, busy-polling its CQ: the active side sends i and waits for its
	 * send completion and the echo; the passive side echoes what it receives */
	struct th_arg *a = p;
	struct ep *e = a->e;
	struct ibv_wc wc;
	double end = now_s() + 30;
	int sends = 0, recvs = 0;
	if (!a->active && post_recv(e, 0, 64, 8)) { a->bad = 1; return NULL; }
	for (int i = 0; i < TH_N && !a->bad; i++) {
		if (a->active) {
			if (post_recv(e, 0, 64, 8)) { a->bad = 2; break; }
			memcpy(e->buf, &i, 4);
			if (post_send_op(e, i, IBV_WR_SEND, 0, 4, 0, 0, 0, 0)) { a->bad = 3; break; }
		}
		int want_recv = recvs + 1, want_send = a->active ? sends + 1 : sends;
		while ((recvs < want_recv || sends < want_send) && !a->bad) {
			if (th_wait(e->cq, &wc, end) != 1 || wc.status) { a->bad = 4; break; }
			if (wc.opcode == IBV_WC_RECV) {
				int v;
				memcpy(&v, e->buf + 64, 4);
				if (v != i) { a->bad = 5; break; }
				recvs++;
				if (!a->active) {
					if (i + 1 < TH_N && post_recv(e, 0, 64, 8)) { a->bad = 6; break; }
					memcpy(e->buf, &v, 4);
					if (post_send_op(e, i, IBV_WR_SEND, 0, 4, 0, 0, 0, 0)) { a->bad = 7; break; }
					want_send = sends + 1;
				}
			} else {
				sends++;
			}
		}
	}
	return NULL;
}

static int t_threads(void)
{
	/* two busy-polling threads per context (one QP each): progress passes of several
	 * threads, held ACKs and the parked progress thread must not lose or reorder anything */
	struct ibv_context *ca = open_soft(), *cb = open_soft();
	CHECK(ca && cb, "contexts");
	struct ibv_pd *pa = ibv_alloc_pd(ca), *pb = ibv_alloc_pd(cb);
	struct ep a[2], b[2];
	for (int k = 0; k < 2; k++) {
		CHECK(!ep_init_ctx(&a[k], ca, pa, IBV_QPT_RC, 4096, NULL) && !ep_init_ctx(&b[k], cb, pb, IBV_QPT_RC, 4096, NULL), "eps");
		CHECK(!publish(&a[k], &b[k]) && !publish(&b[k], &a[k]) && !to_init(&a[k], RW) && !to_init(&b[k], RW), "init");
		CHECK(!to_rtr(&a[k], &b[k], 12) && !to_rtr(&b[k], &a[k], 12) && !to_rts(&a[k], 7) && !to_rts(&b[k], 7), "connect");
	}
	struct th_arg args[4] = { { &a[0], 1, 0 }, { &b[0], 0, 0 }, { &a[1], 1, 0 }, { &b[1], 0, 0 } };
	pthread_t t[4];
	for (int k = 0; k < 4; k++) CHECK(!pthread_create(&t[k], NULL, th_run, &args[k]), "thread");
	for (int k = 0; k < 4; k++) pthread_join(t[k], NULL);
	for (int k = 0; k < 4; k++) CHECK(!args[k].bad, "thread %d failed (%d)", k, args[k].bad);
	for (int k = 0; k < 2; k++) {
		ibv_destroy_qp(a[k].qp); ibv_destroy_qp(b[k].qp);
		ibv_dereg_mr(a[k].mr); ibv_dereg_mr(b[k].mr);
		ibv_destroy_cq(a[k].cq); ibv_destroy_cq(b[k].cq);
		free(a[k].buf); free(b[k].buf);
	}
	CHECK(!ibv_dealloc_pd(pa) && !ibv_dealloc_pd(pb) && !ibv_close_device(ca) && !ibv_close_device(cb), "cleanup");
	return 0;
}

/* Heap in use (every malloc arena), KiB: unlike the resident size, blind to memory that
 * was freed and is reused. */
static long heap_kib(void)
{
	struct mallinfo2 m = mallinfo2();
	return (long)((m.uordblks + m.hblkhd) / 1024);
}

/* valgrind replaces malloc (mallinfo2 then sees nothing): memory bounds are checked by the
 * native run. */
static int under_valgrind(void)
{
	const char *p = getenv("LD_PRELOAD");
	return p && strstr(p, "vgpreload");
}

/* The heap (KiB) once it stopped changing (no 1 MiB either way in 0.5 s; at most 20 s):
 * what an earlier test's links still read or free in the background is not counted. */
static long heap_settled(void)
{
	long last = heap_kib();
	double still = now_s(), end = still + 20;
	while (now_s() < end && now_s() - still < 0.5) {
		usleep(50000);
		long h = heap_kib();
		if (h > last + 1024 || h < last - 1024) { last = h; still = now_s(); }
	}
	return heap_kib();
}

/* Heap growth since `from` (KiB) once it stopped growing. */
static long heap_grown_settled(long from)
{
	return heap_settled() - from;
}

/* Two connected RC endpoints (rnr_retry 7) whose send queue and CQs hold `depth` WRs. */
static int deep_pair(struct ep *a, struct ep *b, size_t alen, size_t blen, int depth)
{
	struct ep *e[2] = { a, b };
	size_t len[2] = { alen, blen };
	for (int k = 0; k < 2; k++) {
		if (ep_init(e[k], IBV_QPT_RC, RW, len[k], NULL)) return -1;
		ibv_destroy_qp(e[k]->qp);
		ibv_destroy_cq(e[k]->cq);
		e[k]->cq = ibv_create_cq(e[k]->ctx, 2 * depth, e[k], NULL, 0);
		struct ibv_qp_init_attr ia = { .send_cq = e[k]->cq, .recv_cq = e[k]->cq,
			.cap = { .max_send_wr = depth, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1 },
			.qp_type = IBV_QPT_RC };
		e[k]->qp = e[k]->cq ? ibv_create_qp(e[k]->pd, &ia) : NULL;
		if (!e[k]->qp) return -1;
	}
	return rc_connect(a, b, RW, 7, 12);
}

#define PB_MSG (256 * 1024)
#define PB_N 1024 /* 256 MiB: four times what a link may park */

/* Where SEND i takes its data: every 8 KiB step of `pattern` holds other bytes. */
static size_t pb_off(int i)
{
	return (size_t)(i % 128) * 8192;
}

/* Posts SENDs [from, to) of PB_MSG bytes, imm = their index. */
static int pb_sends(struct ep *a, int from, int to)
{
	for (int i = from; i < to; i++)
		CHECK(!post_send_op(a, i, IBV_WR_SEND_WITH_IMM, pb_off(i), PB_MSG, 0, 0, htonl(i), 0), "send %d", i);
	return 0;
}

static int t_rnr_parked_bounded(void)
{
	/* a sends 256 MiB to b, which has no receive posted (rnr_retry 7: every SEND waits
	 * at b). b parks at most about 64 MiB of them and stops reading the link; as receives
	 * come, every message arrives intact and in order and every send completes. Then b's
	 * QP is destroyed while its link is stopped: a's sends fail, nothing hangs or spins. */
	static struct ibv_wc wc[PB_N];
	struct ep a, b;
	/* 8 MiB a batch through RNR retries: valgrind can take longer than the usual 5 s */
	double slow = under_valgrind() ? 60 : 5;
	CHECK(!deep_pair(&a, &b, 2 << 20, 32 * (size_t)PB_MSG, PB_N), "setup");
	pattern(a.buf, a.len, 9);
	long heap0 = heap_settled();
	CHECK(!pb_sends(&a, 0, PB_N), "sends");
	long grown = heap_grown_settled(heap0) / 1024;
	CHECK(grown < 96 || under_valgrind(), "b holds %ld MiB of the 256 MiB sent to it without a receive (parks 64 MiB)", grown);
	CHECK(ibv_poll_cq(a.cq, 1, wc) == 0, "no send completes without a receive");
	for (int i = 0; i < PB_N; i += 32) {
		for (int k = 0; k < 32; k++)
			CHECK(!post_recv(&b, i + k, (size_t)k * PB_MSG, PB_MSG), "recv %d", i + k);
		CHECK(poll_n_for(b.cq, wc, 32, slow) == 32, "receives %d..%d", i, i + 31);
		for (int k = 0; k < 32; k++) {
			int n = i + k;
			CHECK(wc[k].status == IBV_WC_SUCCESS && wc[k].wr_id == (uint64_t)n && wc[k].byte_len == PB_MSG &&
			      ntohl(wc[k].imm_data) == (uint32_t)n, "message %d: status %d wr_id %lu imm %u", n,
			      wc[k].status, (unsigned long)wc[k].wr_id, ntohl(wc[k].imm_data));
			CHECK(!memcmp(b.buf + (size_t)k * PB_MSG, a.buf + pb_off(n), PB_MSG), "message %d intact", n);
		}
	}
	CHECK(poll_n_for(a.cq, wc, PB_N, slow) == PB_N, "every send completes");
	for (int i = 0; i < PB_N; i++)
		CHECK(wc[i].status == IBV_WC_SUCCESS && wc[i].wr_id == (uint64_t)i, "send %d: %d", i, wc[i].status);
	/* stopped again (128 MiB sent: 64 MiB parked, the rest waits in the sockets), then the
	 * QP goes */
	heap0 = heap_settled();
	CHECK(!pb_sends(&a, 0, PB_N / 2), "sends 2");
	grown = heap_grown_settled(heap0) / 1024;
	CHECK(grown < 96 || under_valgrind(), "b holds %ld MiB of 128 MiB", grown);
	CHECK(!ibv_destroy_qp(b.qp), "destroy b's QP");
	b.qp = NULL;
	CHECK(poll_n_for(a.cq, wc, PB_N / 2, slow) == PB_N / 2, "a's sends complete once b's QP is gone");
	for (int i = 0; i < PB_N / 2; i++)
		CHECK(wc[i].status != IBV_WC_SUCCESS, "send %d to a destroyed QP: %d", i, wc[i].status);
	usleep(200000); /* b's engine NAKs what was left in the sockets */
	double c0 = cpu_s(), t0 = now_s();
	usleep(300000);
	double used = (cpu_s() - c0) / (now_s() - t0);
	/* under valgrind that NAKing alone can take the whole window */
	CHECK(used < 0.05 || under_valgrind(), "process uses %.1f%% CPU after the destroy", used * 100);
	ep_fini(&a);
	ep_fini(&b);
	return 0;
}

#define RD_LEN (128 * 1024)
#define RD_N 1024 /* 128 MiB of READ responses */
#define OP_HELLO 1
#define OP_READ 4
#define OP_READ_RESP 8

static size_t rd_off(int i)
{
	return (size_t)(i % 7) * 8192;
}

/* Writes what the socket takes of [*sent, len). */
static void write_some(int fd, const unsigned char *p, size_t len, size_t *sent)
{
	while (*sent < len) {
		ssize_t n = write(fd, p + *sent, len - *sent);
		if (n <= 0) return;
		*sent += (size_t)n;
	}
}

/* A peer posing as a's QP asks b for RD_N READs of RD_LEN bytes and reads nothing: b stops
 * serving its requests once more responses wait than a requester may have outstanding,
 * instead of queueing 128 MiB; when the peer reads, every response arrives, in order and
 * intact. `before_rtr`: the READs arrive while b's QP is in INIT, wait there, and all
 * become runnable at once when it reaches RTR. */
static int read_flood(int before_rtr)
{
	struct ep a, b;
	if (before_rtr) {
		CHECK(!ep_init(&a, IBV_QPT_RC, RW, 1 << 20, NULL) && !ep_init(&b, IBV_QPT_RC, RW, 1 << 20, NULL), "setup");
		CHECK(!to_init(&b, RW), "b to INIT");
	} else {
		CHECK(!rc_pair_len(&a, &b, 1 << 20), "setup");
	}
	pattern(b.buf, b.len, 5);
	struct sockaddr_storage ss;
	CHECK(!cm_ops()->qp_endpoint(b.qp, NULL, &ss), "endpoint");
	socklen_t sl = ss.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
	int t = socket(ss.ss_family, SOCK_STREAM, 0);
	int small = 64 * 1024;
	CHECK(t >= 0 && !setsockopt(t, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), "socket");
	CHECK(!connect(t, (struct sockaddr *)&ss, sl), "connect");
	CHECK(!fcntl(t, F_SETFL, fcntl(t, F_GETFL) | O_NONBLOCK), "nonblocking");
	/* posing as a's QP: a Hello, then the READs */
	size_t reqlen = 96 * (size_t)(RD_N + 1), sent = 0;
	unsigned char *req = malloc(reqlen), *resp = malloc(96 + RD_LEN);
	uint32_t aq = a.qp->qp_num, bq = b.qp->qp_num;
	put_hdr(req, OP_HELLO, bq, aq, 0, 0, 0, 0);
	for (int i = 0; i < RD_N; i++)
		put_hdr(req + 96 * (size_t)(i + 1), OP_READ, bq, aq, (uint32_t)i, b.mr->rkey,
			(uintptr_t)b.buf + rd_off(i), RD_LEN);
	long heap0 = heap_settled();
	write_some(t, req, reqlen, &sent);
	if (before_rtr) {
		/* every request sent and taken by b's kernel (its engine is not stopped: nothing
		 * is parked yet), then time for the engine to park them */
		int unsent = 1;
		for (int i = 0; i < 500 && unsent; i++) {
			if (sent < reqlen)
				write_some(t, req, reqlen, &sent);
			if (sent == reqlen && !ioctl(t, SIOCOUTQ, &unsent) && !unsent)
				break;
			unsent = 1;
			usleep(10000);
		}
		CHECK(!unsent, "the READ requests reached b before RTR");
		usleep(200000);
		heap_grown_settled(heap0);
		CHECK(!to_rtr(&b, &a, 12), "b to RTR");
	}
	long grown = heap_grown_settled(heap0) / 1024;
	CHECK(grown < 16 || under_valgrind(), "%ld MiB of READ responses queued for a peer that reads none", grown);
	/* now the peer reads (and sends what did not fit yet) */
	size_t have = 0;
	int i = 0;
	double end = now_s() + 30;
	while (i < RD_N && now_s() < end) {
		struct pollfd pf = { .fd = t, .events = POLLIN | (sent < reqlen ? POLLOUT : 0) };
		poll(&pf, 1, 1000);
		write_some(t, req, reqlen, &sent);
		ssize_t n = read(t, resp + have, 96 + RD_LEN - have);
		CHECK(n != 0, "b closed the stream after %d responses", i);
		if (n < 0) continue;
		have += (size_t)n;
		if (have < 96 + RD_LEN) continue;
		CHECK(resp[3] == OP_READ_RESP && resp[6] == 0 && get32(resp + 8) == aq && get32(resp + 12) == bq &&
		      get32(resp + 16) == (uint32_t)i && get32(resp + 56) == RD_LEN, "response %d: op %d syndrome %d psn %u",
		      i, resp[3], resp[6], get32(resp + 16));
		CHECK(!memcmp(resp + 96, b.buf + rd_off(i), RD_LEN), "response %d intact", i);
		have = 0;
		i++;
	}
	CHECK(i == RD_N, "%d of %d READ responses arrived", i, RD_N);
	close(t);
	free(req);
	free(resp);
	ep_fini(&a);
	ep_fini(&b);
	return 0;
}

static int t_read_unread_bounded(void)
{
	return read_flood(0);
}

static int t_read_parked_unread_bounded(void)
{
	return read_flood(1);
}

/* Reads one whole frame (96-byte header, then its payload) from stream `t` within `secs`:
 * its opcode, PSN and payload length; -1 when none came. */
static int read_frame(int t, double secs, uint32_t *psn, uint32_t *plen)
{
	static unsigned char buf[96 + (1 << 16)];
	size_t have = 0, want = 96;
	double end = now_s() + secs;
	while (have < want) {
		struct pollfd pf = { .fd = t, .events = POLLIN };
		int ms = (int)((end - now_s()) * 1000);
		if (ms <= 0 || poll(&pf, 1, ms) != 1) return -1;
		ssize_t n = read(t, buf + have, want - have);
		if (n <= 0) return -1;
		have += (size_t)n;
		if (have == 96) {
			*psn = get32(buf + 16);
			*plen = get32(buf + 56);
			if (*plen > sizeof(buf) - 96) return -1;
			want = 96 + *plen;
		}
	}
	return buf[3];
}

#define OP_WRITE 3
#define OP_ACK 7

static int t_tx_window(void)
{
	/* The requester keeps at most 256 KiB of WRITE payload unacknowledged (the rest waits
	 * in its send queue, not in the kernel's socket queues): a peer that acknowledges
	 * nothing sees four 64 KiB WRITEs of sixteen; each ACK lets exactly one more leave, and
	 * every WRITE completes once acknowledged. The peer is the test, on a plain socket.
	 * SOFTVERBS_TX_WINDOW (a multiple of 64 KiB here) moves the bound: window / 64 KiB
	 * WRITEs leave at first, all sixteen from 1 MiB on (tests/run.sh runs both). */
	const uint32_t K64 = 64 * 1024, FAKE_QPN = 0x5a5a5;
	const char *wenv = getenv("SOFTVERBS_TX_WINDOW");
	long window = wenv ? atol(wenv) : 256 * 1024;
	int first = window / K64 > 16 ? 16 : (int)(window / K64);
	CHECK(window > 0 && window % K64 == 0 && first >= 1, "SOFTVERBS_TX_WINDOW=%s: this test wants a multiple of 64 KiB", wenv);
	struct ep a;
	CHECK(!ep_init(&a, IBV_QPT_RC, RW, 16 * (size_t)K64, NULL), "setup");
	int l = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	CHECK(l >= 0 && !bind(l, (struct sockaddr *)&sa, sl) && !listen(l, 1) && !getsockname(l, (struct sockaddr *)&sa, &sl),
	      "listener");
	union ibv_gid gid;
	CHECK(!ibv_query_gid(a.ctx, 1, 0, &gid), "gid");
	CHECK(!cm_ops()->add_peer(a.ctx, &gid, FAKE_QPN, (struct sockaddr *)&sa, sizeof(sa)), "add_peer");
	CHECK(!to_init(&a, RW), "INIT");
	struct ibv_qp_attr ra = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_4096, .dest_qp_num = FAKE_QPN,
				  .rq_psn = 0, .max_dest_rd_atomic = 4, .min_rnr_timer = 12 };
	ra.ah_attr.is_global = 1;
	ra.ah_attr.port_num = 1;
	ra.ah_attr.grh.hop_limit = 64;
	ra.ah_attr.grh.dgid = gid;
	CHECK(!ibv_modify_qp(a.qp, &ra, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER), "RTR");
	CHECK(!to_rts(&a, 7), "RTS");
	for (int i = 0; i < 16; i++)
		CHECK(!post_send_op(&a, (uint64_t)i, IBV_WR_RDMA_WRITE, (size_t)i * K64, K64, 0x1000, 1, 0, IBV_SEND_SIGNALED),
		      "write %d", i);
	int t = accept(l, NULL, NULL);
	CHECK(t >= 0, "the requester connects");
	uint32_t psn, plen;
	CHECK(read_frame(t, 5, &psn, &plen) == OP_HELLO, "Hello first");
	int seen = 0;
	while (read_frame(t, 2, &psn, &plen) == OP_WRITE) {
		CHECK(psn == (uint32_t)seen && plen == K64, "WRITE %d: psn %u, %u bytes", seen, psn, plen);
		seen++;
	}
	CHECK(seen == first, "%d WRITEs of 64 KiB left unacknowledged, want %d (a %ld-byte window)", seen, first, window);
	struct ibv_wc wc[16];
	int done = 0;
	for (uint32_t acked = 0; acked < 16; acked++) {
		unsigned char ack[96];
		put_hdr(ack, OP_ACK, a.qp->qp_num, FAKE_QPN, acked, 0, 0, 0);
		CHECK(write(t, ack, sizeof(ack)) == (ssize_t)sizeof(ack), "ACK %u", acked);
		if (seen < 16) {
			CHECK(read_frame(t, 5, &psn, &plen) == OP_WRITE && psn == (uint32_t)seen, "the ACK of %u lets WRITE %d go", acked, seen);
			seen++;
			CHECK(read_frame(t, 0.1, &psn, &plen) == -1, "and no other: %d WRITEs out, %u acknowledged", seen, acked + 1);
		}
		done += poll_n_for(a.cq, wc + done, 1, 5);
		CHECK(done == (int)acked + 1 && wc[acked].status == IBV_WC_SUCCESS && wc[acked].wr_id == acked,
		      "WRITE %u completes when acknowledged", acked);
	}
	close(t);
	close(l);
	ep_fini(&a);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	g_only = argc > 1 ? argv[1] : NULL;
	RUN(t_device_and_port);
	RUN(t_rc_send_recv);
	RUN(t_rc_write_read);
	RUN(t_atomics);
	RUN(t_protection);
	RUN(t_rnr);
	RUN(t_err_flush_event);
	RUN(t_cq_event_semantics);
	RUN(t_inline_and_bad_input);
	RUN(t_ud);
	RUN(t_mcast);
	RUN(t_srq_and_async);
	RUN(t_registry_without_hook);
	RUN(t_kern_copies);
	RUN(t_hook_layout);
	RUN(t_garbage_frames);
	RUN(t_cq_overrun);
	RUN(t_bulk);
	RUN(t_inline_bulk);
	RUN(t_simultaneous_open);
	RUN(t_poll_then_idle);
	RUN(t_idle_no_spin);
	RUN(t_threads);
	RUN(t_rnr_parked_bounded);
	RUN(t_read_unread_bounded);
	RUN(t_read_parked_unread_bounded);
	RUN(t_tx_window);
	printf("verbs_test: %d passed, %d failed\n", g_pass, g_fail);
	return g_fail != 0;
}

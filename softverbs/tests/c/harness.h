/* Tiny helpers shared by the softverbs C tests: two RC/UD endpoints over the soft
 * device, connected with the softverbs CM hook (dlsym "softverbs_cm_ops"). */
#ifndef SV_HARNESS_H
#define SV_HARNESS_H
#include <dlfcn.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "../../include/softverbs.h"

static int g_pass, g_fail;
/* argv[1] of a test program: run only the test of that name (NULL: all). */
static const char *g_only;
#define CHECK(cond, ...) do { if (!(cond)) { printf("  at %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); return 1; } } while (0)
#define RUN(fn) do { if (g_only && strcmp(g_only, #fn)) break; int _r = fn(); if (_r) { g_fail++; printf("FAIL %s\n", #fn); } else { g_pass++; printf("PASS %s\n", #fn); } fflush(stdout); } while (0)

struct ep {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char *buf;
	size_t len;
};

static const struct softverbs_cm_ops *cm_ops(void)
{
	const struct softverbs_cm_ops *(*get)(void) =
		(const struct softverbs_cm_ops *(*)(void))dlsym(RTLD_DEFAULT, "softverbs_cm_ops");
	return get ? get() : NULL;
}

static struct ibv_context *open_soft(void)
{
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	if (!l || n < 1)
		return NULL;
	struct ibv_context *c = ibv_open_device(l[0]);
	ibv_free_device_list(l);
	return c;
}

/* Inline data ep_init's QPs ask for. */
static uint32_t ep_inline;

static int ep_init(struct ep *e, enum ibv_qp_type t, int access, size_t len, struct ibv_srq *srq)
{
	memset(e, 0, sizeof(*e));
	e->ctx = open_soft();
	if (!e->ctx) return -1;
	e->pd = ibv_alloc_pd(e->ctx);
	e->ch = ibv_create_comp_channel(e->ctx);
	e->cq = ibv_create_cq(e->ctx, 64, e, e->ch, 0);
	e->len = len;
	e->buf = aligned_alloc(64, len);
	memset(e->buf, 0, len);
	e->mr = ibv_reg_mr(e->pd, e->buf, len, access);
	struct ibv_qp_init_attr ia = { .send_cq = e->cq, .recv_cq = e->cq, .srq = srq,
		.cap = { .max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 4, .max_recv_sge = 4,
			 .max_inline_data = ep_inline },
		.qp_type = t, .sq_sig_all = 0 };
	e->qp = ibv_create_qp(e->pd, &ia);
	return (e->pd && e->ch && e->cq && e->mr && e->qp) ? 0 : -1;
}

static int ep_init_ctx(struct ep *e, struct ibv_context *ctx, struct ibv_pd *pd, enum ibv_qp_type t,
		       size_t len, struct ibv_srq *srq)
{
	memset(e, 0, sizeof(*e));
	e->ctx = ctx;
	e->pd = pd;
	e->cq = ibv_create_cq(ctx, 64, e, NULL, 0);
	e->len = len;
	e->buf = aligned_alloc(64, len);
	memset(e->buf, 0, len);
	e->mr = ibv_reg_mr(pd, e->buf, len, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp_init_attr ia = { .send_cq = e->cq, .recv_cq = e->cq, .srq = srq,
		.cap = { .max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 4, .max_recv_sge = 4 },
		.qp_type = t };
	e->qp = ibv_create_qp(pd, &ia);
	return (e->cq && e->mr && e->qp) ? 0 : -1;
}

static void ep_fini(struct ep *e)
{
	if (e->qp) ibv_destroy_qp(e->qp);
	if (e->mr) ibv_dereg_mr(e->mr);
	if (e->cq) ibv_destroy_cq(e->cq);
	if (e->ch) ibv_destroy_comp_channel(e->ch);
	if (e->pd) ibv_dealloc_pd(e->pd);
	if (e->ctx) ibv_close_device(e->ctx);
	free(e->buf);
	memset(e, 0, sizeof(*e));
}

/* Tell `to`'s context where `from`'s QP lives (what the soft CM does). */
static int publish(struct ep *from, struct ep *to)
{
	const struct softverbs_cm_ops *ops = cm_ops();
	union ibv_gid gid;
	struct sockaddr_storage ss;
	if (!ops || ibv_query_gid(from->ctx, 1, 0, &gid)) return -1;
	if (ops->qp_endpoint(from->qp, &gid, &ss)) return -1;
	socklen_t len = ss.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
	return ops->add_peer(to->ctx, &gid, from->qp->qp_num, (struct sockaddr *)&ss, len);
}

static int to_init(struct ep *e, int access)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
				 .qp_access_flags = access, .qkey = 0x11111111 };
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	mask |= e->qp->qp_type == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS;
	return ibv_modify_qp(e->qp, &a, mask);
}

static int to_rtr(struct ep *e, struct ep *peer, uint8_t min_rnr_timer)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_4096,
				 .dest_qp_num = peer->qp->qp_num, .rq_psn = 0, .max_dest_rd_atomic = 4,
				 .min_rnr_timer = min_rnr_timer };
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.hop_limit = 64;
	if (ibv_query_gid(peer->ctx, 1, 0, &a.ah_attr.grh.dgid)) return -1;
	return ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static int to_rts(struct ep *e, uint8_t rnr_retry)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTS, .sq_psn = 0, .timeout = 14, .retry_cnt = 7,
				 .rnr_retry = rnr_retry, .max_rd_atomic = 4 };
	return ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			     IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* Two connected RC endpoints. */
/* Connects two RC endpoints whose QPs exist: each learns the other, then INIT, RTR, RTS. */
static int rc_connect(struct ep *a, struct ep *b, int access, uint8_t rnr_retry, uint8_t min_rnr)
{
	if (publish(a, b) || publish(b, a)) return -2;
	if (to_init(a, access) || to_init(b, access)) return -3;
	if (to_rtr(a, b, min_rnr) || to_rtr(b, a, min_rnr)) return -4;
	if (to_rts(a, rnr_retry) || to_rts(b, rnr_retry)) return -5;
	return 0;
}

static int rc_pair(struct ep *a, struct ep *b, int access, uint8_t rnr_retry, uint8_t min_rnr)
{
	if (ep_init(a, IBV_QPT_RC, access, 1 << 16, NULL) || ep_init(b, IBV_QPT_RC, access, 1 << 16, NULL))
		return -1;
	return rc_connect(a, b, access, rnr_retry, min_rnr);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Polls until `n` completions arrived (or 5 s). Returns how many. */
/* Up to n completions within `secs` seconds. */
static int poll_n_for(struct ibv_cq *cq, struct ibv_wc *wc, int n, double secs)
{
	int got = 0;
	double end = now_s() + secs;
	while (got < n && now_s() < end) {
		int r = ibv_poll_cq(cq, n - got, wc + got);
		if (r < 0) return r;
		got += r;
		if (!r) usleep(200);
	}
	return got;
}

static int poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int n)
{
	return poll_n_for(cq, wc, n, 5);
}

static int post_recv(struct ep *e, uint64_t id, size_t off, uint32_t len)
{
	struct ibv_sge s = { .addr = (uintptr_t)e->buf + off, .length = len, .lkey = e->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &s, .num_sge = 1 }, *bad;
	return ibv_post_recv(e->qp, &wr, &bad);
}

static int post_send_op(struct ep *e, uint64_t id, enum ibv_wr_opcode op, size_t off, uint32_t len,
			uint64_t raddr, uint32_t rkey, uint32_t imm, int flags)
{
	struct ibv_sge s = { .addr = (uintptr_t)e->buf + off, .length = len, .lkey = e->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &s, .num_sge = len ? 1 : 0, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED | flags, .imm_data = imm }, *bad;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(e->qp, &wr, &bad);
}
#endif

/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * rdmacm-rs's own rdma_verbs.h: verbs conveniences bound to an rdma_cm_id.
 * Source-compatible with rdma-core's header. Apart from the SRQ calls these
 * are static inline, so they are compiled into applications and work only on
 * the public rdma_cm_id fields (pd, qp, srq, send_cq, recv_cq, *_cq_channel).
 */
#ifndef RDMA_VERBS_H
#define RDMA_VERBS_H

#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Verbs return an errno value; these helpers return -1 and set errno. */
static inline int rdma_seterrno(int ret)
{
	if (ret == 0)
		return 0;
	errno = ret;
	return -1;
}

/* Shared receive queues (exported by the library). */
int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd,
		    struct ibv_srq_init_attr *attr);
int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr);
void rdma_destroy_srq(struct rdma_cm_id *id);

/* Memory registration on the id's protection domain. */
static inline struct ibv_mr *
rdma_reg_msgs(struct rdma_cm_id *id, void *addr, size_t length)
{
	return ibv_reg_mr(id->pd, addr, length, IBV_ACCESS_LOCAL_WRITE);
}

static inline struct ibv_mr *
rdma_reg_read(struct rdma_cm_id *id, void *addr, size_t length)
{
	return ibv_reg_mr(id->pd, addr, length,
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
}

static inline struct ibv_mr *
rdma_reg_write(struct rdma_cm_id *id, void *addr, size_t length)
{
	return ibv_reg_mr(id->pd, addr, length,
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
}

static inline int rdma_dereg_mr(struct ibv_mr *mr)
{
	return rdma_seterrno(ibv_dereg_mr(mr));
}

/*
 * Work requests are zeroed first so fields the operation does not use never
 * carry stack garbage into the provider.
 */

/* Receives go to the id's SRQ when it has one. */
static inline int
rdma_post_recvv(struct rdma_cm_id *id, void *context, struct ibv_sge *sgl,
		int nsge)
{
	struct ibv_recv_wr wr;
	struct ibv_recv_wr *bad_wr;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = (uint64_t)(uintptr_t)context;
	wr.next = NULL;
	wr.sg_list = sgl;
	wr.num_sge = nsge;

	if (id->srq != NULL)
		return rdma_seterrno(ibv_post_srq_recv(id->srq, &wr, &bad_wr));
	return rdma_seterrno(ibv_post_recv(id->qp, &wr, &bad_wr));
}

static inline int
rdma_post_sendv(struct rdma_cm_id *id, void *context, struct ibv_sge *sgl,
		int nsge, int flags)
{
	struct ibv_send_wr wr;
	struct ibv_send_wr *bad_wr;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = (uint64_t)(uintptr_t)context;
	wr.next = NULL;
	wr.sg_list = sgl;
	wr.num_sge = nsge;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = (unsigned int)flags;

	return rdma_seterrno(ibv_post_send(id->qp, &wr, &bad_wr));
}

static inline int
rdma_post_readv(struct rdma_cm_id *id, void *context, struct ibv_sge *sgl,
		int nsge, int flags, uint64_t remote_addr, uint32_t rkey)
{
	struct ibv_send_wr wr;
	struct ibv_send_wr *bad_wr;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = (uint64_t)(uintptr_t)context;
	wr.next = NULL;
	wr.sg_list = sgl;
	wr.num_sge = nsge;
	wr.opcode = IBV_WR_RDMA_READ;
	wr.send_flags = (unsigned int)flags;
	wr.wr.rdma.remote_addr = remote_addr;
	wr.wr.rdma.rkey = rkey;

	return rdma_seterrno(ibv_post_send(id->qp, &wr, &bad_wr));
}

static inline int
rdma_post_writev(struct rdma_cm_id *id, void *context, struct ibv_sge *sgl,
		 int nsge, int flags, uint64_t remote_addr, uint32_t rkey)
{
	struct ibv_send_wr wr;
	struct ibv_send_wr *bad_wr;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = (uint64_t)(uintptr_t)context;
	wr.next = NULL;
	wr.sg_list = sgl;
	wr.num_sge = nsge;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = (unsigned int)flags;
	wr.wr.rdma.remote_addr = remote_addr;
	wr.wr.rdma.rkey = rkey;

	return rdma_seterrno(ibv_post_send(id->qp, &wr, &bad_wr));
}

/* Single-buffer forms. A NULL mr (lkey 0) is allowed only where inline data is possible. */
static inline int
rdma_post_recv(struct rdma_cm_id *id, void *context, void *addr,
	       size_t length, struct ibv_mr *mr)
{
	struct ibv_sge sge;

	/* the whole buffer must lie inside the registration */
	assert((uintptr_t)addr >= (uintptr_t)mr->addr &&
	       (uintptr_t)addr + length <= (uintptr_t)mr->addr + mr->length);
	sge.addr = (uint64_t)(uintptr_t)addr;
	sge.length = (uint32_t)length;
	sge.lkey = mr->lkey;

	return rdma_post_recvv(id, context, &sge, 1);
}

static inline int
rdma_post_send(struct rdma_cm_id *id, void *context, void *addr,
	       size_t length, struct ibv_mr *mr, int flags)
{
	struct ibv_sge sge;

	sge.addr = (uint64_t)(uintptr_t)addr;
	sge.length = (uint32_t)length;
	sge.lkey = mr != NULL ? mr->lkey : 0;

	return rdma_post_sendv(id, context, &sge, 1, flags);
}

static inline int
rdma_post_read(struct rdma_cm_id *id, void *context, void *addr,
	       size_t length, struct ibv_mr *mr, int flags,
	       uint64_t remote_addr, uint32_t rkey)
{
	struct ibv_sge sge;

	/* the local side of a read is always written by the HCA: mr required */
	sge.addr = (uint64_t)(uintptr_t)addr;
	sge.length = (uint32_t)length;
	sge.lkey = mr->lkey;

	return rdma_post_readv(id, context, &sge, 1, flags, remote_addr, rkey);
}

static inline int
rdma_post_write(struct rdma_cm_id *id, void *context, void *addr,
		size_t length, struct ibv_mr *mr, int flags,
		uint64_t remote_addr, uint32_t rkey)
{
	struct ibv_sge sge;

	sge.addr = (uint64_t)(uintptr_t)addr;
	sge.length = (uint32_t)length;
	sge.lkey = mr != NULL ? mr->lkey : 0;

	return rdma_post_writev(id, context, &sge, 1, flags, remote_addr, rkey);
}

/* UD send; the CM gives every UD QP and multicast group RDMA_UDP_QKEY. */
static inline int
rdma_post_ud_send(struct rdma_cm_id *id, void *context, void *addr,
		  size_t length, struct ibv_mr *mr, int flags,
		  struct ibv_ah *ah, uint32_t remote_qpn)
{
	struct ibv_sge sge;
	struct ibv_send_wr wr;
	struct ibv_send_wr *bad_wr;

	sge.addr = (uint64_t)(uintptr_t)addr;
	sge.length = (uint32_t)length;
	sge.lkey = mr != NULL ? mr->lkey : 0;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = (uint64_t)(uintptr_t)context;
	wr.next = NULL;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = (unsigned int)flags;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = remote_qpn;
	wr.wr.ud.remote_qkey = RDMA_UDP_QKEY;

	return rdma_seterrno(ibv_post_send(id->qp, &wr, &bad_wr));
}

/*
 * Blocking completion retrieval: poll, arm, poll again (a completion that
 * arrived before the arm raises no event), then sleep on the channel.
 * Only valid for CQs the library created for this id (cq_context == id).
 * Like upstream: a negative poll result is stored in errno as is, and a
 * failed ibv_get_cq_event() result is returned unchanged.
 */
static inline int rdma_get_send_comp(struct rdma_cm_id *id, struct ibv_wc *wc)
{
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	int n;

	for (;;) {
		n = ibv_poll_cq(id->send_cq, 1, wc);
		if (n != 0)
			break;
		n = ibv_req_notify_cq(id->send_cq, 0);
		if (n != 0)
			return rdma_seterrno(n);
		n = ibv_poll_cq(id->send_cq, 1, wc);
		if (n != 0)
			break;
		n = ibv_get_cq_event(id->send_cq_channel, &ev_cq, &ev_ctx);
		if (n != 0)
			return n;
		assert(ev_cq == id->send_cq && ev_ctx == (void *)id);
		ibv_ack_cq_events(id->send_cq, 1);
	}
	return n < 0 ? rdma_seterrno(n) : n;
}

static inline int rdma_get_recv_comp(struct rdma_cm_id *id, struct ibv_wc *wc)
{
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	int n;

	for (;;) {
		n = ibv_poll_cq(id->recv_cq, 1, wc);
		if (n != 0)
			break;
		n = ibv_req_notify_cq(id->recv_cq, 0);
		if (n != 0)
			return rdma_seterrno(n);
		n = ibv_poll_cq(id->recv_cq, 1, wc);
		if (n != 0)
			break;
		n = ibv_get_cq_event(id->recv_cq_channel, &ev_cq, &ev_ctx);
		if (n != 0)
			return n;
		assert(ev_cq == id->recv_cq && ev_ctx == (void *)id);
		ibv_ack_cq_events(id->recv_cq, 1);
	}
	return n < 0 ? rdma_seterrno(n) : n;
}

#ifdef __cplusplus
}
#endif

#endif /* RDMA_VERBS_H */

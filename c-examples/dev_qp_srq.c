/* dev-example: QPs and SRQs made through the CM
 *
 * rdma_create_qp(3): "If a QP is created... the rdma_cm_id will be bound to
 * the QP"; rdma_create_srq(3): an SRQ "associated with the rdma_cm_id"; a
 * QP created afterwards without an SRQ of its own uses the id's (upstream's
 * rdma_create_qp_ex fills attr->srq from id->srq).  Each case runs in its own
 * forked process and prints what it observed; the lines must equal what
 * rdma-core's librdmacm prints on the same device (c-examples/expected/).
 *
 *   dev_qp_srq ADDR [PORT=7512]
 */
#include "dev.h"
#include <rdma/rdma_verbs.h>

static struct rdma_event_channel *ch;

/* "what: ret R errno E" (errno only for a failure). */
static void say(const char *what, int r, int e)
{
	if (r)
		printf("ok %s: ret %d errno %s\n", what, r, dev_errno_name(e));
	else
		printf("ok %s: ret 0\n", what);
}

#define SAY(call, what)                                                        \
	do {                                                                   \
		int r_, e_;                                                    \
		errno = 0;                                                     \
		r_ = (call);                                                   \
		e_ = errno;                                                    \
		say(what, r_, e_);                                             \
	} while (0)

static struct rdma_cm_id *routed_id(void)
{
	struct rdma_cm_id *id = NULL;

	if (DEV_CALL(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), "rdma_create_id") ||
	    DEV_CALL(rdma_resolve_addr(id, NULL, dev_sa(), DEV_RESOLVE_MS), "rdma_resolve_addr") ||
	    dev_expect(ch, DEV_ACTIVE, RDMA_CM_EVENT_ADDR_RESOLVED) ||
	    DEV_CALL(rdma_resolve_route(id, DEV_RESOLVE_MS), "rdma_resolve_route") ||
	    dev_expect(ch, DEV_ACTIVE, RDMA_CM_EVENT_ROUTE_RESOLVED))
		exit(check_done());
	return id;
}

static void qp_attr(struct ibv_qp_init_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->qp_type = IBV_QPT_RC;
	a->cap.max_send_wr = 4;
	a->cap.max_recv_wr = 4;
	a->cap.max_send_sge = 1;
	a->cap.max_recv_sge = 1;
}

static void case_qp_twice(void)
{
	struct rdma_cm_id *id = routed_id();
	struct ibv_qp_init_attr a;
	struct ibv_qp *first;

	qp_attr(&a);
	SAY(rdma_create_qp(id, NULL, &a), "rdma_create_qp (library CQs, the id's PD)");
	CHECK(id->qp && id->pd && id->send_cq && id->recv_cq, "the id holds the QP, PD and CQs", "missing");
	first = id->qp;
	qp_attr(&a);
	SAY(rdma_create_qp(id, NULL, &a), "rdma_create_qp again");
	CHECK(id->qp == first, "the id keeps its first QP", "replaced");
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
}

static void case_own_pd(void)
{
	struct rdma_cm_id *id = routed_id();
	struct ibv_qp_init_attr a;
	struct ibv_pd *pd, *lib_pd = id->pd;
	struct ibv_cq *cq;

	pd = ibv_alloc_pd(id->verbs);
	cq = pd ? ibv_create_cq(id->verbs, 8, NULL, NULL, 0) : NULL;
	if (!cq) {
		check(0, "ibv_alloc_pd/ibv_create_cq: errno %s", dev_errno_name(errno));
		exit(check_done());
	}
	qp_attr(&a);
	a.send_cq = a.recv_cq = cq;
	SAY(rdma_create_qp(id, pd, &a), "rdma_create_qp on the application's PD and CQ");
	if (id->qp) {
		printf("ok the QP is on that PD: %s\n", id->qp->pd == pd ? "yes" : "no");
		printf("ok id->pd afterwards: %s\n", id->pd == pd ? "the application's PD" :
		       id->pd == lib_pd ? "the library's PD" : "other");
		rdma_destroy_qp(id);
		printf("ok after rdma_destroy_qp: id->send_cq %s, id->recv_cq %s\n",
		       id->send_cq ? "set" : "NULL", id->recv_cq ? "set" : "NULL");
	}
	rdma_destroy_id(id);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
}

static void case_srq_then_qp(void)
{
	struct rdma_cm_id *id = routed_id();
	struct ibv_srq_init_attr sa;
	struct ibv_qp_init_attr a;

	memset(&sa, 0, sizeof(sa));
	sa.attr.max_wr = 8;
	sa.attr.max_sge = 1;
	SAY(rdma_create_srq(id, NULL, &sa), "rdma_create_srq (the id's PD)");
	CHECK(id->srq != NULL, "the id holds the SRQ", "id->srq NULL");
	if (id->srq)
		printf("ok the SRQ is on the id's PD: %s\n", id->srq->pd == id->pd ? "yes" : "no");
	qp_attr(&a);
	SAY(rdma_create_qp(id, NULL, &a), "rdma_create_qp without an SRQ of its own");
	if (id->qp)
		printf("ok the QP uses the id's SRQ: %s\n", id->qp->srq && id->qp->srq == id->srq ? "yes" : "no");
	if (id->qp)
		rdma_destroy_qp(id);
	rdma_destroy_srq(id);
	CHECK(id->srq == NULL, "rdma_destroy_srq clears id->srq", "still set");
	rdma_destroy_id(id);
}

static void case_srq_ex(void)
{
	struct rdma_cm_id *id = routed_id();
	struct ibv_srq_init_attr_ex ax;

	memset(&ax, 0, sizeof(ax));
	ax.attr.max_wr = 8;
	ax.attr.max_sge = 1;
	ax.comp_mask = IBV_SRQ_INIT_ATTR_PD;
	ax.pd = id->pd;
	SAY(rdma_create_srq_ex(id, &ax), "rdma_create_srq_ex without IBV_SRQ_INIT_ATTR_TYPE");
	memset(&ax, 0, sizeof(ax));
	ax.attr.max_wr = 8;
	ax.attr.max_sge = 1;
	ax.comp_mask = IBV_SRQ_INIT_ATTR_TYPE;
	ax.srq_type = IBV_SRQT_BASIC;
	SAY(rdma_create_srq_ex(id, &ax), "rdma_create_srq_ex basic, no PD given");
	printf("ok after it: id->srq %s, the PD filled in %s\n", id->srq ? "set" : "NULL",
	       (ax.comp_mask & IBV_SRQ_INIT_ATTR_PD) && ax.pd == id->pd ? "yes" : "no");
	if (id->srq)
		rdma_destroy_srq(id);
	memset(&ax, 0, sizeof(ax));
	ax.attr.max_wr = 8;
	ax.attr.max_sge = 1;
	ax.comp_mask = IBV_SRQ_INIT_ATTR_TYPE;
	ax.srq_type = IBV_SRQT_XRC;
	SAY(rdma_create_srq_ex(id, &ax), "rdma_create_srq_ex XRC, no XRC domain or CQ given");
	if (id->srq)
		rdma_destroy_srq(id);
	rdma_destroy_id(id);
}

/* An RC block with small caps and nothing else set. */
static void qpx_attr(struct ibv_qp_init_attr_ex *ax)
{
	memset(ax, 0, sizeof(*ax));
	ax->qp_type = IBV_QPT_RC;
	ax->cap.max_send_wr = 4;
	ax->cap.max_recv_wr = 4;
	ax->cap.max_send_sge = 1;
	ax->cap.max_recv_sge = 1;
}

static void case_qp_ex(void)
{
	struct rdma_cm_id *id = routed_id();
	struct ibv_qp_init_attr_ex ax;

	qpx_attr(&ax);
	ax.comp_mask = IBV_QP_INIT_ATTR_CREATE_FLAGS;
	SAY(rdma_create_qp_ex(id, &ax), "rdma_create_qp_ex, no PD, create flags 0");
	printf("ok after it: the PD filled in %s\n", (ax.comp_mask & IBV_QP_INIT_ATTR_PD) && ax.pd == id->pd ? "yes" : "no");
	if (id->qp)
		rdma_destroy_qp(id);
	qpx_attr(&ax);
	ax.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	ax.pd = id->pd;
	ax.send_ops_flags = IBV_QP_EX_WITH_SEND;
	SAY(rdma_create_qp_ex(id, &ax), "rdma_create_qp_ex with send_ops_flags (ibv_wr_* API)");
	if (id->qp) {
		printf("ok ibv_qp_to_qp_ex: %s\n", ibv_qp_to_qp_ex(id->qp) ? "a qp_ex" : "NULL");
		rdma_destroy_qp(id);
	}
	qpx_attr(&ax);
	ax.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
	ax.pd = id->pd;
	ax.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;
	SAY(rdma_create_qp_ex(id, &ax), "rdma_create_qp_ex with BLOCK_SELF_MCAST_LB");
	if (id->qp)
		rdma_destroy_qp(id);
	rdma_destroy_id(id);
}

static const struct dev_case cases[] = {
	{ "qp_twice", case_qp_twice },
	{ "own_pd", case_own_pd },
	{ "srq_then_qp", case_srq_then_qp },
	{ "srq_ex", case_srq_ex },
	{ "qp_ex", case_qp_ex },
};

int main(int argc, char **argv)
{
	dev_args(argc, argv, 7512);
	watchdog(120);
	return dev_run_cases(cases, sizeof(cases) / sizeof(cases[0]), &ch);
}

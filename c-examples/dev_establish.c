/* dev-example: CONNECT_RESPONSE and rdma_establish for an id without a QP
 *
 * rdma_get_cm_event(3): CONNECT_RESPONSE "Generated on the active side to
 * notify the user of a successful response to a connection request.  It is
 * only generated on rdma_cm_id's that do not have a QP associated with
 * them."  rdma_establish(3): "If a QP has not been created on the
 * rdma_cm_id, this function should be called by the active side to complete
 * the connection, after getting connect response event.  This will trigger
 * a connection established event on the passive side."  rdma_connect(3):
 * qp_num "Specifies the QP number associated with the connection."
 *
 * The active side creates its own QP with ibv_create_qp, drives it with
 * rdma_init_qp_attr + ibv_modify_qp (INIT before connecting, RTR and RTS
 * after CONNECT_RESPONSE), passes conn_param.qp_num, then rdma_establish;
 * messages flow both ways; the disconnect completes on both sides.
 *
 *   dev_establish ADDR [PORT=7506]
 */
#include "dev.h"

static int move_qp(struct rdma_cm_id *id, struct ibv_qp *qp, enum ibv_qp_state state,
		   const char *name, struct ibv_qp_attr *out)
{
	struct ibv_qp_attr a;
	int mask = 0, r;
	char what[96];

	memset(&a, 0, sizeof(a));
	a.qp_state = state;
	errno = 0;
	r = rdma_init_qp_attr(id, &a, &mask);
	snprintf(what, sizeof(what), "active: rdma_init_qp_attr(%s) returns 0", name);
	CHECK(r == 0, what, "ret %d errno %s", r, dev_errno_name(errno));
	if (r)
		return -1;
	snprintf(what, sizeof(what), "active: rdma_init_qp_attr(%s) mask includes IBV_QP_STATE", name);
	CHECK(mask & IBV_QP_STATE, what, "mask 0x%x", mask);
	r = ibv_modify_qp(qp, &a, mask);
	snprintf(what, sizeof(what), "active: ibv_modify_qp to %s with those attributes", name);
	CHECK(r == 0, what, "ret %d (%s)", r, dev_errno_name(r));
	if (out)
		*out = a;
	return r ? -1 : 0;
}

int main(int argc, char **argv)
{
	struct dev_pair p;
	struct dev_qp own;
	struct ibv_qp_init_attr qa;
	struct ibv_qp_attr rtr;
	struct ibv_wc wc;
	struct rdma_conn_param cp;
	struct rdma_cm_event *ev;
	int r, mask;

	memset(&p, 0, sizeof(p));
	memset(&own, 0, sizeof(own));
	dev_args(argc, argv, 7506);
	watchdog(60);
	if (dev_listen(&p))
		return check_done();
	p.ach = dev_channel();
	if (dev_resolve(&p))
		goto out;
	if (p.active->verbs && p.active->verbs->device->transport_type == IBV_TRANSPORT_IWARP) {
		/* iw_cm moves the QP to RTS itself and reports ESTABLISHED directly */
		dev_teardown(&p);
		skip("iWARP device: the kernel delivers no CONNECT_RESPONSE (IB/RoCE only)");
	}
	if (dev_pd_cq(p.active, &own, "active"))
		goto out;
	dev_qp_attr(&qa, own.cq);
	own.qp = ibv_create_qp(own.pd, &qa);
	if (!own.qp) {
		check(0, "active: ibv_create_qp: errno %s", dev_errno_name(errno));
		goto out;
	}
	CHECK(p.active->qp == NULL, "active: the id has no QP (app-owned QP)", "id->qp set");
	if (move_qp(p.active, own.qp, IBV_QPS_INIT, "INIT", NULL))
		goto out;
	if (dev_post_recv(own.qp, &own))
		check(0, "active: ibv_post_recv: errno %s", dev_errno_name(errno));

	dev_conn_param(&cp, "dev_establish req");
	cp.qp_num = own.qp->qp_num;
	if (DEV_CALL(rdma_connect(p.active, &cp), "active: rdma_connect with conn_param.qp_num"))
		goto out;
	ev = dev_get_request(&p, "dev_establish req");
	if (!ev)
		goto out;
	CHECK(ev->param.conn.qp_num == own.qp->qp_num,
	      "passive: CONNECT_REQUEST qp_num is the app's QP number", "differs");
	if (dev_rdma_qp(p.child, &p.pq, "passive")) {
		dev_ack(ev);
		goto out;
	}
	dev_post_recv(p.child->qp, &p.pq);
	dev_conn_param(&cp, "dev_establish rep");
	r = DEV_CALL(rdma_accept(p.child, &cp), "passive: rdma_accept");
	dev_ack(ev);
	if (r)
		goto out;

	ev = dev_get(p.ach, DEV_ACTIVE, RDMA_CM_EVENT_CONNECT_RESPONSE, 0);
	if (!ev || ev->event != RDMA_CM_EVENT_CONNECT_RESPONSE) {
		dev_ack(ev);
		goto out;
	}
	dev_check_pdata(DEV_ACTIVE, "CONNECT_RESPONSE", ev->param.conn.private_data,
			ev->param.conn.private_data_len, "dev_establish rep");
	CHECK(ev->param.conn.qp_num == p.child->qp->qp_num,
	      "active: CONNECT_RESPONSE qp_num is the passive QP number", "differs");
	dev_ack(ev);
	printf("passive: events before rdma_establish:\n");
	if (!dev_drain(p.pch, DEV_PASSIVE, 500))
		printf("passive: (none within 500 ms)\n");
	if (move_qp(p.active, own.qp, IBV_QPS_RTR, "RTR", &rtr))
		goto out;
	mask = 0;
	CHECK(rtr.dest_qp_num == p.child->qp->qp_num,
	      "active: rdma_init_qp_attr(RTR) dest_qp_num is the passive QP", "differs");
	if (move_qp(p.active, own.qp, IBV_QPS_RTS, "RTS", NULL))
		goto out;
	errno = 0;
	r = rdma_establish(p.active);
	CHECK(r == 0, "active: rdma_establish returns 0", "ret %d errno %s", r, dev_errno_name(errno));
	dev_expect(p.pch, DEV_PASSIVE, RDMA_CM_EVENT_ESTABLISHED);
	printf("active: events after rdma_establish:\n");
	if (!dev_drain(p.ach, DEV_ACTIVE, 500))
		printf("active: (none within 500 ms)\n");

	/* traffic both ways over the app-owned QP */
	if (dev_post_send(own.qp, &own, "from app qp") == 0) {
		CHECK(dev_poll_cq(&own, 5000, &wc) == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND,
		      "active: send on the app QP completes", "status %d", (int)wc.status);
		CHECK(dev_poll_cq(&p.pq, 5000, &wc) == IBV_WC_SUCCESS && !strcmp(p.pq.buf, "from app qp"),
		      "passive: receives it", "status %d", (int)wc.status);
	}
	if (dev_post_send(p.child->qp, &p.pq, "to app qp") == 0) {
		CHECK(dev_poll_cq(&p.pq, 5000, &wc) == IBV_WC_SUCCESS, "passive: send completes",
		      "status %d", (int)wc.status);
		CHECK(dev_poll_cq(&own, 5000, &wc) == IBV_WC_SUCCESS && !strcmp(own.buf, "to app qp"),
		      "active: the app QP receives the reply", "status %d", (int)wc.status);
	}

	if (!DEV_CALL(rdma_disconnect(p.active), "active: rdma_disconnect")) {
		dev_expect(p.pch, DEV_PASSIVE, RDMA_CM_EVENT_DISCONNECTED);
		DEV_CALL(rdma_disconnect(p.child), "passive: rdma_disconnect");
		dev_expect(p.ach, DEV_ACTIVE, RDMA_CM_EVENT_DISCONNECTED);
	}
out:
	(void)mask;
	dev_seq_print(DEV_ACTIVE);
	dev_seq_print(DEV_PASSIVE);
	dev_free_qp(NULL, &own);
	dev_teardown(&p);
	return check_done();
}

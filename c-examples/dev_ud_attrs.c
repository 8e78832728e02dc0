/* dev-example: what a UD (RDMA_PS_UDP) exchange gives the application
 *
 * rdma_get_cm_event(3): for unreliable datagram port spaces the event's
 * param.ud carries "ah_attr: Address information needed to send data to the
 * remote endpoint(s)", "qp_num: QP number of the remote endpoint or
 * multicast group" and "qkey: QKey needed to send data to the remote
 * endpoint(s)"; rdma_create_qp(3) moves a UD QP to RTS itself.  udaddy and
 * mckey build their address handles from these values, so each is printed
 * (values that differ per run, as QP numbers, printed as relations); the
 * lines must equal what rdma-core's librdmacm prints on the same device.
 *
 *   dev_ud_attrs ADDR [PORT=7516]
 */
#include "dev.h"

static const char *yes(int c)
{
	return c ? "yes" : "no";
}

static const char *qp_state_name(int s)
{
	static const char *n[] = { "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR" };

	return s >= 0 && s <= 6 ? n[s] : "?";
}

static void show_ud_qp(const char *who, struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	memset(&a, 0, sizeof(a));
	if (ibv_query_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY |
			 IBV_QP_SQ_PSN, &ia)) {
		printf("%s: ibv_query_qp failed\n", who);
		return;
	}
	printf("%s: qp type %s, state %s, pkey_index %u, port_num %u, qkey 0x%x, sq_psn %u\n", who,
	       qp->qp_type == IBV_QPT_UD ? "UD" : "other", qp_state_name(a.qp_state), a.pkey_index,
	       a.port_num, a.qkey, a.sq_psn);
}

static void show_ud(const char *who, const struct rdma_ud_param *u, uint32_t peer_qpn)
{
	const struct ibv_ah_attr *ah = &u->ah_attr;

	printf("%s: ud qp_num is the peer's %s, qkey 0x%x, private_data_len %u\n", who,
	       yes(u->qp_num == peer_qpn), u->qkey, u->private_data_len);
	printf("%s: ud ah is_global %u, sl %u, src_path_bits %u, static_rate %u, port_num %u\n", who,
	       ah->is_global, ah->sl, ah->src_path_bits, ah->static_rate, ah->port_num);
	printf("%s: ud ah grh sgid_index %u, hop_limit %u, traffic_class %u, flow_label %s\n", who,
	       ah->grh.sgid_index, ah->grh.hop_limit, ah->grh.traffic_class,
	       ah->grh.flow_label ? "set" : "0");
}

static int ud_qp(struct rdma_cm_id *id, struct dev_qp *q, const char *side)
{
	struct ibv_qp_init_attr a;
	if (dev_pd_cq(id, q, side))
		return -1;
	dev_qp_attr(&a, q->cq);
	a.qp_type = IBV_QPT_UD;
	if (rdma_create_qp(id, q->pd, &a)) {
		/* iWARP has no UD QPs: the same answer is expected of both libraries */
		printf("%s: rdma_create_qp (UD): errno %s\n", side, dev_errno_name(errno));
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct dev_pair p;
	struct rdma_conn_param cp;
	struct rdma_cm_event *ev;
	struct ibv_qp_attr a;
	int mask = 0;
	static char pdata[] = "ud";
	uint8_t tos = 0x60;

	memset(&p, 0, sizeof(p));
	dev_args(argc, argv, 7516);
	watchdog(60);
	p.pch = dev_channel();
	p.ach = dev_channel();
	if (DEV_CALL(rdma_create_id(p.pch, &p.listen, NULL, RDMA_PS_UDP), "passive: rdma_create_id") ||
	    DEV_CALL(rdma_bind_addr(p.listen, dev_sa()), "passive: rdma_bind_addr") ||
	    DEV_CALL(rdma_listen(p.listen, 4), "passive: rdma_listen"))
		return check_done();
	if (DEV_CALL(rdma_create_id(p.ach, &p.active, NULL, RDMA_PS_UDP), "active: rdma_create_id"))
		return check_done();
	/* the TOS reaches the address handle of the ESTABLISHED event (udaddy -t) */
	if (DEV_CALL(rdma_set_option(p.active, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos)),
		     "active: rdma_set_option(TOS)") ||
	    DEV_CALL(rdma_resolve_addr(p.active, NULL, dev_sa(), DEV_RESOLVE_MS), "active: rdma_resolve_addr") ||
	    dev_expect(p.ach, DEV_ACTIVE, RDMA_CM_EVENT_ADDR_RESOLVED) ||
	    DEV_CALL(rdma_resolve_route(p.active, DEV_RESOLVE_MS), "active: rdma_resolve_route") ||
	    dev_expect(p.ach, DEV_ACTIVE, RDMA_CM_EVENT_ROUTE_RESOLVED))
		return check_done();
	printf("active: ps 0x%x, qp_type %s, num_paths %d\n", p.active->ps,
	       p.active->qp_type == IBV_QPT_UD ? "UD" : "other", p.active->route.num_paths);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	if (rdma_init_qp_attr(p.active, &a, &mask))
		printf("active: rdma_init_qp_attr(INIT): errno %s\n", dev_errno_name(errno));
	else
		printf("active: rdma_init_qp_attr(INIT): mask 0x%x, qkey 0x%x, pkey_index %u, port_num %u\n",
		       mask, a.qkey, a.pkey_index, a.port_num);
	if (ud_qp(p.active, &p.aq, "active"))
		return check_done();
	show_ud_qp("active, after rdma_create_qp", p.active->qp);
	dev_conn_param(&cp, pdata);
	if (DEV_CALL(rdma_connect(p.active, &cp), "active: rdma_connect"))
		return check_done();
	ev = dev_get(p.pch, DEV_PASSIVE, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
	if (!ev)
		return check_done();
	p.child = ev->id;
	show_ud("passive CONNECT_REQUEST", &ev->param.ud, p.active->qp->qp_num);
	printf("passive CONNECT_REQUEST: starts with the peer's text %s, new id %s, its ps 0x%x, qp_type %s\n",
	       yes(ev->param.ud.private_data && !memcmp(ev->param.ud.private_data, "ud", 2)),
	       yes(ev->id != p.listen), ev->id->ps, ev->id->qp_type == IBV_QPT_UD ? "UD" : "other");
	if (ud_qp(p.child, &p.pq, "passive")) {
		dev_ack(ev);
		return check_done();
	}
	dev_ack(ev);
	show_ud_qp("passive, after rdma_create_qp", p.child->qp);
	dev_conn_param(&cp, pdata);
	cp.qp_num = p.child->qp->qp_num;
	if (DEV_CALL(rdma_accept(p.child, &cp), "passive: rdma_accept"))
		return check_done();
	ev = dev_get(p.ach, DEV_ACTIVE, RDMA_CM_EVENT_ESTABLISHED, 0);
	if (!ev)
		return check_done();
	show_ud("active ESTABLISHED", &ev->param.ud, p.child->qp->qp_num);
	dev_ack(ev);
	/* no ESTABLISHED (nor anything else) for the passive side of a SIDR exchange */
	dev_drain(p.pch, DEV_PASSIVE, 300);
	dev_teardown(&p);
	return check_done();
}

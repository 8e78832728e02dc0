/* dev-example: rdma_set_option's TOS and ACK_TIMEOUT reach the connection
 *
 * rdma_set_option(3): RDMA_OPTION_ID_TOS "Specify the quality of service
 * provided by a connection", RDMA_OPTION_ID_ACK_TIMEOUT "the QP ACK
 * timeout".  An active id sets both before resolving its route; the path
 * record, init_qp_attr and the connected QPs on both sides show what the
 * library and the kernel made of them.  Printed values must equal what
 * rdma-core's librdmacm prints on the same device.
 *
 *   dev_options ADDR [PORT=7520]
 */
#include "dev.h"

static void show_qp(const char *who, struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	memset(&a, 0, sizeof(a));
	if (ibv_query_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_TIMEOUT, &ia)) {
		printf("%s: ibv_query_qp failed\n", who);
		return;
	}
	printf("%s: qp timeout %u, av traffic_class %u, sl %u\n", who, a.timeout,
	       a.ah_attr.grh.traffic_class, a.ah_attr.sl);
}

static void set_u8(struct rdma_cm_id *id, int name, uint8_t v, const char *what)
{
	int r;

	errno = 0;
	r = rdma_set_option(id, RDMA_OPTION_ID, name, &v, sizeof(v));
	printf("%s %u: ret %d%s%s\n", what, v, r, r ? " errno " : "", r ? dev_errno_name(errno) : "");
}

int main(int argc, char **argv)
{
	struct dev_pair p;
	struct rdma_conn_param cp;
	struct rdma_cm_event *ev;
	struct ibv_qp_attr a;
	int mask = 0;

	memset(&p, 0, sizeof(p));
	dev_args(argc, argv, 7520);
	watchdog(60);
	if (dev_listen(&p))
		return check_done();
	p.ach = dev_channel();
	if (DEV_CALL(rdma_create_id(p.ach, &p.active, NULL, RDMA_PS_TCP), "active: rdma_create_id"))
		return check_done();
	set_u8(p.active, RDMA_OPTION_ID_TOS, 0x60, "active: TOS");
	set_u8(p.active, RDMA_OPTION_ID_ACK_TIMEOUT, 12, "active: ACK_TIMEOUT");
	if (DEV_CALL(rdma_resolve_addr(p.active, NULL, dev_sa(), DEV_RESOLVE_MS), "active: rdma_resolve_addr") ||
	    dev_expect(p.ach, DEV_ACTIVE, RDMA_CM_EVENT_ADDR_RESOLVED) ||
	    DEV_CALL(rdma_resolve_route(p.active, DEV_RESOLVE_MS), "active: rdma_resolve_route") ||
	    dev_expect(p.ach, DEV_ACTIVE, RDMA_CM_EVENT_ROUTE_RESOLVED))
		return check_done();
	if (p.active->route.num_paths > 0 && p.active->route.path_rec)
		printf("active: path traffic_class %u, sl %u, packet_life_time %u\n",
		       p.active->route.path_rec->traffic_class, p.active->route.path_rec->sl,
		       p.active->route.path_rec->packet_life_time);
	else
		printf("active: no path record\n");
	if (dev_rdma_qp(p.active, &p.aq, "active"))
		return check_done();
	dev_conn_param(&cp, NULL);
	if (DEV_CALL(rdma_connect(p.active, &cp), "active: rdma_connect"))
		return check_done();
	ev = dev_get_request(&p, NULL);
	if (!ev)
		return check_done();
	if (p.child->route.num_paths > 0 && p.child->route.path_rec)
		printf("passive: the request's path traffic_class %u, sl %u\n",
		       p.child->route.path_rec->traffic_class, p.child->route.path_rec->sl);
	if (dev_rdma_qp(p.child, &p.pq, "passive")) {
		dev_ack(ev);
		return check_done();
	}
	dev_ack(ev);
	dev_conn_param(&cp, NULL);
	if (DEV_CALL(rdma_accept(p.child, &cp), "passive: rdma_accept") ||
	    dev_expect(p.ach, DEV_ACTIVE, RDMA_CM_EVENT_ESTABLISHED) ||
	    dev_expect(p.pch, DEV_PASSIVE, RDMA_CM_EVENT_ESTABLISHED))
		return check_done();
	show_qp("active", p.active->qp);
	show_qp("passive", p.child->qp);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	if (!rdma_init_qp_attr(p.active, &a, &mask))
		printf("active: rdma_init_qp_attr(RTS) timeout %u\n", a.timeout);
	set_u8(p.active, RDMA_OPTION_ID_TOS, 0x20, "active: TOS once connected");
	dev_teardown(&p);
	return check_done();
}

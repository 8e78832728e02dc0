/* dev-example: what the library fills in for the application to read
 *
 * rdma_cm(7) and rdma_get_cm_event(3): the rdma_cm_id's verbs, port_num and
 * route (addresses, path records) after address and route resolution, the
 * conn parameters of CONNECT_REQUEST and ESTABLISHED, and the QP the
 * library moves through its states (rdma_create_qp(3): "the QP is
 * transitioned ... by the library").  Programs read these fields directly
 * (path MTU, rates, depths, QP numbers), so each value is printed; the lines
 * must equal what rdma-core's librdmacm prints on the same device.  Values
 * that differ from run to run (QP numbers, PSNs, ports, GIDs) are printed as
 * relations: "is the peer's", "equals the device's GID at index N".
 *
 *   dev_attrs ADDR [PORT=7514]
 */
#include "dev.h"

static const char *yes(int c)
{
	return c ? "yes" : "no";
}

static int sa_port(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)sa)->sin_port);
	if (sa->sa_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	return -1;
}

static const char *family(const struct sockaddr *sa)
{
	return sa->sa_family == AF_INET ? "AF_INET" : sa->sa_family == AF_INET6 ? "AF_INET6" :
	       sa->sa_family == AF_IB ? "AF_IB" : "other";
}

/* Same IP as the device address the program was given (port ignored). */
static int is_dev_ip(const struct sockaddr *sa)
{
	const struct sockaddr *d = dev_sa();

	if (sa->sa_family != d->sa_family)
		return 0;
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)d)->sin_addr.s_addr;
	return !memcmp(&((const struct sockaddr_in6 *)sa)->sin6_addr,
		       &((const struct sockaddr_in6 *)d)->sin6_addr, 16);
}

/* Where gid is in the id's port's GID table: "zero", "at index N" or "not in the table". */
static const char *gid_where(struct rdma_cm_id *id, const union ibv_gid *gid)
{
	static char buf[4][32];
	static int k;
	static const union ibv_gid zero;
	union ibv_gid g;
	int i;

	if (!memcmp(gid, &zero, sizeof(zero)))
		return "zero";
	k = (k + 1) % 4;
	for (i = 0; i < 16; i++)
		if (!ibv_query_gid(id->verbs, id->port_num, i, &g) && !memcmp(&g, gid, sizeof(g))) {
			snprintf(buf[k], sizeof(buf[k]), "at index %d", i);
			return buf[k];
		}
	return "not in the table";
}

static void show_id(const char *who, struct rdma_cm_id *id)
{
	struct ibv_sa_path_rec *p = id->route.path_rec;
	struct rdma_addr *a = &id->route.addr;

	printf("%s: verbs %s, port_num %u, ps 0x%x, qp_type %d\n", who, id->verbs ? "set" : "NULL",
	       id->port_num, id->ps, id->qp_type);
	printf("%s: src %s (the device's IP %s), dst %s (the device's IP %s)\n", who,
	       family(&a->src_addr), yes(is_dev_ip(&a->src_addr)), family(&a->dst_addr),
	       yes(is_dev_ip(&a->dst_addr)));
	printf("%s: ibaddr pkey 0x%x, sgid %s, dgid %s\n", who, ntohs(a->addr.ibaddr.pkey),
	       gid_where(id, &a->addr.ibaddr.sgid), gid_where(id, &a->addr.ibaddr.dgid));
	printf("%s: num_paths %d, path_rec %s\n", who, id->route.num_paths, p ? "set" : "NULL");
	if (!p || id->route.num_paths < 1)
		return;
	printf("%s: path sgid %s, dgid %s, the ibaddr's: %s/%s\n", who,
	       gid_where(id, &p->sgid), gid_where(id, &p->dgid),
	       yes(!memcmp(&p->sgid, &a->addr.ibaddr.sgid, 16)),
	       yes(!memcmp(&p->dgid, &a->addr.ibaddr.dgid, 16)));
	/* RoCE v2: the kernel derives the flow label and the LID fields from the
	 * ports, which differ per run */
	printf("%s: path raw_traffic %d flow_label %s hop_limit %u traffic_class %u\n",
	       who, p->raw_traffic, p->flow_label ? "set" : "0",
	       p->hop_limit, p->traffic_class);
	printf("%s: path reversible %d numb_path %u pkey 0x%x sl %u mtu_selector %u mtu %u\n", who,
	       p->reversible, p->numb_path, ntohs(p->pkey), p->sl, p->mtu_selector, p->mtu);
	printf("%s: path rate_selector %u rate %u packet_life_time_selector %u packet_life_time %u preference %u\n",
	       who, p->rate_selector, p->rate, p->packet_life_time_selector, p->packet_life_time,
	       p->preference);
}

static void show_conn(const char *who, const struct rdma_conn_param *c, uint32_t peer_qpn)
{
	printf("%s: conn responder_resources %u initiator_depth %u flow_control %u retry_count %u rnr_retry_count %u srq %u\n",
	       who, c->responder_resources, c->initiator_depth, c->flow_control, c->retry_count,
	       c->rnr_retry_count, c->srq);
	printf("%s: conn qp_num is the peer's %s, private_data_len %u, starts with the peer's text %s\n",
	       who, yes(c->qp_num == peer_qpn), c->private_data_len,
	       yes(c->private_data && !memcmp(c->private_data, "attrs", 5)));
}

static const char *qp_state_name(int s)
{
	static const char *n[] = { "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR" };

	return s >= 0 && s <= 6 ? n[s] : "?";
}

/* The QP as the library left it; peer: the other side's QP (or NULL). */
static void show_qp(const char *who, struct rdma_cm_id *id, struct ibv_qp *peer)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr pa;
	struct ibv_qp_init_attr pia;
	int r;

	memset(&a, 0, sizeof(a));
	r = ibv_query_qp(id->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			 IBV_QP_ACCESS_FLAGS | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_TIMEOUT |
			 IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_RQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC |
			 IBV_QP_MIN_RNR_TIMER | IBV_QP_SQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			 IBV_QP_DEST_QPN, &ia);
	if (r) {
		printf("%s: ibv_query_qp failed: %s\n", who, dev_errno_name(r));
		return;
	}
	printf("%s: qp state %s, pkey_index %u, port_num %u, access_flags 0x%x\n", who,
	       qp_state_name(a.qp_state), a.pkey_index, a.port_num, a.qp_access_flags);
	if (a.qp_state != IBV_QPS_RTR && a.qp_state != IBV_QPS_RTS)
		return;
	printf("%s: qp path_mtu %d timeout %u retry_cnt %u rnr_retry %u min_rnr_timer %u max_rd_atomic %u max_dest_rd_atomic %u\n",
	       who, a.path_mtu, a.timeout, a.retry_cnt, a.rnr_retry, a.min_rnr_timer,
	       a.max_rd_atomic, a.max_dest_rd_atomic);
	printf("%s: qp av is_global %u hop_limit %u traffic_class %u sgid_index %u sl %u port_num %u static_rate %u\n",
	       who, a.ah_attr.is_global, a.ah_attr.grh.hop_limit, a.ah_attr.grh.traffic_class,
	       a.ah_attr.grh.sgid_index, a.ah_attr.sl, a.ah_attr.port_num, a.ah_attr.static_rate);
	if (!peer)
		return;
	memset(&pa, 0, sizeof(pa));
	if (ibv_query_qp(peer, &pa, IBV_QP_RQ_PSN | IBV_QP_SQ_PSN, &pia))
		return;
	printf("%s: qp dest_qp_num is the peer's %s, rq_psn is the peer's sq_psn %s, sq_psn is the peer's rq_psn %s\n",
	       who, yes(a.dest_qp_num == peer->qp_num), yes(a.rq_psn == pa.sq_psn),
	       yes(a.sq_psn == pa.rq_psn));
}

static void show_init_attr(const char *who, struct rdma_cm_id *id, enum ibv_qp_state s)
{
	struct ibv_qp_attr a;
	int mask = 0, r;

	memset(&a, 0, sizeof(a));
	a.qp_state = s;
	errno = 0;
	r = rdma_init_qp_attr(id, &a, &mask);
	if (r) {
		printf("%s: rdma_init_qp_attr(%s): ret %d errno %s\n", who, qp_state_name(s), r,
		       dev_errno_name(errno));
		return;
	}
	printf("%s: rdma_init_qp_attr(%s): mask 0x%x", who, qp_state_name(s), mask);
	if (s == IBV_QPS_INIT)
		printf(", pkey_index %u, port_num %u, access_flags 0x%x\n", a.pkey_index, a.port_num,
		       a.qp_access_flags);
	else if (s == IBV_QPS_RTR)
		printf(", path_mtu %d, max_dest_rd_atomic %u, min_rnr_timer %u\n", a.path_mtu,
		       a.max_dest_rd_atomic, a.min_rnr_timer);
	else
		printf(", timeout %u, retry_cnt %u, rnr_retry %u, max_rd_atomic %u\n", a.timeout,
		       a.retry_cnt, a.rnr_retry, a.max_rd_atomic);
}

int main(int argc, char **argv)
{
	struct dev_pair p;
	struct rdma_conn_param cp;
	struct rdma_cm_event *ev;
	static char pdata[] = "attrs";

	memset(&p, 0, sizeof(p));
	dev_args(argc, argv, 7514);
	watchdog(60);
	if (dev_listen(&p))
		return check_done();
	printf("passive: listener src port is the bound one %s\n",
	       yes(sa_port(rdma_get_local_addr(p.listen)) == dev_port));
	/* rdma_bind_addr and rdma_listen name the device, not the GIDs */
	printf("passive: listener verbs %s, port_num %u, ibaddr sgid %s, dgid %s\n",
	       p.listen->verbs ? "set" : "NULL", p.listen->port_num,
	       p.listen->verbs ? gid_where(p.listen, &p.listen->route.addr.addr.ibaddr.sgid) : "-",
	       p.listen->verbs ? gid_where(p.listen, &p.listen->route.addr.addr.ibaddr.dgid) : "-");
	if (dev_resolve(&p))
		return check_done();
	show_id("active", p.active);
	printf("active: src port set %s, dst port is the listener's %s\n",
	       yes(rdma_get_src_port(p.active) != 0), yes(ntohs(rdma_get_dst_port(p.active)) == dev_port));
	if (dev_rdma_qp(p.active, &p.aq, "active"))
		return check_done();
	show_qp("active, after rdma_create_qp", p.active, NULL);
	show_init_attr("active, before connecting", p.active, IBV_QPS_INIT);
	dev_conn_param(&cp, pdata);
	cp.responder_resources = 2;
	cp.initiator_depth = 1;
	cp.retry_count = 5;
	cp.rnr_retry_count = 6;
	if (DEV_CALL(rdma_connect(p.active, &cp), "active: rdma_connect"))
		return check_done();
	ev = dev_get_request(&p, pdata);
	if (!ev)
		return check_done();
	show_conn("passive CONNECT_REQUEST", &ev->param.conn, p.active->qp->qp_num);
	show_id("passive child", p.child);
	printf("passive child: dst port is the active's src port %s\n",
	       yes(ntohs(rdma_get_dst_port(p.child)) == ntohs(rdma_get_src_port(p.active))));
	if (dev_rdma_qp(p.child, &p.pq, "passive")) {
		dev_ack(ev);
		return check_done();
	}
	dev_ack(ev);
	show_qp("passive, after rdma_create_qp", p.child, NULL);
	show_init_attr("passive, before accepting", p.child, IBV_QPS_RTR);
	dev_conn_param(&cp, pdata);
	cp.responder_resources = 1;
	cp.initiator_depth = 2;
	if (DEV_CALL(rdma_accept(p.child, &cp), "passive: rdma_accept"))
		return check_done();
	/* the active QP gets its PSNs only when its side reads ESTABLISHED */
	show_qp("passive, after rdma_accept", p.child, NULL);
	ev = dev_get(p.ach, DEV_ACTIVE, RDMA_CM_EVENT_ESTABLISHED, 0);
	if (!ev)
		return check_done();
	show_conn("active ESTABLISHED", &ev->param.conn, p.child->qp->qp_num);
	dev_ack(ev);
	show_qp("active, after ESTABLISHED", p.active, p.child->qp);
	show_init_attr("active, connected", p.active, IBV_QPS_RTS);
	ev = dev_get(p.pch, DEV_PASSIVE, RDMA_CM_EVENT_ESTABLISHED, 0);
	if (!ev)
		return check_done();
	dev_ack(ev);
	show_qp("passive, after ESTABLISHED", p.child, p.active->qp);
	if (DEV_CALL(rdma_disconnect(p.active), "active: rdma_disconnect"))
		return check_done();
	show_qp("active, after rdma_disconnect", p.active, NULL);
	/* IB/RoCE: the active side's DISCONNECTED waits for the passive side's
	 * rdma_disconnect (its DREP), so the passive side goes first */
	if (dev_expect(p.pch, DEV_PASSIVE, RDMA_CM_EVENT_DISCONNECTED))
		return check_done();
	show_qp("passive, after DISCONNECTED", p.child, NULL);
	if (DEV_CALL(rdma_disconnect(p.child), "passive: rdma_disconnect") ||
	    dev_expect(p.ach, DEV_ACTIVE, RDMA_CM_EVENT_DISCONNECTED))
		return check_done();
	dev_teardown(&p);
	return check_done();
}

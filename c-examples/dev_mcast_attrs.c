/* dev-example: what a multicast join gives the application
 *
 * rdma_join_multicast(3): "the user will receive a MULTICAST_JOIN event",
 * whose param.ud (rdma_get_cm_event(3)) carries the address handle
 * attributes, the group's QP number and qkey that mckey uses to send to
 * the group; rdma_join_multicast_ex(3): join_flags
 * RDMA_MC_JOIN_FLAG_FULLMEMBER or RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
 * other values rejected.  Each value is printed (the group's GID as a
 * relation to the group address); the lines must equal what rdma-core's
 * librdmacm prints on the same device.
 *
 *   dev_mcast_attrs ADDR [PORT=7518]   (groups 239.255.43.1 and .2)
 */
#include "dev.h"
#include <rdma/rdma_verbs.h>

static int group(const char *ip, struct sockaddr_in *g)
{
	memset(g, 0, sizeof(*g));
	g->sin_family = AF_INET;
	g->sin_port = htons(dev_port);
	return inet_pton(AF_INET, ip, &g->sin_addr) == 1 ? 0 : -1;
}

static void show_join(struct rdma_cm_event *ev, const struct sockaddr_in *g, void *ctx)
{
	const struct rdma_ud_param *u = &ev->param.ud;
	const struct ibv_ah_attr *ah = &u->ah_attr;
	const uint8_t *d = ah->grh.dgid.raw;
	static const uint8_t v4map[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	printf("join: status %d, context is the join's %s, qp_num 0x%x, qkey 0x%x\n", ev->status,
	       u->private_data == ctx ? "yes" : "no", u->qp_num, u->qkey);
	printf("join: ah is_global %u, sl %u, static_rate %u, port_num %u, dlid %s\n", ah->is_global,
	       ah->sl, ah->static_rate, ah->port_num, ah->dlid ? "set" : "0");
	printf("join: ah grh sgid_index %u, hop_limit %u, traffic_class %u, flow_label %u\n",
	       ah->grh.sgid_index, ah->grh.hop_limit, ah->grh.traffic_class, ah->grh.flow_label);
	printf("join: ah grh dgid is the group's IPv4-mapped address %s\n",
	       !memcmp(d, v4map, 12) && !memcmp(d + 12, &g->sin_addr, 4) ? "yes" : "no");
}

static void try_join(struct rdma_event_channel *ch, struct rdma_cm_id *id, struct sockaddr_in *g,
		     uint32_t flags, const char *what)
{
	struct rdma_cm_join_mc_attr_ex mc;
	struct rdma_cm_event *ev;
	int ret, e;

	memset(&mc, 0, sizeof(mc));
	mc.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	mc.join_flags = flags;
	mc.addr = (struct sockaddr *)g;
	errno = 0;
	ret = rdma_join_multicast_ex(id, &mc, g);
	e = errno;
	printf("%s: ret %d%s%s\n", what, ret, ret ? " errno " : "", ret ? dev_errno_name(e) : "");
	if (ret)
		return;
	ev = dev_get(ch, DEV_ACTIVE, RDMA_CM_EVENT_MULTICAST_JOIN, 1);
	if (ev) {
		show_join(ev, g, g);
		dev_ack(ev);
	}
	DEV_CALL(rdma_leave_multicast(id, (struct sockaddr *)g), "rdma_leave_multicast");
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id = NULL;
	struct sockaddr_in g1, g2;
	struct rdma_cm_join_mc_attr_ex mc;
	int ret;

	dev_args(argc, argv, 7518);
	watchdog(60);
	if (dev_addr.ss_family != AF_INET || group("239.255.43.1", &g1) || group("239.255.43.2", &g2)) {
		printf("skip: IPv4 address wanted\n");
		return 77;
	}
	ch = dev_channel();
	if (DEV_CALL(rdma_create_id(ch, &id, NULL, RDMA_PS_UDP), "rdma_create_id") ||
	    DEV_CALL(rdma_resolve_addr(id, dev_sa(), (struct sockaddr *)&g1, DEV_RESOLVE_MS), "rdma_resolve_addr") ||
	    dev_expect(ch, DEV_ACTIVE, RDMA_CM_EVENT_ADDR_RESOLVED))
		goto out;
	memset(&mc, 0, sizeof(mc));
	mc.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	mc.join_flags = 7;
	mc.addr = (struct sockaddr *)&g1;
	errno = 0;
	ret = rdma_join_multicast_ex(id, &mc, &g1);
	printf("rdma_join_multicast_ex with unknown join flags: ret %d%s%s\n", ret,
	       ret ? " errno " : "", ret ? dev_errno_name(errno) : "");
	mc.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS;
	errno = 0;
	ret = rdma_join_multicast_ex(id, &mc, &g1);
	printf("rdma_join_multicast_ex without JOIN_FLAGS in comp_mask: ret %d%s%s\n", ret,
	       ret ? " errno " : "", ret ? dev_errno_name(errno) : "");
	if (!ret) {
		struct rdma_cm_event *ev = dev_get(ch, DEV_ACTIVE, RDMA_CM_EVENT_MULTICAST_JOIN, 1);

		dev_ack(ev);
		rdma_leave_multicast(id, (struct sockaddr *)&g1);
	}
	try_join(ch, id, &g1, RDMA_MC_JOIN_FLAG_FULLMEMBER, "full member join of group 1");
	try_join(ch, id, &g2, RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER, "send-only join of group 2");
	printf("events afterwards within 500 ms:\n");
	if (!dev_drain(ch, DEV_ACTIVE, 500))
		printf("(none)\n");
out:
	if (id)
		rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	return check_done();
}

/* c-example: common
 *
 * rdma_create_id(3) on an event channel for each port space
 * (RDMA_PS_TCP, RDMA_PS_UDP, RDMA_PS_IPOIB, RDMA_PS_IB): succeeds, records the
 * channel, context and port space, picks qp_type (UD for UDP/IPOIB, RC
 * otherwise), starts unbound (no device, no addresses, ports 0 from
 * rdma_get_src_port/rdma_get_dst_port, no paths); rdma_destroy_id succeeds.
 */
#include "check.h"

static const struct {
	enum rdma_port_space ps;
	const char *name;
	enum ibv_qp_type qpt;
} spaces[] = {
	{ RDMA_PS_TCP, "RDMA_PS_TCP", IBV_QPT_RC },
	{ RDMA_PS_UDP, "RDMA_PS_UDP", IBV_QPT_UD },
	{ RDMA_PS_IPOIB, "RDMA_PS_IPOIB", IBV_QPT_UD },
	{ RDMA_PS_IB, "RDMA_PS_IB", IBV_QPT_RC },
};

#define NSPACES (sizeof(spaces) / sizeof(spaces[0]))

int main(void)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *ids[NSPACES];
	int ctx[NSPACES];
	unsigned int i;
	char what[96];
	int ret;

	watchdog(15);
	ch = channel_or_skip();
	for (i = 0; i < NSPACES; i++) {
		struct rdma_cm_id *id = NULL;

		ret = rdma_create_id(ch, &id, &ctx[i], spaces[i].ps);
		ids[i] = ret ? NULL : id;
		snprintf(what, sizeof(what), "%s: rdma_create_id", spaces[i].name);
		CHECK(ret == 0 && id, what, "ret=%d errno=%d (%s)", ret, errno, strerror(errno));
		if (ret || !id)
			continue;
		snprintf(what, sizeof(what), "%s: channel, context, ps recorded", spaces[i].name);
		CHECK(id->channel == ch && id->context == &ctx[i] && id->ps == spaces[i].ps, what,
		      "channel %s context %s ps=0x%x", id->channel == ch ? "ok" : "WRONG",
		      id->context == &ctx[i] ? "ok" : "WRONG", id->ps);
		snprintf(what, sizeof(what), "%s: qp_type %d", spaces[i].name, spaces[i].qpt);
		CHECK(id->qp_type == spaces[i].qpt, what, "qp_type=%d", id->qp_type);
		snprintf(what, sizeof(what), "%s: unbound (no verbs/qp/pd, port_num 0, no paths)",
			 spaces[i].name);
		CHECK(!id->verbs && !id->qp && !id->pd && id->port_num == 0 &&
			      !id->route.path_rec && id->route.num_paths == 0,
		      what, "verbs=%s qp=%s pd=%s port_num=%u num_paths=%d",
		      id->verbs ? "set" : "NULL", id->qp ? "set" : "NULL", id->pd ? "set" : "NULL",
		      id->port_num, id->route.num_paths);
		snprintf(what, sizeof(what), "%s: no addresses yet (AF_UNSPEC)", spaces[i].name);
		CHECK(id->route.addr.src_addr.sa_family == AF_UNSPEC &&
			      id->route.addr.dst_addr.sa_family == AF_UNSPEC,
		      what, "src family %d dst family %d", id->route.addr.src_addr.sa_family,
		      id->route.addr.dst_addr.sa_family);
		snprintf(what, sizeof(what), "%s: rdma_get_src_port/dst_port are 0", spaces[i].name);
		CHECK(rdma_get_src_port(id) == 0 && rdma_get_dst_port(id) == 0, what,
		      "src %u dst %u", rdma_get_src_port(id), rdma_get_dst_port(id));
	}
	for (i = 0; i < NSPACES; i++) {
		if (!ids[i])
			continue;
		ret = rdma_destroy_id(ids[i]);
		snprintf(what, sizeof(what), "%s: rdma_destroy_id", spaces[i].name);
		CHECK(ret == 0, what, "ret=%d errno=%d (%s)", ret, errno, strerror(errno));
	}
	rdma_destroy_event_channel(ch);
	return check_done();
}

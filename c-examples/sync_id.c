/* c-example: common
 *
 * rdma_create_id(3): "If the channel parameter is NULL, the rdma_cm_id will
 * be placed into synchronous operation."  A synchronous id can be created
 * and destroyed without an application channel; the library gives it a
 * private channel (id->channel non-NULL), keeps the context, and sets ps and
 * qp_type (RC for TCP, UD for UDP); a fresh id has no device, QP or event.
 */
#include "check.h"

static int ctx;

static void one(enum rdma_port_space ps, const char *name, enum ibv_qp_type qpt)
{
	struct rdma_cm_id *id = NULL;
	char what[96];
	int ret;

	errno = 0;
	ret = rdma_create_id(NULL, &id, &ctx, ps);
	if (ret && errno == ENODEV && ps == RDMA_PS_TCP)
		skip("rdma_create_id(NULL channel) failed with ENODEV (no RDMA device)");
	snprintf(what, sizeof(what), "synchronous %s id created", name);
	CHECK(ret == 0 && id != NULL, what, "ret=%d errno=%d (%s)", ret, errno, strerror(errno));
	if (ret || !id)
		return;
	snprintf(what, sizeof(what), "synchronous %s id has a private channel", name);
	CHECK(id->channel != NULL, what, "id->channel is NULL");
	snprintf(what, sizeof(what), "synchronous %s id keeps context, ps and qp_type", name);
	CHECK(id->context == &ctx && id->ps == ps && id->qp_type == qpt, what,
	      "context %s ps=0x%x qp_type=%d", id->context == &ctx ? "ok" : "WRONG", id->ps,
	      id->qp_type);
	snprintf(what, sizeof(what), "synchronous %s id: verbs, qp, event, pd are NULL", name);
	CHECK(!id->verbs && !id->qp && !id->event && !id->pd, what, "verbs=%s qp=%s event=%s pd=%s",
	      id->verbs ? "set" : "NULL", id->qp ? "set" : "NULL", id->event ? "set" : "NULL",
	      id->pd ? "set" : "NULL");
	ret = rdma_destroy_id(id);
	snprintf(what, sizeof(what), "synchronous %s id destroyed", name);
	CHECK(ret == 0, what, "ret=%d errno=%d (%s)", ret, errno, strerror(errno));
}

int main(void)
{
	watchdog(15);
	one(RDMA_PS_TCP, "TCP", IBV_QPT_RC);
	one(RDMA_PS_UDP, "UDP", IBV_QPT_UD);
	return check_done();
}

/* c-example: common
 *
 * rdma_getaddrinfo(3) on the active side (no RAI_PASSIVE): the numeric node
 * (IPv4 or IPv6) and service end up in ai_dst_addr/ai_dst_len; without hints
 * the result is RDMA_PS_TCP / IBV_QPT_RC; hints' port space and QP type
 * (RDMA_PS_UDP / IBV_QPT_UD) are honoured; RAI_NUMERICHOST accepts numeric
 * nodes; rdma_freeaddrinfo releases the list.
 */
#include "gai_util.h"

static void active(const char *node, const char *service, const struct rdma_addrinfo *hints,
		   int ps, int qpt, int family, const char *want_dst, const char *label)
{
	struct rdma_addrinfo *res = NULL;
	char what[128], buf[80];
	int ret;

	ret = gai_or_skip(node, service, hints, &res);
	snprintf(what, sizeof(what), "%s: rdma_getaddrinfo succeeds", label);
	CHECK(ret == 0 && res, what, "ret=%d errno=%d (%s)", ret, errno, strerror(errno));
	if (ret || !res)
		return;
	snprintf(what, sizeof(what), "%s: ai_family", label);
	CHECK(res->ai_family == family, what, "ai_family=%d want %d", res->ai_family, family);
	snprintf(what, sizeof(what), "%s: ai_dst_addr is %s", label, want_dst);
	CHECK(res->ai_dst_addr && !strcmp(addr_str(res->ai_dst_addr, buf, sizeof(buf)), want_dst),
	      what, "got %s", addr_str(res->ai_dst_addr, buf, sizeof(buf)));
	snprintf(what, sizeof(what), "%s: ai_dst_len matches the family", label);
	CHECK(res->ai_dst_len == (family == AF_INET6 ? sizeof(struct sockaddr_in6)
						     : sizeof(struct sockaddr_in)),
	      what, "ai_dst_len=%u", (unsigned int)res->ai_dst_len);
	snprintf(what, sizeof(what), "%s: ai_port_space 0x%x, ai_qp_type %d", label, ps, qpt);
	CHECK(res->ai_port_space == ps && res->ai_qp_type == qpt, what,
	      "ai_port_space=0x%x ai_qp_type=%d", res->ai_port_space, res->ai_qp_type);
	rdma_freeaddrinfo(res);
}

int main(void)
{
	struct rdma_addrinfo hints;

	watchdog(15);
	active("127.0.0.1", "7471", NULL, RDMA_PS_TCP, IBV_QPT_RC, AF_INET, "127.0.0.1:7471",
	       "IPv4, no hints (defaults)");
	active("::1", "7174", NULL, RDMA_PS_TCP, IBV_QPT_RC, AF_INET6, "[::1]:7174",
	       "IPv6, no hints (defaults)");

	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_UDP;
	hints.ai_qp_type = IBV_QPT_UD;
	active("198.51.100.20", "7174", &hints, RDMA_PS_UDP, IBV_QPT_UD, AF_INET,
	       "198.51.100.20:7174", "IPv4, UDP/UD hints");

	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_NUMERICHOST;
	hints.ai_port_space = RDMA_PS_TCP;
	hints.ai_qp_type = IBV_QPT_RC;
	active("fe80::1:2", "7471", &hints, RDMA_PS_TCP, IBV_QPT_RC, AF_INET6, "[fe80::1:2]:7471",
	       "IPv6, RAI_NUMERICHOST, TCP/RC hints");
	return check_done();
}

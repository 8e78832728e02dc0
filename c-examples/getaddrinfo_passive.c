/* c-example: common
 *
 * rdma_getaddrinfo(3) with RAI_PASSIVE: "the results will be used on the
 * passive/listening side": ai_src_addr holds the numeric node (IPv4 or IPv6)
 * with the service as port, ai_dst_len is 0 ("This will be 0 if the
 * RAI_PASSIVE flag was specified"), hints' port space and QP type are kept;
 * a NULL node gives a wildcard source address.
 */
#include "gai_util.h"

static void passive(const char *node, const char *service, int ps, int qpt, int family,
		    const char *want_src, const char *label)
{
	struct rdma_addrinfo hints, *res = NULL;
	char what[128], buf[80];
	int ret;

	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = ps;
	hints.ai_qp_type = qpt;
	ret = gai_or_skip(node, service, &hints, &res);
	snprintf(what, sizeof(what), "%s: rdma_getaddrinfo succeeds", label);
	CHECK(ret == 0 && res, what, "ret=%d errno=%d (%s)", ret, errno, strerror(errno));
	if (ret || !res)
		return;
	snprintf(what, sizeof(what), "%s: ai_family", label);
	CHECK(res->ai_family == family, what, "ai_family=%d want %d", res->ai_family, family);
	snprintf(what, sizeof(what), "%s: ai_src_addr is %s", label, want_src);
	CHECK(res->ai_src_addr && !strcmp(addr_str(res->ai_src_addr, buf, sizeof(buf)), want_src),
	      what, "got %s", addr_str(res->ai_src_addr, buf, sizeof(buf)));
	snprintf(what, sizeof(what), "%s: ai_src_len matches the family", label);
	CHECK(res->ai_src_len == (family == AF_INET6 ? sizeof(struct sockaddr_in6)
						     : sizeof(struct sockaddr_in)),
	      what, "ai_src_len=%u", (unsigned int)res->ai_src_len);
	snprintf(what, sizeof(what), "%s: no destination (ai_dst_len 0)", label);
	CHECK(res->ai_dst_len == 0, what, "ai_dst_len=%u", (unsigned int)res->ai_dst_len);
	snprintf(what, sizeof(what), "%s: ai_port_space 0x%x, ai_qp_type %d", label, ps, qpt);
	CHECK(res->ai_port_space == ps && res->ai_qp_type == qpt, what,
	      "ai_port_space=0x%x ai_qp_type=%d", res->ai_port_space, res->ai_qp_type);
	rdma_freeaddrinfo(res);
}

int main(void)
{
	struct rdma_addrinfo hints, *res = NULL;
	char buf[80];
	int ret;

	watchdog(15);
	passive("127.0.0.1", "7471", RDMA_PS_TCP, IBV_QPT_RC, AF_INET, "127.0.0.1:7471", "IPv4 TCP");
	passive("::1", "7174", RDMA_PS_TCP, IBV_QPT_RC, AF_INET6, "[::1]:7174", "IPv6 TCP");
	passive("192.0.2.7", "7427", RDMA_PS_UDP, IBV_QPT_UD, AF_INET, "192.0.2.7:7427", "IPv4 UDP");
	passive("127.0.0.1", NULL, RDMA_PS_TCP, IBV_QPT_RC, AF_INET, "127.0.0.1:0", "no service");

	/* NULL node: wildcard address of either family, port from the service. */
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	hints.ai_qp_type = IBV_QPT_RC;
	ret = gai_or_skip(NULL, "7471", &hints, &res);
	CHECK(ret == 0 && res, "NULL node: rdma_getaddrinfo succeeds", "ret=%d errno=%d (%s)", ret,
	      errno, strerror(errno));
	if (ret == 0 && res) {
		addr_str(res->ai_src_addr, buf, sizeof(buf));
		CHECK(!strcmp(buf, "0.0.0.0:7471") || !strcmp(buf, "[::]:7471"),
		      "NULL node: ai_src_addr is the wildcard address, port 7471", "got %s", buf);
		rdma_freeaddrinfo(res);
	}
	return check_done();
}

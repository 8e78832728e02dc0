/* c-example: ours
 *
 * rdma_getaddrinfo(3) error returns: RAI_NUMERICHOST with a host name gives
 * the getaddrinfo error code (EAI_NONAME, negative, not -1); NULL node,
 * service and hints fail with -1/EINVAL as upstream (nothing to resolve);
 * NULL node and service with empty hints give EAI_NONAME ("both node and
 * service are NULL"); a NULL result pointer fails with -1/EINVAL;
 * rdma_freeaddrinfo(NULL) is a no-op.
 */
#include "gai_util.h"

int main(void)
{
	struct rdma_addrinfo hints, *res;
	int ret;

	watchdog(15);

	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_NUMERICHOST;
	hints.ai_port_space = RDMA_PS_TCP;
	hints.ai_qp_type = IBV_QPT_RC;
	res = NULL;
	ret = gai_or_skip("localhost", "7471", &hints, &res);
	CHECK(ret == EAI_NONAME, "RAI_NUMERICHOST with a host name returns EAI_NONAME",
	      "ret=%d (%s) errno=%d", ret, gai_strerror(ret), errno);
	CHECK(ret < 0 && ret != -1, "the EAI code is negative and distinct from -1", "ret=%d", ret);
	if (ret == 0)
		rdma_freeaddrinfo(res);

	CHECK_ERRNO(rdma_getaddrinfo(NULL, NULL, NULL, &res), EINVAL,
		    "NULL node, service and hints fail with -1/EINVAL");

	memset(&hints, 0, sizeof(hints));
	res = NULL;
	ret = gai_or_skip(NULL, NULL, &hints, &res);
	CHECK(ret == EAI_NONAME, "NULL node and NULL service return EAI_NONAME",
	      "ret=%d (%s) errno=%d (%s)", ret, gai_strerror(ret), errno, strerror(errno));
	if (ret == 0)
		rdma_freeaddrinfo(res);

	CHECK_ERRNO(rdma_getaddrinfo("127.0.0.1", "7471", NULL, NULL), EINVAL,
		    "NULL res fails with -1/EINVAL");
	CHECK_ERRNO(rdma_getaddrinfo("127.0.0.1", "7471", &hints, NULL), EINVAL,
		    "NULL res with hints fails with -1/EINVAL");

	rdma_freeaddrinfo(NULL);
	check(1, "rdma_freeaddrinfo(NULL) is a no-op");
	return check_done();
}

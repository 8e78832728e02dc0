/* dev-example: AF_IB addresses after the library's AF_IB probe
 *
 * kernel-abi.md (ucma_init, step 3): librdmacm probes the kernel once for
 * AF_IB by binding a RDMA_PS_IB id to the AF_IB wildcard with the IP/TCP
 * service id; with support, AF_IB addresses are accepted by rdma_bind_addr
 * (without it, upstream refuses them with EINVAL). This program makes the
 * same bind on ids of its own, on a channel and synchronously, and prints
 * what rdma_get_local_addr and rdma_get_src_port give back.
 *
 *   dev_af_ib ADDR (unused: AF_IB wildcard)
 */
#include <endian.h>
#include <infiniband/ib.h>

#include "dev.h"

static void bind_wildcard(struct rdma_event_channel *ch, const char *what)
{
	struct rdma_cm_id *id = NULL;
	struct sockaddr_ib sib;
	struct sockaddr *local;
	char name[80];

	snprintf(name, sizeof(name), "%s: rdma_create_id(RDMA_PS_IB)", what);
	if (DEV_CALL(rdma_create_id(ch, &id, NULL, RDMA_PS_IB), name))
		return;
	memset(&sib, 0, sizeof(sib));
	sib.sib_family = AF_IB;
	sib.sib_sid = htobe64(RDMA_IB_IP_PS_TCP);
	sib.sib_sid_mask = htobe64(RDMA_IB_IP_PS_MASK);
	errno = 0;
	int r = rdma_bind_addr(id, (struct sockaddr *)&sib);
	printf("%s: rdma_bind_addr(AF_IB wildcard): ret %d errno %s\n", what, r,
	       r ? dev_errno_name(errno) : "0");
	CHECK(r == 0, "bind to the AF_IB wildcard succeeds", "errno %s", dev_errno_name(errno));
	if (r == 0) {
		local = rdma_get_local_addr(id);
		printf("%s: local address family %s, source port %s\n", what,
		       local->sa_family == AF_IB ? "AF_IB" : "other",
		       rdma_get_src_port(id) ? "set" : "0");
	}
	CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id", "errno %s", dev_errno_name(errno));
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch;

	dev_args(argc, argv, 7509);
	watchdog(60);
	ch = dev_channel();
	bind_wildcard(ch, "channel id");
	bind_wildcard(NULL, "sync id");
	rdma_destroy_event_channel(ch);
	return check_done();
}

/* c-example: common
 *
 * rdma_get_src_port(3) / rdma_get_dst_port(3): return the port of the local /
 * remote address recorded in id->route.addr, in network byte order, 0 when
 * unbound.  Without a device the id cannot be bound, so the test writes the
 * address fields directly (sockaddr_in, sockaddr_in6, sockaddr_ib whose port
 * is the low 16 bits of sib_sid) and restores them before destroying the id.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <infiniband/ib.h>

#include "check.h"

int main(void)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct rdma_addr saved;
	struct sockaddr_ib *sib;
	int ret;

	watchdog(15);
	ch = channel_or_skip();
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		fatal("rdma_create_id: errno=%d (%s)", errno, strerror(errno));
	saved = id->route.addr;

	CHECK(rdma_get_src_port(id) == 0 && rdma_get_dst_port(id) == 0,
	      "fresh id: both ports 0", "src %u dst %u", ntohs(rdma_get_src_port(id)),
	      ntohs(rdma_get_dst_port(id)));

	id->route.addr.src_sin.sin_family = AF_INET;
	id->route.addr.src_sin.sin_port = htons(7471);
	id->route.addr.dst_sin.sin_family = AF_INET;
	id->route.addr.dst_sin.sin_port = htons(0x1234);
	CHECK(rdma_get_src_port(id) == htons(7471), "AF_INET source port in network order",
	      "got raw 0x%04x", rdma_get_src_port(id));
	CHECK(rdma_get_dst_port(id) == htons(0x1234), "AF_INET destination port in network order",
	      "got raw 0x%04x", rdma_get_dst_port(id));

	memset(&id->route.addr.src_storage, 0, sizeof(id->route.addr.src_storage));
	memset(&id->route.addr.dst_storage, 0, sizeof(id->route.addr.dst_storage));
	id->route.addr.src_sin6.sin6_family = AF_INET6;
	id->route.addr.src_sin6.sin6_port = htons(7174);
	id->route.addr.dst_sin6.sin6_family = AF_INET6;
	id->route.addr.dst_sin6.sin6_port = htons(0xabcd);
	CHECK(rdma_get_src_port(id) == htons(7174), "AF_INET6 source port in network order",
	      "got raw 0x%04x", rdma_get_src_port(id));
	CHECK(rdma_get_dst_port(id) == htons(0xabcd), "AF_INET6 destination port in network order",
	      "got raw 0x%04x", rdma_get_dst_port(id));

	memset(&id->route.addr.src_storage, 0, sizeof(id->route.addr.src_storage));
	memset(&id->route.addr.dst_storage, 0, sizeof(id->route.addr.dst_storage));
	sib = (struct sockaddr_ib *)&id->route.addr.src_storage;
	sib->sib_family = AF_IB;
	sib->sib_sid = htobe64(RDMA_IB_IP_PS_TCP + 7427);
	sib = (struct sockaddr_ib *)&id->route.addr.dst_storage;
	sib->sib_family = AF_IB;
	sib->sib_sid = htobe64(RDMA_IB_IP_PS_TCP + 0x0102);
	CHECK(rdma_get_src_port(id) == htons(7427), "AF_IB source port = low 16 bits of sib_sid",
	      "got raw 0x%04x", rdma_get_src_port(id));
	CHECK(rdma_get_dst_port(id) == htons(0x0102), "AF_IB destination port = low 16 bits of sib_sid",
	      "got raw 0x%04x", rdma_get_dst_port(id));

	memset(&id->route.addr.src_storage, 0, sizeof(id->route.addr.src_storage));
	memset(&id->route.addr.dst_storage, 0, sizeof(id->route.addr.dst_storage));
	id->route.addr.src_addr.sa_family = AF_UNIX;
	id->route.addr.dst_addr.sa_family = AF_UNIX;
	memset(id->route.addr.src_addr.sa_data, 0x5a, sizeof(id->route.addr.src_addr.sa_data));
	memset(id->route.addr.dst_addr.sa_data, 0x5a, sizeof(id->route.addr.dst_addr.sa_data));
	CHECK(rdma_get_src_port(id) == 0 && rdma_get_dst_port(id) == 0,
	      "unknown address family: ports 0", "src raw 0x%04x dst raw 0x%04x",
	      rdma_get_src_port(id), rdma_get_dst_port(id));

	id->route.addr = saved;
	ret = rdma_destroy_id(id);
	CHECK(ret == 0, "rdma_destroy_id", "ret=%d errno=%d", ret, errno);
	rdma_destroy_event_channel(ch);
	return check_done();
}

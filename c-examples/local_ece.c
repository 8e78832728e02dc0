/* c-example: common
 *
 * rdma_set_local_ece(3) / rdma_get_remote_ece(3) on an id before any
 * connection: "returns 0 on success, or -1 on error" with errno set.
 * Refused with EINVAL (as upstream): a zero vendor_id, a non-zero
 * comp_mask. Accepted: a vendor's ECE, again with other options. An id that
 * received nothing from a peer reads a zero remote ECE (comp_mask cleared),
 * and setting the local ECE does not change it. Under valgrind (run.sh),
 * nothing the ECE is kept in leaks past rdma_destroy_id.
 */
#include <infiniband/verbs.h>

#include "check.h"

static void expect_einval(struct rdma_cm_id *id, struct ibv_ece e, const char *what)
{
	int r;

	errno = 0;
	r = rdma_set_local_ece(id, &e);
	CHECK(r == -1 && errno == EINVAL, what, "ret %d errno %d", r, errno);
}

static void expect_zero_remote(struct rdma_cm_id *id, const char *what)
{
	struct ibv_ece e;
	int r;

	memset(&e, 0xa5, sizeof(e));
	r = rdma_get_remote_ece(id, &e);
	CHECK(r == 0 && e.vendor_id == 0 && e.options == 0 && e.comp_mask == 0, what,
	      "ret %d errno %d ece %u/%u/%u", r, errno, e.vendor_id, e.options, e.comp_mask);
}

int main(void)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_ece e;
	int r;

	watchdog(15);
	ch = channel_or_skip();
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		fatal("rdma_create_id: errno=%d (%s)", errno, strerror(errno));

	expect_zero_remote(id, "a new id's remote ECE is all zero");
	expect_einval(id, (struct ibv_ece){ .vendor_id = 0, .options = 1 },
		      "rdma_set_local_ece with vendor_id 0: -1/EINVAL");
	expect_einval(id, (struct ibv_ece){ .vendor_id = 0x15b3, .comp_mask = 1 },
		      "rdma_set_local_ece with a comp_mask: -1/EINVAL");

	e = (struct ibv_ece){ .vendor_id = 0x15b3, .options = 0x7 };
	r = rdma_set_local_ece(id, &e);
	CHECK(r == 0, "rdma_set_local_ece with a vendor's ECE returns 0", "ret %d errno %d", r, errno);
	e.options = 0x3;
	r = rdma_set_local_ece(id, &e);
	CHECK(r == 0, "rdma_set_local_ece again, other options: 0", "ret %d errno %d", r, errno);
	expect_zero_remote(id, "the remote ECE stays zero after setting the local one");

	if (rdma_destroy_id(id))
		fatal("rdma_destroy_id: errno=%d", errno);
	rdma_destroy_event_channel(ch);
	return check_done();
}

/* c-example: common
 *
 * rdma_ack_cm_event(NULL) must fail cleanly with -1/EINVAL (it must not
 * crash); this needs no device, so Debian's library is held to it too.
 */
#include "check.h"

int main(void)
{
	watchdog(15);
	CHECK_ERRNO(rdma_ack_cm_event(NULL), EINVAL, "rdma_ack_cm_event(NULL) fails with EINVAL");
	CHECK_ERRNO(rdma_ack_cm_event(NULL), EINVAL, "a second rdma_ack_cm_event(NULL) fails the same way");
	return check_done();
}

/* c-example: ours (upstream frees the event at the first ack and dereferences
 * whatever it is given)
 *
 * An event is the application's until rdma_ack_cm_event(3) gives it back; a
 * pointer that is no longer (or never was) a delivered event gives -1/EINVAL
 * instead of freeing something twice: the same event acked a second time and
 * a pointer into the middle of a delivered event are refused, and the live
 * events still ack. (An old pointer whose memory a later event took names
 * that event, as with any allocator.)
 */
#include <stdint.h>

#include "check.h"

int main(void)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct rdma_cm_event *a, *b;

	watchdog(15);
	ch = channel_or_skip();
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		fatal("rdma_create_id: errno=%d (%s)", errno, strerror(errno));
	if (rdma_write_cm_event(id, RDMA_CM_EVENT_USER, 0, 1) ||
	    rdma_write_cm_event(id, RDMA_CM_EVENT_USER, 0, 2))
		fatal("rdma_write_cm_event: errno=%d (%s)", errno, strerror(errno));
	if (rdma_get_cm_event(ch, &a) || rdma_get_cm_event(ch, &b))
		fatal("rdma_get_cm_event: errno=%d (%s)", errno, strerror(errno));

	CHECK_ERRNO(rdma_ack_cm_event((struct rdma_cm_event *)((char *)b + 8)), EINVAL,
		    "a pointer into a delivered event is not an event");
	CHECK(rdma_ack_cm_event(a) == 0, "the first event acks", "errno=%d", errno);
	CHECK_ERRNO(rdma_ack_cm_event(a), EINVAL, "the same event acked again");
	CHECK(b->param.arg == 2, "the other event is untouched by the refused acks",
	      "arg %llu", (unsigned long long)b->param.arg);
	CHECK(rdma_ack_cm_event(b) == 0, "the second event acks", "errno=%d", errno);
	CHECK_ERRNO(rdma_ack_cm_event(b), EINVAL, "and not again");
	CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id returns: every event was acked once",
	      "errno=%d", errno);
	rdma_destroy_event_channel(ch);
	return check_done();
}

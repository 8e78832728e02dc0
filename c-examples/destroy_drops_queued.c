/* c-example: ours (needs RDMACM_1.4 rdma_write_cm_event)
 *
 * Only *reported* (retrieved) events must be acknowledged before
 * rdma_destroy_id returns: an event still queued on the channel when its id
 * is destroyed is not waited for, and it is discarded (never delivered with a
 * dangling id).  Events of other ids on the same channel are kept.
 */
#include <fcntl.h>

#include "check.h"

int main(void)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *x, *y;
	struct rdma_cm_event *ev;
	long long t0;
	int ret;

	watchdog(15);
	ch = channel_or_skip();
	if (rdma_create_id(ch, &x, NULL, RDMA_PS_TCP) || rdma_create_id(ch, &y, NULL, RDMA_PS_TCP))
		fatal("rdma_create_id: errno=%d (%s)", errno, strerror(errno));
	ret = rdma_write_cm_event(x, RDMA_CM_EVENT_USER, 0, 1);
	ret |= rdma_write_cm_event(y, RDMA_CM_EVENT_USER, 0, 2);
	ret |= rdma_write_cm_event(x, RDMA_CM_EVENT_USER, 0, 3);
	if (ret)
		fatal("rdma_write_cm_event: errno=%d (%s)", errno, strerror(errno));

	t0 = now_ms();
	ret = rdma_destroy_id(x);
	CHECK(ret == 0 && now_ms() - t0 < 3000,
	      "rdma_destroy_id does not wait for queued, unretrieved events",
	      "ret=%d errno=%d after %lld ms", ret, errno, now_ms() - t0);

	if (fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK))
		fatal("fcntl O_NONBLOCK: errno=%d", errno);
	ret = rdma_get_cm_event(ch, &ev);
	CHECK(ret == 0 && ev->id == y && ev->param.arg == 2,
	      "the other id's event is still delivered", "ret=%d errno=%d%s", ret, errno,
	      ret == 0 ? " (event of the destroyed id or wrong arg)" : "");
	if (ret == 0)
		rdma_ack_cm_event(ev);
	CHECK_ERRNO(rdma_get_cm_event(ch, &ev), EAGAIN,
		    "the destroyed id's queued events were discarded");

	ret = rdma_destroy_id(y);
	CHECK(ret == 0, "rdma_destroy_id(other id)", "ret=%d errno=%d", ret, errno);
	rdma_destroy_event_channel(ch);
	return check_done();
}

/* c-example: ours (needs RDMACM_1.4 rdma_write_cm_event)
 *
 * rdma_create_event_channel(3): "Event channels are used to direct all events
 * on an rdma_cm_id"; different channels are independent: an event for an id
 * on channel 1 is delivered on channel 1 only, never on channel 2.
 */
#include <fcntl.h>
#include <poll.h>

#include "check.h"

static int readable(int fd)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	return poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLIN);
}

int main(void)
{
	struct rdma_event_channel *ch1, *ch2;
	struct rdma_cm_id *a, *b;
	struct rdma_cm_event *ev;
	struct pollfd pfd;
	int ret;

	watchdog(15);
	ch1 = channel_or_skip();
	ch2 = channel_or_skip();
	CHECK(ch1->fd != ch2->fd, "two channels have distinct fds", "same fd");
	if (rdma_create_id(ch1, &a, NULL, RDMA_PS_TCP) || rdma_create_id(ch2, &b, NULL, RDMA_PS_TCP))
		fatal("rdma_create_id: errno=%d (%s)", errno, strerror(errno));
	if (fcntl(ch2->fd, F_SETFL, fcntl(ch2->fd, F_GETFL) | O_NONBLOCK))
		fatal("fcntl O_NONBLOCK: errno=%d", errno);

	ret = rdma_write_cm_event(a, RDMA_CM_EVENT_USER, 0, 100);
	CHECK(ret == 0, "event written for the id on channel 1", "errno=%d", errno);
	pfd.fd = ch1->fd;
	pfd.events = POLLIN;
	CHECK(poll(&pfd, 1, 5000) == 1, "channel 1 becomes readable", "not readable within 5 s");
	CHECK(!readable(ch2->fd), "channel 2 stays unreadable", "channel 2 readable");
	CHECK_ERRNO(rdma_get_cm_event(ch2, &ev), EAGAIN, "channel 2 has no event (EAGAIN)");
	ret = rdma_get_cm_event(ch1, &ev);
	CHECK(ret == 0 && ev->id == a && ev->param.arg == 100, "channel 1 delivers the event",
	      "ret=%d errno=%d", ret, errno);
	if (ret == 0)
		rdma_ack_cm_event(ev);

	ret = rdma_write_cm_event(b, RDMA_CM_EVENT_USER, 0, 200);
	CHECK(ret == 0, "event written for the id on channel 2", "errno=%d", errno);
	ret = rdma_get_cm_event(ch2, &ev);
	CHECK(ret == 0 && ev->id == b && ev->param.arg == 200, "channel 2 delivers its own event",
	      "ret=%d errno=%d", ret, errno);
	if (ret == 0)
		rdma_ack_cm_event(ev);
	CHECK(!readable(ch1->fd), "channel 1 did not get channel 2's event", "channel 1 readable");

	CHECK(rdma_destroy_id(a) == 0 && rdma_destroy_id(b) == 0, "ids destroyed", "errno=%d", errno);
	rdma_destroy_event_channel(ch1);
	rdma_destroy_event_channel(ch2);
	return check_done();
}

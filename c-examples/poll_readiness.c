/* c-example: ours (needs RDMACM_1.4 rdma_write_cm_event)
 *
 * rdma_create_event_channel(3): the channel fd can be polled/selected.
 * Readiness must follow the event queue: not readable while nothing is
 * queued, readable (POLLIN, level-triggered; also via epoll) once
 * rdma_write_cm_event queued an event, readable while a second event is still
 * queued, and not readable after the last event was retrieved or acked.
 */
#include <poll.h>
#include <sys/epoll.h>

#include "check.h"

static int readable(int fd, int timeout_ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	int ret = poll(&pfd, 1, timeout_ms);

	if (ret < 0)
		return -1;
	return ret == 1 && (pfd.revents & POLLIN);
}

static int get_one(struct rdma_event_channel *ch, struct rdma_cm_event **ev)
{
	int ret = rdma_get_cm_event(ch, ev);

	if (ret)
		fatal("rdma_get_cm_event: ret=%d errno=%d (%s)", ret, errno, strerror(errno));
	return ret;
}

int main(void)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev1, *ev2;
	struct epoll_event eev, out;
	int ret, ep;

	watchdog(15);
	ch = channel_or_skip();
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		fatal("rdma_create_id: errno=%d (%s)", errno, strerror(errno));

	CHECK(readable(ch->fd, 0) == 0, "fd not readable before any event", "poll says readable");

	ep = epoll_create1(EPOLL_CLOEXEC);
	memset(&eev, 0, sizeof(eev));
	eev.events = EPOLLIN;
	ret = epoll_ctl(ep, EPOLL_CTL_ADD, ch->fd, &eev);
	CHECK(ep >= 0 && ret == 0, "channel fd can be added to an epoll set",
	      "epoll errno=%d (%s)", errno, strerror(errno));
	CHECK(epoll_wait(ep, &out, 1, 0) == 0, "epoll: nothing ready before any event",
	      "epoll_wait reported the fd ready");

	ret = rdma_write_cm_event(id, RDMA_CM_EVENT_USER, 0, 1);
	CHECK(ret == 0, "rdma_write_cm_event(USER) succeeds", "ret=%d errno=%d (%s)",
	      ret, errno, strerror(errno));
	CHECK(readable(ch->fd, 5000) == 1, "fd readable (POLLIN) after rdma_write_cm_event",
	      "poll did not report POLLIN within 5 s");
	CHECK(readable(ch->fd, 0) == 1, "fd stays readable until the event is retrieved",
	      "second poll not readable");
	ret = epoll_wait(ep, &out, 1, 1000);
	CHECK(ret == 1 && (out.events & EPOLLIN), "epoll reports EPOLLIN with an event queued",
	      "epoll_wait=%d events=0x%x", ret, ret == 1 ? out.events : 0);

	get_one(ch, &ev1);
	CHECK(readable(ch->fd, 0) == 0, "fd not readable after the only event was retrieved",
	      "poll says readable");
	CHECK(epoll_wait(ep, &out, 1, 0) == 0, "epoll: nothing ready after retrieval",
	      "epoll_wait reported the fd ready");
	ret = rdma_ack_cm_event(ev1);
	CHECK(ret == 0, "rdma_ack_cm_event", "ret=%d errno=%d", ret, errno);
	CHECK(readable(ch->fd, 0) == 0, "fd not readable after ack", "poll says readable");

	/* Two queued events: readable until both are retrieved. */
	ret = rdma_write_cm_event(id, RDMA_CM_EVENT_USER, 0, 2);
	ret |= rdma_write_cm_event(id, RDMA_CM_EVENT_USER, 0, 3);
	CHECK(ret == 0, "two events queued", "errno=%d (%s)", errno, strerror(errno));
	CHECK(readable(ch->fd, 5000) == 1, "fd readable with two events queued", "not readable");
	get_one(ch, &ev1);
	CHECK(readable(ch->fd, 1000) == 1, "fd still readable with one event left", "not readable");
	get_one(ch, &ev2);
	CHECK(readable(ch->fd, 0) == 0, "fd not readable once both were retrieved", "poll says readable");
	CHECK(rdma_ack_cm_event(ev2) == 0 && rdma_ack_cm_event(ev1) == 0,
	      "acks in reverse order succeed", "errno=%d", errno);
	CHECK(readable(ch->fd, 0) == 0, "fd not readable after both acks", "poll says readable");

	if (ep >= 0)
		close(ep);
	ret = rdma_destroy_id(id);
	CHECK(ret == 0, "rdma_destroy_id", "ret=%d errno=%d", ret, errno);
	rdma_destroy_event_channel(ch);
	return check_done();
}

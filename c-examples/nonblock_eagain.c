/* c-example: common
 *
 * rdma_create_event_channel(3): "Each event channel is mapped to a file
 * descriptor ... Users may make the fd non-blocking, poll or select the fd".
 * rdma_get_cm_event(3): "The default synchronous behavior of this routine can
 * be changed by modifying the file descriptor associated with the given
 * channel."
 *
 * Checks: channel->fd is an open fd; with O_NONBLOCK set and nothing queued,
 * rdma_get_cm_event returns -1/EAGAIN (also after an id was created on the
 * channel, which must not queue anything); clearing O_NONBLOCK is accepted.
 */
#include <fcntl.h>
#include <poll.h>

#include "check.h"

int main(void)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev = NULL;
	struct rdma_cm_id *id = NULL;
	struct pollfd pfd;
	long long t0;
	int flags, ret;

	watchdog(15);
	ch = channel_or_skip();

	flags = fcntl(ch->fd, F_GETFL);
	CHECK(flags != -1, "channel fd is an open file descriptor",
	      "fcntl(F_GETFL) errno=%d (%s)", errno, strerror(errno));
	if (flags == -1)
		return check_done();

	ret = fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK);
	CHECK(ret == 0, "O_NONBLOCK can be set on the channel fd",
	      "fcntl(F_SETFL) errno=%d (%s)", errno, strerror(errno));

	t0 = now_ms();
	CHECK_ERRNO(rdma_get_cm_event(ch, &ev), EAGAIN,
		    "non-blocking get_cm_event on an empty channel fails with EAGAIN");
	CHECK(now_ms() - t0 < 2000, "non-blocking get_cm_event returns at once",
	      "took %lld ms", now_ms() - t0);

	pfd.fd = ch->fd;
	pfd.events = POLLIN;
	pfd.revents = 0;
	ret = poll(&pfd, 1, 0);
	CHECK(ret == 0, "empty channel fd is not readable",
	      "poll returned %d revents=0x%x", ret, pfd.revents);

	ret = rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	CHECK(ret == 0, "rdma_create_id on the non-blocking channel",
	      "ret=%d errno=%d (%s)", ret, errno, strerror(errno));
	CHECK_ERRNO(rdma_get_cm_event(ch, &ev), EAGAIN,
		    "creating an id queues no event (still EAGAIN)");

	ret = fcntl(ch->fd, F_SETFL, flags & ~O_NONBLOCK);
	flags = fcntl(ch->fd, F_GETFL);
	CHECK(ret == 0 && flags != -1 && !(flags & O_NONBLOCK),
	      "O_NONBLOCK can be cleared again", "ret=%d flags=0x%x", ret, flags);

	if (id) {
		ret = rdma_destroy_id(id);
		CHECK(ret == 0, "rdma_destroy_id", "ret=%d errno=%d", ret, errno);
	}
	rdma_destroy_event_channel(ch);
	check(1, "rdma_destroy_event_channel returned");
	return check_done();
}

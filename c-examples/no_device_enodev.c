/* c-example: ours
 *
 * Calls that need an RDMA device fail synchronously with -1/ENODEV when the
 * machine has none (rdma_bind_addr, rdma_resolve_addr, rdma_listen), and a
 * failed rdma_resolve_addr queues no ADDR_ERROR event on top of the error.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <unistd.h>

#include "check.h"

int main(void)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev;
	struct sockaddr_in sin;

	watchdog(15);
	if (access("/dev/infiniband", F_OK) == 0)
		skip("this machine has /dev/infiniband: test needs a machine without RDMA devices");
	ch = channel_or_skip();
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		fatal("rdma_create_id: errno=%d (%s)", errno, strerror(errno));

	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sin.sin_port = htons(7471);
	CHECK_ERRNO(rdma_bind_addr(id, (struct sockaddr *)&sin), ENODEV,
		    "rdma_bind_addr(127.0.0.1) fails with ENODEV");
	CHECK_ERRNO(rdma_resolve_addr(id, NULL, (struct sockaddr *)&sin, 2000), ENODEV,
		    "rdma_resolve_addr(127.0.0.1) fails with ENODEV");
	CHECK_ERRNO(rdma_listen(id, 0), ENODEV, "rdma_listen fails with ENODEV");

	if (fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK))
		fatal("fcntl O_NONBLOCK: errno=%d", errno);
	CHECK_ERRNO(rdma_get_cm_event(ch, &ev), EAGAIN, "failed calls queued no event");

	CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id", "errno=%d", errno);
	rdma_destroy_event_channel(ch);
	return check_done();
}

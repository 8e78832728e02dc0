/* dev-example: rdma_leave_multicast drops the group's unread events
 *
 * rdma_join_multicast(3): "the user will receive a MULTICAST_JOIN event"
 * once joined; rdma_leave_multicast(3): "Leaves a multicast group".  A join
 * whose event is read (JOIN, status 0) and then left must succeed; a group
 * joined and left before its event was read must leave nothing behind: no
 * event for it arrives afterwards (the kernel drops it on LEAVE_MCAST).
 * Leaving a group never joined: -1 (errno printed).
 *
 *   dev_mcast_leave ADDR [PORT=7508]   (groups 239.255.42.1 and .2)
 */
#include "dev.h"

static int group(int n, struct sockaddr_in *g)
{
	memset(g, 0, sizeof(*g));
	g->sin_family = AF_INET;
	g->sin_port = htons(dev_port);
	return inet_pton(AF_INET, n == 1 ? "239.255.42.1" : "239.255.42.2", &g->sin_addr) == 1 ? 0 : -1;
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id = NULL;
	struct rdma_cm_event *ev;
	struct sockaddr_in g1, g2, g3;
	int ret, e;

	dev_args(argc, argv, 7508);
	watchdog(60);
	if (dev_addr.ss_family != AF_INET || group(1, &g1) || group(2, &g2)) {
		printf("skip: IPv4 address wanted\n");
		return 77;
	}
	ch = dev_channel();
	if (DEV_CALL(rdma_create_id(ch, &id, NULL, RDMA_PS_UDP), "rdma_create_id") ||
	    DEV_CALL(rdma_resolve_addr(id, dev_sa(), (struct sockaddr *)&g1, DEV_RESOLVE_MS), "rdma_resolve_addr") ||
	    dev_expect(ch, DEV_ACTIVE, RDMA_CM_EVENT_ADDR_RESOLVED))
		goto out;
	errno = 0;
	ret = rdma_join_multicast(id, (struct sockaddr *)&g1, &g1);
	e = errno;
	if (ret) {
		/* iWARP has no multicast */
		printf("rdma_join_multicast: ret -1 errno %s\n", dev_errno_name(e));
		goto out;
	}
	ev = dev_get(ch, DEV_ACTIVE, RDMA_CM_EVENT_MULTICAST_JOIN, 1);
	if (ev) {
		CHECK(ev->status == 0 && ev->param.ud.private_data == &g1,
		      "the JOIN event carries status 0 and the join's context", "status %d", ev->status);
		dev_ack(ev);
	}
	DEV_CALL(rdma_leave_multicast(id, (struct sockaddr *)&g1), "rdma_leave_multicast after the JOIN was read");

	if (DEV_CALL(rdma_join_multicast(id, (struct sockaddr *)&g2, &g2), "second rdma_join_multicast"))
		goto out;
	usleep(1000 * 1000); /* the join completes; its event waits unread */
	DEV_CALL(rdma_leave_multicast(id, (struct sockaddr *)&g2), "rdma_leave_multicast before the JOIN was read");
	printf("events after leaving within 1000 ms:\n");
	if (!dev_drain(ch, DEV_ACTIVE, 1000))
		printf("(none)\n");

	group(2, &g3);
	errno = 0;
	ret = rdma_leave_multicast(id, (struct sockaddr *)&g3);
	printf("leaving a group not joined: ret %d errno %s\n", ret, ret ? dev_errno_name(errno) : "-");
	CHECK(ret == -1, "leaving a group not joined fails", "ret %d", ret);
out:
	dev_seq_print(DEV_ACTIVE);
	if (id)
		rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	return check_done();
}

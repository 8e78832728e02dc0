/* dev-example: event sequence of connect / accept / disconnect, both sides
 *
 * rdma_cm(7) CLIENT/SERVER OPERATION, rdma_get_cm_event(3), rdma_connect(3),
 * rdma_accept(3), rdma_disconnect(3): the active side sees ADDR_RESOLVED,
 * ROUTE_RESOLVED, ESTABLISHED, DISCONNECTED; the passive side sees
 * CONNECT_REQUEST (new id, listen_id = listener), ESTABLISHED, DISCONNECTED.
 * "After successfully disconnecting, an RDMA_CM_EVENT_DISCONNECTED event will
 * be generated on both sides of the connection."  TIMEWAIT_EXIT is printed
 * if the library delivers it while the ids still exist (a window after the
 * disconnect), so the sequences can be compared between libraries.
 *
 * Round 1: the active side disconnects first; round 2: the passive side.
 * The peer gets DISCONNECTED, then the events the initiator sees before the
 * peer calls rdma_disconnect are printed (on IB/RoCE none: the initiator's
 * DISCONNECTED waits for the peer's DREP; on iWARP it comes at once), then
 * the peer disconnects too.  Each side has its own event channel; one
 * process, one thread.
 *
 *   dev_conn_events ADDR [PORT=7501]
 */
#include "dev.h"

#define TIMEWAIT_WINDOW_MS 6000
#define PEER_WINDOW_MS 1000

static int round_trip(struct dev_pair *p)
{
	struct ibv_wc wc;

	if (dev_post_recv(p->child->qp, &p->pq) || dev_post_send(p->active->qp, &p->aq, "ping")) {
		check(0, "post recv/send: errno %s", dev_errno_name(errno));
		return -1;
	}
	CHECK(dev_poll_cq(&p->aq, 5000, &wc) == IBV_WC_SUCCESS, "active: send completes",
	      "status %d", (int)wc.status);
	CHECK(dev_poll_cq(&p->pq, 5000, &wc) == IBV_WC_SUCCESS && !strcmp(p->pq.buf, "ping"),
	      "passive: receives the message", "status %d", (int)wc.status);
	return 0;
}

static void one_round(struct dev_pair *p, int initiator)
{
	struct rdma_cm_id *first, *second;
	struct rdma_event_channel *fch = initiator == DEV_ACTIVE ? p->ach : p->pch;
	struct rdma_event_channel *sch = initiator == DEV_ACTIVE ? p->pch : p->ach;
	int other = initiator == DEV_ACTIVE ? DEV_PASSIVE : DEV_ACTIVE;
	int r, got_first;

	printf("-- round: %s side disconnects first\n", dev_side_name[initiator]);
	if (dev_connect_pair(p, "dev_conn_events req", "dev_conn_events rep"))
		goto out;
	round_trip(p);
	first = initiator == DEV_ACTIVE ? p->active : p->child;
	second = initiator == DEV_ACTIVE ? p->child : p->active;
	if (DEV_CALL(rdma_disconnect(first), "first rdma_disconnect"))
		goto out;
	/* The peer learns of it (DREQ) ... */
	dev_expect(sch, other, RDMA_CM_EVENT_DISCONNECTED);
	/* ... the initiator's own DISCONNECTED may wait for the peer's rdma_disconnect (DREP). */
	printf("%s: events before the peer calls rdma_disconnect:\n", dev_side_name[initiator]);
	got_first = dev_drain(fch, initiator, PEER_WINDOW_MS) > 0;
	if (!got_first)
		printf("%s: (none within %d ms)\n", dev_side_name[initiator], PEER_WINDOW_MS);
	/* rdma_disconnect(3): "should be called by both the client and server side". */
	errno = 0;
	r = rdma_disconnect(second);
	printf("%s: rdma_disconnect after DISCONNECTED: ret %d errno %s\n", dev_side_name[other],
	       r, r ? dev_errno_name(errno) : "0");
	if (!got_first)
		dev_expect(fch, initiator, RDMA_CM_EVENT_DISCONNECTED);
	/* TIMEWAIT_EXIT, if delivered, while the ids (and their QPs) still exist. */
	dev_wait_for(p->ach, DEV_ACTIVE, RDMA_CM_EVENT_TIMEWAIT_EXIT, TIMEWAIT_WINDOW_MS);
	dev_wait_for(p->pch, DEV_PASSIVE, RDMA_CM_EVENT_TIMEWAIT_EXIT, TIMEWAIT_WINDOW_MS);
	/* once more, on a connection that is over */
	errno = 0;
	r = rdma_disconnect(first);
	printf("%s: rdma_disconnect again once the connection is over: ret %d errno %s\n", dev_side_name[initiator], r,
	       r ? dev_errno_name(errno) : "0");
out:
	dev_seq_print(DEV_ACTIVE);
	dev_seq_print(DEV_PASSIVE);
	/* keep the listener and both channels for the next round */
	dev_end_conn(p);
	/* nothing may arrive for destroyed ids */
	CHECK(dev_drain(p->ach, DEV_ACTIVE, 200) == 0 && dev_drain(p->pch, DEV_PASSIVE, 200) == 0,
	      "no events after rdma_destroy_id", "late events above");
	dev_seq[DEV_ACTIVE][0] = dev_seq[DEV_PASSIVE][0] = 0;
}

int main(int argc, char **argv)
{
	struct dev_pair p;

	memset(&p, 0, sizeof(p));
	dev_args(argc, argv, 7501);
	watchdog(90);
	if (dev_listen(&p))
		return check_done();
	p.ach = dev_channel();
	one_round(&p, DEV_ACTIVE);
	one_round(&p, DEV_PASSIVE);
	dev_teardown(&p);
	return check_done();
}

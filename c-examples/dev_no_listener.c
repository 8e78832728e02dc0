/* dev-example: rdma_connect to a port nobody listens on
 *
 * rdma_get_cm_event(3): REJECTED "Indicates that a connection request or
 * response was rejected by the remote end point" (status = transport reject
 * reason), UNREACHABLE "the remote server is not reachable or unable to
 * respond to a connection request", CONNECT_ERROR "an error has occurred
 * trying to establish a connection".  Connecting to a port without a
 * listener must end in one of those, with a non-zero status; the program
 * prints which one and the status.  A listener on another port must see
 * nothing, and the id can be destroyed afterwards.  (On iWARP the refusal
 * may come synchronously: rdma_connect fails with ECONNREFUSED.)
 *
 *   dev_no_listener ADDR [PORT=7503]   (the listener decoy uses PORT+1)
 */
#include "dev.h"

int main(int argc, char **argv)
{
	struct dev_pair p;
	struct rdma_conn_param cp;
	struct rdma_cm_event *ev;
	struct sockaddr_storage decoy;

	memset(&p, 0, sizeof(p));
	dev_args(argc, argv, 7503);
	watchdog(60);
	/* a listener on PORT+1: must not receive the request for PORT */
	dev_parse_addr(dev_addr_str, dev_port + 1, &decoy);
	p.pch = dev_channel();
	if (DEV_CALL(rdma_create_id(p.pch, &p.listen, NULL, RDMA_PS_TCP), "passive: rdma_create_id") ||
	    DEV_CALL(rdma_bind_addr(p.listen, (struct sockaddr *)&decoy), "passive: rdma_bind_addr") ||
	    DEV_CALL(rdma_listen(p.listen, 4), "passive: rdma_listen"))
		return check_done();

	if (dev_resolve(&p) || dev_rdma_qp(p.active, &p.aq, "active"))
		goto out;
	dev_conn_param(&cp, "dev_no_listener");
	errno = 0;
	if (rdma_connect(p.active, &cp)) {
		/* iWARP (siw): the TCP connect is refused before rdma_connect returns */
		int e = errno;

		dev_skip_nodev("rdma_connect", e);
		printf("active: rdma_connect: ret -1 errno %s\n", dev_errno_name(e));
		CHECK(e == ECONNREFUSED || e == ETIMEDOUT || e == EHOSTUNREACH || e == ENETUNREACH,
		      "active: synchronous rdma_connect failure is a refusal", "errno %s",
		      dev_errno_name(e));
		goto out;
	}
	ev = dev_get(p.ach, DEV_ACTIVE, -1, 1);
	if (ev) {
		CHECK(ev->event == RDMA_CM_EVENT_REJECTED || ev->event == RDMA_CM_EVENT_UNREACHABLE ||
		      ev->event == RDMA_CM_EVENT_CONNECT_ERROR,
		      "active: the connect fails with REJECTED, UNREACHABLE or CONNECT_ERROR",
		      "got %s", dev_event_name(ev->event));
		CHECK(ev->status != 0, "active: the failure event has a non-zero status", "status 0");
		printf("active: %s private_data_len %d\n", dev_event_name(ev->event),
		       ev->param.conn.private_data_len);
	}
	dev_ack(ev);
	printf("further events within 500 ms:\n");
	if (!dev_drain(p.ach, DEV_ACTIVE, 500) + !dev_drain(p.pch, DEV_PASSIVE, 100) == 2)
		printf("(none)\n");
out:
	dev_seq_print(DEV_ACTIVE);
	dev_seq_print(DEV_PASSIVE);
	dev_teardown(&p);
	return check_done();
}

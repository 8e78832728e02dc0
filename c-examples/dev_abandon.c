/* dev-example: the active side gives up a connection attempt
 *
 * rdma_destroy_id(3) on an active id whose rdma_connect has not been
 * answered: the listener's new id (CONNECT_REQUEST taken, not accepted yet)
 * learns that the peer is gone. Prints the events the passive side gets
 * within 3 s; the output must equal Debian's on the same kernel.
 *
 *   dev_abandon ADDR [PORT=7510]
 */
#include "dev.h"

int main(int argc, char **argv)
{
	struct dev_pair p;
	struct rdma_conn_param cp;
	struct rdma_cm_event *ev;

	memset(&p, 0, sizeof(p));
	dev_args(argc, argv, 7510);
	watchdog(60);
	if (dev_listen(&p) || dev_resolve(&p) || dev_rdma_qp(p.active, &p.aq, "active"))
		return check_done();
	dev_conn_param(&cp, "dev_abandon req");
	if (DEV_CALL(rdma_connect(p.active, &cp), "active: rdma_connect"))
		return check_done();
	ev = dev_get_request(&p, "dev_abandon req");
	if (!ev)
		return check_done();
	dev_ack(ev);
	/* the active side leaves before any answer */
	dev_free_qp(p.active, &p.aq);
	CHECK(rdma_destroy_id(p.active) == 0, "active: rdma_destroy_id with the request unanswered", "errno %s",
	      dev_errno_name(errno));
	p.active = NULL;
	printf("passive: events on the unaccepted id within 3 s:\n");
	if (dev_drain(p.pch, DEV_PASSIVE, 3000) == 0)
		printf("passive: (none)\n");
	dev_seq_print(DEV_PASSIVE);
	CHECK(rdma_destroy_id(p.child) == 0, "passive: rdma_destroy_id(child)", "errno %s", dev_errno_name(errno));
	CHECK(rdma_destroy_id(p.listen) == 0, "passive: rdma_destroy_id(listener)", "errno %s", dev_errno_name(errno));
	return check_done();
}

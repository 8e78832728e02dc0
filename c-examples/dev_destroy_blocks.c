/* dev-example: rdma_destroy_id blocks while an event is unacked
 *
 * rdma_get_cm_event(3): "All events that are reported must be acknowledged
 * by calling rdma_ack_cm_event.  Destruction of an rdma_cm_id will block
 * until related events have been acknowledged."  rdma_destroy_id(3): "Users
 * must free any associated QP with the rdma_cm_id before calling this
 * routine and ack all related events."
 *
 * Part 1, a connected id: the passive side disconnects, the active side
 * takes DISCONNECTED and holds it; rdma_destroy_id(active) in a second
 * thread must still be blocked after 500 ms and return 0 promptly once the
 * event is acked.
 * Part 2, a listener: CONNECT_REQUEST is counted on the listener, so with
 * it unacked rdma_destroy_id(listener) blocks (after the child was rejected
 * and destroyed), and returns once it is acked.
 *
 *   dev_destroy_blocks ADDR [PORT=7505]
 */
#include "dev.h"

struct destroyer {
	pthread_t t;
	struct rdma_cm_id *id;
	volatile int done;
	int ret, err;
};

static void *destroy_thread(void *arg)
{
	struct destroyer *d = arg;

	errno = 0;
	d->ret = rdma_destroy_id(d->id);
	d->err = errno;
	__atomic_store_n(&d->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

/* Start destroying, check it blocks, ack, check it returns. */
static void destroy_while_held(const char *who, struct rdma_cm_id *id, struct rdma_cm_event *ev)
{
	struct destroyer d = { .id = id };
	char what[128];
	long long end;

	if (pthread_create(&d.t, NULL, destroy_thread, &d))
		fatal("pthread_create");
	sleep_ms(500);
	snprintf(what, sizeof(what), "rdma_destroy_id(%s) is still blocked after 500 ms", who);
	CHECK(!__atomic_load_n(&d.done, __ATOMIC_SEQ_CST), what, "returned %d errno %s", d.ret,
	      dev_errno_name(d.err));
	rdma_ack_cm_event(ev);
	end = now_ms() + 5000;
	while (!__atomic_load_n(&d.done, __ATOMIC_SEQ_CST) && now_ms() < end)
		sleep_ms(5);
	if (!__atomic_load_n(&d.done, __ATOMIC_SEQ_CST)) {
		snprintf(what, sizeof(what),
			 "rdma_destroy_id(%s) still blocked 5 s after rdma_ack_cm_event", who);
		fail_stuck(what);
	}
	pthread_join(d.t, NULL);
	snprintf(what, sizeof(what), "rdma_destroy_id(%s) returns 0 once the event is acked", who);
	CHECK(d.ret == 0, what, "ret %d errno %s", d.ret, dev_errno_name(d.err));
}

int main(int argc, char **argv)
{
	struct dev_pair p;
	struct rdma_conn_param cp;
	struct rdma_cm_event *ev;

	memset(&p, 0, sizeof(p));
	dev_args(argc, argv, 7505);
	watchdog(60);
	if (dev_listen(&p))
		return check_done();
	p.ach = dev_channel();

	printf("-- part 1: connected id holding DISCONNECTED\n");
	if (dev_connect_pair(&p, NULL, NULL))
		goto out;
	if (DEV_CALL(rdma_disconnect(p.child), "passive: rdma_disconnect"))
		goto out;
	ev = dev_get(p.ach, DEV_ACTIVE, RDMA_CM_EVENT_DISCONNECTED, 0);
	if (!ev)
		goto out;
	dev_free_qp(p.active, &p.aq);
	destroy_while_held("connected active id", p.active, ev);
	p.active = NULL;
	/* the passive side still completes its disconnect */
	dev_wait_for(p.pch, DEV_PASSIVE, RDMA_CM_EVENT_DISCONNECTED, 3000);
	dev_free_qp(p.child, &p.pq);
	CHECK(rdma_destroy_id(p.child) == 0, "passive: rdma_destroy_id(child) returns 0", "errno %s",
	      dev_errno_name(errno));
	p.child = NULL;
	dev_seq_print(DEV_ACTIVE);
	dev_seq_print(DEV_PASSIVE);

	printf("-- part 2: listener holding CONNECT_REQUEST\n");
	if (dev_resolve(&p) || dev_rdma_qp(p.active, &p.aq, "active"))
		goto out;
	dev_conn_param(&cp, NULL);
	if (DEV_CALL(rdma_connect(p.active, &cp), "active: rdma_connect"))
		goto out;
	ev = dev_get_request(&p, NULL);
	if (!ev)
		goto out;
	CHECK(rdma_reject(p.child, NULL, 0) == 0, "passive: rdma_reject returns 0", "errno %s",
	      dev_errno_name(errno));
	CHECK(rdma_destroy_id(p.child) == 0,
	      "passive: rdma_destroy_id(child) returns at once (its CONNECT_REQUEST counts on the listener)",
	      "errno %s", dev_errno_name(errno));
	p.child = NULL;
	destroy_while_held("listener", p.listen, ev);
	p.listen = NULL;
	dev_ack(dev_get(p.ach, DEV_ACTIVE, RDMA_CM_EVENT_REJECTED, 1));
	dev_seq_print(DEV_ACTIVE);
	dev_seq_print(DEV_PASSIVE);
out:
	dev_teardown(&p);
	return check_done();
}

/* dev-example: rdma_migrate_id between channels and into synchronous mode
 *
 * rdma_migrate_id(3): "Migrates a communication identifier to a different
 * event channel and moves any pending events associated with the
 * rdma_cm_id to the new channel. [...] This call will block while there are
 * any unacknowledged events on the current event channel. If the channel
 * parameter is NULL, the specified rdma_cm_id will be placed into
 * synchronous operation mode."
 *
 * The active id's ADDR_RESOLVED is left pending on its first channel and
 * the id migrated: the event must come out of the second channel, the
 * first must stay empty, and later events (ROUTE_RESOLVED, ESTABLISHED)
 * follow the id.  The passive side migrates the accepted id before
 * rdma_accept: its ESTABLISHED arrives on the new channel, not on the
 * listener's.  A migration with an event not yet acked waits for the ack.
 * Finally the active id goes to synchronous mode (a private channel, now
 * id->channel), where the peer's disconnect shows up.  (It does not
 * disconnect in turn: with Debian's library on siw, rdma_disconnect on a
 * synchronous id that already read its DISCONNECTED does not return.)
 *
 *   dev_migrate ADDR [PORT=7511]
 */
#include "dev.h"

struct late_ack {
	struct rdma_cm_event *ev;
	int ms;
};

static void *ack_later(void *arg)
{
	struct late_ack *a = arg;

	usleep(a->ms * 1000);
	rdma_ack_cm_event(a->ev);
	return NULL;
}

/* Whether ch has an event within ms (the event stays queued). */
static int pending(struct rdma_event_channel *ch, int ms)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };

	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

int main(int argc, char **argv)
{
	struct dev_pair p;
	struct rdma_event_channel *ach2 = NULL, *pch2 = NULL;
	struct rdma_conn_param cp;
	struct rdma_cm_event *ev;
	struct late_ack la;
	pthread_t th;
	long long t0;
	int ok;

	memset(&p, 0, sizeof(p));
	dev_args(argc, argv, 7511);
	watchdog(90);
	if (dev_listen(&p))
		goto out;
	p.ach = dev_channel();
	ach2 = dev_channel();
	pch2 = dev_channel();
	if (DEV_CALL(rdma_create_id(p.ach, &p.active, NULL, RDMA_PS_TCP), "active: rdma_create_id") ||
	    DEV_CALL(rdma_resolve_addr(p.active, NULL, dev_sa(), DEV_RESOLVE_MS), "active: rdma_resolve_addr"))
		goto out;

	/* 1. a pending event moves with the id */
	CHECK(pending(p.ach, DEV_EVENT_MS), "active: ADDR_RESOLVED pending on the first channel",
	      "nothing arrived");
	if (DEV_CALL(rdma_migrate_id(p.active, ach2), "active: rdma_migrate_id(second channel)"))
		goto out;
	CHECK(p.active->channel == ach2, "active: id->channel is the second channel", "it is not");
	CHECK(!pending(p.ach, 300), "active: the first channel is empty after the migration",
	      "it still reports an event");
	if (dev_expect(ach2, DEV_ACTIVE, RDMA_CM_EVENT_ADDR_RESOLVED))
		goto out;

	/* 2. later events follow the id */
	if (DEV_CALL(rdma_resolve_route(p.active, DEV_RESOLVE_MS), "active: rdma_resolve_route"))
		goto out;
	ev = dev_get(ach2, DEV_ACTIVE, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
	if (!ev)
		goto out;

	/* 3. a migration waits until the id's delivered event is acked */
	la.ev = ev;
	la.ms = 400;
	t0 = now_ms();
	if (pthread_create(&th, NULL, ack_later, &la)) {
		dev_ack(ev);
		goto out;
	}
	ok = !DEV_CALL(rdma_migrate_id(p.active, p.ach), "active: rdma_migrate_id(back, event unacked)");
	fprintf(stderr, "[migrate returned after %lld ms]\n", now_ms() - t0);
	CHECK(now_ms() - t0 >= 300, "active: rdma_migrate_id blocked until the event was acked",
	      "returned after %lld ms", now_ms() - t0);
	pthread_join(th, NULL);
	if (!ok)
		goto out;
	CHECK(p.active->channel == p.ach, "active: id->channel is the first channel again", "it is not");

	/* 4. the passive side moves the new id before accepting */
	if (dev_rdma_qp(p.active, &p.aq, "active"))
		goto out;
	dev_conn_param(&cp, "dev_migrate");
	if (DEV_CALL(rdma_connect(p.active, &cp), "active: rdma_connect"))
		goto out;
	ev = dev_get_request(&p, "dev_migrate");
	if (!ev)
		goto out;
	dev_ack(ev);
	if (DEV_CALL(rdma_migrate_id(p.child, pch2), "passive: rdma_migrate_id(child)") ||
	    dev_rdma_qp(p.child, &p.pq, "passive"))
		goto out;
	dev_conn_param(&cp, NULL);
	if (DEV_CALL(rdma_accept(p.child, &cp), "passive: rdma_accept"))
		goto out;
	if (dev_expect(p.ach, DEV_ACTIVE, RDMA_CM_EVENT_ESTABLISHED) ||
	    dev_expect(pch2, DEV_PASSIVE, RDMA_CM_EVENT_ESTABLISHED))
		goto out;
	CHECK(!pending(p.pch, 200), "passive: the listener's channel got nothing for the moved id",
	      "it reports an event");

	/* 5. synchronous mode */
	if (DEV_CALL(rdma_migrate_id(p.active, NULL), "active: rdma_migrate_id(NULL)"))
		goto out;
	CHECK(p.active->channel && p.active->channel != p.ach,
	      "active: a synchronous id has a private channel", "channel %s",
	      p.active->channel ? "is the old one" : "NULL");
	errno = 0;
	CHECK(rdma_migrate_id(p.active, NULL) == -1 && errno == EINVAL,
	      "active: migrating a synchronous id to NULL again: EINVAL", "errno %s",
	      dev_errno_name(errno));
	if (DEV_CALL(rdma_disconnect(p.child), "passive: rdma_disconnect"))
		goto out;
	dev_expect(p.active->channel, DEV_ACTIVE, RDMA_CM_EVENT_DISCONNECTED);
	CHECK(!pending(p.ach, 200), "active: the old channel got nothing after the move to sync mode",
	      "it reports an event");
out:
	dev_seq_print(DEV_ACTIVE);
	dev_seq_print(DEV_PASSIVE);
	dev_teardown(&p);
	if (ach2)
		rdma_destroy_event_channel(ach2);
	if (pch2)
		rdma_destroy_event_channel(pch2);
	return check_done();
}

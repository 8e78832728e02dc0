/* What the soft-fabric pair programs (rnr_pair, onesided_pair, idle_peer) share: one
 * event channel, bounded waits for CM events, and a connect that tries again while the
 * server is still tearing down the previous connection (REJECTED). */
#ifndef SOFT_PAIR_H
#define SOFT_PAIR_H
#include "dev.h" /* c-examples: fatal, dev_wait, now_ms, sleep_ms */

static struct rdma_event_channel *ch;

static void die(const char *what)
{
	fatal("%s: %s", what, strerror(errno));
}

/* The next event within ms, or NULL (a timeout). */
static struct rdma_cm_event *next(int ms)
{
	struct rdma_cm_event *ev;
	int r = dev_wait(ch, ms, &ev);

	if (r < 0)
		die("rdma_get_cm_event");
	return r ? NULL : ev;
}

static struct rdma_cm_event *expect(enum rdma_cm_event_type t, int ms)
{
	struct rdma_cm_event *ev = next(ms);

	if (!ev || ev->event != t)
		fatal("wanted %s, got %s", rdma_event_str(t), ev ? rdma_event_str(ev->event) : "nothing");
	return ev;
}

/* rdma_connect until ESTABLISHED (returned, not acked); REJECTED means the server has
 * not yet taken the previous connection down: again in 200 ms, 20 times at most. */
static __attribute__((unused)) struct rdma_cm_event *connect_established(struct rdma_cm_id *id,
									 struct rdma_conn_param *cp)
{
	for (int tries = 0;; tries++) {
		struct rdma_cm_event *ev;

		if (rdma_connect(id, cp))
			die("rdma_connect");
		if (!(ev = next(15000)))
			fatal("no answer to the connect");
		if (ev->event == RDMA_CM_EVENT_ESTABLISHED)
			return ev;
		if (ev->event != RDMA_CM_EVENT_REJECTED || tries == 20)
			fatal("connect: %s", rdma_event_str(ev->event));
		rdma_ack_cm_event(ev);
		sleep_ms(200);
	}
}
#endif

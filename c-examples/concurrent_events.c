/* c-example: ours (needs RDMACM_1.4 rdma_write_cm_event)
 *
 * Event channels are thread-safe: 4 threads each queue 500 USER events for
 * their own id on one channel while the main thread retrieves and acks them.
 * Every event arrives exactly once, with its own id, and each id's events
 * arrive in the order they were written; afterwards every id can be
 * destroyed without blocking.
 */
#include <pthread.h>
#include <stdint.h>

#include "check.h"

#define NTHREADS 4
#define PER_THREAD 500

struct writer {
	struct rdma_cm_id *id;
	int failed;
};

static void *writer_thread(void *arg)
{
	struct writer *w = arg;
	uint64_t i;

	for (i = 0; i < PER_THREAD; i++) {
		if (rdma_write_cm_event(w->id, RDMA_CM_EVENT_USER, (int)i, i)) {
			w->failed = errno ? errno : -1;
			break;
		}
	}
	return NULL;
}

int main(void)
{
	struct rdma_event_channel *ch;
	struct writer w[NTHREADS];
	pthread_t t[NTHREADS];
	uint64_t next[NTHREADS] = { 0 };
	int i, n, order_ok = 1, owner_ok = 1, write_ok = 1, destroy_ok = 1;

	watchdog(15);
	ch = channel_or_skip();
	for (i = 0; i < NTHREADS; i++) {
		w[i].failed = 0;
		if (rdma_create_id(ch, &w[i].id, &w[i], RDMA_PS_TCP))
			fatal("rdma_create_id: errno=%d (%s)", errno, strerror(errno));
	}
	for (i = 0; i < NTHREADS; i++)
		if (pthread_create(&t[i], NULL, writer_thread, &w[i]))
			fatal("pthread_create");

	for (n = 0; n < NTHREADS * PER_THREAD; n++) {
		struct rdma_cm_event *ev;
		struct writer *owner;

		if (rdma_get_cm_event(ch, &ev))
			fatal("rdma_get_cm_event #%d: errno=%d (%s)", n, errno, strerror(errno));
		owner = ev->id ? ev->id->context : NULL;
		if (!owner || owner < w || owner >= w + NTHREADS || owner->id != ev->id) {
			owner_ok = 0;
		} else {
			i = (int)(owner - w);
			if (ev->param.arg != next[i] || ev->status != (int)next[i])
				order_ok = 0;
			next[i] = ev->param.arg + 1;
		}
		if (rdma_ack_cm_event(ev))
			fatal("rdma_ack_cm_event: errno=%d", errno);
	}
	for (i = 0; i < NTHREADS; i++) {
		pthread_join(t[i], NULL);
		write_ok &= w[i].failed == 0;
	}
	CHECK(write_ok, "all 2000 concurrent rdma_write_cm_event calls succeed", "a write failed");
	CHECK(owner_ok, "every event names one of the writers' ids", "foreign or NULL id");
	CHECK(order_ok, "per-id FIFO order kept under concurrency", "out of order or duplicated");
	for (i = 0; i < NTHREADS; i++)
		destroy_ok &= rdma_destroy_id(w[i].id) == 0;
	CHECK(destroy_ok, "all ids destroyed after every event was acked", "errno=%d", errno);
	rdma_destroy_event_channel(ch);
	return check_done();
}

/* c-example: ours (needs RDMACM_1.4 rdma_write_cm_event to obtain an event)
 *
 * rdma_get_cm_event(3): "All events that are reported must be acknowledged by
 * calling rdma_ack_cm_event.  Destruction of an rdma_cm_id will block until
 * related events have been acknowledged."
 *
 * Thread A retrieves a USER event of id X and holds it; another thread calls
 * rdma_destroy_id(X): it must still be blocked after ~200 ms and return 0
 * promptly once A acks.  An unacked event of a *different* id must not block
 * destroying an id that has none.
 */
#include <pthread.h>

#include "check.h"

struct holder {
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev;
	int got;          /* set by A after rdma_get_cm_event */
	int may_ack;      /* set by main */
	int acked;        /* set by A after rdma_ack_cm_event */
	int ack_ret;
};

struct destroyer {
	struct rdma_cm_id *id;
	int done;
	int ret;
	int err;
};

static int load(int *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static void store(int *p, int v)
{
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
}

/* Wait until *p != 0, at most timeout_ms; returns the final value. */
static int wait_flag(int *p, long timeout_ms)
{
	long long end = now_ms() + timeout_ms;

	while (!load(p) && now_ms() < end)
		sleep_ms(5);
	return load(p);
}

static void *holder_thread(void *arg)
{
	struct holder *h = arg;

	if (rdma_get_cm_event(h->ch, &h->ev)) {
		printf("FAIL holder: rdma_get_cm_event errno=%d (%s)\n", errno, strerror(errno));
		fflush(stdout);
		_exit(1);
	}
	store(&h->got, 1);
	while (!load(&h->may_ack))
		sleep_ms(5);
	h->ack_ret = rdma_ack_cm_event(h->ev);
	store(&h->acked, 1);
	return NULL;
}

static void *destroyer_thread(void *arg)
{
	struct destroyer *d = arg;

	errno = 0;
	d->ret = rdma_destroy_id(d->id);
	d->err = errno;
	store(&d->done, 1);
	return NULL;
}

int main(void)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *x, *y;
	struct holder h;
	struct destroyer dx, dy;
	pthread_t ta, tx, ty;

	watchdog(15);
	ch = channel_or_skip();
	if (rdma_create_id(ch, &x, NULL, RDMA_PS_TCP) || rdma_create_id(ch, &y, NULL, RDMA_PS_TCP))
		fatal("rdma_create_id: errno=%d (%s)", errno, strerror(errno));
	if (rdma_write_cm_event(x, RDMA_CM_EVENT_USER, 0, 42))
		fatal("rdma_write_cm_event: errno=%d (%s)", errno, strerror(errno));

	memset(&h, 0, sizeof(h));
	h.ch = ch;
	if (pthread_create(&ta, NULL, holder_thread, &h))
		fatal("pthread_create");
	if (!wait_flag(&h.got, 5000))
		fail_stuck("thread A did not receive the queued event within 5 s");
	CHECK(h.ev->id == x && h.ev->param.arg == 42, "thread A holds the event of id X",
	      "wrong event");

	/* Destroying Y (no events) must not wait for X's unacked event. */
	memset(&dy, 0, sizeof(dy));
	dy.id = y;
	if (pthread_create(&ty, NULL, destroyer_thread, &dy))
		fatal("pthread_create");
	if (!wait_flag(&dy.done, 3000))
		fail_stuck("rdma_destroy_id(Y) blocked on an unacked event of another id");
	pthread_join(ty, NULL);
	CHECK(dy.ret == 0, "rdma_destroy_id(Y) returns at once while X's event is unacked",
	      "ret=%d errno=%d", dy.ret, dy.err);

	/* Destroying X must block until A acks. */
	memset(&dx, 0, sizeof(dx));
	dx.id = x;
	if (pthread_create(&tx, NULL, destroyer_thread, &dx))
		fatal("pthread_create");
	sleep_ms(200);
	CHECK(!load(&dx.done), "rdma_destroy_id(X) still blocked after 200 ms with the event unacked",
	      "returned early: ret=%d errno=%d", dx.ret, dx.err);

	store(&h.may_ack, 1);
	if (!wait_flag(&h.acked, 5000))
		fail_stuck("rdma_ack_cm_event did not return within 5 s");
	pthread_join(ta, NULL);
	CHECK(h.ack_ret == 0, "thread A acked the event", "ret=%d", h.ack_ret);

	if (!wait_flag(&dx.done, 5000))
		fail_stuck("rdma_destroy_id(X) did not return within 5 s of the ack");
	pthread_join(tx, NULL);
	CHECK(dx.ret == 0, "rdma_destroy_id(X) returns 0 after the ack", "ret=%d errno=%d",
	      dx.ret, dx.err);

	rdma_destroy_event_channel(ch);
	return check_done();
}

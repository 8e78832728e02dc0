/* c-example: ours (needs RDMACM_1.4 rdma_write_cm_event)
 *
 * rdma_get_cm_event(3): "If no events are pending, by default, the call will
 * block until an event is received."  A thread blocked in rdma_get_cm_event
 * on an empty channel must still be blocked after ~200 ms and must wake up
 * with the event once another thread queues one with rdma_write_cm_event.
 */
#include <pthread.h>
#include <stdint.h>

#include "check.h"

struct getter {
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev;
	int done;
	int ret;
	int err;
};

static void *getter_thread(void *arg)
{
	struct getter *g = arg;

	errno = 0;
	g->ret = rdma_get_cm_event(g->ch, &g->ev);
	g->err = errno;
	__atomic_store_n(&g->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

int main(void)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct getter g;
	pthread_t t;
	long long end;
	int ret;

	watchdog(15);
	ch = channel_or_skip();
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_UDP))
		fatal("rdma_create_id: errno=%d (%s)", errno, strerror(errno));

	memset(&g, 0, sizeof(g));
	g.ch = ch;
	if (pthread_create(&t, NULL, getter_thread, &g))
		fatal("pthread_create");
	sleep_ms(200);
	CHECK(!__atomic_load_n(&g.done, __ATOMIC_ACQUIRE),
	      "rdma_get_cm_event blocks on an empty channel", "returned ret=%d errno=%d", g.ret,
	      g.err);

	ret = rdma_write_cm_event(id, RDMA_CM_EVENT_USER, -3, UINT64_C(0xfeedface));
	CHECK(ret == 0, "rdma_write_cm_event from another thread", "ret=%d errno=%d", ret, errno);

	end = now_ms() + 5000;
	while (!__atomic_load_n(&g.done, __ATOMIC_ACQUIRE) && now_ms() < end)
		sleep_ms(5);
	if (!__atomic_load_n(&g.done, __ATOMIC_ACQUIRE))
		fail_stuck("blocked rdma_get_cm_event did not wake up within 5 s of the event");
	pthread_join(t, NULL);
	CHECK(g.ret == 0 && g.ev && g.ev->id == id && g.ev->status == -3 &&
		      g.ev->param.arg == UINT64_C(0xfeedface),
	      "the blocked rdma_get_cm_event returns the written event", "ret=%d errno=%d",
	      g.ret, g.err);
	if (g.ret == 0)
		CHECK(rdma_ack_cm_event(g.ev) == 0, "rdma_ack_cm_event", "errno=%d", errno);

	ret = rdma_destroy_id(id);
	CHECK(ret == 0, "rdma_destroy_id", "ret=%d errno=%d", ret, errno);
	rdma_destroy_event_channel(ch);
	return check_done();
}

/* c-example: ours (needs RDMACM_1.4 rdma_write_cm_event)
 *
 * rdma_get_cm_event(3) blocks; upstream blocks in write(2) on the channel
 * fd, which a signal handler interrupts as signal(7) says for "slow"
 * devices: -1/EINTR after a handler installed without SA_RESTART, and the
 * call goes on waiting after one installed with SA_RESTART.
 *
 * Checks: a blocked rdma_get_cm_event interrupted by a SIGUSR1 handler
 * without SA_RESTART returns -1/EINTR; with every handler SA_RESTART it keeps
 * waiting and returns the event another thread writes afterwards.
 */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>

#include "check.h"

static volatile sig_atomic_t caught;

static void on_usr1(int sig)
{
	(void)sig;
	caught++;
}

static void handle(int sig, void (*fn)(int), int flags)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = fn;
	sa.sa_flags = flags;
	if (sigaction(sig, &sa, NULL))
		fatal("sigaction: errno=%d", errno);
}

struct later {
	pthread_t target;
	struct rdma_cm_id *id; /* NULL: only the signal */
};

/* After 200 ms: SIGUSR1 to the main thread; 400 ms later the event, if any. */
static void *poke(void *arg)
{
	struct later *l = arg;

	sleep_ms(200);
	pthread_kill(l->target, SIGUSR1);
	if (l->id) {
		sleep_ms(400);
		if (rdma_write_cm_event(l->id, RDMA_CM_EVENT_USER, 0, UINT64_C(7)))
			fatal("rdma_write_cm_event: errno=%d", errno);
	}
	return NULL;
}

int main(void)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev = NULL;
	struct rdma_cm_id *id;
	struct later l;
	pthread_t t;
	int ret, err;

	watchdog(15);
	/* the watchdog's handler exits; SA_RESTART keeps it out of the question */
	handle(SIGALRM, watchdog_handler, SA_RESTART);
	ch = channel_or_skip();
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_UDP))
		fatal("rdma_create_id: errno=%d (%s)", errno, strerror(errno));

	handle(SIGUSR1, on_usr1, 0);
	l.target = pthread_self();
	l.id = NULL;
	if (pthread_create(&t, NULL, poke, &l))
		fatal("pthread_create");
	errno = 0;
	ret = rdma_get_cm_event(ch, &ev);
	err = errno;
	pthread_join(t, NULL);
	CHECK(ret == -1 && err == EINTR && caught == 1,
	      "a handler without SA_RESTART interrupts a blocked rdma_get_cm_event: -1/EINTR",
	      "ret=%d errno=%d caught=%d", ret, err, (int)caught);

	handle(SIGUSR1, on_usr1, SA_RESTART);
	l.id = id;
	if (pthread_create(&t, NULL, poke, &l))
		fatal("pthread_create");
	errno = 0;
	ret = rdma_get_cm_event(ch, &ev);
	err = errno;
	pthread_join(t, NULL);
	CHECK(ret == 0 && ev && ev->event == RDMA_CM_EVENT_USER && ev->param.arg == 7 && caught == 2,
	      "with SA_RESTART it goes on waiting and returns the event written after the signal",
	      "ret=%d errno=%d caught=%d", ret, err, (int)caught);
	if (ret == 0)
		CHECK(rdma_ack_cm_event(ev) == 0, "rdma_ack_cm_event", "errno=%d", errno);
	CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id", "errno=%d", errno);
	rdma_destroy_event_channel(ch);
	return check_done();
}

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
#include <stdint.h>

#include "check.h"

static void write_event(void *id)
{
	if (rdma_write_cm_event(id, RDMA_CM_EVENT_USER, 0, UINT64_C(7)))
		fatal("rdma_write_cm_event: errno=%d", errno);
}

int main(void)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev = NULL;
	struct rdma_cm_id *id;
	struct check_poke pk;
	int restart, ret, err;

	watchdog(15);
	/* the watchdog's handler exits; SA_RESTART keeps it out of the question */
	ch = channel_or_skip();
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_UDP))
		fatal("rdma_create_id: errno=%d (%s)", errno, strerror(errno));

	for (restart = 0; restart < 2; restart++) {
		check_handle(SIGUSR1, check_count_signal, restart ? SA_RESTART : 0);
		check_poke_me(&pk, restart ? write_event : NULL, id);
		errno = 0;
		ret = rdma_get_cm_event(ch, &ev);
		err = errno;
		pthread_join(pk.thread, NULL);
		if (!restart)
			CHECK(ret == -1 && err == EINTR && check_signals == 1,
			      "a handler without SA_RESTART interrupts a blocked rdma_get_cm_event: -1/EINTR",
			      "ret=%d errno=%d caught=%d", ret, err, (int)check_signals);
		else
			CHECK(ret == 0 && ev && ev->event == RDMA_CM_EVENT_USER && ev->param.arg == 7 &&
				      check_signals == 2,
			      "with SA_RESTART it goes on waiting and returns the event written after the signal",
			      "ret=%d errno=%d caught=%d", ret, err, (int)check_signals);
	}
	if (ret == 0)
		CHECK(rdma_ack_cm_event(ev) == 0, "rdma_ack_cm_event", "errno=%d", errno);
	CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id", "errno=%d", errno);
	rdma_destroy_event_channel(ch);
	return check_done();
}

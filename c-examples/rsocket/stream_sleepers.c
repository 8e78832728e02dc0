/* Two threads asleep on ONE connected stream rsocket stay asleep through a
 * change that readies neither of them, and each still wakes for data:
 *   1. both in rrecv (rrecvfrom without an address); another thread's rsend
 *      on the same rsocket completes (its send completion wakes them);
 *   2. one in rrecv, one in rpoll (POLLIN); the same;
 *   3. both in rpoll; the same;
 *   4. both in repoll_wait (a set each); the same.
 * How "asleep" is measured: sleepers.h. The wake flag used to come down only
 * when no sleeper was counted, so two blocking rrecv kept it up for each
 * other and spun (224 and 428 ms of CPU in the 500 ms after the completion).
 * tests/rsocket/run.sh also runs it with a 60 s wake_up_interval, where a
 * lost wake-up fails instead of being hidden by the periodic re-scan. */
#include "sleepers.h"

static int c, s;

/* c sends to its peer, which takes it (so c never runs out of credits). */
static void c_to_s(void)
{
	char buf[16];

	if (rsend(c, "ping", 4, 0) != 4)
		fail_stuck("rsend on the sleepers' rsocket failed");
	if (rrecv(s, buf, 4, MSG_WAITALL) != 4)
		fail_stuck("the peer did not get the data");
}

static void s_to_c(const char *msg)
{
	if (rsend(s, msg, strlen(msg), 0) != (ssize_t)strlen(msg))
		fail_stuck("rsend to the sleepers failed");
}

static void round_of(const char *what, enum how h0, enum how h1)
{
	struct sleeper sl[2];
	char buf[16];

	sleepers_through(sl, c, h0, h1, what, c_to_s);
	sleepers_wake(sl, s_to_c);
	/* what readied a poller is still queued */
	while (rrecv(c, buf, sizeof(buf), MSG_DONTWAIT) > 0)
		;
}

int main(int argc, char **argv)
{
	int port = port_arg(argc, argv);
	int l;

	watchdog(60);
	l = rs_listener(port);
	rs_pair(l, port, &c, &s);

	round_of("two rrecv sleepers stay asleep through another thread's send completion", RECV, RECV);
	round_of("an rrecv and an rpoll sleeper stay asleep through a send completion", RECV, POLL);
	round_of("two rpoll sleepers stay asleep through a send completion", POLL, POLL);
	round_of("two repoll_wait sleepers stay asleep through a send completion", EPOLL, EPOLL);

	rclose(c);
	rclose(s);
	rclose(l);
	return check_done();
}

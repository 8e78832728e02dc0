/* Two threads asleep on ONE datagram rsocket stay asleep through a change
 * that readies neither of them, and each still wakes for what it waits for:
 *   1. both in rrecvfrom; another thread's rsendto from the same rsocket
 *      makes its first QP (every sleeper must add that QP's CQ);
 *   2. both in rrecvfrom; another rsendto's send completion;
 *   3. one in rrecvfrom, one in rpoll (POLLIN); a send completion;
 *   4. both in rpoll; a send completion;
 *   5. both in repoll_wait (a set each); a send completion.
 * How "asleep" is measured: sleepers.h.
 * tests/rsocket/run.sh also runs it with a 60 s wake_up_interval, where a
 * lost wake-up fails instead of being hidden by the periodic re-scan. */
#include "sleepers.h"

static int x, y;
static struct sockaddr_in xa, ya;

/* x sends one datagram to y, and y takes it (so y never fills up). */
static void x_to_y(void)
{
	char buf[16];

	if (rsendto(x, "ping", 4, 0, (struct sockaddr *)&ya, sizeof(ya)) != 4)
		fail_stuck("rsendto from the sleepers' rsocket failed");
	if (rrecvfrom(y, buf, sizeof(buf), 0, NULL, NULL) != 4)
		fail_stuck("the peer did not get the datagram");
}

static void y_to_x(const char *msg)
{
	if (rsendto(y, msg, strlen(msg), 0, (struct sockaddr *)&xa, sizeof(xa)) != (ssize_t)strlen(msg))
		fail_stuck("rsendto to the sleepers failed");
}

static void round_of(const char *what, enum how h0, enum how h1)
{
	struct sleeper s[2];
	char buf[16];

	sleepers_through(s, x, h0, h1, what, x_to_y);
	sleepers_wake(s, y_to_x);
	/* what readied a poller is still queued */
	while (rrecvfrom(x, buf, sizeof(buf), MSG_DONTWAIT, NULL, NULL) > 0)
		;
}

int main(int argc, char **argv)
{
	int port = port_arg(argc, argv);

	watchdog(60);
	xa = lo_addr(port);
	ya = lo_addr(port + 1);
	x = rsocket(AF_INET, SOCK_DGRAM, 0);
	y = rsocket(AF_INET, SOCK_DGRAM, 0);
	CHECK(x >= 0 && y >= 0, "two datagram rsockets", "%s", strerror(errno));
	CHECK(rbind(x, (struct sockaddr *)&xa, sizeof(xa)) == 0 && rbind(y, (struct sockaddr *)&ya, sizeof(ya)) == 0,
	      "both bound", "%s", strerror(errno));

	round_of("two rrecvfrom sleepers stay asleep when another thread's rsendto makes the first QP", RECV, RECV);
	round_of("two rrecvfrom sleepers stay asleep through a send completion", RECV, RECV);
	round_of("an rrecvfrom and an rpoll sleeper stay asleep through a send completion", RECV, POLL);
	round_of("two rpoll sleepers stay asleep through a send completion", POLL, POLL);
	round_of("two repoll_wait sleepers stay asleep through a send completion", EPOLL, EPOLL);

	rclose(x);
	rclose(y);
	return check_done();
}

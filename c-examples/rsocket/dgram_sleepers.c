/* Two threads asleep on ONE datagram rsocket stay asleep through a change
 * that readies neither of them, and each still wakes for what it waits for:
 *   1. both in rrecvfrom; another thread's rsendto from the same rsocket
 *      makes its first QP (every sleeper must add that QP's CQ);
 *   2. both in rrecvfrom; another rsendto's send completion;
 *   3. one in rrecvfrom, one in rpoll (POLLIN); a send completion;
 *   4. both in repoll_wait (a set each); a send completion.
 * "Asleep" is measured as the CPU time the two sleepers use in the 500 ms
 * after the change: a sleeper woken by the change looks once and sleeps
 * again (a few ms at most, also under valgrind); two sleepers that keep
 * each other's wake-up alive (each re-counted while the other still is, so
 * the wake flag is never lowered) poll in a loop and use most of a core
 * each, until a datagram readies one of them.
 * tests/rsocket/run.sh also runs it with a 60 s wake_up_interval, where a
 * lost wake-up fails the watchdog instead of being hidden by the periodic
 * re-scan. */
#include <sys/epoll.h>

#include "rs_util.h"

/* CPU the two sleepers may use in the 500 ms after the change. */
#define CPU_LIMIT_MS 60

enum how { RECV, POLL, EPOLL };

struct sleeper {
	pthread_t t;
	enum how how;
	int fd;
	ssize_t got; /* rrecvfrom: bytes; rpoll/repoll_wait: the call's result */
	char buf[16];
	int revents;
};

static void *sleeper_main(void *arg)
{
	struct sleeper *s = arg;
	struct epoll_event ev = { .events = EPOLLIN }, out;
	struct pollfd p = { .fd = s->fd, .events = POLLIN };
	int ep;

	switch (s->how) {
	case RECV:
		s->got = rrecvfrom(s->fd, s->buf, sizeof(s->buf), 0, NULL, NULL);
		break;
	case POLL:
		s->got = rpoll(&p, 1, -1); /* no timeout: a lost wake-up must not be hidden */
		s->revents = p.revents;
		break;
	case EPOLL:
		ep = repoll_create(0);
		if (ep < 0 || repoll_ctl(ep, EPOLL_CTL_ADD, s->fd, &ev))
			fail_stuck("repoll set for the sleeper");
		s->got = repoll_wait(ep, &out, 1, -1);
		s->revents = s->got == 1 ? (int)out.events : 0;
		rclose(ep);
		break;
	}
	return NULL;
}

static long long cpu_ms(pthread_t t)
{
	struct timespec ts;
	clockid_t c;

	if (pthread_getcpuclockid(t, &c) || clock_gettime(c, &ts))
		fail_stuck("thread CPU clock");
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

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
	struct sleeper s[2] = { { .how = h0, .fd = x }, { .how = h1, .fd = x } };
	long long c0, c1;
	int i, recvs = 0, ok = 1;
	char msg[2][8], buf[16];

	for (i = 0; i < 2; i++)
		if (pthread_create(&s[i].t, NULL, sleeper_main, &s[i]))
			fail_stuck("pthread_create");
	sleep_ms(300);
	c0 = cpu_ms(s[0].t) + cpu_ms(s[1].t);
	x_to_y();
	sleep_ms(500);
	c1 = cpu_ms(s[0].t) + cpu_ms(s[1].t);
	fprintf(stderr, "%s: the sleepers used %lld ms of CPU in 500 ms\n", what, c1 - c0);
	CHECK(c1 - c0 <= CPU_LIMIT_MS, what, "the two sleepers used %lld ms of CPU in the 500 ms after it (limit %d)",
	      c1 - c0, CPU_LIMIT_MS);

	/* A datagram per sleeper: a receiver takes one, a poller is readied by
	 * what is queued (the main thread takes the pollers' ones after). */
	for (i = 0; i < 2; i++) {
		snprintf(msg[i], sizeof(msg[i]), "m%d", i);
		y_to_x(msg[i]);
		recvs += s[i].how == RECV;
	}
	for (i = 0; i < 2; i++)
		pthread_join(s[i].t, NULL);
	for (i = 0; i < 2; i++) {
		if (s[i].how == RECV)
			ok &= s[i].got == 2 && s[i].buf[0] == 'm';
		else if (s[i].how == POLL)
			ok &= s[i].got == 1 && s[i].revents == POLLIN;
		else
			ok &= s[i].got == 1 && (s[i].revents & EPOLLIN);
	}
	CHECK(ok, "then each sleeper woke for its datagram", "results %zd/%zd, revents %#x/%#x", s[0].got, s[1].got,
	      s[0].revents, s[1].revents);
	for (i = recvs; i < 2; i++)
		CHECK(rrecvfrom(x, buf, sizeof(buf), MSG_DONTWAIT, NULL, NULL) == 2, "a poller's datagram is queued",
		      "%s", strerror(errno));
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

/* A thread asleep in rrecvfrom on a bound datagram rsocket that has no QP
 * yet wakes for a reply arriving on the QP that another thread's rsendto on
 * the same rsocket made (the sleeper must add that QP's CQ to its sleep); a
 * thread asleep in rpoll on it wakes for the next datagram.
 * tests/rsocket/run.sh also runs it with a 60 s wake_up_interval, where a
 * lost wake-up fails the watchdog instead of being hidden by the periodic
 * re-scan. */
#include "rs_util.h"

static int x;
static char got[64];
static ssize_t got_n = -2;

static int y;
static struct sockaddr_in a;

static void *late_send(void *arg)
{
	(void)arg;
	sleep_ms(300);
	if (rsendto(y, "again", 5, 0, (struct sockaddr *)&a, sizeof(a)) != 5)
		fail_stuck("the late rsendto failed");
	return NULL;
}

static void *receiver(void *arg)
{
	(void)arg;
	got_n = rrecvfrom(x, got, sizeof(got), 0, NULL, NULL);
	return NULL;
}

int main(int argc, char **argv)
{
	int port = port_arg(argc, argv);
	struct sockaddr_in b = lo_addr(port + 1), from;
	struct pollfd p = { .events = POLLIN };
	socklen_t len = sizeof(from);
	char buf[64];
	pthread_t t;
	ssize_t n;
	int r;

	watchdog(20);
	if (no_ud()) {
		check_no_ud(port);
		return check_done();
	}
	a = lo_addr(port);
	x = rsocket(AF_INET, SOCK_DGRAM, 0);
	y = rsocket(AF_INET, SOCK_DGRAM, 0);
	CHECK(x >= 0 && y >= 0, "two datagram rsockets", "%s", strerror(errno));
	CHECK(rbind(x, (struct sockaddr *)&a, sizeof(a)) == 0 && rbind(y, (struct sockaddr *)&b, sizeof(b)) == 0,
	      "both bound", "%s", strerror(errno));
	CHECK(pthread_create(&t, NULL, receiver, NULL) == 0, "a thread sleeps in rrecvfrom", "no thread");
	sleep_ms(300);
	CHECK(rsendto(x, "ping", 4, 0, (struct sockaddr *)&b, sizeof(b)) == 4,
	      "the main thread sends from the same rsocket (its first QP)", "%s", strerror(errno));
	n = rrecvfrom(y, buf, sizeof(buf), 0, (struct sockaddr *)&from, &len);
	CHECK(n == 4 && !memcmp(buf, "ping", 4), "the peer got it", "got %zd: %s", n, strerror(errno));
	CHECK(rsendto(y, "pong", 4, 0, (struct sockaddr *)&from, len) == 4, "the peer replies", "%s",
	      strerror(errno));
	pthread_join(t, NULL);
	CHECK(got_n == 4 && !memcmp(got, "pong", 4), "the sleeping thread woke with the reply", "got %zd", got_n);
	CHECK(pthread_create(&t, NULL, late_send, NULL) == 0, "the peer sends again 300 ms later", "no thread");
	p.fd = x;
	r = rpoll(&p, 1, -1);
	pthread_join(t, NULL);
	n = r == 1 ? rrecv(x, buf, sizeof(buf), 0) : -1;
	CHECK(r == 1 && p.revents == POLLIN && n == 5 && !memcmp(buf, "again", 5),
	      "meanwhile asleep in rpoll, this thread woke with it", "rpoll %d revents %#x, then %zd", r, p.revents, n);
	rclose(x);
	rclose(y);
	return check_done();
}

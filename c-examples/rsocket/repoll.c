/* repoll_create/repoll_ctl/repoll_wait (RDMACM_1.5): an epoll set holding a
 * listening rsocket, a connected rsocket and a pipe reports each when it is
 * ready, with the caller's data; EPOLLONESHOT disarms until EPOLL_CTL_MOD;
 * ADD twice: EEXIST; MOD/DEL of a stranger: ENOENT. A sleeper in repoll_wait
 * is woken by data another thread sends after it slept, to a stream and to a
 * datagram rsocket (tests/rsocket/run.sh also runs this with a 60 s
 * wake_up_interval: a lost wake-up then fails the watchdog instead of being
 * hidden by the periodic re-scan). */
#include <sys/epoll.h>

#include "rs_util.h"

/* Another thread's send, 300 ms after the sleeper started. */
struct late {
	int fd, dgram;
	struct sockaddr_in to;
	pthread_t t;
};

static void *late_main(void *arg)
{
	struct late *l = arg;
	ssize_t n;

	sleep_ms(300);
	if (l->dgram)
		n = rsendto(l->fd, "late", 4, 0, (struct sockaddr *)&l->to, sizeof(l->to));
	else
		n = rsend(l->fd, "late", 4, 0);
	if (n != 4)
		fail_stuck_errno("the late send failed");
	return NULL;
}

/* Sleeps in repoll_wait on `ep` while `l` sends; returns the data of the one rsocket
 * it reported (1000 + n when it reported n != 1). */
static unsigned long long woken(int ep, struct late *l)
{
	struct epoll_event out[4];
	int n;

	if (pthread_create(&l->t, NULL, late_main, l))
		fatal("pthread_create");
	n = repoll_wait(ep, out, 4, -1); /* no timeout: its last look would hide a lost wake-up */
	pthread_join(l->t, NULL);
	return n == 1 ? out[0].data.u64 : (unsigned long long)(1000 + n);
}

int main(int argc, char **argv)
{
	int port = port_arg(argc, argv);
	struct epoll_event ev, out[4];
	int ep, l, c, s, pfd[2], n;
	char buf[8];

	watchdog(30);
	ep = repoll_create(EPOLL_CLOEXEC);
	CHECK(ep >= 0, "repoll_create", "%s", strerror(errno));
	l = rs_listener(port);
	if (pipe(pfd))
		fatal("pipe");
	ev.events = EPOLLIN;
	ev.data.u64 = 1;
	CHECK(repoll_ctl(ep, EPOLL_CTL_ADD, l, &ev) == 0, "add the listener", "%s", strerror(errno));
	CHECK_ERRNO(repoll_ctl(ep, EPOLL_CTL_ADD, l, &ev), EEXIST, "adding it twice: EEXIST");
	ev.data.u64 = 2;
	CHECK(repoll_ctl(ep, EPOLL_CTL_ADD, pfd[0], &ev) == 0, "add a pipe", "%s", strerror(errno));
	CHECK(repoll_wait(ep, out, 4, 100) == 0, "nothing ready", "ready");

	c = rs_connect(port);
	n = repoll_wait(ep, out, 4, 5000);
	CHECK(n == 1 && out[0].data.u64 == 1 && (out[0].events & EPOLLIN), "listener reported with its data",
	      "n %d data %llu", n, n > 0 ? (unsigned long long)out[0].data.u64 : 0ULL);
	s = raccept(l, NULL, NULL);
	CHECK(repoll_wait(ep, out, 4, 0) == 0, "not after raccept (level-triggered)", "still ready");

	ev.events = EPOLLIN | EPOLLONESHOT;
	ev.data.u64 = 3;
	CHECK(repoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) == 0, "add the accepted rsocket (one-shot)", "%s", strerror(errno));
	rsend(c, "abc", 3, 0);
	n = repoll_wait(ep, out, 4, 5000);
	CHECK(n == 1 && out[0].data.u64 == 3 && (out[0].events & EPOLLIN), "data reported", "n %d", n);
	CHECK(repoll_wait(ep, out, 4, 100) == 0, "one-shot: not again while still readable", "reported again");
	ev.events = EPOLLIN;
	CHECK(repoll_ctl(ep, EPOLL_CTL_MOD, s, &ev) == 0, "EPOLL_CTL_MOD re-arms", "%s", strerror(errno));
	n = repoll_wait(ep, out, 4, 1000);
	CHECK(n == 1 && out[0].data.u64 == 3, "reported again after MOD", "n %d", n);
	rrecv(s, buf, sizeof(buf), 0);

	if (write(pfd[1], "x", 1) != 1)
		fatal("write");
	n = repoll_wait(ep, out, 4, 5000);
	CHECK(n == 1 && out[0].data.u64 == 2, "the pipe reported with its data", "n %d", n);
	CHECK(repoll_ctl(ep, EPOLL_CTL_DEL, pfd[0], NULL) == 0, "delete the pipe", "%s", strerror(errno));
	CHECK(repoll_ctl(ep, EPOLL_CTL_DEL, s, NULL) == 0, "delete the rsocket", "%s", strerror(errno));
	CHECK_ERRNO(repoll_ctl(ep, EPOLL_CTL_DEL, s, NULL), ENOENT, "delete it again: ENOENT");
	CHECK_ERRNO(repoll_ctl(ep, EPOLL_CTL_MOD, c, &ev), ENOENT, "modify a stranger: ENOENT");

	ev.events = EPOLLOUT;
	ev.data.u64 = 4;
	repoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
	n = repoll_wait(ep, out, 4, 1000);
	CHECK(n >= 1 && out[0].data.u64 == 4 && (out[0].events & EPOLLOUT), "a connected rsocket is writable", "n %d", n);
	close(ep);

	/* sleepers woken by another thread's send: a stream and a datagram rsocket in one set */
	{
		struct sockaddr_in xa = lo_addr(port + 1), ya = lo_addr(port + 2);
		int x = rsocket(AF_INET, SOCK_DGRAM, 0), y = rsocket(AF_INET, SOCK_DGRAM, 0);
		struct late ls = { .fd = c }, ld = { .fd = y, .dgram = 1, .to = xa };
		unsigned long long got;

		if (x < 0 || y < 0 || rbind(x, (struct sockaddr *)&xa, sizeof(xa)) || rbind(y, (struct sockaddr *)&ya, sizeof(ya)))
			fatal("datagram rsockets: %s", strerror(errno));
		ep = repoll_create(0);
		ev.events = EPOLLIN;
		ev.data.u64 = 5;
		repoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
		ev.data.u64 = 6;
		CHECK(repoll_ctl(ep, EPOLL_CTL_ADD, x, &ev) == 0, "add a datagram rsocket", "%s", strerror(errno));
		got = woken(ep, &ls);
		CHECK(got == 5 && rrecv(s, buf, sizeof(buf), 0) == 4, "a sleeper is woken by data sent to a stream rsocket",
		      "reported %llu", got);
		if (no_ud()) {
			check_no_ud(port + 3);
		} else {
			got = woken(ep, &ld);
			CHECK(got == 6 && rrecv(x, buf, sizeof(buf), 0) == 4, "and by a datagram (the first: over UDP)",
			      "reported %llu", got);
			ld.fd = x;
			ld.to = ya;
			ev.data.u64 = 7;
			repoll_ctl(ep, EPOLL_CTL_ADD, y, &ev);
			got = woken(ep, &ld);
			CHECK(got == 7 && rrecv(y, buf, sizeof(buf), 0) == 4, "and by a datagram back (over UD)",
			      "reported %llu", got);
			ld.fd = y;
			ld.to = xa;
			got = woken(ep, &ld);
			CHECK(got == 6 && rrecv(x, buf, sizeof(buf), 0) == 4, "and by the next datagram (over UD)",
			      "reported %llu", got);
		}
		close(ep);
		rclose(x);
		rclose(y);
	}
	rclose(c);
	rclose(s);
	rclose(l);
	return check_done();
}

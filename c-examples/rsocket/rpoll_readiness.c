/* rpoll/rselect readiness: a listener is readable only with a connection
 * queued; a connected rsocket is writable, readable only with data queued,
 * and a sleeper is woken by data sent from another thread; rsockets and
 * ordinary fds mix in one call. */
#include "rs_util.h"

static int wfd;

static void *late_send(void *arg)
{
	(void)arg;
	sleep_ms(300);
	if (rsend(wfd, "late", 4, 0) != 4)
		fail_stuck("late rsend failed");
	return NULL;
}

int main(int argc, char **argv)
{
	int port = port_arg(argc, argv);
	struct pollfd p[2];
	int l, c, s, pfd[2], ret;
	char buf[16];
	long long t0;
	pthread_t th;
	fd_set rd, wr;
	struct timeval tv;

	watchdog(30);
	l = rs_listener(port);
	CHECK(!readable(l, 100), "listener not readable without a connection", "readable");
	c = rs_connect(port);
	CHECK(readable(l, 5000), "listener readable once a connection is queued", "not readable");
	s = raccept(l, NULL, NULL);
	CHECK(s >= 0, "raccept", "%s", strerror(errno));
	CHECK(!readable(l, 0), "listener not readable after raccept", "readable");

	p[0].fd = c;
	p[0].events = POLLIN | POLLOUT;
	p[0].revents = 0;
	ret = rpoll(p, 1, 1000);
	CHECK(ret == 1 && p[0].revents == POLLOUT, "connected, no data: POLLOUT only", "ret %d revents %#x", ret,
	      p[0].revents);
	CHECK(!readable(c, 100), "not readable before data", "readable");
	CHECK(rsend(s, "hello", 5, 0) == 5, "rsend", "%s", strerror(errno));
	CHECK(readable(c, 5000), "readable once data arrived", "not readable");
	CHECK(rrecv(c, buf, sizeof(buf), 0) == 5, "rrecv takes it", "%s", strerror(errno));
	CHECK(!readable(c, 50), "not readable once drained", "readable");

	wfd = s;
	pthread_create(&th, NULL, late_send, NULL);
	t0 = now_ms();
	ret = readable(c, 10000);
	CHECK(ret && now_ms() - t0 < 5000, "a sleeping rpoll wakes for data sent by another thread", "ret %d after %lld ms",
	      ret, now_ms() - t0);
	pthread_join(th, NULL);
	rrecv(c, buf, sizeof(buf), 0);

	if (pipe(pfd))
		fatal("pipe");
	p[0].fd = c;
	p[0].events = POLLIN;
	p[1].fd = pfd[0];
	p[1].events = POLLIN;
	p[0].revents = p[1].revents = 0;
	CHECK(rpoll(p, 2, 100) == 0, "rsocket + pipe: nothing ready", "ready");
	if (write(pfd[1], "x", 1) != 1)
		fatal("write");
	p[0].revents = p[1].revents = 0;
	ret = rpoll(p, 2, 5000);
	CHECK(ret == 1 && p[1].revents == POLLIN && !p[0].revents, "rpoll reports the ordinary fd", "ret %d %#x %#x",
	      ret, p[0].revents, p[1].revents);

	FD_ZERO(&rd);
	FD_ZERO(&wr);
	FD_SET(c, &rd);
	FD_SET(c, &wr);
	FD_SET(pfd[0], &rd);
	tv.tv_sec = 1;
	tv.tv_usec = 0;
	ret = rselect((c > pfd[0] ? c : pfd[0]) + 1, &rd, &wr, NULL, &tv);
	CHECK(ret == 2 && FD_ISSET(pfd[0], &rd) && FD_ISSET(c, &wr) && !FD_ISSET(c, &rd),
	      "rselect: pipe readable, rsocket writable", "ret %d", ret);
	rclose(c);
	rclose(s);
	rclose(l);
	return check_done();
}

/* repoll_create/repoll_ctl/repoll_wait (RDMACM_1.5): an epoll set holding a
 * listening rsocket, a connected rsocket and a pipe reports each when it is
 * ready, with the caller's data; EPOLLONESHOT disarms until EPOLL_CTL_MOD;
 * ADD twice: EEXIST; MOD/DEL of a stranger: ENOENT. */
#include <sys/epoll.h>

#include "rs_util.h"

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
	rclose(c);
	rclose(s);
	rclose(l);
	close(ep);
	return check_done();
}

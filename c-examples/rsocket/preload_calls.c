/* c-example style checks of the preload library: a plain sockets program
 * (no rsocket calls) run with LD_PRELOAD=librspreload.so. A server thread
 * and the main thread talk over 127.0.0.1 using the calls the preload
 * library maps onto rsockets: accept4 flags, dup/dup2/F_DUPFD, fcntl,
 * sendfile, readv/writev, sendmsg/recvmsg, select, poll and epoll. Run
 * without the preload it checks the same against kernel TCP. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "check.h"

static int port, lfd;

static void *server(void *arg)
{
	char buf[65536];
	int c;
	ssize_t n;

	(void)arg;
	c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (c < 0)
		fail_stuck("accept4 failed");
	while ((n = read(c, buf, sizeof(buf))) > 0)
		for (ssize_t off = 0; off < n;) {
			ssize_t w = write(c, buf + off, n - off);
			if (w <= 0)
				fail_stuck("server write failed");
			off += w;
		}
	close(c);
	return NULL;
}

static int read_all(int fd, char *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = read(fd, buf + got, len - got);
		if (n <= 0)
			return -1;
		got += n;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_in a;
	char file[] = "/tmp/rspreload-XXXXXX", buf[8192], back[8192];
	int s, d, d2, tf, ep, flags, one = 1;
	struct iovec iov[2];
	struct msghdr m;
	struct pollfd p;
	struct epoll_event ev, out;
	fd_set rd;
	struct timeval tv;
	off_t off = 0;
	pthread_t th;

	watchdog(60);
	port = argc > 1 ? atoi(argv[1]) : 7990;
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons(port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	CHECK(bind(lfd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(lfd, 4) == 0, "socket, bind, listen",
	      "%s", strerror(errno));
	pthread_create(&th, NULL, server, NULL);

	s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(connect(s, (struct sockaddr *)&a, sizeof(a)) == 0, "connect", "%s", strerror(errno));
	flags = fcntl(s, F_GETFD);
	CHECK(flags >= 0 && (flags & FD_CLOEXEC), "SOCK_CLOEXEC shows in F_GETFD", "flags %d", flags);
	flags = fcntl(s, F_GETFL);
	CHECK(flags >= 0 && !(flags & O_NONBLOCK), "blocking by default (F_GETFL)", "flags %#x", flags);

	d = dup(s);
	CHECK(d >= 0 && d != s, "dup", "%s", strerror(errno));
	CHECK(write(d, "dup!", 4) == 4 && read_all(s, back, 4) == 0 && !memcmp(back, "dup!", 4),
	      "a dup'ed descriptor talks on the same connection", "no");
	close(d);
	CHECK(write(s, "ok", 2) == 2 && read_all(s, back, 2) == 0, "closing the dup keeps the original open", "closed");
	d2 = fcntl(s, F_DUPFD, 100);
	CHECK(d2 >= 100, "F_DUPFD", "%d", d2);
	tf = dup2(s, d2);
	CHECK(tf == d2, "dup2 onto itself-mapped fd", "%d", tf);
	close(d2);

	iov[0].iov_base = "hello, ";
	iov[0].iov_len = 7;
	iov[1].iov_base = "world";
	iov[1].iov_len = 5;
	CHECK(writev(s, iov, 2) == 12, "writev", "%s", strerror(errno));
	iov[0].iov_base = back;
	iov[0].iov_len = 3;
	iov[1].iov_base = back + 3;
	iov[1].iov_len = 9;
	{
		ssize_t got = 0, n;
		while (got < 12 && (n = readv(s, iov, 2)) > 0) {
			got += n;
			iov[0].iov_base = back + got; /* simple refill: rest goes to the first vector */
			iov[0].iov_len = 12 - got;
			iov[1].iov_len = 0;
		}
		CHECK(got == 12 && !memcmp(back, "hello, world", 12), "readv", "got %zd", got);
	}
	memset(&m, 0, sizeof(m));
	iov[0].iov_base = "msg";
	iov[0].iov_len = 3;
	m.msg_iov = iov;
	m.msg_iovlen = 1;
	CHECK(sendmsg(s, &m, 0) == 3, "sendmsg", "%s", strerror(errno));
	iov[0].iov_base = back;
	iov[0].iov_len = 3;
	CHECK(recvmsg(s, &m, MSG_WAITALL) == 3 && !memcmp(back, "msg", 3), "recvmsg", "%s", strerror(errno));

	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (char)(i * 13);
	tf = mkstemp(file);
	if (tf < 0 || write(tf, buf, sizeof(buf)) != (ssize_t)sizeof(buf))
		fatal("temp file");
	unlink(file);
	CHECK(sendfile(s, tf, &off, sizeof(buf)) == (ssize_t)sizeof(buf) && off == (off_t)sizeof(buf), "sendfile",
	      "%s", strerror(errno));
	CHECK(read_all(s, back, sizeof(back)) == 0 && !memcmp(back, buf, sizeof(buf)), "sendfile bytes echoed intact",
	      "differ");
	close(tf);

	p.fd = s;
	p.events = POLLIN;
	CHECK(poll(&p, 1, 50) == 0, "poll: nothing to read", "ready");
	CHECK(write(s, "p", 1) == 1 && poll(&p, 1, 5000) == 1 && (p.revents & POLLIN), "poll: echo readable", "no");
	CHECK(read(s, back, 1) == 1, "read it", "no");
	FD_ZERO(&rd);
	FD_SET(s, &rd);
	tv.tv_sec = 0;
	tv.tv_usec = 50000;
	CHECK(select(s + 1, &rd, NULL, NULL, &tv) == 0, "select: nothing to read", "ready");
	CHECK(write(s, "s", 1) == 1, "write", "no");
	FD_ZERO(&rd);
	FD_SET(s, &rd);
	tv.tv_sec = 5;
	tv.tv_usec = 0;
	CHECK(select(s + 1, &rd, NULL, NULL, &tv) == 1 && FD_ISSET(s, &rd), "select: echo readable", "no");
	CHECK(read(s, back, 1) == 1, "read it", "no");
	ep = epoll_create1(0);
	ev.events = EPOLLIN;
	ev.data.u64 = 42;
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) == 0, "epoll_ctl ADD", "%s", strerror(errno));
	CHECK(epoll_wait(ep, &out, 1, 50) == 0, "epoll_wait: nothing", "ready");
	CHECK(write(s, "e", 1) == 1 && epoll_wait(ep, &out, 1, 5000) == 1 && out.data.u64 == 42, "epoll_wait: echo",
	      "no");
	close(ep);
	CHECK(fcntl(s, F_SETFL, O_NONBLOCK) == 0, "F_SETFL O_NONBLOCK", "%s", strerror(errno));
	CHECK(read(s, back, 1) == 1, "read the echo", "%s", strerror(errno));
	CHECK_ERRNO(read(s, back, 1), EAGAIN, "non-blocking read with nothing: EAGAIN");
	CHECK(shutdown(s, SHUT_WR) == 0, "shutdown(SHUT_WR)", "%s", strerror(errno));
	close(s);
	pthread_join(th, NULL);
	close(lfd);
	return check_done();
}

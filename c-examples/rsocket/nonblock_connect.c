/* rconnect on a non-blocking rsocket: -1/EINPROGRESS (or 0), then rpoll reports
 * POLLOUT and SO_ERROR is 0; a second rconnect says EISCONN. A connect to a
 * port nobody listens on: EINPROGRESS, then POLLOUT|POLLERR and SO_ERROR
 * ECONNREFUSED; the same in blocking mode fails with ECONNREFUSED. A
 * non-blocking rrecv with MSG_WAITALL returns what is there, as TCP does. */
#include "rs_util.h"

int main(int argc, char **argv)
{
	int port = port_arg(argc, argv);
	struct sockaddr_in a = lo_addr(port);
	struct pollfd p;
	socklen_t len;
	int l, c, s, err, ret, flags;
	char buf[4];

	watchdog(30);
	l = rs_listener(port);

	c = rsocket(AF_INET, SOCK_STREAM, 0);
	flags = rfcntl(c, F_GETFL);
	CHECK(flags >= 0 && !(flags & O_NONBLOCK), "F_GETFL: blocking by default", "flags %#x", flags);
	CHECK(rfcntl(c, F_SETFL, flags | O_NONBLOCK) == 0, "F_SETFL O_NONBLOCK", "%s", strerror(errno));
	CHECK(rfcntl(c, F_GETFL) & O_NONBLOCK, "F_GETFL shows O_NONBLOCK", "no");
	/* As connect(2) may, it can also complete at once (every CM event came before it
	 * looked again), as the refused connect below may fail at once. */
	ret = rconnect(c, (struct sockaddr *)&a, sizeof(a));
	CHECK(ret == 0 || (ret == -1 && errno == EINPROGRESS), "non-blocking rconnect: EINPROGRESS (or connected at once)",
	      "ret %d errno %d (%s)", ret, errno, strerror(errno));
	p.fd = c;
	p.events = POLLOUT;
	p.revents = 0;
	ret = rpoll(&p, 1, 10000);
	CHECK(ret == 1 && (p.revents & POLLOUT) && !(p.revents & POLLERR), "rpoll reports POLLOUT once connected",
	      "ret %d revents %#x", ret, p.revents);
	err = -1;
	len = sizeof(err);
	CHECK(rgetsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0 && len == sizeof(err),
	      "SO_ERROR is 0", "err %d", err);
	CHECK_ERRNO(rconnect(c, (struct sockaddr *)&a, sizeof(a)), EISCONN, "second rconnect: EISCONN");
	s = raccept(l, NULL, NULL);
	CHECK(s >= 0, "raccept gives the connection", "%s", strerror(errno));
	CHECK(rsend(c, "abc", 3, 0) == 3, "rsend on the connected socket", "%s", strerror(errno));
	rfcntl(s, F_SETFL, 0);
	CHECK(rrecv(s, buf, 3, MSG_WAITALL) == 3 && !memcmp(buf, "abc", 3), "data arrives", "bad");
	CHECK(rsend(c, "de", 2, 0) == 2, "rsend 2 more bytes", "%s", strerror(errno));
	p.fd = s;
	p.events = POLLIN;
	p.revents = 0;
	CHECK(rpoll(&p, 1, 10000) == 1 && (p.revents & POLLIN), "rpoll: they arrived", "revents %#x", p.revents);
	ret = rrecv(s, buf, 4, MSG_WAITALL | MSG_DONTWAIT);
	CHECK(ret == 2 && !memcmp(buf, "de", 2), "MSG_WAITALL|MSG_DONTWAIT for 4: the 2 there, no wait",
	      "ret %d errno %d", ret, errno);
	CHECK_ERRNO(rrecv(s, buf, 4, MSG_WAITALL | MSG_DONTWAIT), EAGAIN, "and then EAGAIN");
	rclose(c);
	rclose(s);

	/* nobody listens on port + 1 */
	a = lo_addr(port + 1);
	c = rsocket(AF_INET, SOCK_STREAM, 0);
	rfcntl(c, F_SETFL, O_NONBLOCK);
	ret = rconnect(c, (struct sockaddr *)&a, sizeof(a));
	if (ret == 0 || errno != EINPROGRESS) {
		CHECK(ret == -1 && errno == ECONNREFUSED, "refused at once or in progress", "ret %d errno %d", ret, errno);
	} else {
		p.fd = c;
		p.events = POLLOUT;
		p.revents = 0;
		ret = rpoll(&p, 1, 10000);
		CHECK(ret == 1 && (p.revents & POLLERR), "refused connect: rpoll reports POLLERR", "ret %d revents %#x",
		      ret, p.revents);
		err = 0;
		len = sizeof(err);
		rgetsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len);
		CHECK(err == ECONNREFUSED, "SO_ERROR is ECONNREFUSED", "err %d (%s)", err, strerror(err));
		err = -1;
		rgetsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len);
		CHECK(err == 0, "SO_ERROR is cleared once read", "err %d", err);
	}
	rclose(c);
	c = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK_ERRNO(rconnect(c, (struct sockaddr *)&a, sizeof(a)), ECONNREFUSED, "blocking rconnect to no listener: ECONNREFUSED");
	rclose(c);
	CHECK(rclose(l) == 0, "rclose of the listener", "%s", strerror(errno));
	CHECK(rclose(l) == EBADF, "rclose of an unknown fd returns EBADF (positive)", "got %d", rclose(l));
	return check_done();
}

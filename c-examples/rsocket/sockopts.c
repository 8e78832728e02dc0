/* rsetsockopt/rgetsockopt/rfcntl/rgetsockname/rgetpeername on stream
 * rsockets: buffer sizes (doubled, as Linux does), SOL_RDMA sizes before
 * connecting, TCP options, SO_RCVTIMEO (also across a MSG_WAITALL receive), unknown options: ENOTSUP (upstream's
 * quirk), rfcntl beyond GETFL/SETFL/GETFD/SETFD: ENOTSUP; addresses of both
 * ends agree. */
#include "rs_util.h"

/* Sends 10 bytes every 150 ms, 6 times: each gap is shorter than the 200 ms
 * receive timeout, their sum much longer. */
static void *trickle(void *arg)
{
	int fd = *(int *)arg;
	char piece[10] = "trickle..";

	for (int i = 0; i < 6; i++) {
		usleep(150000);
		if (rsend(fd, piece, sizeof(piece), 0) != sizeof(piece))
			break;
	}
	return NULL;
}

static int get_int(int fd, int level, int name)
{
	int v = -12345;
	socklen_t len = sizeof(v);

	if (rgetsockopt(fd, level, name, &v, &len))
		return -12345;
	return v;
}

int main(int argc, char **argv)
{
	int port = port_arg(argc, argv);
	int l, c, s, v, ret;
	struct sockaddr_in a, b;
	socklen_t len;
	struct timeval tv = { 0, 200000 };
	long long t0;
	char buf[8];

	watchdog(30);
	l = rs_listener(port);
	c = rsocket(AF_INET, SOCK_STREAM, 0);
	v = 65536;
	CHECK(rsetsockopt(c, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v)) == 0 && get_int(c, SOL_SOCKET, SO_RCVBUF) == 131072,
	      "SO_RCVBUF set before connecting reads back doubled", "got %d", get_int(c, SOL_SOCKET, SO_RCVBUF));
	CHECK(rsetsockopt(c, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v)) == 0 && get_int(c, SOL_SOCKET, SO_SNDBUF) == 131072,
	      "SO_SNDBUF likewise", "got %d", get_int(c, SOL_SOCKET, SO_SNDBUF));
	v = 128;
	CHECK(rsetsockopt(c, SOL_RDMA, RDMA_SQSIZE, &v, sizeof(v)) == 0 && get_int(c, SOL_RDMA, RDMA_SQSIZE) == 128,
	      "RDMA_SQSIZE", "got %d", get_int(c, SOL_RDMA, RDMA_SQSIZE));
	CHECK(rsetsockopt(c, SOL_RDMA, RDMA_RQSIZE, &v, sizeof(v)) == 0 && get_int(c, SOL_RDMA, RDMA_RQSIZE) == 128,
	      "RDMA_RQSIZE", "got %d", get_int(c, SOL_RDMA, RDMA_RQSIZE));
	v = 32;
	CHECK(rsetsockopt(c, SOL_RDMA, RDMA_INLINE, &v, sizeof(v)) == 0, "RDMA_INLINE", "%s", strerror(errno));
	v = 1;
	CHECK(rsetsockopt(c, IPPROTO_TCP, TCP_NODELAY, &v, sizeof(v)) == 0 && get_int(c, IPPROTO_TCP, TCP_NODELAY) == 1,
	      "TCP_NODELAY", "no");
	CHECK(rsetsockopt(c, SOL_SOCKET, SO_KEEPALIVE, &v, sizeof(v)) == 0 && get_int(c, SOL_SOCKET, SO_KEEPALIVE) == 1,
	      "SO_KEEPALIVE", "no");
	v = 30;
	CHECK(rsetsockopt(c, IPPROTO_TCP, TCP_KEEPIDLE, &v, sizeof(v)) == 0 && get_int(c, IPPROTO_TCP, TCP_KEEPIDLE) == 30,
	      "TCP_KEEPIDLE", "no");
	CHECK(get_int(c, SOL_SOCKET, SO_TYPE) == SOCK_STREAM, "SO_TYPE", "got %d", get_int(c, SOL_SOCKET, SO_TYPE));
	len = sizeof(buf);
	CHECK_ERRNO(rgetsockopt(c, SOL_SOCKET, SO_PEERCRED, buf, &len), ENOTSUP, "unknown option: ENOTSUP");
	CHECK_ERRNO(rsetsockopt(c, SOL_SOCKET, SO_PEERCRED, &v, sizeof(v)), ENOTSUP, "unknown option set: ENOTSUP");
	CHECK_ERRNO(rfcntl(c, F_GETOWN), ENOTSUP, "rfcntl F_GETOWN: ENOTSUP");
	CHECK(rfcntl(c, F_SETFD, FD_CLOEXEC) == 0 && rfcntl(c, F_GETFD) == FD_CLOEXEC, "F_SETFD/F_GETFD", "no");

	a = lo_addr(port);
	if (rconnect(c, (struct sockaddr *)&a, sizeof(a)))
		fatal("rconnect: %s", strerror(errno));
	s = raccept(l, NULL, NULL);
	v = 64;
	CHECK_ERRNO(rsetsockopt(c, SOL_RDMA, RDMA_SQSIZE, &v, sizeof(v)), EINVAL, "SOL_RDMA once connected: EINVAL");
	CHECK(get_int(c, IPPROTO_TCP, TCP_MAXSEG) > 0, "TCP_MAXSEG is positive", "got %d", get_int(c, IPPROTO_TCP, TCP_MAXSEG));
	CHECK(get_int(c, SOL_SOCKET, SO_ERROR) == 0, "SO_ERROR 0 on a healthy connection", "no");

	len = sizeof(a);
	ret = rgetsockname(c, (struct sockaddr *)&a, &len);
	len = sizeof(b);
	ret |= rgetpeername(s, (struct sockaddr *)&b, &len);
	CHECK(ret == 0 && len == sizeof(b) && a.sin_port == b.sin_port && a.sin_addr.s_addr == b.sin_addr.s_addr,
	      "client's name is the server's peer", "ret %d ports %d/%d", ret, ntohs(a.sin_port), ntohs(b.sin_port));
	len = sizeof(a);
	ret = rgetpeername(c, (struct sockaddr *)&a, &len);
	CHECK(ret == 0 && ntohs(a.sin_port) == port && a.sin_addr.s_addr == lo_addr(port).sin_addr.s_addr, "client's peer",
	      "port %d", ntohs(a.sin_port));
	len = sizeof(a);
	CHECK_ERRNO(rgetpeername(l, (struct sockaddr *)&a, &len), ENOTCONN, "rgetpeername on a listener: ENOTCONN");

	CHECK(rsetsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0, "SO_RCVTIMEO 200 ms", "%s", strerror(errno));
	t0 = now_ms();
	ret = rrecv(s, buf, sizeof(buf), 0);
	CHECK(ret == -1 && errno == EAGAIN && now_ms() - t0 >= 150 && now_ms() - t0 < 3000,
	      "rrecv times out with EAGAIN", "ret %d errno %d after %lld ms", ret, errno, now_ms() - t0);
	/* SO_RCVTIMEO bounds the whole call (as Linux counts it down), not each
	 * wait between the pieces a MSG_WAITALL receive gathers: the call returns
	 * what arrived when the 200 ms are up. */
	{
		pthread_t t;
		char all[60];

		pthread_create(&t, NULL, trickle, &c);
		t0 = now_ms();
		ret = rrecv(s, all, sizeof(all), MSG_WAITALL);
		CHECK(ret > 0 && ret < (int)sizeof(all), "SO_RCVTIMEO ends a MSG_WAITALL receive with what arrived",
		      "ret %d errno %d after %lld ms", ret, errno, now_ms() - t0);
		pthread_join(t, NULL);
	}
	rclose(c);
	rclose(s);
	rclose(l);
	return check_done();
}

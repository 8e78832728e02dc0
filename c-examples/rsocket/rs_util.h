/*
 * Helpers shared by the rsocket checks: a listener on 127.0.0.1 (or on
 * $RS_TEST_ADDR: an RDMA device's address in the VM, where loopback is not
 * an RDMA address) and a connected pair made through it. Built on c-examples/check.h (ok/FAIL
 * lines, watchdog). Ports come from the command line (run.sh gives each
 * program its own).
 */
#ifndef RS_UTIL_H
#define RS_UTIL_H

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include <rdma/rsocket.h>

#include "check.h"

static inline struct sockaddr_in lo_addr(int port)
{
	struct sockaddr_in a;

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons(port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (getenv("RS_TEST_ADDR") && inet_pton(AF_INET, getenv("RS_TEST_ADDR"), &a.sin_addr) != 1)
		fatal("RS_TEST_ADDR %s: not an IPv4 address", getenv("RS_TEST_ADDR"));
	return a;
}

static inline int rs_listener(int port)
{
	struct sockaddr_in a = lo_addr(port);
	int one = 1, fd;

	fd = rsocket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		fatal("rsocket: %s", strerror(errno));
	rsetsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (rbind(fd, (struct sockaddr *)&a, sizeof(a)))
		fatal("rbind %d: %s", port, strerror(errno));
	if (rlisten(fd, 8))
		fatal("rlisten: %s", strerror(errno));
	return fd;
}

static inline int rs_connect(int port)
{
	struct sockaddr_in a = lo_addr(port);
	int fd = rsocket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		fatal("rsocket: %s", strerror(errno));
	if (rconnect(fd, (struct sockaddr *)&a, sizeof(a)))
		fatal("rconnect %d: %s", port, strerror(errno));
	return fd;
}

/* A connected pair through listener `l`: *c the active side, *s the accepted one. */
static inline void rs_pair(int l, int port, int *c, int *s)
{
	*c = rs_connect(port);
	*s = raccept(l, NULL, NULL);
	if (*s < 0)
		fatal("raccept: %s", strerror(errno));
}

static inline int readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int r = rpoll(&p, 1, ms);

	return r == 1 && (p.revents & POLLIN);
}

/* RS_TEST_NO_UD=1: the device has no UD QPs (siw). Datagram rsockets cannot
 * work there with either library: checks replace their datagram parts with
 * check_no_ud. */
static inline int no_ud(void)
{
	const char *v = getenv("RS_TEST_NO_UD");

	return v && *v == '1';
}

/* Without UD QPs a datagram rsocket opens and binds, and its first send
 * fails with EOPNOTSUPP (upstream's too): an error, not a hang or a loss. */
static inline void check_no_ud(int port)
{
	struct sockaddr_in a = lo_addr(port);
	int d = rsocket(AF_INET, SOCK_DGRAM, 0);
	ssize_t n = -2;
	int e = 0;

	if (d >= 0 && rbind(d, (struct sockaddr *)&a, sizeof(a)) == 0) {
		n = rsendto(d, "x", 1, 0, (struct sockaddr *)&a, sizeof(a));
		e = errno;
	}
	CHECK(n == -1 && e == EOPNOTSUPP, "no UD QPs: a datagram rsocket's first send fails with EOPNOTSUPP",
	      "got %zd (%s)", n, n == -2 ? strerror(errno) : n == -1 ? strerror(e) : "sent");
	if (d >= 0)
		rclose(d);
}

static inline int port_arg(int argc, char **argv)
{
	return argc > 1 ? atoi(argv[1]) : 7950;
}

#endif

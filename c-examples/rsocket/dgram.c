/* SOCK_DGRAM rsockets: datagrams between two bound rsockets keep their
 * boundaries and report the sender's address; the first go over the UDP
 * side channel, later ones over UD once the peers learnt each other's QP;
 * rconnect sets a default destination; oversized datagrams: EMSGSIZE
 * (beyond a receive slot, or beyond the port's MTU: never silently lost). */
#include "rs_util.h"

int main(int argc, char **argv)
{
	int port = port_arg(argc, argv);
	struct sockaddr_in a = lo_addr(port), b = lo_addr(port + 1), from;
	socklen_t len;
	int x, y, ok = 1;
	char buf[2048], big[4096];
	ssize_t n;

	watchdog(30);
	if (no_ud()) {
		check_no_ud(port);
		return check_done();
	}
	memset(big, 0, sizeof(big));
	x = rsocket(AF_INET, SOCK_DGRAM, 0);
	y = rsocket(AF_INET, SOCK_DGRAM, 0);
	CHECK(x >= 0 && y >= 0, "two datagram rsockets", "%s", strerror(errno));
	CHECK(rbind(x, (struct sockaddr *)&a, sizeof(a)) == 0 && rbind(y, (struct sockaddr *)&b, sizeof(b)) == 0,
	      "both bound", "%s", strerror(errno));
	for (int i = 0; i < 50 && ok; i++) {
		int size = 1 + (i * 37) % 1000; /* fits rxe's 1024-byte MTU too */
		memset(big, 'a' + i % 26, size);
		if (rsendto(x, big, size, 0, (struct sockaddr *)&b, sizeof(b)) != size) {
			ok = 0;
			break;
		}
		len = sizeof(from);
		n = rrecvfrom(y, buf, sizeof(buf), 0, (struct sockaddr *)&from, &len);
		ok = n == size && !memcmp(buf, big, size) && len == sizeof(from) && from.sin_port == a.sin_port &&
		     from.sin_addr.s_addr == a.sin_addr.s_addr;
		if (ok && rsendto(y, buf, n, 0, (struct sockaddr *)&from, len) != n)
			ok = 0;
		if (ok)
			ok = rrecv(x, buf, sizeof(buf), 0) == size;
	}
	CHECK(ok, "50 datagrams of varied sizes echoed, boundaries and source address kept", "failed: %s",
	      strerror(errno));
	CHECK(rconnect(x, (struct sockaddr *)&b, sizeof(b)) == 0, "rconnect sets the default destination", "%s",
	      strerror(errno));
	CHECK(rsend(x, "hi", 2, 0) == 2, "rsend to it", "%s", strerror(errno));
	CHECK(rrecv(y, buf, sizeof(buf), 0) == 2 && !memcmp(buf, "hi", 2), "received", "no");
	len = sizeof(from);
	CHECK(rgetpeername(x, (struct sockaddr *)&from, &len) == 0 && from.sin_port == b.sin_port, "rgetpeername",
	      "%s", strerror(errno));
	CHECK_ERRNO(rsend(x, big, sizeof(big), 0), EMSGSIZE, "a datagram larger than a slot: EMSGSIZE");
	n = rsend(x, big, 1500, 0);
	if (n == 1500)
		CHECK(rrecv(y, buf, sizeof(buf), 0) == 1500, "1500 bytes sent arrive whole (MTU >= 2048)", "no");
	else
		CHECK(n == -1 && errno == EMSGSIZE, "1500 bytes not sent: EMSGSIZE (a smaller MTU)", "ret %zd %s", n,
		      strerror(errno));
	rfcntl(y, F_SETFL, O_NONBLOCK);
	CHECK_ERRNO(rrecv(y, buf, sizeof(buf), 0), EAGAIN, "non-blocking rrecv with nothing queued: EAGAIN");
	CHECK_ERRNO(rlisten(y, 1), EOPNOTSUPP, "rlisten on a datagram rsocket: EOPNOTSUPP");
	rclose(x);
	rclose(y);
	return check_done();
}

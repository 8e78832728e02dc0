/* A handler installed without SA_RESTART interrupts a blocking rrecv or
 * rrecvfrom on a datagram rsocket: -1/EINTR, as recv(2) says (signal(7));
 * upstream returns what its epoll_wait returned. Checked before the rsocket
 * has a QP (asleep on its wake-up flag alone) and after datagrams went both
 * ways (asleep on its CQ too). The datagram the peer sends 400 ms after the
 * signal is then received whole, from the peer's address; it also ends the
 * call where a signal does not, so a failure is a FAIL line, not a hang. */
#include "rs_util.h"

static int y;
static struct sockaddr_in xa, ya;

static void send_late(void *msg)
{
	ssize_t len = strlen(msg);

	if (rsendto(y, msg, len, 0, (struct sockaddr *)&xa, sizeof(xa)) != len)
		fail_stuck_errno("the peer's rsendto failed");
}

static void interrupted(int x, int with_from, char *msg, const char *what)
{
	struct sockaddr_in from;
	socklen_t len = sizeof(from);
	struct check_poke pk;
	int before = check_signals, err;
	char buf[64];
	ssize_t n;

	memset(&from, 0, sizeof(from));
	check_poke_me(&pk, send_late, msg);
	errno = 0;
	if (with_from)
		n = rrecvfrom(x, buf, sizeof(buf), 0, (struct sockaddr *)&from, &len);
	else
		n = rrecv(x, buf, sizeof(buf), 0);
	err = errno;
	pthread_join(pk.thread, NULL);
	CHECK(n == -1 && err == EINTR && check_signals == before + 1, what, "got %zd errno %d caught %d", n, err,
	      (int)(check_signals - before));
	if (n == -1) {
		len = sizeof(from);
		n = rrecvfrom(x, buf, sizeof(buf), 0, (struct sockaddr *)&from, &len);
	}
	CHECK(n == (ssize_t)strlen(msg) && !memcmp(buf, msg, n) && from.sin_port == ya.sin_port,
	      "then the datagram sent after the signal arrives whole, from the peer", "got %zd errno %d", n, errno);
}

int main(int argc, char **argv)
{
	int port = port_arg(argc, argv), x;
	char buf[64];

	watchdog(30);
	if (no_ud()) {
		check_no_ud(port);
		return check_done();
	}
	xa = lo_addr(port);
	ya = lo_addr(port + 1);
	x = rsocket(AF_INET, SOCK_DGRAM, 0);
	y = rsocket(AF_INET, SOCK_DGRAM, 0);
	if (x < 0 || y < 0)
		fatal("rsocket(SOCK_DGRAM): %s", strerror(errno));
	if (rbind(x, (struct sockaddr *)&xa, sizeof(xa)) || rbind(y, (struct sockaddr *)&ya, sizeof(ya)))
		fatal("rbind: %s", strerror(errno));
	check_handle(SIGUSR1, check_count_signal, 0);
	interrupted(x, 0, "first", "a handler without SA_RESTART interrupts a datagram rrecv (no QP yet): EINTR");
	if (rsendto(x, "ping", 4, 0, (struct sockaddr *)&ya, sizeof(ya)) != 4 || rrecv(y, buf, sizeof(buf), 0) != 4)
		fatal("a datagram back to the peer: %s", strerror(errno));
	interrupted(x, 1, "second", "and a datagram rrecvfrom (its QP's CQ armed): EINTR");
	rclose(x);
	rclose(y);
	return check_done();
}

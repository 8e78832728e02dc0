/* A signal handler interrupts a blocking rrecv as it interrupts upstream's
 * blocking read of the completion channel (signal(7)): -1/EINTR after a
 * handler installed without SA_RESTART; with SA_RESTART the call goes on
 * waiting and returns the data sent afterwards. A blocking rsend interrupted
 * after it moved some bytes returns their count, as send(2) does (-1/EINTR
 * if it moved none), and the peer receives exactly those bytes. A blocking
 * rrecv with MSG_WAITALL interrupted after part of the data arrived returns
 * that part (-1/EINTR when nothing arrived), as recv(2) does and upstream's
 * rrecv (its loop returns what it copied); with MSG_PEEK too, the part is
 * returned and stays queued. rpoll with a timeout is never
 * restarted (signal(7), upstream's poll(2)): -1/EINTR with either handler. */
#include "rs_util.h"

static void send_byte(void *peer)
{
	if (rsend(*(int *)peer, "x", 1, 0) != 1)
		fatal("rsend: %s", strerror(errno));
}

#define BIG (8 << 20) /* far more than the send and receive buffers hold */

static unsigned char pattern(size_t i)
{
	return (unsigned char)(i * 7 % 251);
}

/* rsend of BIG bytes into a peer that does not read, interrupted 200 ms in. */
static void partial_send(int c, int peer)
{
	unsigned char *big = malloc(BIG), *in = malloc(BIG);
	struct check_poke pk;
	ssize_t n, got = 0, r;
	size_t i;
	int err, bad = 0;

	if (!big || !in)
		fatal("malloc");
	for (i = 0; i < BIG; i++)
		big[i] = pattern(i);
	check_handle(SIGUSR1, check_count_signal, 0);
	check_signals = 0;
	check_poke_me(&pk, NULL, NULL);
	errno = 0;
	n = rsend(c, big, BIG, 0);
	err = errno;
	pthread_join(pk.thread, NULL);
	CHECK(n > 0 && n < BIG && check_signals == 1, "an interrupted blocking rsend returns the bytes it sent",
	      "got %zd errno %d caught %d", n, err, (int)check_signals);
	/* the buffers are still full: the next rsend moves nothing before its signal */
	check_poke_me(&pk, NULL, NULL);
	errno = 0;
	r = n > 0 ? rsend(c, big + n, BIG - n, 0) : -1;
	err = errno;
	pthread_join(pk.thread, NULL);
	CHECK(r == -1 && err == EINTR && check_signals == 2, "interrupted before it sent anything: -1/EINTR",
	      "got %zd errno %d caught %d", r, err, (int)check_signals);
	while (n > 0 && got < n && (r = rrecv(peer, in + got, n - got, 0)) > 0)
		got += r;
	for (i = 0; i < (size_t)got; i++)
		bad += in[i] != pattern(i);
	sleep_ms(200);
	errno = 0;
	r = rrecv(peer, in, 1, MSG_DONTWAIT);
	CHECK(n > 0 && got == n && !bad && r == -1 && errno == EAGAIN, "the peer receives exactly those bytes",
	      "sent %zd, received %zd (%d differ), then %zd errno %d", n, got, bad, r, errno);
	free(big);
	free(in);
}

/* rrecv(MSG_WAITALL | peek) of 8 bytes with 2 of them there, then with none, each interrupted 200 ms in. */
static void waitall(int c, int peer, int peek)
{
	struct check_poke pk;
	char buf[8] = { 0 };
	ssize_t n;
	int err;

	check_handle(SIGUSR1, check_count_signal, 0);
	check_signals = 0;
	if (rsend(peer, "ab", 2, 0) != 2 || !readable(c, 5000))
		fatal("the first 2 bytes did not arrive: %s", strerror(errno));
	check_poke_me(&pk, NULL, NULL);
	errno = 0;
	n = rrecv(c, buf, sizeof(buf), MSG_WAITALL | peek);
	err = errno;
	pthread_join(pk.thread, NULL);
	CHECK(n == 2 && !memcmp(buf, "ab", 2) && check_signals == 1,
	      peek ? "an interrupted rrecv with MSG_PEEK|MSG_WAITALL returns the part that arrived"
		   : "an interrupted rrecv with MSG_WAITALL returns the part that arrived",
	      "got %zd errno %d caught %d", n, err, (int)check_signals);
	if (peek) {
		memset(buf, 0, sizeof(buf));
		n = rrecv(c, buf, sizeof(buf), MSG_DONTWAIT);
		CHECK(n == 2 && !memcmp(buf, "ab", 2), "and the peeked part is still queued", "got %zd: %.2s", n, buf);
	}
	check_poke_me(&pk, NULL, NULL);
	errno = 0;
	n = rrecv(c, buf, sizeof(buf), MSG_WAITALL | peek);
	err = errno;
	pthread_join(pk.thread, NULL);
	CHECK(n == -1 && err == EINTR && check_signals == 2, "with nothing arrived: -1/EINTR",
	      "got %zd errno %d caught %d", n, err, (int)check_signals);
	memset(buf, 0, sizeof(buf));
	n = rsend(peer, "cdefghij", 8, 0) == 8 ? rrecv(c, buf, sizeof(buf), MSG_WAITALL) : -1;
	CHECK(n == 8 && !memcmp(buf, "cdefghij", 8), "nothing was lost: the next 8 bytes arrive whole",
	      "got %zd: %.8s", n, buf);
}

/* rpoll on an rsocket with nothing to read, 10 s timeout, interrupted 200 ms in. */
static void rpoll_eintr(int c)
{
	struct pollfd p = { .fd = c, .events = POLLIN };
	struct check_poke pk;
	int restart, r, err;

	for (restart = 0; restart < 2; restart++) {
		check_handle(SIGUSR1, check_count_signal, restart ? SA_RESTART : 0);
		check_signals = 0;
		check_poke_me(&pk, NULL, NULL);
		errno = 0;
		r = rpoll(&p, 1, 10000);
		err = errno;
		pthread_join(pk.thread, NULL);
		CHECK(r == -1 && err == EINTR && check_signals == 1,
		      restart ? "rpoll with a timeout is not restarted after an SA_RESTART handler either: EINTR"
			      : "a handler without SA_RESTART interrupts rpoll with a timeout: EINTR",
		      "got %d errno %d revents %#x caught %d", r, err, p.revents, (int)check_signals);
	}
}

int main(int argc, char **argv)
{
	int port = port_arg(argc, argv), l, c, peer, restart, err;
	struct check_poke pk;
	char b = 0;
	ssize_t n;

	watchdog(60);
	l = rs_listener(port);
	rs_pair(l, port, &c, &peer);
	for (restart = 0; restart < 2; restart++) {
		check_handle(SIGUSR1, check_count_signal, restart ? SA_RESTART : 0);
		check_poke_me(&pk, restart ? send_byte : NULL, &peer);
		errno = 0;
		n = rrecv(c, &b, 1, 0);
		err = errno;
		pthread_join(pk.thread, NULL);
		if (!restart)
			CHECK(n == -1 && err == EINTR && check_signals == 1,
			      "a handler without SA_RESTART interrupts a blocking rrecv: EINTR", "got %zd errno %d caught %d",
			      n, err, (int)check_signals);
		else
			CHECK(n == 1 && b == 'x' && check_signals == 2,
			      "with SA_RESTART rrecv goes on waiting and returns the byte sent after",
			      "got %zd errno %d caught %d", n, err, (int)check_signals);
	}
	partial_send(c, peer);
	waitall(c, peer, 0);
	waitall(c, peer, MSG_PEEK);
	rpoll_eintr(c);
	rclose(c);
	rclose(peer);
	rclose(l);
	return check_done();
}

/* A signal handler interrupts a blocking rrecv as it interrupts upstream's
 * blocking read of the completion channel (signal(7)): -1/EINTR after a
 * handler installed without SA_RESTART; with SA_RESTART the call goes on
 * waiting and returns the data sent afterwards. A blocking rsend interrupted
 * after it moved some bytes returns their count, as send(2) does (-1/EINTR
 * if it moved none), and the peer receives exactly those bytes. */
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

int main(int argc, char **argv)
{
	int port = port_arg(argc, argv), l, c, peer, restart, err;
	struct check_poke pk;
	char b = 0;
	ssize_t n;

	watchdog(30);
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
	rclose(c);
	rclose(peer);
	rclose(l);
	return check_done();
}

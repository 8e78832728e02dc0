/* A signal handler interrupts a blocking rrecv as it interrupts upstream's
 * blocking read of the completion channel (signal(7)): -1/EINTR after a
 * handler installed without SA_RESTART; with SA_RESTART the call goes on
 * waiting and returns the data sent afterwards. */
#include "rs_util.h"

static void send_byte(void *peer)
{
	if (rsend(*(int *)peer, "x", 1, 0) != 1)
		fatal("rsend: %s", strerror(errno));
}

int main(int argc, char **argv)
{
	int port = port_arg(argc, argv), l, c, peer, restart, err;
	struct check_poke pk;
	char b = 0;
	ssize_t n;

	watchdog(30);
	check_handle(SIGALRM, watchdog_handler, SA_RESTART); /* it exits: out of the question */
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
	rclose(c);
	rclose(peer);
	rclose(l);
	return check_done();
}

/* A signal handler interrupts a blocking rrecv as it interrupts upstream's
 * blocking read of the completion channel (signal(7)): -1/EINTR after a
 * handler installed without SA_RESTART; with SA_RESTART the call goes on
 * waiting and returns the data sent afterwards. */
#include <signal.h>

#include "rs_util.h"

static volatile sig_atomic_t caught;
static int peer;

static void on_usr1(int sig)
{
	(void)sig;
	caught++;
}

static void handle(int sig, void (*fn)(int), int flags)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = fn;
	sa.sa_flags = flags;
	if (sigaction(sig, &sa, NULL))
		fatal("sigaction: %s", strerror(errno));
}

static pthread_t target;
static int then_send;

/* After 200 ms SIGUSR1 to the main thread; 400 ms later one byte, if asked. */
static void *poke(void *arg)
{
	(void)arg;
	sleep_ms(200);
	pthread_kill(target, SIGUSR1);
	if (then_send) {
		sleep_ms(400);
		if (rsend(peer, "x", 1, 0) != 1)
			fatal("rsend: %s", strerror(errno));
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int port = port_arg(argc, argv), l, c;
	pthread_t t;
	char b;
	ssize_t n;
	int err;

	watchdog(30);
	handle(SIGALRM, watchdog_handler, SA_RESTART); /* it exits: out of the question */
	l = rs_listener(port);
	rs_pair(l, port, &c, &peer);
	target = pthread_self();

	handle(SIGUSR1, on_usr1, 0);
	if (pthread_create(&t, NULL, poke, NULL))
		fatal("pthread_create");
	errno = 0;
	n = rrecv(c, &b, 1, 0);
	err = errno;
	pthread_join(t, NULL);
	CHECK(n == -1 && err == EINTR && caught == 1, "a handler without SA_RESTART interrupts a blocking rrecv: EINTR",
	      "got %zd errno %d caught %d", n, err, (int)caught);

	handle(SIGUSR1, on_usr1, SA_RESTART);
	then_send = 1;
	if (pthread_create(&t, NULL, poke, NULL))
		fatal("pthread_create");
	errno = 0;
	n = rrecv(c, &b, 1, 0);
	err = errno;
	pthread_join(t, NULL);
	CHECK(n == 1 && b == 'x' && caught == 2, "with SA_RESTART rrecv goes on waiting and returns the byte sent after",
	      "got %zd errno %d caught %d", n, err, (int)caught);
	rclose(c);
	rclose(peer);
	rclose(l);
	return check_done();
}

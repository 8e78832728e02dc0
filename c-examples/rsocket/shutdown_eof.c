/* rshutdown and rclose: SHUT_WR gives the peer EOF after the queued data
 * while the other direction keeps working; SHUT_RD keeps the peer
 * writable; a closed peer gives EOF (then errors on send, never a hang);
 * a peer process that dies gives EOF or ECONNRESET within seconds. */
#include <signal.h>
#include <sys/wait.h>

#include "rs_util.h"

/* A peer in a fresh process (RDMA state does not survive fork): this program
 * again with "die": it connects to `port`, sends 3 bytes and is SIGKILLed. */
static pid_t doomed_peer(const char *self, int port)
{
	pid_t pid = fork();

	if (pid == 0) {
		char p[16];

		snprintf(p, sizeof(p), "%d", port);
		execl(strchr(self, '/') ? self : "/proc/self/exe", self, p, "die", (char *)NULL);
		_exit(127);
	}
	return pid;
}

int main(int argc, char **argv)
{
	int port = port_arg(argc, argv);
	int l, c, s, ret;
	char buf[64];
	struct pollfd p;
	long long t0;
	pid_t pid;

	if (argc > 2 && !strcmp(argv[2], "die")) {
		int k = rs_connect(port);
		rsend(k, "bye", 3, 0);
		sleep_ms(300);
		kill(getpid(), SIGKILL);
		return 1;
	}
	watchdog(60);
	l = rs_listener(port);
	rs_pair(l, port, &c, &s);

	CHECK(rsend(s, "tail", 4, 0) == 4, "rsend before shutdown", "%s", strerror(errno));
	CHECK(rshutdown(s, SHUT_WR) == 0, "rshutdown(SHUT_WR)", "%s", strerror(errno));
	CHECK(rrecv(c, buf, 4, MSG_WAITALL) == 4 && !memcmp(buf, "tail", 4), "queued data still arrives",
	      "bad");
	CHECK(rrecv(c, buf, sizeof(buf), 0) == 0, "then EOF (0)", "got data or error: %s", strerror(errno));
	p.fd = c;
	p.events = POLLIN;
	p.revents = 0;
	CHECK(rpoll(&p, 1, 0) == 1 && (p.revents & POLLIN), "EOF reads as POLLIN", "revents %#x", p.revents);
	CHECK_ERRNO(rsend(s, "x", 1, 0), EPIPE, "rsend after own SHUT_WR: EPIPE");
	CHECK(rsend(c, "back", 4, 0) == 4, "the other direction still sends", "%s", strerror(errno));
	CHECK(rrecv(s, buf, 4, MSG_WAITALL) == 4 && !memcmp(buf, "back", 4), "and the half-closed side reads it",
	      "bad");
	CHECK(rclose(c) == 0, "rclose", "%s", strerror(errno));
	t0 = now_ms();
	ret = rrecv(s, buf, sizeof(buf), 0);
	CHECK(ret == 0 && now_ms() - t0 < 5000, "peer closed: EOF", "ret %d errno %d", ret, errno);
	rclose(s);

	/* small messages just before the peer leaves: rshutdown and rclose have
	 * nothing left to wait for and return at once, not at the end of a 2-second
	 * bound */
	rs_pair(l, port, &c, &s);
	for (int i = 0; i < 3; i++)
		CHECK(rsend(s, "abc", 3, 0) == 3, "small rsend", "%s", strerror(errno));
	CHECK(rrecv(c, buf, 9, MSG_WAITALL) == 9, "the peer reads them", "%s", strerror(errno));
	rclose(c);
	CHECK(rrecv(s, buf, sizeof(buf), 0) == 0, "then sees EOF", "errno %d", errno);
	t0 = now_ms();
	rshutdown(s, SHUT_RDWR);
	rclose(s);
	CHECK(now_ms() - t0 < 1500, "rshutdown and rclose after the peer left return promptly", "took %lld ms",
	      now_ms() - t0);

	/* SHUT_RD: no EOF for the peer, which can still send */
	rs_pair(l, port, &c, &s);
	CHECK(rsend(c, "abc", 3, 0) == 3, "small rsend", "%s", strerror(errno));
	t0 = now_ms();
	CHECK(rshutdown(c, SHUT_RD) == 0, "rshutdown(SHUT_RD)", "%s", strerror(errno));
	CHECK(now_ms() - t0 < 1500, "which returns promptly", "took %lld ms", now_ms() - t0);
	CHECK(rrecv(s, buf, 3, MSG_WAITALL) == 3, "peer receives what came before", "%s", strerror(errno));
	CHECK(rrecv(c, buf, sizeof(buf), 0) == 0, "reads after SHUT_RD give 0", "errno %d", errno);
	CHECK(rsend(c, "still", 5, 0) == 5, "sends after SHUT_RD work", "%s", strerror(errno));
	CHECK(rrecv(s, buf, 5, MSG_WAITALL) == 5, "peer receives them", "%s", strerror(errno));
	CHECK_ERRNO(rshutdown(c, 7), EINVAL, "rshutdown with a bad how: EINVAL");
	rclose(c);
	rclose(s);

	/* a peer that dies without closing */
	pid = doomed_peer(argv[0], port);
	s = raccept(l, NULL, NULL);
	CHECK(s >= 0, "raccept the doomed peer", "%s", strerror(errno));
	CHECK(rrecv(s, buf, 3, MSG_WAITALL) == 3, "its data arrives", "%s", strerror(errno));
	waitpid(pid, NULL, 0);
	t0 = now_ms();
	ret = rrecv(s, buf, sizeof(buf), 0);
	CHECK((ret == 0 || (ret < 0 && errno == ECONNRESET)) && now_ms() - t0 < 10000,
	      "dead peer: EOF or ECONNRESET, no hang", "ret %d errno %d after %lld ms", ret, errno, now_ms() - t0);
	t0 = now_ms();
	for (int i = 0; i < 100 && rsend(s, buf, sizeof(buf), 0) > 0; i++)
		;
	CHECK(now_ms() - t0 < 10000, "sends to a dead peer fail instead of hanging", "took %lld ms", now_ms() - t0);
	t0 = now_ms();
	rclose(s);
	CHECK(now_ms() - t0 < 5000, "rclose with a dead peer returns promptly", "took %lld ms", now_ms() - t0);

	/* the same, noticed by a reader that never sleeps (MSG_DONTWAIT loop) */
	pid = doomed_peer(argv[0], port);
	s = raccept(l, NULL, NULL);
	CHECK(s >= 0 && rrecv(s, buf, 3, MSG_WAITALL) == 3, "second doomed peer connected", "%s", strerror(errno));
	waitpid(pid, NULL, 0);
	t0 = now_ms();
	do
		ret = rrecv(s, buf, sizeof(buf), MSG_DONTWAIT);
	while (ret < 0 && errno == EAGAIN && now_ms() - t0 < 15000);
	CHECK(ret == 0 || (ret < 0 && errno == ECONNRESET), "busy non-blocking reader: EOF or ECONNRESET",
	      "ret %d errno %d after %lld ms", ret, errno, now_ms() - t0);
	rclose(s);
	rclose(l);
	return check_done();
}

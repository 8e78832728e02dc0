/* rrecv on a stream, as recv(2): MSG_PEEK returns queued bytes without
 * consuming them (across message boundaries, and from the rest of a message
 * that was partly read), a short buffer takes part of a message and leaves
 * the rest first in line, and nothing is lost or repeated; rreadv and
 * rrecvmsg scatter the same stream over several buffers. A repeated peek
 * sees data that arrived after the data it already saw. MSG_PEEK with
 * MSG_WAITALL waits, as TCP's, until the whole request is queued or the
 * peer sends no more; a non-blocking one, or one SO_RCVTIMEO ends, sees
 * what is there. */
#include <sys/uio.h>

#include "rs_util.h"

/* Waits until `want` bytes are queued at `fd` (peeking, non-blocking). */
static int peek_until(int fd, char *buf, int want)
{
	long long t0 = now_ms();
	int n;

	do {
		n = rrecv(fd, buf, want, MSG_PEEK | MSG_DONTWAIT);
		if (n == want)
			return n;
		sleep_ms(2);
	} while (now_ms() - t0 < 10000);
	return n;
}

struct later {
	int fd;
	const char *msg;
};

/* Sends `msg` 300 ms from now (while the main thread waits in a peek). */
static void *send_later(void *arg)
{
	struct later *l = arg;

	sleep_ms(300);
	if (rsend(l->fd, l->msg, strlen(l->msg), 0) != (ssize_t)strlen(l->msg))
		fprintf(stderr, "peek: the later rsend failed: %s\n", strerror(errno));
	return NULL;
}

int main(int argc, char **argv)
{
	int port = port_arg(argc, argv);
	int l, c, s;
	char buf[64];

	watchdog(60);
	l = rs_listener(port);
	rs_pair(l, port, &c, &s);

	CHECK(rsend(s, "hello ", 6, 0) == 6, "rsend", "%s", strerror(errno));
	CHECK(peek_until(c, buf, 6) == 6, "the first message is queued", "%s", "not within 10 s");
	CHECK(rsend(s, "world", 5, 0) == 5, "a second rsend after it", "%s", strerror(errno));
	memset(buf, 0, sizeof(buf));
	CHECK(peek_until(c, buf, 11) == 11 && !memcmp(buf, "hello world", 11),
	      "repeated MSG_PEEKs see the message that came later, both as one stream", "got '%.11s'", buf);
	memset(buf, 0, sizeof(buf));
	CHECK(rrecv(c, buf, 3, MSG_PEEK) == 3 && !memcmp(buf, "hel", 3), "a short MSG_PEEK", "got '%.3s'", buf);
	CHECK(rrecv(c, buf, 4, 0) == 4 && !memcmp(buf, "hell", 4), "peeked bytes are still read, from the start",
	      "got '%.4s'", buf);
	memset(buf, 0, sizeof(buf));
	CHECK(rrecv(c, buf, sizeof(buf), MSG_PEEK) == 7 && !memcmp(buf, "o world", 7),
	      "MSG_PEEK after a partial read starts at the rest", "got '%.7s'", buf);
	CHECK(rrecv(c, buf, 1, 0) == 1 && buf[0] == 'o', "one byte more", "got '%c'", buf[0]);
	memset(buf, 0, sizeof(buf));
	CHECK(rrecv(c, buf, sizeof(buf), 0) == 6 && !memcmp(buf, " world", 6),
	      "the rest of the first message and the second", "got '%.6s'", buf);
	CHECK_ERRNO(rrecv(c, buf, sizeof(buf), MSG_DONTWAIT), EAGAIN, "then nothing is left (EAGAIN)");

	/* A read that ends inside a message, then MSG_WAITALL over the boundary. */
	CHECK(rsend(s, "abc", 3, 0) == 3 && rsend(s, "defg", 4, 0) == 4, "two more rsends", "%s", strerror(errno));
	CHECK(peek_until(c, buf, 7) == 7, "both queued", "%s", "not within 10 s");
	CHECK(rrecv(c, buf, 2, 0) == 2 && !memcmp(buf, "ab", 2), "two bytes", "got '%.2s'", buf);
	CHECK(rrecv(c, buf, 5, MSG_WAITALL) == 5 && !memcmp(buf, "cdefg", 5), "MSG_WAITALL across the boundary",
	      "got '%.5s'", buf);
	CHECK_ERRNO(rrecv(c, buf, sizeof(buf), MSG_DONTWAIT), EAGAIN, "again nothing left");

	/* Several buffers: a peek over two of them, then rreadv over three
	 * (one empty) that end inside the second message. */
	CHECK(rsend(s, "0123456", 7, 0) == 7 && rsend(s, "789ab", 5, 0) == 5, "two rsends for the iovecs", "%s",
	      strerror(errno));
	CHECK(peek_until(c, buf, 12) == 12, "all 12 queued", "%s", "not within 10 s");
	{
		char a[2], b[5], d[4], e[16];
		struct iovec iv[3] = { { a, sizeof(a) }, { NULL, 0 }, { b, sizeof(b) } };
		struct iovec pv[2] = { { d, sizeof(d) }, { e, sizeof(e) } };
		struct msghdr m;

		memset(&m, 0, sizeof(m));
		m.msg_iov = pv;
		m.msg_iovlen = 2;
		memset(e, 0, sizeof(e));
		CHECK(rrecvmsg(c, &m, MSG_PEEK) == 12 && !memcmp(d, "0123", 4) && !memcmp(e, "456789ab", 8),
		      "rrecvmsg MSG_PEEK over two buffers", "got '%.4s' '%.8s'", d, e);
		CHECK(rreadv(c, iv, 3) == 7 && !memcmp(a, "01", 2) && !memcmp(b, "23456", 5),
		      "rreadv fills three buffers (one empty) in order", "got '%.2s' '%.5s'", a, b);
		iv[0].iov_len = 1;
		iv[2].iov_len = 2;
		CHECK(rreadv(c, iv, 3) == 3 && a[0] == '7' && !memcmp(b, "89", 2), "rreadv inside a message",
		      "got '%c' '%.2s'", a[0], b);
		CHECK(rrecv(c, buf, sizeof(buf), 0) == 2 && !memcmp(buf, "ab", 2), "and its rest", "got '%.2s'", buf);
	}

	{
		struct later lt = { s, "all!" };
		struct timeval tv = { 0, 200 * 1000 };
		pthread_t t;

		CHECK(rsend(s, "wait", 4, 0) == 4 && peek_until(c, buf, 4) == 4, "four bytes queued", "%s",
		      strerror(errno));
		memset(buf, 0, sizeof(buf));
		CHECK(rrecv(c, buf, 8, MSG_PEEK | MSG_WAITALL | MSG_DONTWAIT) == 4 && !memcmp(buf, "wait", 4),
		      "a non-blocking MSG_PEEK|MSG_WAITALL returns what is there", "got '%.4s'", buf);
		CHECK(pthread_create(&t, NULL, send_later, &lt) == 0, "a thread that sends 300 ms later", "%s",
		      "pthread_create failed");
		memset(buf, 0, sizeof(buf));
		CHECK(rrecv(c, buf, 8, MSG_PEEK | MSG_WAITALL) == 8 && !memcmp(buf, "waitall!", 8),
		      "a blocking MSG_PEEK|MSG_WAITALL waits until the whole request is queued", "got '%.8s'", buf);
		pthread_join(t, NULL);
		memset(buf, 0, sizeof(buf));
		CHECK(rrecv(c, buf, 8, MSG_WAITALL) == 8 && !memcmp(buf, "waitall!", 8), "and it consumed nothing",
		      "got '%.8s'", buf);
		CHECK(rsetsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0, "SO_RCVTIMEO 200 ms", "%s",
		      strerror(errno));
		CHECK(rsend(s, "part", 4, 0) == 4 && peek_until(c, buf, 4) == 4, "four bytes more", "%s", strerror(errno));
		memset(buf, 0, sizeof(buf));
		CHECK(rrecv(c, buf, 8, MSG_PEEK | MSG_WAITALL) == 4 && !memcmp(buf, "part", 4),
		      "MSG_PEEK|MSG_WAITALL that SO_RCVTIMEO ends sees what came", "got '%.4s'", buf);
		CHECK(rrecv(c, buf, 8, 0) == 4, "read them", "%s", strerror(errno));
		CHECK_ERRNO(rrecv(c, buf, 8, MSG_PEEK | MSG_WAITALL), EAGAIN,
			    "with nothing queued it ends in EAGAIN at SO_RCVTIMEO");
		/* No timeout any more: only the peer's shutdown can end the next wait. */
		tv.tv_usec = 0;
		CHECK(rsetsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0, "SO_RCVTIMEO off", "%s",
		      strerror(errno));
		CHECK(rsend(s, "end", 3, 0) == 3 && peek_until(c, buf, 3) == 3 && rshutdown(s, SHUT_WR) == 0,
		      "three bytes, then the peer's SHUT_WR", "%s", strerror(errno));
		memset(buf, 0, sizeof(buf));
		CHECK(rrecv(c, buf, 8, MSG_PEEK | MSG_WAITALL) == 3 && !memcmp(buf, "end", 3),
		      "MSG_PEEK|MSG_WAITALL returns what is queued once the peer sends no more", "got '%.3s'", buf);
	}

	rclose(c);
	rclose(s);
	rclose(l);
	return check_done();
}

/* rrecv on a stream, as recv(2): MSG_PEEK returns queued bytes without
 * consuming them (across message boundaries, and from the rest of a message
 * that was partly read), a short buffer takes part of a message and leaves
 * the rest first in line, and nothing is lost or repeated. */
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

int main(int argc, char **argv)
{
	int port = port_arg(argc, argv);
	int l, c, s;
	char buf[64];

	watchdog(60);
	l = rs_listener(port);
	rs_pair(l, port, &c, &s);

	CHECK(rsend(s, "hello ", 6, 0) == 6 && rsend(s, "world", 5, 0) == 5, "two rsends", "%s", strerror(errno));
	memset(buf, 0, sizeof(buf));
	CHECK(peek_until(c, buf, 11) == 11 && !memcmp(buf, "hello world", 11),
	      "MSG_PEEK sees both messages as one stream", "got '%.11s'", buf);
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

	rclose(c);
	rclose(s);
	rclose(l);
	return check_done();
}

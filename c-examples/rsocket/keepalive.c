/* SO_KEEPALIVE with TCP_KEEPIDLE 1 s (the keepalive knob rsockets honours,
 * upstream's keepalive_time; TCP_KEEPINTVL and TCP_KEEPCNT are accepted and
 * ignored: the connection is reliable): the options read back, an idle
 * connection sends keepalives, and the connection stays as it was: no error,
 * nothing readable at the peer (a keepalive is a 0-byte RDMA write with no
 * immediate, which the peer's application never sees), data flows both ways
 * afterwards. The keepalives themselves are seen on the soft fabric only,
 * in its verbs trace (RDMACM_RS_TRACE, pointed here at a file of this
 * program's before the first call): RDMA writes of 0 bytes. Elsewhere (a real
 * device, Debian's library) the connection is left idle just as long and the
 * rest is checked. */
#include "rs_util.h"

/* 0-byte RDMA writes posted so far (the peer has no keepalive: all the client's),
 * -1 when the trace has no verbs lines (not the soft fabric). */
static int probes(const char *trace)
{
	FILE *f = fopen(trace, "r");
	char *line = NULL;
	size_t cap = 0;
	int n = 0, soft = 0;

	if (!f)
		return -1;
	while (getline(&line, &cap, f) > 0) {
		soft |= !strncmp(line, "softverbs[", 10);
		n += strstr(line, "ibv_post_send(") && strstr(line, " RDMA_WRITE num_sge 0 len 0 ");
	}
	free(line);
	fclose(f);
	return soft ? n : -1;
}

static int getopt_int(int fd, int level, int name)
{
	int v = -1;
	socklen_t len = sizeof(v);

	return rgetsockopt(fd, level, name, &v, &len) ? -1 : v;
}

int main(int argc, char **argv)
{
	int port = port_arg(argc, argv), l, c, s, one = 1, n = 0, err = -1;
	struct pollfd p[2] = { { .events = POLLIN | POLLOUT }, { .events = POLLIN | POLLOUT } };
	socklen_t len = sizeof(err);
	char trace[64], buf[8];
	long long t0;

	snprintf(trace, sizeof(trace), "/tmp/rs_keepalive.%d.trace", (int)getpid());
	unlink(trace);
	setenv("RDMACM_RS_TRACE", trace, 1);
	watchdog(40);
	l = rs_listener(port);
	rs_pair(l, port, &c, &s);
	CHECK(!rsetsockopt(c, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) &&
		      !rsetsockopt(c, IPPROTO_TCP, TCP_KEEPIDLE, &one, sizeof(one)),
	      "SO_KEEPALIVE on, TCP_KEEPIDLE 1 s", "%s", strerror(errno));
	CHECK(getopt_int(c, SOL_SOCKET, SO_KEEPALIVE) == 1 && getopt_int(c, IPPROTO_TCP, TCP_KEEPIDLE) == 1,
	      "both read back", "SO_KEEPALIVE %d TCP_KEEPIDLE %d", getopt_int(c, SOL_SOCKET, SO_KEEPALIVE),
	      getopt_int(c, IPPROTO_TCP, TCP_KEEPIDLE));
	/* idle: nothing sent or read here for as long as two keepalives take (a bound, not a timing) */
	t0 = now_ms();
	if (probes(trace) >= 0) {
		while ((n = probes(trace)) < 2 && now_ms() - t0 < 15000)
			sleep_ms(250);
		CHECK(n >= 2, "the idle connection sends keepalives (0-byte RDMA writes in the verbs trace)",
		      "%d in %lld ms", n, now_ms() - t0);
	} else {
		sleep_ms(4000);
		printf("note: keepalives not observable here (no soft fabric verbs trace)\n");
	}
	p[0].fd = c;
	p[1].fd = s;
	CHECK(rpoll(p, 2, 0) == 2 && p[0].revents == POLLOUT && p[1].revents == POLLOUT,
	      "both ends still only writable: no error, no hang-up, nothing to read at the peer",
	      "revents %#x and %#x", p[0].revents, p[1].revents);
	CHECK(!rgetsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len) && err == 0, "no SO_ERROR", "%d", err);
	CHECK(rsend(c, "ping", 4, 0) == 4 && rrecv(s, buf, sizeof(buf), 0) == 4 && !memcmp(buf, "ping", 4) &&
		      rsend(s, "pong", 4, 0) == 4 && rrecv(c, buf, sizeof(buf), 0) == 4 && !memcmp(buf, "pong", 4),
	      "data still flows both ways", "%s", strerror(errno));
	rclose(c);
	rclose(s);
	rclose(l);
	unlink(trace);
	return check_done();
}

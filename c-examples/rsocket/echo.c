/*
 * A plain TCP echo server and client (no rsocket calls: run it under
 * LD_PRELOAD=librspreload.so to move it onto rsockets).
 *
 *   echo server PORT [CONNS]          echoes CONNS connections (default 1), then exits 0
 *   echo client HOST PORT BYTES       sends BYTES of a pattern, checks every byte echoed back,
 *                                     half-closes, expects EOF; exits 0 on success
 *
 * The client uses poll(), non-blocking connect and partial reads/writes;
 * the server uses select(), accept() and blocking read()/write().
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

static int die(const char *what)
{
	fprintf(stderr, "echo: %s: %s\n", what, strerror(errno));
	exit(1);
}

static int serve_one(int c)
{
	char buf[65536];
	long total = 0;

	for (;;) {
		ssize_t n = read(c, buf, sizeof(buf));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			die("read");
		}
		if (n == 0)
			break;
		for (ssize_t off = 0; off < n;) {
			ssize_t w = write(c, buf + off, n - off);
			if (w < 0)
				die("write");
			off += w;
		}
		total += n;
	}
	printf("server: echoed %ld bytes\n", total);
	close(c);
	return 0;
}

static int server(int port, int conns)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	int one = 1, l;

	l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0)
		die("socket");
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	a.sin_addr.s_addr = htonl(INADDR_ANY);
	if (bind(l, (struct sockaddr *)&a, sizeof(a)))
		die("bind");
	if (listen(l, 8))
		die("listen");
	printf("server: listening on %d\n", port);
	fflush(stdout);
	for (int i = 0; i < conns; i++) {
		struct sockaddr_in peer;
		socklen_t len = sizeof(peer);
		fd_set rd;
		int c;

		FD_ZERO(&rd);
		FD_SET(l, &rd);
		if (select(l + 1, &rd, NULL, NULL, NULL) != 1)
			die("select");
		c = accept(l, (struct sockaddr *)&peer, &len);
		if (c < 0)
			die("accept");
		if (peer.sin_family != AF_INET)
			fprintf(stderr, "echo: accept gave family %d\n", peer.sin_family);
		serve_one(c);
	}
	close(l);
	return 0;
}

static unsigned char pat(long i)
{
	return (unsigned char)(i * 131 + (i >> 8) * 7 + 1);
}

static int client(const char *host, int port, long bytes)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	static unsigned char out[65536], in[65536];
	long sent = 0, got = 0;
	int s, flags, err = 0;
	socklen_t len = sizeof(err);
	struct pollfd p;

	if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
		die("inet_pton");
	s = socket(AF_INET, SOCK_STREAM, 0);
	if (s < 0)
		die("socket");
	flags = fcntl(s, F_GETFL);
	fcntl(s, F_SETFL, flags | O_NONBLOCK);
	if (connect(s, (struct sockaddr *)&a, sizeof(a))) {
		if (errno != EINPROGRESS)
			die("connect");
		p.fd = s;
		p.events = POLLOUT;
		if (poll(&p, 1, 10000) != 1)
			die("poll connect");
		if (getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) || err) {
			errno = err;
			die("SO_ERROR");
		}
	}
	fcntl(s, F_SETFL, flags);
	while (got < bytes) {
		p.fd = s;
		p.events = POLLIN | (sent < bytes && sent - got < (long)sizeof(out) ? POLLOUT : 0);
		if (poll(&p, 1, 10000) < 1)
			die("poll");
		if (p.revents & POLLOUT) {
			long n = bytes - sent;
			if (n > (long)sizeof(out) - (sent - got))
				n = sizeof(out) - (sent - got);
			for (long i = 0; i < n; i++)
				out[i] = pat(sent + i);
			ssize_t w = send(s, out, n, MSG_DONTWAIT);
			if (w < 0 && errno != EAGAIN)
				die("send");
			if (w > 0)
				sent += w;
		}
		if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
			ssize_t r = recv(s, in, sizeof(in), MSG_DONTWAIT);
			if (r < 0 && errno == EAGAIN)
				continue;
			if (r <= 0) {
				fprintf(stderr, "echo: early EOF/error after %ld bytes\n", got);
				return 1;
			}
			for (ssize_t i = 0; i < r; i++)
				if (in[i] != pat(got + i)) {
					fprintf(stderr, "echo: byte %ld differs\n", got + i);
					return 1;
				}
			got += r;
		}
	}
	if (shutdown(s, SHUT_WR))
		die("shutdown");
	if (read(s, in, sizeof(in)) != 0) {
		fprintf(stderr, "echo: no EOF after shutdown\n");
		return 1;
	}
	close(s);
	printf("client: %ld bytes echoed and verified\n", got);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 3 && !strcmp(argv[1], "server"))
		return server(atoi(argv[2]), argc > 3 ? atoi(argv[3]) : 1);
	if (argc == 5 && !strcmp(argv[1], "client"))
		return client(argv[2], atoi(argv[3]), atol(argv[4]));
	fprintf(stderr, "usage: echo server PORT [CONNS] | echo client HOST PORT BYTES\n");
	return 2;
}

/* Full duplex from two threads per end: on each rsocket one thread sends
 * 32 MiB while another receives 32 MiB (blocking calls, both sleeping on
 * the same completion queue); every byte is checked. Then the same with
 * the receivers in rpoll. Lost wake-ups would hang here (watchdog). Then
 * with a 4 KiB send buffer and the senders in rwritev with three 700-byte
 * pieces: a message split across buffers is staged in the send ring (not
 * sent inline from the caller's memory, which needs one piece), and the
 * small ring wraps all the time. */
#include "rs_util.h"

#define TOTAL (32L << 20)

struct job {
	int fd;
	int use_poll;
	int use_iov;
	long done;
	int bad;
};

static unsigned char pat(long i)
{
	return (unsigned char)(i ^ (i >> 11) ^ 0x5a);
}

static void *sender(void *arg)
{
	struct job *j = arg;
	static __thread unsigned char buf[100000];

	while (j->done < TOTAL) {
		long n = TOTAL - j->done < (long)sizeof(buf) ? TOTAL - j->done : (long)sizeof(buf);
		for (long i = 0; i < n; i++)
			buf[i] = pat(j->done + i);
		ssize_t w;
		if (j->use_iov) {
			n = n < 2100 ? n : 2100;
			struct iovec v[3] = { { buf, 700 }, { buf + 700, 700 }, { buf + 1400, 700 } };
			int cnt = 0;
			for (long off = 0; off < n; off += 700)
				v[cnt++].iov_len = n - off < 700 ? n - off : 700;
			w = rwritev(j->fd, v, cnt);
		} else {
			w = rsend(j->fd, buf, n, 0);
		}
		if (w <= 0) {
			j->bad = 1;
			break;
		}
		j->done += w;
	}
	return NULL;
}

static void *receiver(void *arg)
{
	struct job *j = arg;
	static __thread unsigned char buf[70000];

	while (j->done < TOTAL) {
		if (j->use_poll) {
			struct pollfd p = { .fd = j->fd, .events = POLLIN };
			if (rpoll(&p, 1, 20000) != 1) {
				j->bad = 2;
				break;
			}
		}
		ssize_t r = rrecv(j->fd, buf, sizeof(buf), j->use_poll ? MSG_DONTWAIT : 0);
		if (r < 0 && errno == EAGAIN)
			continue;
		if (r <= 0) {
			j->bad = 3;
			break;
		}
		for (ssize_t i = 0; i < r; i++)
			if (buf[i] != pat(j->done + i)) {
				j->bad = 4;
				return NULL;
			}
		j->done += r;
	}
	return NULL;
}

static void run(int c, int s, int use_poll, int use_iov, const char *what)
{
	struct job js[4] = { { c, 0, use_iov, 0, 0 }, { s, 0, use_iov, 0, 0 }, { c, use_poll, 0, 0, 0 }, { s, use_poll, 0, 0, 0 } };
	pthread_t t[4];

	pthread_create(&t[0], NULL, sender, &js[0]);
	pthread_create(&t[1], NULL, sender, &js[1]);
	pthread_create(&t[2], NULL, receiver, &js[2]);
	pthread_create(&t[3], NULL, receiver, &js[3]);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	CHECK(!js[0].bad && !js[1].bad && !js[2].bad && !js[3].bad && js[2].done == TOTAL && js[3].done == TOTAL, what,
	      "errors %d %d %d %d, received %ld/%ld", js[0].bad, js[1].bad, js[2].bad, js[3].bad, js[2].done, js[3].done);
}

int main(int argc, char **argv)
{
	int port = port_arg(argc, argv);
	int l, c, s;

	watchdog(120);
	l = rs_listener(port);
	rs_pair(l, port, &c, &s);
	run(c, s, 0, 0, "32 MiB each way at once, blocking sender and receiver threads");
	run(c, s, 1, 0, "again with the receivers in rpoll + MSG_DONTWAIT");
	rclose(c);
	rclose(s);

	struct sockaddr_in a = lo_addr(port);
	int small = 4096;
	c = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(rsetsockopt(c, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)) == 0 &&
	      rsetsockopt(l, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)) == 0, "4 KiB send buffers", "%s", strerror(errno));
	CHECK(rconnect(c, (struct sockaddr *)&a, sizeof(a)) == 0, "connected", "%s", strerror(errno));
	s = raccept(l, NULL, NULL);
	run(c, s, 0, 1, "32 MiB each way from rwritev in three pieces, through 4 KiB send rings");
	rclose(c);
	rclose(s);
	rclose(l);
	return check_done();
}

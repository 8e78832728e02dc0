/* A completion queue that cannot be armed (ibv_req_notify_cq fails) ends a
 * wait with that error instead of a spin: rpoll and repoll_wait on a datagram
 * and on a connected stream rsocket, a blocking rrecvfrom on the datagram one
 * and a blocking rrecv on the stream, fail with the verbs error (EIO here) at
 * once, after one try to arm. Once arming works again, so do the sleeps.
 * The failure is made by swapping the device context's req_notify_cq op
 * (ibv_req_notify_cq calls cq->context->ops.req_notify_cq; the contexts
 * rdma_get_devices returns are those the library's CQs live on) for one that
 * fails while `failing` is set.
 * Upstream ignores ibv_req_notify_cq's result and sleeps on a CQ that will
 * raise no event: rpoll until its timeout, a blocking call for ever. */
#define _GNU_SOURCE
#include <sys/epoll.h>

#include "rs_util.h"

#define MAX_CTX 8

static int (*orig[MAX_CTX])(struct ibv_cq *, int);
static struct ibv_context *ctxs[MAX_CTX];
static int nctx;
static volatile int failing, attempts;

static int req_notify(struct ibv_cq *cq, int solicited_only)
{
	int i;

	if (failing) {
		__sync_fetch_and_add(&attempts, 1);
		return EIO;
	}
	for (i = 0; i < nctx; i++)
		if (ctxs[i] == cq->context)
			return orig[i](cq, solicited_only);
	return EINVAL;
}

static void swap_ops(void)
{
	struct ibv_context **list;
	int n, i;

	list = rdma_get_devices(&n);
	if (!list || n < 1)
		fatal("rdma_get_devices: %s", strerror(errno));
	for (i = 0; i < n && i < MAX_CTX; i++) {
		ctxs[i] = list[i];
		orig[i] = list[i]->ops.req_notify_cq;
		list[i]->ops.req_notify_cq = req_notify;
	}
	nctx = i;
	rdma_free_devices(list);
}

static long long t0;

static void start(void)
{
	attempts = 0;
	failing = 1;
	errno = 0;
	t0 = now_ms();
}

/* The call's result r failed at once with EIO after few tries to arm. */
static void fails_at_once(const char *what, int r)
{
	int e = errno, a = attempts;
	long long ms = now_ms() - t0;

	failing = 0;
	fprintf(stderr, "%s: %d (%s) after %lld ms, %d tries to arm\n", what, r, strerror(e), ms, a);
	CHECK(r == -1 && e == EIO && ms < 300 && a >= 1 && a <= 4, what,
	      "returned %d (%s) after %lld ms, %d tries to arm the CQ", r, strerror(e), ms, a);
}

static int x;
static ssize_t got = -2;
static int got_errno;

/* arg: the stream rsocket's fd (rrecv), or NULL for x (rrecvfrom) */
static void *receiver(void *arg)
{
	char buf[16];

	got = arg ? rrecv(*(int *)arg, buf, sizeof(buf), 0) : rrecvfrom(x, buf, sizeof(buf), 0, NULL, NULL);
	got_errno = errno;
	return NULL;
}

/* A blocking receive (see receiver) fails at once; it would sleep for ever,
 * or in wake_up_interval slices, without its CQ. */
static void blocking_receive_fails(const char *what, int *stream)
{
	struct timespec ts;
	pthread_t t;
	char msg[256];

	start();
	got = -2;
	if (pthread_create(&t, NULL, receiver, stream))
		fatal("pthread_create");
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 3;
	if (pthread_timedjoin_np(t, NULL, &ts)) {
		snprintf(msg, sizeof(msg), "%s: still sleeps after 3 s", what);
		fail_stuck(msg);
	}
	errno = got_errno;
	fails_at_once(what, (int)got);
}

static int s_fd;

static void *late_send(void *arg)
{
	(void)arg;
	sleep_ms(100);
	if (rsend(s_fd, "wake", 4, 0) != 4)
		fail_stuck("the late rsend failed");
	return NULL;
}

int main(int argc, char **argv)
{
	int port = port_arg(argc, argv);
	struct sockaddr_in xa = lo_addr(port), ya = lo_addr(port + 1);
	struct pollfd p;
	struct epoll_event ev = { .events = EPOLLIN }, out;
	char buf[16];
	pthread_t t;
	int y, ep, l, c, r;

	watchdog(60);
	x = rsocket(AF_INET, SOCK_DGRAM, 0);
	y = rsocket(AF_INET, SOCK_DGRAM, 0);
	CHECK(x >= 0 && y >= 0, "two datagram rsockets", "%s", strerror(errno));
	CHECK(rbind(x, (struct sockaddr *)&xa, sizeof(xa)) == 0 && rbind(y, (struct sockaddr *)&ya, sizeof(ya)) == 0,
	      "both bound", "%s", strerror(errno));
	/* x's first send makes its QP; its CQ is not armed yet */
	CHECK(rsendto(x, "ping", 4, 0, (struct sockaddr *)&ya, sizeof(ya)) == 4 &&
		      rrecvfrom(y, buf, sizeof(buf), 0, NULL, NULL) == 4,
	      "a datagram from x to y", "%s", strerror(errno));
	swap_ops();

	start();
	p = (struct pollfd){ .fd = x, .events = POLLIN };
	r = rpoll(&p, 1, 500);
	fails_at_once("rpoll on a datagram rsocket whose CQ cannot be armed fails with EIO", r);

	ep = repoll_create(0);
	CHECK(ep >= 0 && repoll_ctl(ep, EPOLL_CTL_ADD, x, &ev) == 0, "a repoll set holding it", "%s", strerror(errno));
	start();
	r = repoll_wait(ep, &out, 1, 500);
	fails_at_once("repoll_wait on it fails with EIO", r);

	/* a stream whose CQ event was just read (so its CQ is not armed) */
	l = rs_listener(port + 2);
	rs_pair(l, port + 2, &c, &s_fd);
	if (pthread_create(&t, NULL, late_send, NULL))
		fatal("pthread_create");
	p = (struct pollfd){ .fd = c, .events = POLLIN };
	r = rpoll(&p, 1, 5000);
	pthread_join(t, NULL);
	CHECK(r == 1 && rrecv(c, buf, sizeof(buf), 0) == 4, "a connected stream woke for data", "rpoll %d", r);
	start();
	p = (struct pollfd){ .fd = c, .events = POLLIN };
	r = rpoll(&p, 1, 500);
	fails_at_once("rpoll on a connected stream whose CQ cannot be armed fails with EIO", r);

	blocking_receive_fails("a blocking rrecv on the stream fails with EIO", &c);
	blocking_receive_fails("a blocking rrecvfrom on the datagram rsocket fails with EIO", NULL);

	/* arming works again: so do the sleeps */
	CHECK(rsendto(y, "pong", 4, 0, (struct sockaddr *)&xa, sizeof(xa)) == 4, "y answers", "%s", strerror(errno));
	p = (struct pollfd){ .fd = x, .events = POLLIN };
	r = rpoll(&p, 1, 5000);
	CHECK(r == 1 && p.revents == POLLIN && rrecvfrom(x, buf, sizeof(buf), 0, NULL, NULL) == 4,
	      "arming works again: rpoll wakes for the datagram", "rpoll %d revents %#x", r, p.revents);
	if (pthread_create(&t, NULL, late_send, NULL))
		fatal("pthread_create");
	r = repoll_wait(ep, &out, 1, 0) == 0 ? 0 : -1;
	p = (struct pollfd){ .fd = c, .events = POLLIN };
	r |= rpoll(&p, 1, 5000) == 1 ? 0 : -1;
	pthread_join(t, NULL);
	CHECK(r == 0 && rrecv(c, buf, sizeof(buf), 0) == 4, "and on the stream", "failed");
	if (pthread_create(&t, NULL, late_send, NULL))
		fatal("pthread_create");
	r = rrecv(c, buf, sizeof(buf), 0);
	pthread_join(t, NULL);
	CHECK(r == 4, "and a blocking rrecv on it", "%d (%s)", r, strerror(errno));

	rclose(ep);
	rclose(c);
	rclose(s_fd);
	rclose(l);
	rclose(x);
	rclose(y);
	return check_done();
}

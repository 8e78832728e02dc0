/*
 * Helpers for the device-level programs c-examples/dev_*.c (run by
 * c-examples/run-device.sh, not by run.sh: they need an RDMA device).
 *
 * Same output rules as check.h ("ok <what>", "FAIL <what>: details",
 * "skip: <reason>" + exit 77), plus: every event seen is printed as
 *   "<side>: <EVENT> status <n>"
 * and every errno by name, so that the stdout of two libraries (Debian's
 * on rxe, ours on the soft fabric or in the VM) can be diffed.  Nothing on
 * stdout depends on pointers, timing, QP numbers or the host; diagnostics
 * that do (elapsed times, QP numbers) go to stderr.
 *
 * Address: argv[1] or $RDMA_TEST_ADDR (an address of the RDMA device's
 * netdev, e.g. 10.10.10.1 in tests/vm); port: argv[2] or the program's
 * default.  A library without a device (ENODEV from channel creation, bind
 * or resolve) makes the program skip.
 */
#ifndef RDMACM_RS_DEV_H
#define RDMACM_RS_DEV_H

#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <arpa/inet.h>
#include <sys/socket.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "check.h"

/* Not every program uses every helper. */
#pragma GCC diagnostic ignored "-Wunused-function"

/* Per-step wait for one event; TCG guests are slow, so be generous. */
#define DEV_EVENT_MS 8000
#define DEV_RESOLVE_MS 2000

static const char *dev_event_name(int e)
{
	static const char *names[] = {
		"ADDR_RESOLVED", "ADDR_ERROR", "ROUTE_RESOLVED", "ROUTE_ERROR",
		"CONNECT_REQUEST", "CONNECT_RESPONSE", "CONNECT_ERROR",
		"UNREACHABLE", "REJECTED", "ESTABLISHED", "DISCONNECTED",
		"DEVICE_REMOVAL", "MULTICAST_JOIN", "MULTICAST_ERROR",
		"ADDR_CHANGE", "TIMEWAIT_EXIT", "ADDRINFO_RESOLVED",
		"ADDRINFO_ERROR", "USER", "INTERNAL",
	};
	static char buf[32];

	if (e >= 0 && e < (int)(sizeof(names) / sizeof(names[0])))
		return names[e];
	snprintf(buf, sizeof(buf), "EVENT_%d", e);
	return buf;
}

static const char *dev_errno_name(int e)
{
	static char buf[32];

	switch (e) {
	case 0: return "0";
	case EPERM: return "EPERM";
	case ENOENT: return "ENOENT";
	case EINTR: return "EINTR";
	case EIO: return "EIO";
	case EBADF: return "EBADF";
	case EAGAIN: return "EAGAIN";
	case ENOMEM: return "ENOMEM";
	case EACCES: return "EACCES";
	case EFAULT: return "EFAULT";
	case EBUSY: return "EBUSY";
	case EEXIST: return "EEXIST";
	case ENODEV: return "ENODEV";
	case EINVAL: return "EINVAL";
	case ENOSPC: return "ENOSPC";
	case ERANGE: return "ERANGE";
	case ENOSYS: return "ENOSYS";
	case ENODATA: return "ENODATA";
	case EPROTO: return "EPROTO";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case EAFNOSUPPORT: return "EAFNOSUPPORT";
	case EADDRINUSE: return "EADDRINUSE";
	case EADDRNOTAVAIL: return "EADDRNOTAVAIL";
	case ENETDOWN: return "ENETDOWN";
	case ENETUNREACH: return "ENETUNREACH";
	case ECONNABORTED: return "ECONNABORTED";
	case ECONNRESET: return "ECONNRESET";
	case EISCONN: return "EISCONN";
	case ENOTCONN: return "ENOTCONN";
	case ETIMEDOUT: return "ETIMEDOUT";
	case ECONNREFUSED: return "ECONNREFUSED";
	case EHOSTUNREACH: return "EHOSTUNREACH";
	case EALREADY: return "EALREADY";
	case EINPROGRESS: return "EINPROGRESS";
	default:
		snprintf(buf, sizeof(buf), "errno%d", e);
		return buf;
	}
}

/* "0", "-110 (ETIMEDOUT)" or "28" (positive = transport value, e.g. IB REJ reason). */
static const char *dev_status_str(int status)
{
	static char buf[48];

	if (status < 0)
		snprintf(buf, sizeof(buf), "%d (%s)", status, dev_errno_name(-status));
	else
		snprintf(buf, sizeof(buf), "%d", status);
	return buf;
}

/* ---- arguments ------------------------------------------------------- */

static struct sockaddr_storage dev_addr;
static int dev_port;
static char dev_addr_str[INET6_ADDRSTRLEN];

static void dev_usage(const char *prog)
{
	printf("FAIL usage: %s ADDR [PORT] (or RDMA_TEST_ADDR=ADDR)\n", prog);
	exit(2);
}

/* Parse "text" with port into *ss (numeric IPv4/IPv6 only); 0 on success. */
static int dev_parse_addr(const char *text, int port, struct sockaddr_storage *ss)
{
	struct addrinfo hints, *res;

	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = AI_NUMERICHOST;
	hints.ai_family = AF_UNSPEC;
	if (getaddrinfo(text, NULL, &hints, &res))
		return -1;
	memset(ss, 0, sizeof(*ss));
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
	return 0;
}

static void dev_args(int argc, char **argv, int default_port)
{
	const char *a = argc > 1 ? argv[1] : getenv("RDMA_TEST_ADDR");

	if (!a || !*a)
		dev_usage(argv[0]);
	dev_port = argc > 2 ? atoi(argv[2]) : default_port;
	if (dev_parse_addr(a, dev_port, &dev_addr))
		dev_usage(argv[0]);
	snprintf(dev_addr_str, sizeof(dev_addr_str), "%s", a);
	setvbuf(stdout, NULL, _IOLBF, 0);
}

static struct sockaddr *dev_sa(void)
{
	return (struct sockaddr *)&dev_addr;
}

/* ---- skip / errors --------------------------------------------------- */

/* After a failed call: ENODEV means the library under test has no device. */
static void dev_skip_nodev(const char *what, int err)
{
	if (err == ENODEV)
		skip("%s failed with ENODEV (no RDMA device)", what);
}

static struct rdma_event_channel *dev_channel(void)
{
	return channel_or_skip();
}

/* Run an int call; on -1 print FAIL with errno and return -1 (skip on ENODEV). */
#define DEV_CALL(call, what)                                                   \
	({                                                                     \
		int r_, e_;                                                    \
		errno = 0;                                                     \
		r_ = (call);                                                   \
		e_ = errno;                                                    \
		if (r_) {                                                      \
			dev_skip_nodev(what, e_);                              \
			check(0, "%s: ret %d errno %s", what, r_,              \
			      dev_errno_name(e_));                             \
		}                                                              \
		r_;                                                            \
	})

/* ---- events ---------------------------------------------------------- */

enum { DEV_ACTIVE, DEV_PASSIVE, DEV_SIDES };
static const char *dev_side_name[DEV_SIDES] = { "active", "passive" };
static char dev_seq[DEV_SIDES][512];

static void dev_seq_add(int side, const char *name)
{
	size_t l = strlen(dev_seq[side]);

	snprintf(dev_seq[side] + l, sizeof(dev_seq[side]) - l, "%s%s", l ? " " : "", name);
}

static void dev_seq_print(int side)
{
	printf("%s sequence: %s\n", dev_side_name[side], dev_seq[side][0] ? dev_seq[side] : "(none)");
	dev_seq[side][0] = 0;
}

/* Wait up to ms for an event: 0 and *ev set, 1 on timeout, -1 on error. */
static int dev_wait(struct rdma_event_channel *ch, int ms, struct rdma_cm_event **ev)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	int n;

	do {
		n = poll(&p, 1, ms);
	} while (n < 0 && errno == EINTR);
	if (n == 0)
		return 1;
	if (n < 0)
		return -1;
	if (rdma_get_cm_event(ch, ev))
		return -1;
	return 0;
}

/*
 * Get the next event of `side` (printing "<side>: <EVENT> status <s>" and
 * recording it in the side's sequence); FAIL unless it is `want` (-1: any)
 * with status 0 (unless any_status).  Returns the unacked event or NULL.
 */
static struct rdma_cm_event *dev_get(struct rdma_event_channel *ch, int side, int want,
				     int any_status)
{
	struct rdma_cm_event *ev = NULL;
	long long t0 = now_ms();
	int r = dev_wait(ch, DEV_EVENT_MS, &ev);

	if (r == 1) {
		check(0, "%s: %s within %d ms: nothing arrived", dev_side_name[side],
		      want >= 0 ? dev_event_name(want) : "an event", DEV_EVENT_MS);
		dev_seq_add(side, "(timeout)");
		return NULL;
	}
	if (r < 0) {
		check(0, "%s: rdma_get_cm_event: errno %s", dev_side_name[side],
		      dev_errno_name(errno));
		return NULL;
	}
	fprintf(stderr, "[%s: %s after %lld ms]\n", dev_side_name[side],
		dev_event_name(ev->event), now_ms() - t0);
	printf("%s: %s status %s\n", dev_side_name[side], dev_event_name(ev->event),
	       dev_status_str(ev->status));
	dev_seq_add(side, dev_event_name(ev->event));
	if (want >= 0 && (int)ev->event != want)
		check(0, "%s: expected %s", dev_side_name[side], dev_event_name(want));
	else if (!any_status && ev->status)
		check(0, "%s: %s has status 0", dev_side_name[side], dev_event_name(ev->event));
	return ev;
}

static void dev_ack(struct rdma_cm_event *ev)
{
	if (ev && rdma_ack_cm_event(ev))
		check(0, "rdma_ack_cm_event: errno %s", dev_errno_name(errno));
}

/* Get, check and ack; 0 if the wanted event arrived with status 0. */
static int dev_expect(struct rdma_event_channel *ch, int side, int want)
{
	struct rdma_cm_event *ev = dev_get(ch, side, want, 0);
	int ok = ev && (int)ev->event == want && !ev->status;

	dev_ack(ev);
	return ok ? 0 : -1;
}

/* Print and ack every event arriving within ms; returns how many. */
static int dev_drain(struct rdma_event_channel *ch, int side, int ms)
{
	struct rdma_cm_event *ev;
	long long end = now_ms() + ms;
	int n = 0;

	for (;;) {
		long long left = end - now_ms();

		if (left <= 0 || dev_wait(ch, (int)left, &ev))
			break;
		fprintf(stderr, "[%s: late %s, %lld ms before the window closed]\n",
			dev_side_name[side], dev_event_name(ev->event), end - now_ms());
		printf("%s: %s status %s\n", dev_side_name[side], dev_event_name(ev->event),
		       dev_status_str(ev->status));
		dev_seq_add(side, dev_event_name(ev->event));
		rdma_ack_cm_event(ev);
		n++;
	}
	return n;
}

/*
 * Print and ack events until one of type `until` arrives or ms pass; prints
 * "<side>: no <EVENT> within <ms> ms" when it did not come.  Returns 0 if seen.
 */
static int dev_wait_for(struct rdma_event_channel *ch, int side, int until, int ms)
{
	struct rdma_cm_event *ev;
	long long t0 = now_ms(), end = t0 + ms;

	for (;;) {
		long long left = end - now_ms();
		int type;

		if (left <= 0 || dev_wait(ch, (int)left, &ev)) {
			printf("%s: no %s within %d ms\n", dev_side_name[side], dev_event_name(until), ms);
			return -1;
		}
		type = ev->event;
		fprintf(stderr, "[%s: %s after %lld ms]\n", dev_side_name[side], dev_event_name(type),
			now_ms() - t0);
		printf("%s: %s status %s\n", dev_side_name[side], dev_event_name(type),
		       dev_status_str(ev->status));
		dev_seq_add(side, dev_event_name(type));
		rdma_ack_cm_event(ev);
		if (type == until)
			return 0;
	}
}

/* Private data check: prefix equal to want, print the delivered length. */
static void dev_check_pdata(int side, const char *evname, const void *pd, int len,
			    const char *want)
{
	size_t wl = want ? strlen(want) : 0;
	char what[96];

	printf("%s: %s private_data_len %d\n", dev_side_name[side], evname, len);
	if (!want)
		return;
	snprintf(what, sizeof(what), "%s: %s carries the peer's private data", dev_side_name[side],
		 evname);
	CHECK(pd && len >= (int)wl && !memcmp(pd, want, wl), what, "len %d, data %s", len,
	      pd ? "differs" : "NULL");
}

/* ---- QPs ------------------------------------------------------------- */

struct dev_qp {
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;   /* app-created QP (dev_app_qp) */
	struct ibv_mr *mr;
	char buf[256];
};

static void dev_qp_attr(struct ibv_qp_init_attr *a, struct ibv_cq *cq)
{
	memset(a, 0, sizeof(*a));
	a->qp_type = IBV_QPT_RC;
	a->send_cq = cq;
	a->recv_cq = cq;
	a->cap.max_send_wr = 4;
	a->cap.max_recv_wr = 4;
	a->cap.max_send_sge = 1;
	a->cap.max_recv_sge = 1;
}

static int dev_pd_cq(struct rdma_cm_id *id, struct dev_qp *q, const char *side)
{
	char what[96];

	if (!id->verbs) {
		check(0, "%s: id->verbs set", side);
		return -1;
	}
	q->pd = ibv_alloc_pd(id->verbs);
	q->cq = q->pd ? ibv_create_cq(id->verbs, 16, NULL, NULL, 0) : NULL;
	if (q->cq)
		q->mr = ibv_reg_mr(q->pd, q->buf, sizeof(q->buf), IBV_ACCESS_LOCAL_WRITE);
	if (!q->mr) {
		snprintf(what, sizeof(what), "%s: ibv_alloc_pd/create_cq/reg_mr", side);
		check(0, "%s: errno %s", what, dev_errno_name(errno));
		return -1;
	}
	return 0;
}

/* PD + CQ + rdma_create_qp (RC) on id. */
static int dev_rdma_qp(struct rdma_cm_id *id, struct dev_qp *q, const char *side)
{
	struct ibv_qp_init_attr a;
	char what[96];

	if (dev_pd_cq(id, q, side))
		return -1;
	dev_qp_attr(&a, q->cq);
	snprintf(what, sizeof(what), "%s: rdma_create_qp", side);
	if (DEV_CALL(rdma_create_qp(id, q->pd, &a), what))
		return -1;
	return 0;
}

static void dev_free_qp(struct rdma_cm_id *id, struct dev_qp *q)
{
	if (id && id->qp)
		rdma_destroy_qp(id);
	if (q->qp)
		ibv_destroy_qp(q->qp);
	if (q->mr)
		ibv_dereg_mr(q->mr);
	if (q->cq)
		ibv_destroy_cq(q->cq);
	if (q->pd)
		ibv_dealloc_pd(q->pd);
	memset(q, 0, sizeof(*q));
}

static int dev_post_recv(struct ibv_qp *qp, struct dev_qp *q)
{
	struct ibv_sge sge = { (uintptr_t)q->buf, sizeof(q->buf), q->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;

	return ibv_post_recv(qp, &wr, &bad);
}

static int dev_post_send(struct ibv_qp *qp, struct dev_qp *q, const char *msg)
{
	struct ibv_sge sge = { (uintptr_t)q->buf, (uint32_t)strlen(msg) + 1, q->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;

	strcpy(q->buf, msg);
	return ibv_post_send(qp, &wr, &bad);
}

/* Busy-poll the CQ for one completion (up to ms); returns the status or -1. */
static int dev_poll_cq(struct dev_qp *q, int ms, struct ibv_wc *wc)
{
	long long end = now_ms() + ms;

	while (now_ms() < end) {
		int n = ibv_poll_cq(q->cq, 1, wc);

		if (n < 0)
			return -1;
		if (n == 1)
			return wc->status;
		sleep_ms(1);
	}
	return -1;
}

/* ---- connection set-up ----------------------------------------------- */

struct dev_pair {
	struct rdma_event_channel *pch, *ach;  /* passive, active channels */
	struct rdma_cm_id *listen, *child, *active;
	struct dev_qp pq, aq;
};

/* Passive side: channel, id, bind to ADDR:port, listen. */
static int dev_listen(struct dev_pair *p)
{
	p->pch = dev_channel();
	if (DEV_CALL(rdma_create_id(p->pch, &p->listen, NULL, RDMA_PS_TCP), "passive: rdma_create_id"))
		return -1;
	if (DEV_CALL(rdma_bind_addr(p->listen, dev_sa()), "passive: rdma_bind_addr"))
		return -1;
	if (DEV_CALL(rdma_listen(p->listen, 4), "passive: rdma_listen"))
		return -1;
	return 0;
}

/* Active side: channel, id, resolve addr + route (events printed). */
static int dev_resolve(struct dev_pair *p)
{
	if (!p->ach)
		p->ach = dev_channel();
	if (DEV_CALL(rdma_create_id(p->ach, &p->active, NULL, RDMA_PS_TCP), "active: rdma_create_id"))
		return -1;
	if (DEV_CALL(rdma_resolve_addr(p->active, NULL, dev_sa(), DEV_RESOLVE_MS),
		     "active: rdma_resolve_addr"))
		return -1;
	if (dev_expect(p->ach, DEV_ACTIVE, RDMA_CM_EVENT_ADDR_RESOLVED))
		return -1;
	if (DEV_CALL(rdma_resolve_route(p->active, DEV_RESOLVE_MS), "active: rdma_resolve_route"))
		return -1;
	if (dev_expect(p->ach, DEV_ACTIVE, RDMA_CM_EVENT_ROUTE_RESOLVED))
		return -1;
	return 0;
}

static void dev_conn_param(struct rdma_conn_param *cp, const char *pdata)
{
	memset(cp, 0, sizeof(*cp));
	cp->private_data = pdata;
	cp->private_data_len = pdata ? (uint8_t)strlen(pdata) : 0;
	cp->responder_resources = 1;
	cp->initiator_depth = 1;
	cp->retry_count = 7;
	cp->rnr_retry_count = 7;
}

/*
 * Passive: wait for CONNECT_REQUEST on the listener, check its ids and
 * private data, keep the child in p->child; returns the unacked event.
 */
static struct rdma_cm_event *dev_get_request(struct dev_pair *p, const char *want_pdata)
{
	struct rdma_cm_event *ev = dev_get(p->pch, DEV_PASSIVE, RDMA_CM_EVENT_CONNECT_REQUEST, 0);

	if (!ev || ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
		dev_ack(ev);
		return NULL;
	}
	p->child = ev->id;
	CHECK(ev->listen_id == p->listen, "CONNECT_REQUEST listen_id is the listener",
	      "listen_id %s", ev->listen_id ? "is another id" : "NULL");
	CHECK(ev->id && ev->id != p->listen, "CONNECT_REQUEST id is a new id",
	      "id %s", ev->id ? "is the listener" : "NULL");
	dev_check_pdata(DEV_PASSIVE, "CONNECT_REQUEST", ev->param.conn.private_data,
			ev->param.conn.private_data_len, want_pdata);
	return ev;
}

/* Full async connect: resolve, QPs, connect, accept, ESTABLISHED both sides. */
static int dev_connect_pair(struct dev_pair *p, const char *req_pdata, const char *rep_pdata)
{
	struct rdma_conn_param cp;
	struct rdma_cm_event *ev;
	int ok;

	if (dev_resolve(p) || dev_rdma_qp(p->active, &p->aq, "active"))
		return -1;
	dev_conn_param(&cp, req_pdata);
	if (DEV_CALL(rdma_connect(p->active, &cp), "active: rdma_connect"))
		return -1;
	ev = dev_get_request(p, req_pdata);
	if (!ev)
		return -1;
	if (dev_rdma_qp(p->child, &p->pq, "passive")) {
		dev_ack(ev);
		return -1;
	}
	dev_conn_param(&cp, rep_pdata);
	ok = !DEV_CALL(rdma_accept(p->child, &cp), "passive: rdma_accept");
	dev_ack(ev);
	if (!ok)
		return -1;
	ev = dev_get(p->ach, DEV_ACTIVE, RDMA_CM_EVENT_ESTABLISHED, 0);
	if (!ev)
		return -1;
	ok = ev->event == RDMA_CM_EVENT_ESTABLISHED && !ev->status;
	if (ok)
		dev_check_pdata(DEV_ACTIVE, "ESTABLISHED", ev->param.conn.private_data,
				ev->param.conn.private_data_len, rep_pdata);
	dev_ack(ev);
	if (!ok)
		return -1;
	ev = dev_get(p->pch, DEV_PASSIVE, RDMA_CM_EVENT_ESTABLISHED, 0);
	if (!ev)
		return -1;
	ok = ev->event == RDMA_CM_EVENT_ESTABLISHED && !ev->status;
	if (ok)
		CHECK(ev->id == p->child, "passive ESTABLISHED is on the accepted id", "other id");
	dev_ack(ev);
	return ok ? 0 : -1;
}

/*
 * End one connection: both sides' QPs and ids go, the listener and both
 * channels stay for the next (programs that connect in rounds).
 */
static void dev_end_conn(struct dev_pair *p)
{
	if (p->active) {
		dev_free_qp(p->active, &p->aq);
		if (rdma_destroy_id(p->active))
			check(0, "active: rdma_destroy_id: errno %s", dev_errno_name(errno));
	}
	if (p->child) {
		dev_free_qp(p->child, &p->pq);
		if (rdma_destroy_id(p->child))
			check(0, "passive: rdma_destroy_id(child): errno %s", dev_errno_name(errno));
	}
	p->active = p->child = NULL;
}

/* Tear down whatever exists (no events expected any more). */
static void dev_teardown(struct dev_pair *p)
{
	dev_end_conn(p);
	if (p->listen && rdma_destroy_id(p->listen))
		check(0, "passive: rdma_destroy_id(listener): errno %s", dev_errno_name(errno));
	if (p->ach)
		rdma_destroy_event_channel(p->ach);
	if (p->pch)
		rdma_destroy_event_channel(p->pch);
	memset(p, 0, sizeof(*p));
}

/* ---- per-thread logs (deterministic output from threads) ------------- */

struct dev_log {
	char buf[8192];
	size_t len;
	int fails;
};

__attribute__((format(printf, 3, 4)))
static void dlog(struct dev_log *l, int cond, const char *fmt, ...)
{
	va_list ap;
	int n;

	n = snprintf(l->buf + l->len, sizeof(l->buf) - l->len, "%s", cond ? "ok " : "FAIL ");
	if (n > 0 && l->len + n < sizeof(l->buf))
		l->len += n;
	va_start(ap, fmt);
	n = vsnprintf(l->buf + l->len, sizeof(l->buf) - l->len, fmt, ap);
	va_end(ap);
	if (n > 0 && l->len + n < sizeof(l->buf) - 1)
		l->len += n;
	l->buf[l->len++] = '\n';
	l->buf[l->len] = 0;
	/* also live on stderr (not compared), in case the program gets stuck */
	va_start(ap, fmt);
	fprintf(stderr, "[%s", cond ? "ok " : "FAIL ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "]\n");
	va_end(ap);
	if (!cond)
		l->fails++;
}

static void dev_log_flush(struct dev_log *l)
{
	fputs(l->buf, stdout);
	check_failures += l->fails;
	l->len = 0;
	l->buf[0] = 0;
	l->fails = 0;
}


/* ---- one forked process per case -------------------------------------- */

#include <sys/wait.h>

struct dev_case {
	const char *name;
	void (*fn)(void);
};

/*
 * Runs each case in its own child process ("-- case NAME" first), so a
 * crash is reported ("FAIL NAME: crashed with signal N"), not fatal; each
 * child gets a new event channel in *ch.  Returns the program's status.
 */
static int dev_run_cases(const struct dev_case *cases, unsigned n, struct rdma_event_channel **ch)
{
	unsigned i;
	int status, failed = 0;

	for (i = 0; i < n; i++) {
		pid_t pid;

		printf("-- case %s\n", cases[i].name);
		fflush(stdout);
		pid = fork();
		if (pid < 0)
			fatal("fork");
		if (pid == 0) {
			alarm(0);
			watchdog(30);
			*ch = dev_channel();
			cases[i].fn();
			rdma_destroy_event_channel(*ch);
			exit(check_done());
		}
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
		if (WIFSIGNALED(status)) {
			printf("FAIL %s: crashed with signal %d\n", cases[i].name, WTERMSIG(status));
			failed = 1;
		} else if (WEXITSTATUS(status) == SKIP_STATUS) {
			return SKIP_STATUS;  /* the child printed "skip: ..." */
		} else if (WEXITSTATUS(status)) {
			failed = 1;
		}
	}
	return failed || check_done();
}

#endif

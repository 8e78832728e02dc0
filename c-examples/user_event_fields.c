/* c-example: ours (needs RDMACM_1.4 rdma_write_cm_event)
 *
 * rdma_get_cm_event(3) EVENT DATA for a RDMA_CM_EVENT_USER event queued with
 * rdma_write_cm_event(id, RDMA_CM_EVENT_USER, status, arg): event->id is the
 * id, listen_id is NULL, event/status as written, param.arg == arg; the id's
 * context is untouched; events come out in FIFO order and each carries its
 * own id; any other event type is refused with -1/EINVAL and queues nothing.
 */
#include <fcntl.h>
#include <stdint.h>

#include "check.h"

static int marker_a, marker_b;

int main(void)
{
	static const struct {
		int status;
		uint64_t arg;
	} seq[] = {
		{ 0, 0 },
		{ -5, 0x0123456789abcdefULL },
		{ 7, UINT64_MAX },
		{ -110, 1ULL << 63 },
	};
	static const int refused[] = {
		RDMA_CM_EVENT_ADDR_RESOLVED, RDMA_CM_EVENT_CONNECT_REQUEST,
		RDMA_CM_EVENT_ESTABLISHED, RDMA_CM_EVENT_DISCONNECTED,
		RDMA_CM_EVENT_TIMEWAIT_EXIT, RDMA_CM_EVENT_ADDRINFO_RESOLVED,
		RDMA_CM_EVENT_ADDRINFO_ERROR, 19, 1000, -1,
	};
	struct rdma_event_channel *ch;
	struct rdma_cm_id *a, *b;
	struct rdma_cm_event *ev;
	unsigned int i;
	int ret;

	watchdog(15);
	ch = channel_or_skip();
	if (rdma_create_id(ch, &a, &marker_a, RDMA_PS_TCP) ||
	    rdma_create_id(ch, &b, &marker_b, RDMA_PS_UDP))
		fatal("rdma_create_id: errno=%d (%s)", errno, strerror(errno));

	CHECK(RDMA_CM_EVENT_USER == 18, "RDMA_CM_EVENT_USER == 18", "is %d", RDMA_CM_EVENT_USER);

	/* FIFO order for one id. */
	for (i = 0; i < sizeof(seq) / sizeof(seq[0]); i++) {
		ret = rdma_write_cm_event(a, RDMA_CM_EVENT_USER, seq[i].status, seq[i].arg);
		if (ret)
			fatal("rdma_write_cm_event #%u: ret=%d errno=%d (%s)", i, ret, errno,
			      strerror(errno));
	}
	check(1, "rdma_write_cm_event(USER) x4 succeeds");
	for (i = 0; i < sizeof(seq) / sizeof(seq[0]); i++) {
		char what[80];

		if (rdma_get_cm_event(ch, &ev))
			fatal("rdma_get_cm_event #%u: errno=%d (%s)", i, errno, strerror(errno));
		snprintf(what, sizeof(what), "event #%u: id is the writer, listen_id NULL", i);
		CHECK(ev->id == a && ev->listen_id == NULL, what,
		      "id %s, listen_id %s", ev->id == a ? "ok" : "WRONG",
		      ev->listen_id ? "non-NULL" : "NULL");
		snprintf(what, sizeof(what), "event #%u: type RDMA_CM_EVENT_USER", i);
		CHECK(ev->event == RDMA_CM_EVENT_USER, what, "event=%d (%s)", ev->event,
		      rdma_event_str(ev->event));
		snprintf(what, sizeof(what), "event #%u: status and param.arg as written (FIFO)", i);
		CHECK(ev->status == seq[i].status && ev->param.arg == seq[i].arg, what,
		      "status=%d arg=0x%llx, want %d/0x%llx", ev->status,
		      (unsigned long long)ev->param.arg, seq[i].status,
		      (unsigned long long)seq[i].arg);
		snprintf(what, sizeof(what), "event #%u: id->context untouched", i);
		CHECK(ev->id && ev->id->context == &marker_a, what, "id->context changed");
		if (rdma_ack_cm_event(ev))
			fatal("rdma_ack_cm_event: errno=%d", errno);
	}

	/* Interleaved ids on one channel: each event names its own id. */
	ret = rdma_write_cm_event(b, RDMA_CM_EVENT_USER, 1, 11);
	ret |= rdma_write_cm_event(a, RDMA_CM_EVENT_USER, 2, 22);
	CHECK(ret == 0, "events for two ids queued", "errno=%d", errno);
	if (rdma_get_cm_event(ch, &ev))
		fatal("rdma_get_cm_event: errno=%d (%s)", errno, strerror(errno));
	CHECK(ev->id == b && ev->id->context == &marker_b && ev->status == 1 && ev->param.arg == 11,
	      "first event belongs to the UDP id", "status=%d arg=%llu", ev->status,
	      (unsigned long long)ev->param.arg);
	rdma_ack_cm_event(ev);
	if (rdma_get_cm_event(ch, &ev))
		fatal("rdma_get_cm_event: errno=%d (%s)", errno, strerror(errno));
	CHECK(ev->id == a && ev->id->context == &marker_a && ev->status == 2 && ev->param.arg == 22,
	      "second event belongs to the TCP id", "status=%d arg=%llu", ev->status,
	      (unsigned long long)ev->param.arg);
	rdma_ack_cm_event(ev);

	/* Only USER may be written. */
	for (i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		char what[80];

		snprintf(what, sizeof(what), "rdma_write_cm_event(type %d) fails with EINVAL",
			 refused[i]);
		CHECK_ERRNO(rdma_write_cm_event(a, (enum rdma_cm_event_type)refused[i], 0, 0),
			    EINVAL, what);
	}
	if (fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK))
		fatal("fcntl O_NONBLOCK: errno=%d", errno);
	CHECK_ERRNO(rdma_get_cm_event(ch, &ev), EAGAIN, "refused writes queued nothing");

	CHECK(rdma_destroy_id(a) == 0 && rdma_destroy_id(b) == 0, "both ids destroyed",
	      "errno=%d", errno);
	rdma_destroy_event_channel(ch);
	return check_done();
}

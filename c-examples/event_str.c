/* c-example: common
 *
 * rdma_event_str(3): "Returns a pointer to a static character string
 * corresponding to the event."  librdmacm returns the literal enum name for
 * every event it knows and "UNKNOWN EVENT" otherwise.  Events 0..15 are known
 * to rdma-core 44 and to us; 16/17 are checked in event_str_addrinfo.c.
 */
#include "check.h"

#define EV(x) { x, #x }

static const struct {
	int value;
	const char *name;
} known[] = {
	EV(RDMA_CM_EVENT_ADDR_RESOLVED),
	EV(RDMA_CM_EVENT_ADDR_ERROR),
	EV(RDMA_CM_EVENT_ROUTE_RESOLVED),
	EV(RDMA_CM_EVENT_ROUTE_ERROR),
	EV(RDMA_CM_EVENT_CONNECT_REQUEST),
	EV(RDMA_CM_EVENT_CONNECT_RESPONSE),
	EV(RDMA_CM_EVENT_CONNECT_ERROR),
	EV(RDMA_CM_EVENT_UNREACHABLE),
	EV(RDMA_CM_EVENT_REJECTED),
	EV(RDMA_CM_EVENT_ESTABLISHED),
	EV(RDMA_CM_EVENT_DISCONNECTED),
	EV(RDMA_CM_EVENT_DEVICE_REMOVAL),
	EV(RDMA_CM_EVENT_MULTICAST_JOIN),
	EV(RDMA_CM_EVENT_MULTICAST_ERROR),
	EV(RDMA_CM_EVENT_ADDR_CHANGE),
	EV(RDMA_CM_EVENT_TIMEWAIT_EXIT),
};

/* 18 = RDMA_CM_EVENT_USER upstream: no string there either. */
static const int unknown[] = { 18, 19, 20, 64, 1000, 0x7fffffff, -1 };

int main(void)
{
	unsigned int i;

	watchdog(15);
	for (i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
		const char *s = rdma_event_str((enum rdma_cm_event_type)known[i].value);
		char what[96];

		snprintf(what, sizeof(what), "%s == %u", known[i].name, i);
		CHECK(known[i].value == (int)i, what, "enum value is %d", known[i].value);
		snprintf(what, sizeof(what), "rdma_event_str(%u) is \"%s\"", i, known[i].name);
		CHECK(s && strcmp(s, known[i].name) == 0, what, "got \"%s\"", s ? s : "(null)");
	}
	for (i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
		const char *s = rdma_event_str((enum rdma_cm_event_type)unknown[i]);
		char what[64];

		snprintf(what, sizeof(what), "rdma_event_str(%d) is UNKNOWN EVENT", unknown[i]);
		CHECK(s && strcmp(s, "UNKNOWN EVENT") == 0, what, "got \"%s\"", s ? s : "(null)");
	}
	return check_done();
}

/* c-example: ours (needs RDMACM_1.4 rdma_resolve_addrinfo)
 *
 * rdma_resolve_addrinfo / rdma_query_addrinfo (1.4): the resolution ends
 * with RDMA_CM_EVENT_ADDRINFO_RESOLVED on the id's channel, and
 * rdma_query_addrinfo then hands the result over once (the caller frees it
 * with rdma_freeaddrinfo; a second query has nothing: -1/EINVAL, as before
 * any resolution). A name that cannot resolve ends with
 * RDMA_CM_EVENT_ADDRINFO_ERROR (non-zero status) and leaves nothing to
 * query. An id that also holds a local ECE keeps it through all of this.
 */
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>

#include "check.h"

static int one_event(struct rdma_event_channel *ch, struct rdma_cm_id *id, int *status)
{
	struct rdma_cm_event *ev;
	int type;

	if (rdma_get_cm_event(ch, &ev))
		fatal("rdma_get_cm_event: errno=%d (%s)", errno, strerror(errno));
	if (ev->id != id)
		fatal("event for another id");
	type = ev->event;
	*status = ev->status;
	rdma_ack_cm_event(ev);
	return type;
}

static void expect_nothing(struct rdma_cm_id *id, const char *what)
{
	struct rdma_addrinfo *ai = NULL;
	int r;

	errno = 0;
	r = rdma_query_addrinfo(id, &ai);
	CHECK(r == -1 && errno == EINVAL && ai == NULL, what, "ret %d errno %d", r, errno);
}

int main(void)
{
	struct rdma_addrinfo hints, *ai = NULL;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_ece e = { .vendor_id = 0x15b3, .options = 5 };
	int r, type, status;

	watchdog(15);
	ch = channel_or_skip();
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		fatal("rdma_create_id: errno=%d (%s)", errno, strerror(errno));
	if (rdma_set_local_ece(id, &e))
		fatal("rdma_set_local_ece: errno=%d", errno);

	expect_nothing(id, "rdma_query_addrinfo before any resolution: -1/EINVAL");

	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_NUMERICHOST;
	hints.ai_port_space = RDMA_PS_TCP;
	r = rdma_resolve_addrinfo(id, "127.0.0.1", "7471", &hints);
	CHECK(r == 0, "rdma_resolve_addrinfo(127.0.0.1, 7471) returns 0", "ret %d errno %d", r, errno);
	type = one_event(ch, id, &status);
	CHECK(type == RDMA_CM_EVENT_ADDRINFO_RESOLVED && status == 0,
	      "then RDMA_CM_EVENT_ADDRINFO_RESOLVED, status 0", "event %d status %d", type, status);
	r = rdma_query_addrinfo(id, &ai);
	CHECK(r == 0 && ai != NULL, "rdma_query_addrinfo hands the result over", "ret %d errno %d", r, errno);
	if (ai) {
		const struct sockaddr_in *d = (const struct sockaddr_in *)ai->ai_dst_addr;

		CHECK(ai->ai_family == AF_INET && d && d->sin_family == AF_INET &&
			      d->sin_addr.s_addr == htonl(INADDR_LOOPBACK) && d->sin_port == htons(7471),
		      "its destination is 127.0.0.1 port 7471", "family %d", ai->ai_family);
		rdma_freeaddrinfo(ai);
	}
	expect_nothing(id, "a second rdma_query_addrinfo: -1/EINVAL (handed over once)");

	r = rdma_resolve_addrinfo(id, "256.1.1.1", "7471", &hints);
	CHECK(r == 0, "rdma_resolve_addrinfo of a malformed numeric host returns 0",
	      "ret %d errno %d", r, errno);
	type = one_event(ch, id, &status);
	CHECK(type == RDMA_CM_EVENT_ADDRINFO_ERROR && status != 0,
	      "then RDMA_CM_EVENT_ADDRINFO_ERROR, non-zero status", "event %d status %d", type, status);
	expect_nothing(id, "nothing to query after ADDRINFO_ERROR");

	e.options = 0;
	r = rdma_get_remote_ece(id, &e);
	CHECK(r == 0 && e.vendor_id == 0, "the remote ECE is still zero", "ret %d vendor %u", r, e.vendor_id);

	if (rdma_destroy_id(id))
		fatal("rdma_destroy_id: errno=%d", errno);
	rdma_destroy_event_channel(ch);
	return check_done();
}

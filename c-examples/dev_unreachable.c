/* dev-example: resolving an address nobody answers for
 *
 * rdma_get_cm_event(3): ADDR_ERROR "Address resolution (rdma_resolve_addr)
 * failed", ROUTE_ERROR "Route resolution (rdma_resolve_route) failed";
 * rdma_resolve_addr(3): resolution completes within timeout_ms.  The target
 * is a TEST-NET-1 address (default 192.0.2.1, argv[3] or
 * $RDMA_TEST_UNREACHABLE) that is routed onto the RDMA netdev where nothing
 * answers (tests/vm routes 192.0.2.0/24 onto its dummy netdev); never point
 * this at a real host.  Resolution must fail (synchronously, or with
 * ADDR_ERROR / ROUTE_ERROR) within the timeout plus slack, with and without
 * a source address, and the id must stay destroyable.
 *
 *   dev_unreachable ADDR [PORT=7504 [TARGET=192.0.2.1]]
 */
#include "dev.h"

#define SLACK_MS 6000

static struct sockaddr_storage target;

static void one_case(struct rdma_event_channel *ch, int with_src)
{
	struct rdma_cm_id *id = NULL;
	struct rdma_cm_event *ev;
	struct sockaddr_storage src;
	long long t0;
	int r, e, failed = 0;

	printf("-- case: rdma_resolve_addr %s source address\n", with_src ? "with" : "without");
	if (DEV_CALL(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), "rdma_create_id"))
		return;
	dev_parse_addr(dev_addr_str, 0, &src);
	t0 = now_ms();
	errno = 0;
	r = rdma_resolve_addr(id, with_src ? (struct sockaddr *)&src : NULL,
			      (struct sockaddr *)&target, DEV_RESOLVE_MS);
	if (r) {
		dev_skip_nodev("rdma_resolve_addr", errno);
		e = errno;
		printf("rdma_resolve_addr: ret %d errno %s\n", r, dev_errno_name(e));
		/* a synchronous failure must say "unreachable", not "not implemented" */
		failed = e == ENETUNREACH || e == EHOSTUNREACH || e == EADDRNOTAVAIL ||
			 e == ETIMEDOUT || e == ENODATA;
		CHECK(failed, "synchronous failure has an unreachable errno", "errno %s",
		      dev_errno_name(e));
	} else {
		ev = dev_get(ch, DEV_ACTIVE, -1, 1);
		if (ev && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED && !ev->status) {
			dev_ack(ev);
			errno = 0;
			r = rdma_resolve_route(id, DEV_RESOLVE_MS);
			if (r) {
				printf("rdma_resolve_route: ret %d errno %s\n", r, dev_errno_name(errno));
				failed = 1;
			} else {
				ev = dev_get(ch, DEV_ACTIVE, -1, 1);
			}
		}
		if (ev && (ev->event == RDMA_CM_EVENT_ADDR_ERROR ||
			   ev->event == RDMA_CM_EVENT_ROUTE_ERROR)) {
			failed = 1;
			CHECK(ev->status != 0, "error event has a non-zero status", "status 0");
			CHECK(ev->id == id, "error event is on the resolving id", "other id");
		}
		dev_ack(ev);
	}
	fprintf(stderr, "[failure reported after %lld ms]\n", now_ms() - t0);
	CHECK(failed, "resolution fails", "no ADDR_ERROR/ROUTE_ERROR and no unreachable errno");
	CHECK(now_ms() - t0 <= 2 * DEV_RESOLVE_MS + SLACK_MS, "failure reported within the timeouts",
	      "took %lld ms", now_ms() - t0);
	dev_seq_print(DEV_ACTIVE);
	errno = 0;
	r = rdma_destroy_id(id);
	CHECK(r == 0, "rdma_destroy_id after the failure returns 0", "ret %d errno %s", r,
	      dev_errno_name(errno));
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch;
	const char *t = argc > 3 ? argv[3] : getenv("RDMA_TEST_UNREACHABLE");

	dev_args(argc, argv, 7504);
	if (!t || !*t)
		t = "192.0.2.1";
	if (dev_parse_addr(t, dev_port, &target))
		fatal("bad target address %s", t);
	watchdog(60);
	ch = dev_channel();
	one_case(ch, 0);
	one_case(ch, 1);
	rdma_destroy_event_channel(ch);
	return check_done();
}

/* c-example: ours (RDMACM_1.4 event numbers)
 *
 * The 1.4 event types have the kernel's numbers (ADDRINFO_RESOLVED 16,
 * ADDRINFO_ERROR 17, USER 18) and rdma_event_str names 16/17 literally;
 * USER has no string ("UNKNOWN EVENT"), as upstream.
 */
#include "check.h"

int main(void)
{
	const char *s;

	watchdog(15);
	CHECK(RDMA_CM_EVENT_ADDRINFO_RESOLVED == 16 && RDMA_CM_EVENT_ADDRINFO_ERROR == 17 &&
		      RDMA_CM_EVENT_USER == 18,
	      "1.4 event numbers are 16, 17, 18", "got %d %d %d",
	      RDMA_CM_EVENT_ADDRINFO_RESOLVED, RDMA_CM_EVENT_ADDRINFO_ERROR, RDMA_CM_EVENT_USER);
	s = rdma_event_str(RDMA_CM_EVENT_ADDRINFO_RESOLVED);
	CHECK(s && !strcmp(s, "RDMA_CM_EVENT_ADDRINFO_RESOLVED"),
	      "rdma_event_str(16) is \"RDMA_CM_EVENT_ADDRINFO_RESOLVED\"", "got \"%s\"", s ? s : "(null)");
	s = rdma_event_str(RDMA_CM_EVENT_ADDRINFO_ERROR);
	CHECK(s && !strcmp(s, "RDMA_CM_EVENT_ADDRINFO_ERROR"),
	      "rdma_event_str(17) is \"RDMA_CM_EVENT_ADDRINFO_ERROR\"", "got \"%s\"", s ? s : "(null)");
	s = rdma_event_str(RDMA_CM_EVENT_USER);
	CHECK(s && !strcmp(s, "UNKNOWN EVENT"), "rdma_event_str(USER) is \"UNKNOWN EVENT\"",
	      "got \"%s\"", s ? s : "(null)");
	CHECK(RAI_SA == 0x10 && RAI_DNS == 0x20, "RAI_SA == 0x10, RAI_DNS == 0x20",
	      "got 0x%x 0x%x", RAI_SA, RAI_DNS);
	return check_done();
}

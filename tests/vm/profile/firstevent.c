/* make profile-vm-first: what a process's first CM event costs, from outside
 * the library. One id after another (two), each: rdma_resolve_addr, poll() of
 * the channel's fd until the kernel has the event queued, rdma_get_cm_event,
 * rdma_ack_cm_event, each call timed. The first id's get is where both
 * libraries open the device and run their event path for the first time in
 * the process (under qemu's TCG, code run for the first time is translated
 * first); the poll keeps the kernel's address resolution out of that number.
 * cmtime's resolve addr step pays exactly these first-time costs once.
 * Then two bursts of 100 rdma_create_id (cmtime's create id step) and their
 * rdma_destroy_id, each timed with the page faults of the creates: the
 * first burst takes fresh heap pages, the second reuses them.
 * Usage: firstevent SERVER_IP (any address of the guest's RDMA device). */
#include <stdio.h>
#include <time.h>
#include <poll.h>
#include <sys/resource.h>
#include <rdma/rdma_cma.h>

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Pages touched for the first time (code or data): each is a trip through the
 * guest kernel's fault handler, itself emulated. */
static long faults(void)
{
	struct rusage u;
	getrusage(RUSAGE_SELF, &u);
	return u.ru_minflt + u.ru_majflt;
}

int main(int argc, char **argv)
{
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP }, *rai;
	struct rdma_event_channel *ch;
	struct rdma_cm_event *e;
	struct rdma_cm_id *id;

	if (argc < 2 || rdma_getaddrinfo(argv[1], "7471", &hints, &rai))
		return 1;
	ch = rdma_create_event_channel();
	if (!ch)
		return 1;
	for (int k = 0; k < 2; k++) {
		struct pollfd pf = { .fd = ch->fd, .events = POLLIN };
		double t0, t1, t2, t3, t4;
		long f0, f1, f2;

		if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
			return 1;
		f0 = faults();
		t0 = now_ms();
		if (rdma_resolve_addr(id, NULL, rai->ai_dst_addr, 2000))
			return 1;
		t1 = now_ms();
		if (poll(&pf, 1, 5000) != 1)
			return 1;
		t2 = now_ms();
		f1 = faults();
		if (rdma_get_cm_event(ch, &e) || e->event != RDMA_CM_EVENT_ADDR_RESOLVED)
			return 1;
		t3 = now_ms();
		rdma_ack_cm_event(e);
		t4 = now_ms();
		f2 = faults();
		printf("%s resolve %.3f get %.3f ack %.3f resolve_faults %ld get_ack_faults %ld\n", k ? "second" : "first",
		       t1 - t0, t3 - t2, t4 - t3, f1 - f0, f2 - f1);
	}
	for (int b = 1; b <= 2; b++) {
		struct rdma_cm_id *ids[100];
		double t0, t1, t2;
		long f0, f1;

		f0 = faults();
		t0 = now_ms();
		for (int i = 0; i < 100; i++)
			if (rdma_create_id(ch, &ids[i], NULL, RDMA_PS_TCP))
				return 1;
		t1 = now_ms();
		f1 = faults();
		for (int i = 0; i < 100; i++)
			if (rdma_destroy_id(ids[i]))
				return 1;
		t2 = now_ms();
		printf("burst%d create100 %.3f destroy100 %.3f create_faults %ld\n", b, t1 - t0, t2 - t1, f1 - f0);
	}
	return 0;
}

/* dev-example: what the loopback address gives (libfabric's verbs provider
 * decides from it where a passive endpoint listens)
 *
 * libfabric asks rdma_getaddrinfo for its node (none: the loopback address),
 * creates an id, binds or resolves it, and takes id->verbs as "this address
 * belongs to an RDMA device": set, the endpoint uses rdma_get_local_addr;
 * NULL, it lists the devices' own interface addresses instead.  So the
 * answers below must be the kernel's, and are printed for diffing:
 *   1. rdma_getaddrinfo(NULL, port) without RAI_PASSIVE: which addresses;
 *   2. rdma_bind_addr(127.0.0.1): ret/errno, id->verbs set or NULL;
 *   3. rdma_resolve_addr(no source, 127.0.0.1): the event, id->verbs, and
 *      whether the local address is loopback or the device's (ADDR); on siw
 *      the kernel refuses it at once (EINVAL);
 *   4. the same for ::1;
 *   5. rdma_bind_addr(ADDR): the device's own address attaches it.
 * The soft fabric differs in 2 and 4 (expected/dev_loopback.soft.txt): there
 * the loopback address is soft0's, the address every same-host program uses.
 * Checked in every case: a bound/resolved id with a device is destroyable,
 * and a failure is a clean errno, not a crash or hang.
 *
 *   dev_loopback ADDR [PORT=7524]
 */
#include "dev.h"

static const char *addr_kind(const struct sockaddr *sa)
{
	if (!sa)
		return "none";
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)sa;
		const struct sockaddr_in *d = (const void *)&dev_addr;

		if (ntohl(s->sin_addr.s_addr) >> 24 == 127)
			return "loopback";
		if (s->sin_addr.s_addr == INADDR_ANY)
			return "any";
		if (dev_addr.ss_family == AF_INET && s->sin_addr.s_addr == d->sin_addr.s_addr)
			return "the device's address";
		return "another address";
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const void *)sa;

		if (IN6_IS_ADDR_LOOPBACK(&s->sin6_addr))
			return "loopback";
		if (IN6_IS_ADDR_UNSPECIFIED(&s->sin6_addr))
			return "any";
		return "another address";
	}
	return "another family";
}

static void getaddrinfo_case(void)
{
	struct rdma_addrinfo hints, *res = NULL;
	int r;

	printf("-- case: rdma_getaddrinfo(NULL, port), not passive\n");
	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_TCP;
	errno = 0;
	r = rdma_getaddrinfo(NULL, "7524", &hints, &res);
	printf("rdma_getaddrinfo: ret %d%s\n", r, r ? " (failed)" : "");
	if (r || !res)
		return;
	printf("first: src %s, dst %s\n", addr_kind(res->ai_src_addr), addr_kind(res->ai_dst_addr));
	rdma_freeaddrinfo(res);
}

static void bind_case(struct rdma_event_channel *ch, const char *text, const char *label)
{
	struct sockaddr_storage ss;
	struct rdma_cm_id *id = NULL;
	int r;

	printf("-- case: rdma_bind_addr %s\n", label ? label : text);
	if (DEV_CALL(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), "rdma_create_id"))
		return;
	if (dev_parse_addr(text, 0, &ss))
		fatal("bad address %s", text);
	errno = 0;
	r = rdma_bind_addr(id, (struct sockaddr *)&ss);
	printf("rdma_bind_addr: ret %d errno %s\n", r, dev_errno_name(r ? errno : 0));
	if (r)
		CHECK(r == -1 && errno != 0, "a failed bind returns -1 and sets errno", "ret %d errno 0", r);
	else
		printf("id->verbs: %s\n", id->verbs ? "set" : "NULL");
	errno = 0;
	r = rdma_destroy_id(id);
	CHECK(r == 0, "rdma_destroy_id returns 0", "ret %d errno %s", r, dev_errno_name(errno));
}

static void resolve_case(struct rdma_event_channel *ch, const char *text)
{
	struct sockaddr_storage ss;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id = NULL;
	int r;

	printf("-- case: rdma_resolve_addr to %s, no source\n", text);
	if (DEV_CALL(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), "rdma_create_id"))
		return;
	if (dev_parse_addr(text, dev_port, &ss))
		fatal("bad address %s", text);
	errno = 0;
	r = rdma_resolve_addr(id, NULL, (struct sockaddr *)&ss, DEV_RESOLVE_MS);
	printf("rdma_resolve_addr: ret %d errno %s\n", r, dev_errno_name(r ? errno : 0));
	if (!r) {
		ev = dev_get(ch, DEV_ACTIVE, -1, 1);
		if (ev && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED && !ev->status) {
			printf("id->verbs: %s\n", id->verbs ? "set" : "NULL");
			printf("local address: %s\n", addr_kind(rdma_get_local_addr(id)));
		}
		dev_ack(ev);
	}
	errno = 0;
	r = rdma_destroy_id(id);
	CHECK(r == 0, "rdma_destroy_id returns 0", "ret %d errno %s", r, dev_errno_name(errno));
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch;

	dev_args(argc, argv, 7524);
	watchdog(60);
	ch = dev_channel();
	getaddrinfo_case();
	bind_case(ch, "127.0.0.1", NULL);
	resolve_case(ch, "127.0.0.1");
	bind_case(ch, "::1", NULL);
	resolve_case(ch, "::1");
	bind_case(ch, dev_addr_str, "ADDR (the device's address)");
	rdma_destroy_event_channel(ch);
	return check_done();
}

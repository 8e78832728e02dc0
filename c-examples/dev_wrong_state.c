/* dev-example: errno of calls made in the wrong state
 *
 * rdma_cm(7) RETURN CODES: "-1 error - see errno for more details".  The
 * man pages give the order of calls (bind before listen, route resolution
 * before connect, accept only on an id from CONNECT_REQUEST, resolve_route
 * after resolve_addr, rdma_establish only without a QP, REUSEADDR before
 * bind), binds and listens on a port other ids hold (the kernel CM's
 * REUSEADDR and AFONLY rules), and addresses of a family the CM does not
 * know; this program makes each call out of order and checks the result
 * against what rdma-core's librdmacm on a real kernel returns (the values
 * were taken from Debian's library on rxe; see c-examples/expected/).
 * Every case runs in its own forked process, so a crash is reported, not
 * fatal.
 *
 *   dev_wrong_state ADDR [PORT=7508]
 */
#include "dev.h"

static struct rdma_event_channel *ch;

/* Print "<what>: ret R errno E" and check it against want_ret/want_errno. */
static void result(const char *what, int r, int e, int want_r, int want_e)
{
	char got[64], want[64];

	snprintf(got, sizeof(got), "ret %d errno %s", r, r ? dev_errno_name(e) : "0");
	snprintf(want, sizeof(want), "ret %d errno %s", want_r, want_r ? dev_errno_name(want_e) : "0");
	if (r == want_r && (r == 0 || e == want_e))
		printf("ok %s: %s\n", what, got);
	else {
		printf("FAIL %s: %s, want %s\n", what, got, want);
		check_failures++;
	}
}

#define TRY(call, what, want_r, want_e)                                        \
	do {                                                                   \
		int r_, e_;                                                    \
		errno = 0;                                                     \
		r_ = (call);                                                   \
		e_ = errno;                                                    \
		result(what, r_, e_, want_r, want_e);                          \
	} while (0)

static struct rdma_cm_id *new_id(void)
{
	struct rdma_cm_id *id = NULL;

	if (DEV_CALL(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), "rdma_create_id"))
		exit(check_done());
	return id;
}

static void resolve_addr(struct rdma_cm_id *id)
{
	if (DEV_CALL(rdma_resolve_addr(id, NULL, dev_sa(), DEV_RESOLVE_MS), "rdma_resolve_addr") ||
	    dev_expect(ch, DEV_ACTIVE, RDMA_CM_EVENT_ADDR_RESOLVED))
		exit(check_done());
}

static void resolve_route(struct rdma_cm_id *id)
{
	resolve_addr(id);
	if (DEV_CALL(rdma_resolve_route(id, DEV_RESOLVE_MS), "rdma_resolve_route") ||
	    dev_expect(ch, DEV_ACTIVE, RDMA_CM_EVENT_ROUTE_RESOLVED))
		exit(check_done());
}

static void bind_addr(struct rdma_cm_id *id)
{
	if (DEV_CALL(rdma_bind_addr(id, dev_sa()), "rdma_bind_addr"))
		exit(check_done());
}

static void case_listen_before_bind(void)
{
	struct rdma_cm_id *id = new_id();

	TRY(rdma_listen(id, 1), "rdma_listen before rdma_bind_addr", 0, 0);
	/* the kernel binds a listening id to the wildcard address and a free port */
	CHECK(rdma_get_src_port(id) != 0, "the listening id got a port", "port 0");
	rdma_destroy_id(id);
}

static void case_listen_twice(void)
{
	struct rdma_cm_id *id = new_id();

	bind_addr(id);
	TRY(rdma_listen(id, 1), "rdma_listen after rdma_bind_addr", 0, 0);
	TRY(rdma_listen(id, 1), "rdma_listen again", -1, EINVAL);
	rdma_destroy_id(id);
}

static void case_bind_twice(void)
{
	struct rdma_cm_id *id = new_id();

	bind_addr(id);
	TRY(rdma_bind_addr(id, dev_sa()), "rdma_bind_addr again", -1, EINVAL);
	rdma_destroy_id(id);
}

static void case_connect_before_route(void)
{
	struct rdma_cm_id *id = new_id();
	struct rdma_conn_param cp;

	resolve_addr(id);
	dev_conn_param(&cp, NULL);
	cp.qp_num = 0x1234;
	TRY(rdma_connect(id, &cp), "rdma_connect after resolve_addr, before resolve_route", -1,
	    EINVAL);
	rdma_destroy_id(id);
}

/*
 * On a fresh id (no address at all) Debian's librdmacm 44 dereferences the
 * id's NULL device and crashes, so the case uses an id that is bound to the
 * device's address but has not resolved a destination.
 */
static void case_route_before_addr(void)
{
	struct rdma_cm_id *id = new_id();

	bind_addr(id);
	TRY(rdma_resolve_route(id, DEV_RESOLVE_MS),
	    "rdma_resolve_route after rdma_bind_addr, before rdma_resolve_addr", -1, EINVAL);
	rdma_destroy_id(id);
}

static void case_accept_on_active(void)
{
	struct rdma_cm_id *id = new_id();
	struct dev_qp q;

	memset(&q, 0, sizeof(q));
	resolve_route(id);
	if (dev_rdma_qp(id, &q, "active"))
		exit(check_done());
	TRY(rdma_accept(id, NULL), "rdma_accept on a route-resolved active id with a QP", -1, EINVAL);
	dev_free_qp(id, &q);
	rdma_destroy_id(id);
}

static void case_accept_on_listener(void)
{
	struct rdma_cm_id *id = new_id();
	struct rdma_conn_param cp;

	bind_addr(id);
	if (DEV_CALL(rdma_listen(id, 1), "rdma_listen"))
		exit(check_done());
	dev_conn_param(&cp, NULL);
	cp.qp_num = 0x1234;
	TRY(rdma_accept(id, &cp), "rdma_accept on the listening id", -1, EINVAL);
	rdma_destroy_id(id);
}

static void case_establish_with_qp(void)
{
	struct rdma_cm_id *id = new_id();
	struct dev_qp q;

	memset(&q, 0, sizeof(q));
	resolve_route(id);
	if (dev_rdma_qp(id, &q, "active"))
		exit(check_done());
	TRY(rdma_establish(id), "rdma_establish on an id with a QP", -1, EINVAL);
	dev_free_qp(id, &q);
	rdma_destroy_id(id);
}

static void case_disconnect_unconnected(void)
{
	struct rdma_cm_id *id = new_id();
	struct dev_qp q;

	memset(&q, 0, sizeof(q));
	resolve_route(id);
	if (dev_rdma_qp(id, &q, "active"))
		exit(check_done());
	TRY(rdma_disconnect(id), "rdma_disconnect on a route-resolved, unconnected id", -1, EINVAL);
	dev_free_qp(id, &q);
	rdma_destroy_id(id);
}

static void case_resolve_addr_twice(void)
{
	struct rdma_cm_id *id = new_id();

	resolve_addr(id);
	TRY(rdma_resolve_addr(id, NULL, dev_sa(), DEV_RESOLVE_MS),
	    "rdma_resolve_addr again after ADDR_RESOLVED", -1, EINVAL);
	rdma_destroy_id(id);
}

static void case_reuseaddr(void)
{
	struct rdma_cm_id *id = new_id();
	int one = 1;

	TRY(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof(one)),
	    "rdma_set_option(REUSEADDR) before bind", 0, 0);
	bind_addr(id);
	TRY(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof(one)),
	    "rdma_set_option(REUSEADDR) after bind", 0, 0);
	if (DEV_CALL(rdma_listen(id, 1), "rdma_listen"))
		exit(check_done());
	TRY(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof(one)),
	    "rdma_set_option(REUSEADDR) after listen", -1, EINVAL);
	rdma_destroy_id(id);
}

/* Two ids share a port through REUSEADDR: while both hold it neither may
 * listen (the kernel CM's rule; TCP would let one). The refused id keeps its
 * binding and listens once the other is gone. */
static void case_listen_busy(void)
{
	struct rdma_cm_id *a = new_id(), *b = new_id();
	int one = 1;

	TRY(rdma_set_option(a, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof(one)),
	    "rdma_set_option(REUSEADDR) on the first id", 0, 0);
	TRY(rdma_set_option(b, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof(one)),
	    "rdma_set_option(REUSEADDR) on the second id", 0, 0);
	bind_addr(a);
	TRY(rdma_bind_addr(b, dev_sa()), "rdma_bind_addr of the second id to the same port", 0, 0);
	TRY(rdma_listen(a, 1), "rdma_listen on a port another id holds", -1, EADDRINUSE);
	TRY(rdma_listen(b, 1), "rdma_listen of that other id", -1, EADDRINUSE);
	rdma_destroy_id(b);
	TRY(rdma_listen(a, 1), "rdma_listen once the other id is gone", 0, 0);
	rdma_destroy_id(a);
}

/* The wildcard address of `family`, on the program's port. */
static struct sockaddr *wildcard(int family)
{
	static struct sockaddr_storage ss;

	memset(&ss, 0, sizeof(ss));
	ss.ss_family = family;
	if (family == AF_INET)
		((struct sockaddr_in *)&ss)->sin_port = htons(dev_port);
	else
		((struct sockaddr_in6 *)&ss)->sin6_port = htons(dev_port);
	return (struct sockaddr *)&ss;
}

static void set_opt(struct rdma_cm_id *id, int name, int value, const char *what)
{
	TRY(rdma_set_option(id, RDMA_OPTION_ID, name, &value, sizeof(value)), what, 0, 0);
}

/* Without REUSEADDR a port is one id's: another id's bind of it fails,
 * EADDRINUSE for the same address and EADDRNOTAVAIL for the wildcard; so
 * does a bind of the port rdma_resolve_addr gave an unbound id. */
static void case_bind_busy(void)
{
	struct rdma_cm_id *a = new_id(), *b = new_id(), *c = new_id(), *d = new_id();
	struct sockaddr_storage ss;

	bind_addr(a);
	TRY(rdma_bind_addr(b, dev_sa()), "rdma_bind_addr of a second id to the same address and port",
	    -1, EADDRINUSE);
	TRY(rdma_bind_addr(b, wildcard(dev_addr.ss_family)),
	    "rdma_bind_addr of a second id to the wildcard on that port", -1, EADDRNOTAVAIL);
	rdma_destroy_id(a);
	TRY(rdma_bind_addr(b, dev_sa()), "rdma_bind_addr once the first id is gone", 0, 0);
	resolve_addr(c);
	memcpy(&ss, &dev_addr, sizeof(ss));
	if (ss.ss_family == AF_INET)
		((struct sockaddr_in *)&ss)->sin_port = rdma_get_src_port(c);
	else
		((struct sockaddr_in6 *)&ss)->sin6_port = rdma_get_src_port(c);
	TRY(rdma_bind_addr(d, (struct sockaddr *)&ss),
	    "rdma_bind_addr to the port rdma_resolve_addr gave an unbound id", -1, EADDRINUSE);
	rdma_destroy_id(d);
	rdma_destroy_id(c);
	rdma_destroy_id(b);
}

/* listen_busy with a wildcard sharer: EADDRNOTAVAIL. A listener's port is
 * its own: REUSEADDR no longer shares it. */
static void case_listen_busy_wildcard(void)
{
	struct rdma_cm_id *a = new_id(), *b = new_id(), *c = new_id();

	set_opt(a, RDMA_OPTION_ID_REUSEADDR, 1, "rdma_set_option(REUSEADDR) on the first id");
	set_opt(b, RDMA_OPTION_ID_REUSEADDR, 1, "rdma_set_option(REUSEADDR) on the second id");
	set_opt(c, RDMA_OPTION_ID_REUSEADDR, 1, "rdma_set_option(REUSEADDR) on a third id");
	TRY(rdma_bind_addr(a, wildcard(dev_addr.ss_family)), "rdma_bind_addr of the first id to the wildcard",
	    0, 0);
	TRY(rdma_bind_addr(b, dev_sa()), "rdma_bind_addr of the second id to the address, same port", 0, 0);
	TRY(rdma_listen(a, 1), "rdma_listen of the wildcard id", -1, EADDRNOTAVAIL);
	TRY(rdma_listen(b, 1), "rdma_listen of the other id", -1, EADDRNOTAVAIL);
	rdma_destroy_id(b);
	TRY(rdma_listen(a, 1), "rdma_listen once the other id is gone", 0, 0);
	TRY(rdma_bind_addr(c, dev_sa()), "rdma_bind_addr with REUSEADDR to the listener's port", -1,
	    EADDRNOTAVAIL);
	rdma_destroy_id(c);
	rdma_destroy_id(a);
}

/* IPv4 and IPv6 ids meet on a port unless both are AFONLY. An IPv4 id is
 * AFONLY unless told otherwise, an IPv6 id as net.ipv6.bindv6only says (0,
 * Linux's default, assumed here: the VM's and the soft fabric's hosts). */
static void case_bind_families(void)
{
	struct rdma_cm_id *a = new_id(), *b = new_id(), *c = new_id();
	int other = dev_addr.ss_family == AF_INET ? AF_INET6 : AF_INET;

	TRY(rdma_bind_addr(a, wildcard(dev_addr.ss_family)), "rdma_bind_addr to the wildcard", 0, 0);
	TRY(rdma_bind_addr(b, wildcard(other)), "rdma_bind_addr to the other family's wildcard, same port",
	    -1, EADDRNOTAVAIL);
	set_opt(c, RDMA_OPTION_ID_AFONLY, 1, "rdma_set_option(AFONLY) on a third id");
	TRY(rdma_bind_addr(c, wildcard(other)), "rdma_bind_addr of the AFONLY id to that wildcard", 0, 0);
	TRY(rdma_listen(a, 1), "rdma_listen of the first id", 0, 0);
	TRY(rdma_listen(c, 1), "rdma_listen of the AFONLY id", 0, 0);
	rdma_destroy_id(c);
	rdma_destroy_id(b);
	rdma_destroy_id(a);
}

static void case_afonly(void)
{
	struct rdma_cm_id *id = new_id();
	int one = 1;

	bind_addr(id);
	TRY(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one, sizeof(one)),
	    "rdma_set_option(AFONLY) after bind", 0, 0);
	if (DEV_CALL(rdma_listen(id, 1), "rdma_listen"))
		exit(check_done());
	TRY(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one, sizeof(one)),
	    "rdma_set_option(AFONLY) after listen", -1, EINVAL);
	rdma_destroy_id(id);
}

/* upstream's ucma_addrlen knows AF_INET, AF_INET6 and (with kernel support) AF_IB */
static void case_unknown_family(void)
{
	struct rdma_cm_id *id = new_id();
	struct sockaddr_storage ss;

	memset(&ss, 0, sizeof(ss));
	ss.ss_family = AF_UNIX;
	TRY(rdma_bind_addr(id, (struct sockaddr *)&ss), "rdma_bind_addr with AF_UNIX", -1, EINVAL);
	TRY(rdma_resolve_addr(id, NULL, (struct sockaddr *)&ss, DEV_RESOLVE_MS),
	    "rdma_resolve_addr to AF_UNIX", -1, EINVAL);
	TRY(rdma_join_multicast(id, (struct sockaddr *)&ss, NULL), "rdma_join_multicast with AF_UNIX",
	    -1, EINVAL);
	rdma_destroy_id(id);
}

static const struct dev_case cases[] = {
	{ "listen_before_bind", case_listen_before_bind },
	{ "listen_twice", case_listen_twice },
	{ "bind_twice", case_bind_twice },
	{ "connect_before_route", case_connect_before_route },
	{ "route_before_addr", case_route_before_addr },
	{ "resolve_addr_twice", case_resolve_addr_twice },
	{ "accept_on_active", case_accept_on_active },
	{ "accept_on_listener", case_accept_on_listener },
	{ "establish_with_qp", case_establish_with_qp },
	{ "disconnect_unconnected", case_disconnect_unconnected },
	{ "reuseaddr", case_reuseaddr },
	{ "listen_busy", case_listen_busy },
	{ "bind_busy", case_bind_busy },
	{ "listen_busy_wildcard", case_listen_busy_wildcard },
	{ "bind_families", case_bind_families },
	{ "afonly", case_afonly },
	{ "unknown_family", case_unknown_family },
};

int main(int argc, char **argv)
{
	dev_args(argc, argv, 7508);
	watchdog(120);
	return dev_run_cases(cases, sizeof(cases) / sizeof(cases[0]), &ch);
}

/* dev-example: rdma_reject with and without private data
 *
 * rdma_reject(3): "If the underlying RDMA transport supports private data in
 * the reject message, the specified data will be passed to the remote side";
 * rdma_get_cm_event(3) REJECTED: "The event status field will contain the
 * transport specific reject reason if available.  Under InfiniBand, this is
 * the reject reason carried in the IB CM REJ message", and private_data_len
 * "may be larger than the amount of private data sent" (IB/RoCE pad the REJ
 * private data; the length is printed so libraries can be compared).
 * A rejected request leaves the listener usable and the child id destroyable.
 *
 *   dev_reject ADDR [PORT=7502]
 */
#include "dev.h"

static const char msg[] = "dev_reject: go away";

static void one_round(struct dev_pair *p, const char *pdata)
{
	struct rdma_conn_param cp;
	struct rdma_cm_event *ev;
	int r, i, zero = 1;

	printf("-- round: reject with %s\n", pdata ? "private data" : "no private data");
	if (dev_resolve(p) || dev_rdma_qp(p->active, &p->aq, "active"))
		goto out;
	dev_conn_param(&cp, "dev_reject req");
	if (DEV_CALL(rdma_connect(p->active, &cp), "active: rdma_connect"))
		goto out;
	ev = dev_get_request(p, "dev_reject req");
	if (!ev)
		goto out;
	errno = 0;
	r = rdma_reject(p->child, pdata, pdata ? (uint8_t)strlen(pdata) : 0);
	CHECK(r == 0, "passive: rdma_reject returns 0", "ret %d errno %s", r, dev_errno_name(errno));
	dev_ack(ev);
	errno = 0;
	r = rdma_destroy_id(p->child);
	CHECK(r == 0, "passive: rdma_destroy_id of the rejected id returns 0", "ret %d errno %s", r,
	      dev_errno_name(errno));
	p->child = NULL;

	ev = dev_get(p->ach, DEV_ACTIVE, RDMA_CM_EVENT_REJECTED, 1);
	if (ev && ev->event == RDMA_CM_EVENT_REJECTED) {
		CHECK(ev->status != 0, "active: REJECTED has a non-zero status (reject reason)",
		      "status 0");
		CHECK(ev->id == p->active, "active: REJECTED is on the connecting id", "other id");
		dev_check_pdata(DEV_ACTIVE, "REJECTED", ev->param.conn.private_data,
				ev->param.conn.private_data_len, pdata);
		if (!pdata) {
			const unsigned char *d = ev->param.conn.private_data;

			for (i = 0; d && i < ev->param.conn.private_data_len; i++)
				zero &= d[i] == 0;
			printf("active: REJECTED private_data %s\n",
			       !d ? "NULL" : zero ? "all zero" : "not zero");
		} else if (ev->param.conn.private_data) {
			const unsigned char *d = ev->param.conn.private_data;

			for (i = strlen(pdata); i < ev->param.conn.private_data_len; i++)
				zero &= d[i] == 0;
			CHECK(zero, "active: REJECTED padding is zeroed", "non-zero padding");
		}
	}
	dev_ack(ev);
	/* nothing else arrives on either side */
	printf("further events within 500 ms:\n");
	if (!dev_drain(p->ach, DEV_ACTIVE, 500) + !dev_drain(p->pch, DEV_PASSIVE, 100) == 2)
		printf("(none)\n");
out:
	dev_seq_print(DEV_ACTIVE);
	dev_seq_print(DEV_PASSIVE);
	dev_free_qp(p->active, &p->aq);
	if (p->active && rdma_destroy_id(p->active))
		check(0, "active: rdma_destroy_id: errno %s", dev_errno_name(errno));
	p->active = NULL;
}

int main(int argc, char **argv)
{
	struct dev_pair p;

	memset(&p, 0, sizeof(p));
	dev_args(argc, argv, 7502);
	watchdog(60);
	if (dev_listen(&p))
		return check_done();
	p.ach = dev_channel();
	one_round(&p, msg);
	one_round(&p, NULL);
	dev_teardown(&p);
	return check_done();
}

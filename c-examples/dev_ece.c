/* dev-example: ECE (enhanced connection establishment) carried by a real connection
 *
 * rdma_set_local_ece(3): "Set local ECE options to be used for REQ/REP
 * communication.  In use to implement ECE handshake in external QP."
 * rdma_get_remote_ece(3): "Get ECE options received from the remote peer.
 * In use to implement ECE handshake in external QP."  rdma_reject_ece(3):
 * reject a connection request because of unsupported ECE options.  What
 * each call returns and reads is printed; the expected files recorded from
 * Debian's library say what is right.  Rounds, each on fresh ids:
 *   qp       library QPs, the active side's ECE set after rdma_create_qp
 *   early    library QPs, the active side's ECE set before rdma_create_qp
 *   external no QP on the ids (an external QP's handshake, the QP numbers
 *            passed in conn_param): the passive side reads the request's
 *            ECE and answers with its own, the active side reads it at
 *            CONNECT_RESPONSE and calls rdma_establish
 *   reject   no QP: the passive side rejects with rdma_reject_ece
 * The last two need IB/RoCE: iWARP connects only an existing QP.
 *
 *   dev_ece ADDR [PORT=7522]
 */
#include "dev.h"

#define VENDOR 0x15b3 /* any non-zero vendor id */

static void show(const char *side, const char *when, struct rdma_cm_id *id)
{
	struct ibv_ece e;
	int r;

	memset(&e, 0xa5, sizeof(e));
	errno = 0;
	r = rdma_get_remote_ece(id, &e);
	if (r)
		printf("%s: rdma_get_remote_ece %s: ret %d errno %s\n", side, when, r,
		       dev_errno_name(errno));
	else
		printf("%s: remote ECE %s: vendor_id 0x%x options 0x%x comp_mask 0x%x\n", side, when,
		       e.vendor_id, e.options, e.comp_mask);
}

static void set_ece(const char *side, struct rdma_cm_id *id, uint32_t options)
{
	struct ibv_ece e = { .vendor_id = VENDOR, .options = options, .comp_mask = 0 };
	int r;

	errno = 0;
	r = rdma_set_local_ece(id, &e);
	printf("%s: rdma_set_local_ece(vendor 0x%x, options 0x%x): ret %d errno %s\n", side, VENDOR,
	       options, r, r ? dev_errno_name(errno) : "0");
}

enum round { QP, EARLY, EXTERNAL, REJECT };
static const char *round_name[] = { "qp", "early", "external", "reject" };
#define FAKE_QPN 0x123 /* an external QP's number: the CM carries it, nothing checks it */

static void finish(struct dev_pair *p)
{
	if (!DEV_CALL(rdma_disconnect(p->active), "active: rdma_disconnect")) {
		dev_expect(p->pch, DEV_PASSIVE, RDMA_CM_EVENT_DISCONNECTED);
		DEV_CALL(rdma_disconnect(p->child), "passive: rdma_disconnect");
		dev_expect(p->ach, DEV_ACTIVE, RDMA_CM_EVENT_DISCONNECTED);
	}
}

static void one_round(struct dev_pair *p, enum round rd)
{
	struct rdma_conn_param cp;
	struct rdma_cm_event *ev;
	int ok, qps = rd == QP || rd == EARLY;

	printf("-- round: %s\n", round_name[rd]);
	if (dev_resolve(p))
		goto out;
	if (rd != QP)
		set_ece("active", p->active, 0x5);
	if (qps && dev_rdma_qp(p->active, &p->aq, "active"))
		goto out;
	if (rd == QP)
		set_ece("active", p->active, 0x5);
	show("active", "before connecting", p->active);
	dev_conn_param(&cp, "dev_ece req");
	if (!qps)
		cp.qp_num = FAKE_QPN;
	if (DEV_CALL(rdma_connect(p->active, &cp), "active: rdma_connect"))
		goto out;
	ev = dev_get_request(p, "dev_ece req");
	if (!ev)
		goto out;
	show("passive", "at CONNECT_REQUEST", p->child);
	if (rd == REJECT) {
		DEV_CALL(rdma_reject_ece(p->child, "dev_ece rej", 11), "passive: rdma_reject_ece");
		dev_ack(ev);
		ev = dev_get(p->ach, DEV_ACTIVE, RDMA_CM_EVENT_REJECTED, 1);
		if (ev && ev->event == RDMA_CM_EVENT_REJECTED)
			show("active", "at REJECTED", p->active);
		dev_ack(ev);
		goto out;
	}
	if (qps && dev_rdma_qp(p->child, &p->pq, "passive")) {
		dev_ack(ev);
		goto out;
	}
	set_ece("passive", p->child, 0x3);
	dev_conn_param(&cp, "dev_ece rep");
	if (!qps)
		cp.qp_num = FAKE_QPN + 1;
	ok = !DEV_CALL(rdma_accept(p->child, &cp), "passive: rdma_accept");
	dev_ack(ev);
	if (!ok)
		goto out;
	if (!qps) {
		ev = dev_get(p->ach, DEV_ACTIVE, RDMA_CM_EVENT_CONNECT_RESPONSE, 0);
		ok = ev && ev->event == RDMA_CM_EVENT_CONNECT_RESPONSE;
		if (ok)
			show("active", "at CONNECT_RESPONSE", p->active);
		dev_ack(ev);
		if (!ok || DEV_CALL(rdma_establish(p->active), "active: rdma_establish"))
			goto out;
	} else {
		ev = dev_get(p->ach, DEV_ACTIVE, RDMA_CM_EVENT_ESTABLISHED, 0);
		if (ev && ev->event == RDMA_CM_EVENT_ESTABLISHED)
			show("active", "at ESTABLISHED", p->active);
		dev_ack(ev);
	}
	if (dev_expect(p->pch, DEV_PASSIVE, RDMA_CM_EVENT_ESTABLISHED) == 0)
		show("passive", "at ESTABLISHED", p->child);
	finish(p);
out:
	dev_end_conn(p);
	dev_seq[DEV_ACTIVE][0] = dev_seq[DEV_PASSIVE][0] = 0;
}

int main(int argc, char **argv)
{
	struct dev_pair p;

	memset(&p, 0, sizeof(p));
	dev_args(argc, argv, 7522);
	watchdog(90);
	if (dev_listen(&p))
		return check_done();
	p.ach = dev_channel();
	one_round(&p, QP);
	one_round(&p, EARLY);
	if (p.listen->verbs && p.listen->verbs->device->transport_type == IBV_TRANSPORT_IWARP) {
		printf("iWARP device: no rounds without a QP (iw_cm connects only an existing QP)\n");
	} else {
		one_round(&p, EXTERNAL);
		one_round(&p, REJECT);
	}
	dev_teardown(&p);
	return check_done();
}

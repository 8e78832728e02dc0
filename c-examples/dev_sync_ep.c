/* dev-example: synchronous endpoints, two threads
 *
 * rdma_create_ep(3): "If the rdma_cm_id will be used on the passive side ...
 * RAI_PASSIVE ... this call will save the provided pd and qp_init_attr ...
 * When a new connection request is retrieved by calling rdma_get_request,
 * the rdma_cm_id associated with the new connection will automatically be
 * associated with a QP"; active side: "rdma_create_ep will automatically
 * create a QP ... The active side calls rdma_resolve_addr and
 * rdma_resolve_route are not necessary."  "The newly created rdma_cm_id will
 * be set to use synchronous operation."  rdma_get_request(3): "The new
 * rdma_cm_id will reference event information associated with the request".
 * rdma_cm(7): without an event channel "all rdma_cm operations for the
 * selected rdma_cm_identifier will block until they complete".
 *
 * Server thread: getaddrinfo(RAI_PASSIVE), create_ep, listen, get_request,
 * reg_msgs, post_recv, accept, get_recv_comp, post_send, get_send_comp,
 * disconnect, destroy.  Client thread: getaddrinfo, create_ep, post_recv,
 * connect, post_send, get_send_comp, get_recv_comp, disconnect, destroy.
 * Each thread logs to its own buffer; main prints them after joining.
 *
 *   dev_sync_ep ADDR [PORT=7507]
 */
#include <rdma/rdma_verbs.h>

#include "dev.h"

static char port_str[16];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int listening; /* 1 listening, -1 server failed */
static int server_done;

static void set_listening(int v)
{
	pthread_mutex_lock(&mu);
	listening = v;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

static void init_attr(struct ibv_qp_init_attr *a, void *ctx)
{
	memset(a, 0, sizeof(*a));
	a->cap.max_send_wr = a->cap.max_recv_wr = 2;
	a->cap.max_send_sge = a->cap.max_recv_sge = 1;
	a->qp_context = ctx;
	a->sq_sig_all = 1;
	a->qp_type = IBV_QPT_RC;
}

#define LOGCALL(l, call, what)                                                  \
	({                                                                      \
		int r_, e_;                                                     \
		errno = 0;                                                      \
		r_ = (call);                                                    \
		e_ = errno;                                                     \
		dlog(l, r_ == 0, "%s%s%s", what, r_ ? ": errno " : "",          \
		     r_ ? dev_errno_name(e_) : "");                             \
		if (r_ && e_ == ENODEV)                                         \
			skip("%s failed with ENODEV (no RDMA device)", what);   \
		r_;                                                             \
	})

static const char *ev_name(struct rdma_cm_id *id)
{
	return id->event ? dev_event_name(id->event->event) : "NULL";
}

static struct dev_log slog, clog;

static void *server(void *arg)
{
	struct dev_log *l = &slog;
	struct rdma_addrinfo hints, *res = NULL;
	struct rdma_cm_id *listen_id = NULL, *id = NULL;
	struct ibv_qp_init_attr attr;
	struct ibv_mr *mr = NULL;
	struct ibv_wc wc;
	char rbuf[32] = "", sbuf[32] = "world";
	int r;

	(void)arg;
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	r = rdma_getaddrinfo(dev_addr_str, port_str, &hints, &res);
	dlog(l, r == 0, "server: rdma_getaddrinfo(RAI_PASSIVE)%s", r ? " failed" : "");
	if (r)
		goto out;
	init_attr(&attr, NULL);
	if (LOGCALL(l, rdma_create_ep(&listen_id, res, NULL, &attr), "server: rdma_create_ep"))
		goto out;
	dlog(l, listen_id->qp == NULL, "server: passive endpoint has no QP of its own");
	if (LOGCALL(l, rdma_listen(listen_id, 0), "server: rdma_listen"))
		goto out;
	set_listening(1);
	if (LOGCALL(l, rdma_get_request(listen_id, &id), "server: rdma_get_request"))
		goto out;
	dlog(l, id && id != listen_id, "server: rdma_get_request returns a new id");
	dlog(l, id->qp != NULL, "server: the new id has a QP (attributes saved by rdma_create_ep)");
	dlog(l, id->event && id->event->event == RDMA_CM_EVENT_CONNECT_REQUEST,
	     "server: id->event is the CONNECT_REQUEST (got %s)", ev_name(id));
	dlog(l, id->event && id->event->listen_id == listen_id,
	     "server: id->event->listen_id is the listener");
	mr = rdma_reg_msgs(id, rbuf, sizeof(rbuf));
	dlog(l, mr != NULL, "server: rdma_reg_msgs");
	if (!mr || LOGCALL(l, rdma_post_recv(id, NULL, rbuf, sizeof(rbuf), mr), "server: rdma_post_recv"))
		goto out;
	if (LOGCALL(l, rdma_accept(id, NULL), "server: rdma_accept(NULL)"))
		goto out;
	dlog(l, 1, "server: id->event after rdma_accept: %s", ev_name(id));
	r = rdma_get_recv_comp(id, &wc);
	dlog(l, r == 1 && wc.status == IBV_WC_SUCCESS && !strcmp(rbuf, "hello"),
	     "server: rdma_get_recv_comp returns 1 completion with \"hello\" (ret %d)", r);
	rdma_dereg_mr(mr);
	mr = rdma_reg_msgs(id, sbuf, sizeof(sbuf));
	if (!mr || LOGCALL(l, rdma_post_send(id, NULL, sbuf, strlen(sbuf) + 1, mr, 0),
			   "server: rdma_post_send"))
		goto out;
	r = rdma_get_send_comp(id, &wc);
	dlog(l, r == 1 && wc.status == IBV_WC_SUCCESS,
	     "server: rdma_get_send_comp returns 1 successful completion (ret %d)", r);
	LOGCALL(l, rdma_disconnect(id), "server: rdma_disconnect");
out:
	pthread_mutex_lock(&mu);
	if (listening == 0) {
		listening = -1;
		pthread_cond_broadcast(&cv);
	}
	pthread_mutex_unlock(&mu);
	if (mr)
		rdma_dereg_mr(mr);
	if (id)
		rdma_destroy_ep(id);
	if (listen_id)
		rdma_destroy_ep(listen_id);
	if (res)
		rdma_freeaddrinfo(res);
	__atomic_store_n(&server_done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

static void *client(void *arg)
{
	struct dev_log *l = &clog;
	struct rdma_addrinfo hints, *res = NULL;
	struct rdma_cm_id *id = NULL;
	struct ibv_qp_init_attr attr;
	struct ibv_mr *rmr = NULL, *smr = NULL;
	struct ibv_wc wc;
	char rbuf[32] = "", sbuf[32] = "hello";
	int r;

	(void)arg;
	pthread_mutex_lock(&mu);
	while (!listening)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	if (listening < 0) {
		dlog(l, 0, "client: server did not start listening");
		return NULL;
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_TCP;
	r = rdma_getaddrinfo(dev_addr_str, port_str, &hints, &res);
	dlog(l, r == 0, "client: rdma_getaddrinfo%s", r ? " failed" : "");
	if (r)
		goto out;
	init_attr(&attr, &l);
	if (LOGCALL(l, rdma_create_ep(&id, res, NULL, &attr), "client: rdma_create_ep"))
		goto out;
	dlog(l, id->qp != NULL, "client: rdma_create_ep created a QP");
	dlog(l, id->verbs != NULL, "client: id->verbs set (address and route resolved)");
	rmr = rdma_reg_msgs(id, rbuf, sizeof(rbuf));
	smr = rdma_reg_msgs(id, sbuf, sizeof(sbuf));
	dlog(l, rmr && smr, "client: rdma_reg_msgs");
	if (!rmr || !smr ||
	    LOGCALL(l, rdma_post_recv(id, NULL, rbuf, sizeof(rbuf), rmr), "client: rdma_post_recv"))
		goto out;
	if (LOGCALL(l, rdma_connect(id, NULL), "client: rdma_connect(NULL)"))
		goto out;
	dlog(l, id->event && id->event->event == RDMA_CM_EVENT_ESTABLISHED,
	     "client: id->event after rdma_connect is ESTABLISHED (got %s)", ev_name(id));
	if (LOGCALL(l, rdma_post_send(id, NULL, sbuf, strlen(sbuf) + 1, smr, 0), "client: rdma_post_send"))
		goto out;
	r = rdma_get_send_comp(id, &wc);
	dlog(l, r == 1 && wc.status == IBV_WC_SUCCESS,
	     "client: rdma_get_send_comp returns 1 successful completion (ret %d)", r);
	r = rdma_get_recv_comp(id, &wc);
	dlog(l, r == 1 && wc.status == IBV_WC_SUCCESS && !strcmp(rbuf, "world"),
	     "client: rdma_get_recv_comp returns 1 completion with \"world\" (ret %d)", r);
	LOGCALL(l, rdma_disconnect(id), "client: rdma_disconnect");
out:
	if (rmr)
		rdma_dereg_mr(rmr);
	if (smr)
		rdma_dereg_mr(smr);
	if (id)
		rdma_destroy_ep(id);
	if (res)
		rdma_freeaddrinfo(res);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t s, c;

	dev_args(argc, argv, 7507);
	snprintf(port_str, sizeof(port_str), "%d", dev_port);
	watchdog(60);
	if (pthread_create(&s, NULL, server, NULL) || pthread_create(&c, NULL, client, NULL))
		fatal("pthread_create");
	pthread_join(c, NULL);
	/* if the client gave up early the server may sit in rdma_get_request */
	for (int i = 0; i < 1000 && !__atomic_load_n(&server_done, __ATOMIC_SEQ_CST); i++)
		sleep_ms(10);
	if (!__atomic_load_n(&server_done, __ATOMIC_SEQ_CST)) {
		printf("-- server thread (still blocked 10 s after the client finished)\n");
		dev_log_flush(&slog);
		printf("-- client thread\n");
		dev_log_flush(&clog);
		fail_stuck("server thread did not finish");
	}
	pthread_join(s, NULL);
	printf("-- server thread\n");
	dev_log_flush(&slog);
	printf("-- client thread\n");
	dev_log_flush(&clog);
	return check_done();
}

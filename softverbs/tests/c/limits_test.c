/* The counts ibv_query_device reports for soft0 can all be held at once: max_pd PDs,
 * max_cq CQs, max_qp QPs, max_srq SRQs, max_ah address handles and max_mr MRs. libfabric
 * passes them on as its domain limits (fi_info -v: ep_cnt, cq_cnt, mr_cnt,
 * max_ep_srx_ctx), so each must be true. Kept apart from verbs_test.c, which also runs
 * under valgrind: a million registrations take seconds here and hours there. */
/* The pair helpers of harness.h go unused here. */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "harness.h"

/* Creates `want` objects with make(i) (NULL = failure), then frees them with drop(). */
static int hold(const char *what, int want, void *(*make)(int), int (*drop)(void *))
{
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	void **v = calloc(want, sizeof(*v));
	CHECK(v, "calloc");
	int made = 0;
	while (made < want && (v[made] = make(made)))
		made++;
	int err = errno;
	for (int i = 0; i < made; i++)
		drop(v[i]);
	free(v);
	CHECK(made == want, "%s: %d of the %d reported (errno %d)", what, made, want, err);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("  %d %s held and freed in %.1f s\n", want, what,
	       (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
	return 0;
}

static struct ibv_context *g_ctx;
static struct ibv_pd *g_pd;
static struct ibv_cq *g_cq;
static char g_page[4096] __attribute__((aligned(4096)));

static void *make_pd(int i) { (void)i; return ibv_alloc_pd(g_ctx); }
static int drop_pd(void *p) { return ibv_dealloc_pd(p); }
static void *make_cq(int i) { (void)i; return ibv_create_cq(g_ctx, 1, NULL, NULL, 0); }
static int drop_cq(void *p) { return ibv_destroy_cq(p); }
static void *make_qp(int i)
{
	struct ibv_qp_init_attr a = { .send_cq = g_cq, .recv_cq = g_cq,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = i % 2 ? IBV_QPT_UD : IBV_QPT_RC };
	return ibv_create_qp(g_pd, &a);
}
static int drop_qp(void *p) { return ibv_destroy_qp(p); }
static void *make_srq(int i)
{
	(void)i;
	struct ibv_srq_init_attr a = { .attr = { .max_wr = 1, .max_sge = 1 } };
	return ibv_create_srq(g_pd, &a);
}
static int drop_srq(void *p) { return ibv_destroy_srq(p); }
static void *make_ah(int i)
{
	struct ibv_ah_attr a = { .port_num = 1, .is_global = 1,
		.grh = { .hop_limit = 64, .sgid_index = 0 } };
	a.grh.dgid.raw[10] = 0xff;
	a.grh.dgid.raw[11] = 0xff;
	a.grh.dgid.raw[12] = 127;
	a.grh.dgid.raw[15] = 1 + i % 250;
	return ibv_create_ah(g_pd, &a);
}
static int drop_ah(void *p) { return ibv_destroy_ah(p); }
static void *make_mr(int i) { (void)i; return ibv_reg_mr(g_pd, g_page, sizeof(g_page), IBV_ACCESS_LOCAL_WRITE); }
static int drop_mr(void *p) { return ibv_dereg_mr(p); }

static int t_reported_counts_hold(void)
{
	struct ibv_device_attr d;
	g_ctx = open_soft();
	CHECK(g_ctx && ibv_query_device(g_ctx, &d) == 0, "open and query soft0");
	g_pd = ibv_alloc_pd(g_ctx);
	g_cq = ibv_create_cq(g_ctx, 16, NULL, NULL, 0);
	CHECK(g_pd && g_cq, "PD and CQ");
	/* One of each is held already. */
	if (hold("PDs", d.max_pd - 1, make_pd, drop_pd) || hold("CQs", d.max_cq - 1, make_cq, drop_cq)
	    || hold("QPs", d.max_qp, make_qp, drop_qp) || hold("SRQs", d.max_srq, make_srq, drop_srq)
	    || hold("AHs", d.max_ah, make_ah, drop_ah) || hold("MRs", d.max_mr, make_mr, drop_mr))
		return 1;
	printf("  held max_pd %d, max_cq %d, max_qp %d, max_srq %d, max_ah %d, max_mr %d\n",
	       d.max_pd, d.max_cq, d.max_qp, d.max_srq, d.max_ah, d.max_mr);
	ibv_destroy_cq(g_cq);
	ibv_dealloc_pd(g_pd);
	ibv_close_device(g_ctx);
	return 0;
}

int main(int argc, char **argv)
{
	g_only = argc > 1 ? argv[1] : NULL;
	setvbuf(stdout, NULL, _IOLBF, 0);
	RUN(t_reported_counts_hold);
	printf("%d passed, %d failed\n", g_pass, g_fail);
	return g_fail ? 1 : 0;
}

/* One-sided operations that need no CPU at the target, as a pair of processes:
 *   onesided_pair server IP PORT [refuse|off]
 *   onesided_pair client IP PORT [refuse|off]
 * The server registers three buffers filled with 0x5a: "rw" (REMOTE_WRITE), "ro"
 * (REMOTE_READ, then filled with a pattern) and "gone" (REMOTE_WRITE, deregistered
 * before any connection), and accepts six connections, telling each its pid, addresses
 * and rkeys in the REP's private data. Per connection the client does:
 *   0  stops the server (SIGSTOP), RDMA WRITEs 64 KiB into rw and READs 64 KiB of ro,
 *      continues it (SIGCONT) and checks what it read
 *   1  a WRITE that runs 8 bytes past rw's end     -> IBV_WC_REM_ACCESS_ERR
 *   2  a WRITE with a wrong rkey                   -> IBV_WC_REM_ACCESS_ERR
 *   3  a WRITE into ro (no REMOTE_WRITE)           -> IBV_WC_REM_ACCESS_ERR
 *   4  a READ of rw (no REMOTE_READ)               -> IBV_WC_REM_ACCESS_ERR
 *   5  a WRITE into gone (deregistered)            -> IBV_WC_REM_ACCESS_ERR
 * (the statuses rxe gives). After each disconnect the server checks that no byte of its
 * buffers changed but the 64 KiB written in round 0.
 * Round 0 must complete while the server is stopped (the soft fabric's same-host path,
 * as a NIC would). With "refuse" the server makes itself non-dumpable first, so the
 * kernel refuses the client process_vm_writev/readv: the requests then take the stream
 * path, must not complete while the server is stopped, and must once it continues.
 * "off" (run with SOFTVERBS_SHM=0) expects the same of a dumpable server.
 * Exit 0 when everything held. */
#include "pair.h" /* ch, die, expect, connect_established */
#include <linux/capability.h>
#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#define BIG (64 * 1024)
#define SZ (BIG + 4096)
#define ROUNDS 6

/* refuse: the kernel is made to refuse the same-host copy; off: the path is switched off
 * (SOFTVERBS_SHM=0). Either way round 0 must wait for the stopped server. */
static int refuse, stream_only;

struct info {
	uint64_t pid, rw, ro, gone;
	uint32_t rw_key, ro_key, gone_key, pad;
};

static void make_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr a = { .cap = { 4, 4, 1, 1, 0 }, .qp_type = IBV_QPT_RC, .send_cq = cq, .recv_cq = cq };

	if (rdma_create_qp(id, pd, &a))
		die("rdma_create_qp");
}

static char pattern(int i, int salt)
{
	return (char)(i * 31 + salt);
}

static int server(struct rdma_addrinfo *ai)
{
	static char rw[SZ], ro[SZ], gone[SZ];
	struct rdma_cm_id *lid;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mrw, *mro, *mgone;
	struct info in = { .pid = (uint64_t)getpid(), .rw = (uintptr_t)rw, .ro = (uintptr_t)ro, .gone = (uintptr_t)gone };
	int fails = 0;

	if (refuse && prctl(PR_SET_DUMPABLE, 0, 0, 0, 0))
		die("prctl(PR_SET_DUMPABLE)");
	memset(rw, 0x5a, SZ);
	memset(gone, 0x5a, SZ);
	for (int i = 0; i < SZ; i++)
		ro[i] = pattern(i, 7);
	if (rdma_create_id(ch, &lid, NULL, RDMA_PS_TCP) || rdma_bind_addr(lid, ai->ai_src_addr) || rdma_listen(lid, 2))
		die("listen");
	for (int r = 0; r < ROUNDS; r++) {
		struct rdma_cm_event *ev = expect(RDMA_CM_EVENT_CONNECT_REQUEST, 30000);
		struct rdma_cm_id *id = ev->id;
		struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1, .retry_count = 7,
					      .rnr_retry_count = 7, .private_data = &in, .private_data_len = sizeof(in) };

		rdma_ack_cm_event(ev);
		if (r == 0) {
			if (!(pd = ibv_alloc_pd(id->verbs)) || !(cq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0)))
				die("ibv_alloc_pd/ibv_create_cq");
			mrw = ibv_reg_mr(pd, rw, SZ, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
			mro = ibv_reg_mr(pd, ro, SZ, IBV_ACCESS_REMOTE_READ);
			mgone = ibv_reg_mr(pd, gone, SZ, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
			if (!mrw || !mro || !mgone)
				die("ibv_reg_mr");
			in.rw_key = mrw->rkey;
			in.ro_key = mro->rkey;
			in.gone_key = mgone->rkey;
			if (ibv_dereg_mr(mgone))
				die("ibv_dereg_mr");
		}
		make_qp(id, pd, cq);
		if (rdma_accept(id, &cp))
			die("rdma_accept");
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_ESTABLISHED, 15000));
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_DISCONNECTED, 30000));
		for (int i = 0; i < SZ; i++) {
			char want = i < BIG ? pattern(i, 3) : 0x5a;

			if (rw[i] != want || gone[i] != 0x5a || ro[i] != pattern(i, 7)) {
				printf("round %d: server memory differs at byte %d (rw %#x, ro %#x, gone %#x)\n", r, i,
				       rw[i] & 0xff, ro[i] & 0xff, gone[i] & 0xff);
				fails++;
				break;
			}
		}
		rdma_destroy_qp(id);
		rdma_destroy_id(id);
	}
	printf("server: memory checked after %d rounds\n", ROUNDS);
	ibv_dereg_mr(mrw);
	ibv_dereg_mr(mro);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	rdma_destroy_id(lid);
	return fails;
}

/* Completions within ms into wc[]; how many came. */
static int poll_n(struct ibv_cq *cq, int want, int ms, struct ibv_wc *wc)
{
	long long until = now_ms() + ms;
	int got = 0;

	while (got < want && now_ms() < until) {
		int n = ibv_poll_cq(cq, want - got, wc + got);

		if (n < 0)
			die("ibv_poll_cq");
		got += n;
		if (!n)
			sleep_ms(1);
	}
	return got;
}

static void post(struct ibv_qp *qp, enum ibv_wr_opcode op, struct ibv_sge *sge, uint64_t raddr, uint32_t rkey, uint64_t id)
{
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = sge, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED },
			   *bad;

	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	if (ibv_post_send(qp, &wr, &bad))
		die("ibv_post_send");
}

/* Every thread of pid is stopped (kill returns before they are). */
static int all_stopped(pid_t pid)
{
	char path[64], line[512];
	struct dirent *e;
	DIR *d;
	int stopped = 1;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	if (!(d = opendir(path)))
		return 0;
	while (stopped && (e = readdir(d))) {
		FILE *f;
		char *p;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.20s/stat", (int)pid, e->d_name);
		if (!(f = fopen(path, "r")))
			continue;
		p = fgets(line, sizeof(line), f) ? strrchr(line, ')') : NULL;
		stopped = p && (p[2] == 'T' || p[2] == 't');
		fclose(f);
	}
	closedir(d);
	return stopped;
}

static void stop(pid_t pid)
{
	long long until = now_ms() + 5000;

	if (kill(pid, SIGSTOP))
		die("kill(SIGSTOP)");
	while (!all_stopped(pid))
		if (now_ms() > until)
			fatal("the server did not stop");
		else
			sleep_ms(1);
}

static int round0(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_mr *mr, char *buf, const struct info *in)
{
	struct ibv_sge w = { (uintptr_t)buf, BIG, mr->lkey }, r = { (uintptr_t)buf + BIG, BIG, mr->lkey };
	struct ibv_wc wc[2];
	int fails = 0, early, got;

	for (int i = 0; i < BIG; i++)
		buf[i] = pattern(i, 3);
	stop((pid_t)in->pid);
	post(qp, IBV_WR_RDMA_WRITE, &w, in->rw, in->rw_key, 1);
	post(qp, IBV_WR_RDMA_READ, &r, in->ro, in->ro_key, 2);
	early = poll_n(cq, 2, stream_only ? 300 : 5000, wc);
	if (kill((pid_t)in->pid, SIGCONT))
		die("kill(SIGCONT)");
	printf("round 0: %d of 2 completions while the server was stopped\n", early);
	if (early != (stream_only ? 0 : 2))
		fails++;
	got = early + poll_n(cq, 2 - early, 15000, wc + early);
	for (int i = 0; i < got; i++)
		if (wc[i].status != IBV_WC_SUCCESS || wc[i].wr_id != (uint64_t)i + 1) {
			printf("round 0: completion %d: wr_id %llu, %s\n", i, (unsigned long long)wc[i].wr_id,
			       ibv_wc_status_str(wc[i].status));
			fails++;
		}
	if (got != 2)
		fails++;
	for (int i = 0; i < BIG; i++)
		if (buf[BIG + i] != pattern(i, 7)) {
			printf("round 0: READ data differs at byte %d\n", i);
			fails++;
			break;
		}
	return fails;
}

/* Root may reach a non-dumpable process (CAP_SYS_PTRACE): give that up. */
static void drop_ptrace_cap(void)
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];

	if (syscall(SYS_capget, &h, d))
		die("capget");
	d[0].effective &= ~(1u << CAP_SYS_PTRACE);
	d[0].permitted &= ~(1u << CAP_SYS_PTRACE);
	if (syscall(SYS_capset, &h, d))
		die("capset");
}

static int client(struct rdma_addrinfo *ai)
{
	static char buf[2 * BIG];
	int fails = 0;

	if (refuse)
		drop_ptrace_cap();

	for (int r = 0; r < ROUNDS; r++) {
		struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1, .retry_count = 7,
					      .rnr_retry_count = 7 };
		struct rdma_cm_id *id;
		struct rdma_cm_event *ev;
		struct ibv_pd *pd;
		struct ibv_cq *cq;
		struct ibv_mr *mr;
		struct info in;
		struct ibv_sge sge = { (uintptr_t)buf, 16, 0 };
		struct ibv_wc wc;
		const char *what[ROUNDS] = { "", "WRITE past the end of rw", "WRITE with a wrong rkey", "WRITE into ro",
					     "READ of rw", "WRITE into gone (deregistered)" };

		if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) || rdma_resolve_addr(id, NULL, ai->ai_dst_addr, 2000))
			die("rdma_resolve_addr");
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_ADDR_RESOLVED, 5000));
		if (rdma_resolve_route(id, 2000))
			die("rdma_resolve_route");
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_ROUTE_RESOLVED, 5000));
		if (!(pd = ibv_alloc_pd(id->verbs)) || !(cq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0)))
			die("ibv_alloc_pd/ibv_create_cq");
		if (!(mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE)))
			die("ibv_reg_mr");
		make_qp(id, pd, cq);
		ev = connect_established(id, &cp);
		if (ev->param.conn.private_data_len < sizeof(in))
			fatal("no private data in the REP");
		memcpy(&in, ev->param.conn.private_data, sizeof(in));
		rdma_ack_cm_event(ev);
		sge.lkey = mr->lkey;
		switch (r) {
		case 0: fails += round0(id->qp, cq, mr, buf, &in); break;
		case 1: post(id->qp, IBV_WR_RDMA_WRITE, &sge, in.rw + SZ - 8, in.rw_key, 9); break;
		case 2: post(id->qp, IBV_WR_RDMA_WRITE, &sge, in.rw, in.rw_key ^ 0x100, 9); break;
		case 3: post(id->qp, IBV_WR_RDMA_WRITE, &sge, in.ro, in.ro_key, 9); break;
		case 4: post(id->qp, IBV_WR_RDMA_READ, &sge, in.rw, in.rw_key, 9); break;
		case 5: post(id->qp, IBV_WR_RDMA_WRITE, &sge, in.gone, in.gone_key, 9); break;
		}
		if (r) {
			int got = poll_n(cq, 1, 15000, &wc);

			printf("round %d, %s: %s\n", r, what[r], got ? ibv_wc_status_str(wc.status) : "no completion");
			if (!got || wc.status != IBV_WC_REM_ACCESS_ERR)
				fails++;
		}
		if (rdma_disconnect(id))
			die("rdma_disconnect");
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_DISCONNECTED, 15000));
		rdma_destroy_qp(id);
		ibv_dereg_mr(mr);
		ibv_destroy_cq(cq);
		ibv_dealloc_pd(pd);
		rdma_destroy_id(id);
	}
	return fails;
}

int main(int argc, char **argv)
{
	struct rdma_addrinfo *ai;
	int srv, fails;

	if ((argc != 4 && argc != 5) || (strcmp(argv[1], "server") && strcmp(argv[1], "client")) ||
	    (argc == 5 && strcmp(argv[4], "refuse") && strcmp(argv[4], "off"))) {
		fprintf(stderr, "usage: %s server|client IP PORT [refuse|off]\n", argv[0]);
		return 2;
	}
	srv = !strcmp(argv[1], "server");
	refuse = argc == 5 && !strcmp(argv[4], "refuse");
	stream_only = argc == 5;
	ai = pair_start(argv[2], argv[3], srv);
	fails = srv ? server(ai) : client(ai);
	printf("%s\n", fails ? "onesided_pair: FAILED" : "onesided_pair: ok");
	return fails != 0;
}

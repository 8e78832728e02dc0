/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Behaviour probe for the static inline helpers of rdma_verbs.h and
 * rdma_cma.h (run by layout.sh). Built once against include/ and once
 * against the system headers; the printed traces must be identical.
 *
 * The verbs the helpers reach are replaced by recording fakes: the inline
 * ibv_post_*()/ibv_poll_cq()/ibv_req_notify_cq() dispatch through
 * ibv_context.ops, and ibv_reg_mr(), ibv_dereg_mr(), ibv_get_cq_event() and
 * ibv_ack_cq_events() are defined here (libibverbs is not linked). Only the
 * work-request fields the helpers are specified to fill are printed, since
 * upstream leaves the others uninitialised.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <rdma/rdma_verbs.h>

static struct ibv_context ctx;
static struct ibv_pd pd;
static struct ibv_qp qp;
static struct ibv_srq srq;
static struct ibv_cq scq, rcq;
static struct ibv_comp_channel sch, rch;
static struct ibv_ah ah;
static struct ibv_mr mr;
static struct rdma_cm_id id;
static char buf[256];

/* scripted results, consumed in order by the fakes */
static int script[16];
static int nscript, iscript;
static void *event_ctx;		/* cq_context that ibv_get_cq_event() reports */
static int show_rdma, show_ud;	/* which wr.wr union member the helper fills */

static void plan(int n, const int *rets)
{
	memcpy(script, rets, (size_t)n * sizeof(int));
	nscript = n;
	iscript = 0;
}

static int next_ret(void)
{
	if (iscript >= nscript) {
		printf("  !! unexpected extra call\n");
		exit(2);
	}
	return script[iscript++];
}

static const char *nm(const void *p)
{
	if (p == NULL)
		return "NULL";
	if (p == &pd) return "pd";
	if (p == &qp) return "qp";
	if (p == &srq) return "srq";
	if (p == &scq) return "send_cq";
	if (p == &rcq) return "recv_cq";
	if (p == &sch) return "send_ch";
	if (p == &rch) return "recv_ch";
	if (p == &ah) return "ah";
	if (p == &mr) return "mr";
	if (p == &id) return "id";
	if ((const char *)p >= buf && (const char *)p < buf + sizeof(buf))
		return "buf+";
	return "other";
}

static void print_sges(const struct ibv_sge *sg, int n)
{
	int i;

	for (i = 0; i < n; i++)
		printf("  sge[%d] addr=buf+%lld len=%u lkey=0x%x\n", i,
		       (long long)(sg[i].addr - (uint64_t)(uintptr_t)buf),
		       sg[i].length, sg[i].lkey);
}

static void print_recv_wr(const struct ibv_recv_wr *wr)
{
	printf("  wr_id=0x%llx next=%s num_sge=%d\n",
	       (unsigned long long)wr->wr_id, nm(wr->next), wr->num_sge);
	print_sges(wr->sg_list, wr->num_sge);
}

static int fake_post_send(struct ibv_qp *q, struct ibv_send_wr *wr,
			  struct ibv_send_wr **bad)
{
	int ret = next_ret();

	printf("  post_send(%s) wr_id=0x%llx next=%s num_sge=%d opcode=%d flags=0x%x\n",
	       nm(q), (unsigned long long)wr->wr_id, nm(wr->next), wr->num_sge,
	       (int)wr->opcode, wr->send_flags);
	print_sges(wr->sg_list, wr->num_sge);
	if (show_rdma)
		printf("  rdma remote_addr=0x%llx rkey=0x%x\n",
		       (unsigned long long)wr->wr.rdma.remote_addr,
		       wr->wr.rdma.rkey);
	if (show_ud)
		printf("  ud ah=%s remote_qpn=0x%x remote_qkey=0x%x\n",
		       nm(wr->wr.ud.ah), wr->wr.ud.remote_qpn,
		       wr->wr.ud.remote_qkey);
	if (ret)
		*bad = wr;
	return ret;
}

static int fake_post_recv(struct ibv_qp *q, struct ibv_recv_wr *wr,
			  struct ibv_recv_wr **bad)
{
	int ret = next_ret();

	printf("  post_recv(%s)\n", nm(q));
	print_recv_wr(wr);
	if (ret)
		*bad = wr;
	return ret;
}

static int fake_post_srq_recv(struct ibv_srq *s, struct ibv_recv_wr *wr,
			      struct ibv_recv_wr **bad)
{
	int ret = next_ret();

	printf("  post_srq_recv(%s)\n", nm(s));
	print_recv_wr(wr);
	if (ret)
		*bad = wr;
	return ret;
}

static int fake_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	int ret = next_ret();

	printf("  poll_cq(%s, %d) -> %d\n", nm(cq), n, ret);
	if (ret > 0)
		wc->wr_id = 0x77;
	return ret;
}

static int fake_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	int ret = next_ret();

	printf("  req_notify_cq(%s, %d) -> %d\n", nm(cq), solicited_only, ret);
	return ret;
}

int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq,
		     void **cq_context)
{
	int ret = next_ret();

	printf("  get_cq_event(%s) -> %d\n", nm(channel), ret);
	if (ret) {
		errno = EIO;
		return ret;
	}
	*cq = channel == &sch ? &scq : &rcq;
	*cq_context = event_ctx;
	return 0;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	printf("  ack_cq_events(%s, %u)\n", nm(cq), nevents);
}

struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *p, void *addr, size_t length,
			    int access)
{
	printf("  reg_mr(%s, %s%d, %zu, access=0x%x)\n", nm(p), nm(addr),
	       (int)((char *)addr - buf), length, (unsigned)access);
	return &mr;
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *p, void *addr, size_t length,
				uint64_t iova, unsigned int access)
{
	printf("  reg_mr_iova2(%s, %p, %zu, 0x%llx, 0x%x)\n", nm(p), addr,
	       length, (unsigned long long)iova, access);
	return &mr;
}

int ibv_dereg_mr(struct ibv_mr *m)
{
	int ret = next_ret();

	printf("  dereg_mr(%s) -> %d\n", nm(m), ret);
	return ret;
}

static void result(const char *what, long ret)
{
	printf("%s -> %ld errno=%d\n", what, ret, errno);
	fflush(stdout);
	errno = 12345;	/* so an untouched errno is visible */
}

static void setup(void)
{
	ctx.ops.post_send = fake_post_send;
	ctx.ops.post_recv = fake_post_recv;
	ctx.ops.post_srq_recv = fake_post_srq_recv;
	ctx.ops.poll_cq = fake_poll_cq;
	ctx.ops.req_notify_cq = fake_req_notify_cq;
	qp.context = &ctx;
	srq.context = &ctx;
	scq.context = &ctx;
	rcq.context = &ctx;
	mr.addr = buf + 16;
	mr.length = 128;
	mr.lkey = 0x1111;
	mr.rkey = 0x2222;
	id.pd = &pd;
	id.qp = &qp;
	id.send_cq = &scq;
	id.recv_cq = &rcq;
	id.send_cq_channel = &sch;
	id.recv_cq_channel = &rch;
	id.route.addr.src_sin.sin_port = 0x1234;
	id.route.addr.dst_sin.sin_port = 0x5678;
	errno = 12345;
}

/* Run fn in a child; report how it ended (used for the helpers' asserts). */
static void in_child(const char *what, void (*fn)(void))
{
	pid_t pid;
	int st;

	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		/* keep the child's expected abort off the terminal */
		if (freopen("/dev/null", "w", stderr) == NULL)
			_exit(3);
		fn();
		fflush(stdout);
		_exit(0);
	}
	if (pid < 0 || waitpid(pid, &st, 0) != pid) {
		printf("%s: fork/wait failed\n", what);
		exit(2);
	}
	if (WIFSIGNALED(st))
		printf("%s: child killed by signal %d\n", what, WTERMSIG(st));
	else
		printf("%s: child exited %d\n", what, WEXITSTATUS(st));
}

static void bad_recv_range(void)
{
	/* buffer ends past the registration */
	plan(1, (const int[]){0});
	result("rdma_post_recv(outside mr)",
	       rdma_post_recv(&id, (void *)1, buf + 100, 64, &mr));
}

static void wrong_cq_context(void)
{
	struct ibv_wc wc;

	event_ctx = &pd;
	plan(4, (const int[]){0, 0, 0, 0});
	result("rdma_get_send_comp(foreign cq_context)",
	       rdma_get_send_comp(&id, &wc));
}

static void wrong_recv_cq_context(void)
{
	struct ibv_wc wc;

	event_ctx = NULL;
	plan(4, (const int[]){0, 0, 0, 0});
	result("rdma_get_recv_comp(foreign cq_context)",
	       rdma_get_recv_comp(&id, &wc));
}

static void comp_cases(const char *name,
		       int (*get)(struct rdma_cm_id *, struct ibv_wc *))
{
	struct ibv_wc wc;
	char what[96];

	event_ctx = &id;

	snprintf(what, sizeof(what), "%s(ready)", name);
	plan(1, (const int[]){1});
	result(what, get(&id, &wc));

	snprintf(what, sizeof(what), "%s(ready after arm)", name);
	plan(3, (const int[]){0, 0, 1});
	result(what, get(&id, &wc));

	snprintf(what, sizeof(what), "%s(after one event)", name);
	plan(7, (const int[]){0, 0, 0, 0, 0, 0, 1});
	result(what, get(&id, &wc));

	snprintf(what, sizeof(what), "%s(arm fails)", name);
	plan(2, (const int[]){0, EAGAIN});
	result(what, get(&id, &wc));

	snprintf(what, sizeof(what), "%s(get_cq_event fails)", name);
	plan(4, (const int[]){0, 0, 0, -1});
	result(what, get(&id, &wc));

	snprintf(what, sizeof(what), "%s(poll fails)", name);
	plan(1, (const int[]){-2});
	result(what, get(&id, &wc));

	snprintf(what, sizeof(what), "%s(second poll fails)", name);
	plan(3, (const int[]){0, 0, -5});
	result(what, get(&id, &wc));
}

int main(void)
{
	struct ibv_sge sgl[2];

	setup();

	result("rdma_seterrno(0)", rdma_seterrno(0));
	result("rdma_seterrno(EINVAL)", rdma_seterrno(EINVAL));
	result("rdma_seterrno(-7)", rdma_seterrno(-7));

	result("rdma_get_local_addr",
	       (long)((char *)rdma_get_local_addr(&id) - (char *)&id));
	result("rdma_get_peer_addr",
	       (long)((char *)rdma_get_peer_addr(&id) - (char *)&id));

	result("rdma_reg_msgs", rdma_reg_msgs(&id, buf + 16, 128) == &mr);
	result("rdma_reg_read", rdma_reg_read(&id, buf + 16, 128) == &mr);
	result("rdma_reg_write", rdma_reg_write(&id, buf + 16, 128) == &mr);
	plan(1, (const int[]){0});
	result("rdma_dereg_mr(ok)", rdma_dereg_mr(&mr));
	plan(1, (const int[]){EBUSY});
	result("rdma_dereg_mr(EBUSY)", rdma_dereg_mr(&mr));

	sgl[0].addr = (uint64_t)(uintptr_t)(buf + 16);
	sgl[0].length = 8;
	sgl[0].lkey = 0x1111;
	sgl[1].addr = (uint64_t)(uintptr_t)(buf + 40);
	sgl[1].length = 24;
	sgl[1].lkey = 0x1111;

	plan(1, (const int[]){0});
	result("rdma_post_recvv(qp)", rdma_post_recvv(&id, (void *)0x10, sgl, 2));
	plan(1, (const int[]){ENOMEM});
	result("rdma_post_recvv(qp, ENOMEM)",
	       rdma_post_recvv(&id, (void *)0x11, sgl, 1));
	id.srq = &srq;
	plan(1, (const int[]){0});
	result("rdma_post_recvv(srq)", rdma_post_recvv(&id, (void *)0x12, sgl, 2));
	plan(1, (const int[]){0});
	result("rdma_post_recv(srq)",
	       rdma_post_recv(&id, (void *)0x13, buf + 16, 128, &mr));
	id.srq = NULL;
	plan(1, (const int[]){0});
	result("rdma_post_recv(qp)",
	       rdma_post_recv(&id, (void *)0x14, buf + 32, 16, &mr));

	plan(1, (const int[]){0});
	result("rdma_post_sendv",
	       rdma_post_sendv(&id, (void *)0x20, sgl, 2, IBV_SEND_SIGNALED));
	plan(1, (const int[]){EINVAL});
	result("rdma_post_sendv(EINVAL)", rdma_post_sendv(&id, (void *)0x21, sgl, 1, 0));
	plan(1, (const int[]){0});
	result("rdma_post_send(mr)",
	       rdma_post_send(&id, (void *)0x22, buf + 16, 10, &mr, IBV_SEND_SIGNALED));
	plan(1, (const int[]){0});
	result("rdma_post_send(inline)",
	       rdma_post_send(&id, (void *)0x23, buf + 200, 10, NULL,
			      IBV_SEND_INLINE | IBV_SEND_SIGNALED));

	show_rdma = 1;
	plan(1, (const int[]){0});
	result("rdma_post_readv",
	       rdma_post_readv(&id, (void *)0x30, sgl, 2, IBV_SEND_SIGNALED,
			       0x1122334455667788ULL, 0xabcd));
	plan(1, (const int[]){0});
	result("rdma_post_read",
	       rdma_post_read(&id, (void *)0x31, buf + 16, 64, &mr, 0,
			      0x1000, 0x99));
	plan(1, (const int[]){0});
	result("rdma_post_writev",
	       rdma_post_writev(&id, (void *)0x32, sgl, 2, IBV_SEND_FENCE,
				0x8877665544332211ULL, 0xdcba));
	plan(1, (const int[]){0});
	result("rdma_post_write(mr)",
	       rdma_post_write(&id, (void *)0x33, buf + 16, 64, &mr,
			       IBV_SEND_SIGNALED, 0x2000, 0x98));
	plan(1, (const int[]){EFAULT});
	result("rdma_post_write(inline, EFAULT)",
	       rdma_post_write(&id, (void *)0x34, buf + 200, 8, NULL,
			       IBV_SEND_INLINE, 0x3000, 0x97));
	show_rdma = 0;

	show_ud = 1;
	plan(1, (const int[]){0});
	result("rdma_post_ud_send(mr)",
	       rdma_post_ud_send(&id, (void *)0x40, buf + 16, 32, &mr,
				 IBV_SEND_SIGNALED, &ah, 0xffffff));
	plan(1, (const int[]){0});
	result("rdma_post_ud_send(inline)",
	       rdma_post_ud_send(&id, (void *)0x41, buf + 200, 16, NULL, 0,
				 &ah, 0x123));
	show_ud = 0;

	comp_cases("rdma_get_send_comp", rdma_get_send_comp);
	comp_cases("rdma_get_recv_comp", rdma_get_recv_comp);

	in_child("rdma_post_recv(outside mr)", bad_recv_range);
	in_child("rdma_get_send_comp(foreign cq_context)", wrong_cq_context);
	in_child("rdma_get_recv_comp(foreign cq_context)", wrong_recv_cq_context);
	return 0;
}

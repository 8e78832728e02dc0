/* softverbs: hook exported by the software libibverbs.so.1 (node SOFTVERBS_1.0).
 *
 * The verbs API names a remote QP only by (dgid, dest_qp_num) at RTR, or by
 * (ah dgid, remote_qpn) for UD. The soft device carries frames over TCP (RC) and
 * UDP (UD) between per-context endpoints (IP:port); this table lets the connection
 * manager publish and learn those endpoints:
 *
 *   const struct softverbs_cm_ops *(*get)(void) = dlsym(h, "softverbs_cm_ops");
 *   const struct softverbs_cm_ops *ops = get();
 *   ops->qp_endpoint(qp, &local_gid, &ss);     // send ss to the peer in the CM message
 *   ops->add_peer(ctx, &peer_gid, peer_qpn, (struct sockaddr *)&peer_ss, len);
 *
 * Check ops->size and ops->version before using a member.
 */
#ifndef SOFTVERBS_H
#define SOFTVERBS_H

#include <stdint.h>
#include <sys/socket.h>
#include <infiniband/verbs.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SOFTVERBS_CM_OPS_VERSION 1

struct softverbs_cm_ops {
	uint32_t size;     /* sizeof(struct softverbs_cm_ops) */
	uint32_t version;  /* SOFTVERBS_CM_OPS_VERSION */
	/* Where frames for this QP must be sent (its context's TCP/UDP endpoint: the IP
	 * of the GID the caller names, and the context port); 0 or an errno value. */
	int (*qp_endpoint)(struct ibv_qp *qp, const union ibv_gid *local_gid,
			   struct sockaddr_storage *out);
	/* (gid, qpn) is reachable at `addr`; the CM calls it before moving a QP to RTR
	 * (RC) and before UD sends; repeated calls update it; 0 or an errno value. */
	int (*add_peer)(struct ibv_context *ctx, const union ibv_gid *gid, uint32_t qpn,
			const struct sockaddr *addr, socklen_t len);
	/* Like qp_endpoint, for a context (all its QPs share the endpoint): for ids
	 * whose QP the application owns. Present when size covers it. */
	int (*ctx_endpoint)(struct ibv_context *ctx, const union ibv_gid *local_gid,
			    struct sockaddr_storage *out);
	/* RoCEv2 (present when size covers them). roce_mode: *mode = 0 no RoCEv2 from
	 * the context's address `local`, 1 used when the peer has no soft-fabric
	 * listener, 2 always (SOFTVERBS_WIRE=roce). The MAD calls carry the CM's
	 * 256-byte MADs to and from the context's QP1: mad_fd is readable while some
	 * wait; mad_recv returns EAGAIN when none does (addresses with port 0);
	 * mad_send returns ENETUNREACH when `from` has no RoCEv2 endpoint.
	 * Each returns 0 or an errno value. */
	int (*roce_mode)(struct ibv_context *ctx, const struct sockaddr *local,
			 socklen_t len, int *mode);
	int (*mad_fd)(struct ibv_context *ctx, int *fd);
	int (*mad_recv)(struct ibv_context *ctx, uint8_t *mad,
			struct sockaddr_storage *from, struct sockaddr_storage *to);
	int (*mad_send)(struct ibv_context *ctx, const struct sockaddr *from,
			const struct sockaddr *to, socklen_t len, const uint8_t *mad);
	/* The CM listens (listen 1) or stops (0) on IB service `service_id`: another
	 * soft-fabric process owning UDP 4791 here hands this one the REQs for it. The
	 * CM's comm IDs carry the context port in their high 16 bits likewise. */
	int (*roce_service)(struct ibv_context *ctx, uint64_t service_id, int listen);
	/* Delivers to the context's QPs, without blocking, the frames already waiting
	 * for them (shared-memory rings, socket buffers): the CM calls it before it
	 * reports a disconnect, which travels apart from the data sent before it.
	 * 0 or an errno value. Present when size covers it. */
	int (*ctx_drain)(struct ibv_context *ctx);
};

/* Exported as softverbs_cm_ops@@SOFTVERBS_1.0. Never NULL. */
const struct softverbs_cm_ops *softverbs_cm_ops(void);

#ifdef __cplusplus
}
#endif

#endif /* SOFTVERBS_H */

/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Layout probe for rdma_cma.h / rdma_verbs.h / rsocket.h (run by layout.sh).
 *
 * Built twice, once against include/ (with -DPROBE_OURS) and once against
 * the system headers; the two outputs must be identical. Every field also
 * has its declared type checked at compile time, so the same expectation is
 * imposed on both header sets.
 *
 * Lines starting with "new:" are upstream-only (RDMACM_1.4+) items missing
 * from Debian 12's headers; layout.sh compares them with literal values.
 */
#include <stdio.h>
#include <stddef.h>
#include <string.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>

/* 1.4 headers define RAI_SA alongside the new events and param.arg. */
#if defined(PROBE_OURS) || defined(RAI_SA)
#define PROBE_HAVE_1_4 1
#endif

#define STR_(x) #x
#define XSTR_(x) STR_(x)

#define TYPE(T) \
	printf("type %s size %zu align %zu\n", #T, sizeof(T), _Alignof(T))

/* Paths built from macro pieces stringify as "addr. src_sin": drop blanks. */
static void print_field(const char *pfx, const char *type, const char *path,
			size_t off, size_t size, size_t align)
{
	printf("%sfield %s.", pfx, type);
	for (; *path; path++)
		if (*path != ' ')
			putchar(*path);
	printf(" offset %zu size %zu align %zu\n", off, size, align);
}

/* field of struct T (path may be nested: route.addr.src_sin6) */
#define FIELD_NT(pfx, T, path)						\
	print_field(pfx, #T, #path, offsetof(T, path),			\
		    sizeof(((T *)0)->path),				\
		    _Alignof(__typeof__(((T *)0)->path)))

/* same, plus a compile-time check of the field's declared type */
#define FIELD(T, path, FT)						\
	do {								\
		_Static_assert(__builtin_types_compatible_p(		\
			__typeof__(((T *)0)->path), FT),		\
			#T "." #path " must have type " #FT);		\
		FIELD_NT("", T, path);					\
	} while (0)

/*
 * Value, size and signedness of a constant, and whether it is a macro
 * (its expansion differs from its name) or an enumerator. The name is
 * stringified here, before any expansion.
 */
#define CONST_(pfx, name, x)						\
	printf("%sconst %s = 0x%llx size %zu %s %s\n", pfx, name,	\
	       (unsigned long long)(x), sizeof(x),			\
	       ((__typeof__(x))-1 > 0) ? "unsigned" : "signed",		\
	       strcmp(name, XSTR_(x)) ? "macro" : "enum")
#define CONST(x) CONST_("", #x, x)
#define NEWCONST(x) CONST_("new:", #x, x)

static void types(void)
{
	TYPE(struct rdma_ib_addr);
	TYPE(struct rdma_addr);
	TYPE(struct rdma_route);
	TYPE(struct rdma_event_channel);
	TYPE(struct rdma_cm_id);
	TYPE(struct rdma_conn_param);
	TYPE(struct rdma_ud_param);
	TYPE(struct rdma_cm_event);
	TYPE(struct rdma_addrinfo);
	TYPE(struct rdma_cm_join_mc_attr_ex);
	TYPE(enum rdma_cm_event_type);
	TYPE(enum rdma_port_space);
	TYPE(enum rdma_cm_join_mc_attr_mask);
	TYPE(enum rdma_cm_mc_join_flags);
}

/* The sockaddr/ib unions of struct rdma_addr, reached through prefix P. */
#define ADDR_FIELDS(T, P)						\
	do {								\
		FIELD(T, P src_addr, struct sockaddr);			\
		FIELD(T, P src_sin, struct sockaddr_in);		\
		FIELD(T, P src_sin6, struct sockaddr_in6);		\
		FIELD(T, P src_storage, struct sockaddr_storage);	\
		FIELD(T, P dst_addr, struct sockaddr);			\
		FIELD(T, P dst_sin, struct sockaddr_in);		\
		FIELD(T, P dst_sin6, struct sockaddr_in6);		\
		FIELD(T, P dst_storage, struct sockaddr_storage);	\
		FIELD_NT("", T, P addr);	/* unnamed union type */ \
		FIELD(T, P addr.ibaddr, struct rdma_ib_addr);		\
		FIELD(T, P addr.ibaddr.sgid, union ibv_gid);		\
		FIELD(T, P addr.ibaddr.dgid, union ibv_gid);		\
		FIELD(T, P addr.ibaddr.pkey, __be16);			\
	} while (0)

#define CONN_FIELDS(T, P)						\
	do {								\
		FIELD(T, P private_data, const void *);			\
		FIELD(T, P private_data_len, uint8_t);			\
		FIELD(T, P responder_resources, uint8_t);		\
		FIELD(T, P initiator_depth, uint8_t);			\
		FIELD(T, P flow_control, uint8_t);			\
		FIELD(T, P retry_count, uint8_t);			\
		FIELD(T, P rnr_retry_count, uint8_t);			\
		FIELD(T, P srq, uint8_t);				\
		FIELD(T, P qp_num, uint32_t);				\
	} while (0)

#define UD_FIELDS(T, P)							\
	do {								\
		FIELD(T, P private_data, const void *);			\
		FIELD(T, P private_data_len, uint8_t);			\
		FIELD(T, P ah_attr, struct ibv_ah_attr);		\
		FIELD(T, P qp_num, uint32_t);				\
		FIELD(T, P qkey, uint32_t);				\
	} while (0)

static void fields(void)
{
	FIELD(struct rdma_ib_addr, sgid, union ibv_gid);
	FIELD(struct rdma_ib_addr, dgid, union ibv_gid);
	FIELD(struct rdma_ib_addr, pkey, __be16);

	ADDR_FIELDS(struct rdma_addr, );

	FIELD(struct rdma_route, addr, struct rdma_addr);
	ADDR_FIELDS(struct rdma_route, addr.);
	FIELD(struct rdma_route, path_rec, struct ibv_sa_path_rec *);
	FIELD(struct rdma_route, num_paths, int);

	FIELD(struct rdma_event_channel, fd, int);

	FIELD(struct rdma_cm_id, verbs, struct ibv_context *);
	FIELD(struct rdma_cm_id, channel, struct rdma_event_channel *);
	FIELD(struct rdma_cm_id, context, void *);
	FIELD(struct rdma_cm_id, qp, struct ibv_qp *);
	FIELD(struct rdma_cm_id, route, struct rdma_route);
	FIELD(struct rdma_cm_id, route.addr, struct rdma_addr);
	ADDR_FIELDS(struct rdma_cm_id, route.addr.);
	FIELD(struct rdma_cm_id, route.path_rec, struct ibv_sa_path_rec *);
	FIELD(struct rdma_cm_id, route.num_paths, int);
	FIELD(struct rdma_cm_id, ps, enum rdma_port_space);
	FIELD(struct rdma_cm_id, port_num, uint8_t);
	FIELD(struct rdma_cm_id, event, struct rdma_cm_event *);
	FIELD(struct rdma_cm_id, send_cq_channel, struct ibv_comp_channel *);
	FIELD(struct rdma_cm_id, send_cq, struct ibv_cq *);
	FIELD(struct rdma_cm_id, recv_cq_channel, struct ibv_comp_channel *);
	FIELD(struct rdma_cm_id, recv_cq, struct ibv_cq *);
	FIELD(struct rdma_cm_id, srq, struct ibv_srq *);
	FIELD(struct rdma_cm_id, pd, struct ibv_pd *);
	FIELD(struct rdma_cm_id, qp_type, enum ibv_qp_type);

	CONN_FIELDS(struct rdma_conn_param, );
	UD_FIELDS(struct rdma_ud_param, );

	FIELD(struct rdma_cm_event, id, struct rdma_cm_id *);
	FIELD(struct rdma_cm_event, listen_id, struct rdma_cm_id *);
	FIELD(struct rdma_cm_event, event, enum rdma_cm_event_type);
	FIELD(struct rdma_cm_event, status, int);
	FIELD_NT("", struct rdma_cm_event, param);	/* unnamed union type */
	FIELD(struct rdma_cm_event, param.conn, struct rdma_conn_param);
	CONN_FIELDS(struct rdma_cm_event, param.conn.);
	FIELD(struct rdma_cm_event, param.ud, struct rdma_ud_param);
	UD_FIELDS(struct rdma_cm_event, param.ud.);

	FIELD(struct rdma_addrinfo, ai_flags, int);
	FIELD(struct rdma_addrinfo, ai_family, int);
	FIELD(struct rdma_addrinfo, ai_qp_type, int);
	FIELD(struct rdma_addrinfo, ai_port_space, int);
	FIELD(struct rdma_addrinfo, ai_src_len, socklen_t);
	FIELD(struct rdma_addrinfo, ai_dst_len, socklen_t);
	FIELD(struct rdma_addrinfo, ai_src_addr, struct sockaddr *);
	FIELD(struct rdma_addrinfo, ai_dst_addr, struct sockaddr *);
	FIELD(struct rdma_addrinfo, ai_src_canonname, char *);
	FIELD(struct rdma_addrinfo, ai_dst_canonname, char *);
	FIELD(struct rdma_addrinfo, ai_route_len, size_t);
	FIELD(struct rdma_addrinfo, ai_route, void *);
	FIELD(struct rdma_addrinfo, ai_connect_len, size_t);
	FIELD(struct rdma_addrinfo, ai_connect, void *);
	FIELD(struct rdma_addrinfo, ai_next, struct rdma_addrinfo *);

	FIELD(struct rdma_cm_join_mc_attr_ex, comp_mask, uint32_t);
	FIELD(struct rdma_cm_join_mc_attr_ex, join_flags, uint32_t);
	FIELD(struct rdma_cm_join_mc_attr_ex, addr, struct sockaddr *);

#ifdef PROBE_HAVE_1_4
	_Static_assert(__builtin_types_compatible_p(
		__typeof__(((struct rdma_cm_event *)0)->param.arg), uint64_t),
		"param.arg must be uint64_t");
	FIELD_NT("new:", struct rdma_cm_event, param.arg);
#endif
}

static void constants(void)
{
	CONST(RDMA_CM_EVENT_ADDR_RESOLVED);
	CONST(RDMA_CM_EVENT_ADDR_ERROR);
	CONST(RDMA_CM_EVENT_ROUTE_RESOLVED);
	CONST(RDMA_CM_EVENT_ROUTE_ERROR);
	CONST(RDMA_CM_EVENT_CONNECT_REQUEST);
	CONST(RDMA_CM_EVENT_CONNECT_RESPONSE);
	CONST(RDMA_CM_EVENT_CONNECT_ERROR);
	CONST(RDMA_CM_EVENT_UNREACHABLE);
	CONST(RDMA_CM_EVENT_REJECTED);
	CONST(RDMA_CM_EVENT_ESTABLISHED);
	CONST(RDMA_CM_EVENT_DISCONNECTED);
	CONST(RDMA_CM_EVENT_DEVICE_REMOVAL);
	CONST(RDMA_CM_EVENT_MULTICAST_JOIN);
	CONST(RDMA_CM_EVENT_MULTICAST_ERROR);
	CONST(RDMA_CM_EVENT_ADDR_CHANGE);
	CONST(RDMA_CM_EVENT_TIMEWAIT_EXIT);

	CONST(RDMA_PS_IPOIB);
	CONST(RDMA_PS_TCP);
	CONST(RDMA_PS_UDP);
	CONST(RDMA_PS_IB);

	CONST(RDMA_IB_IP_PS_MASK);
	CONST(RDMA_IB_IP_PORT_MASK);
	CONST(RDMA_IB_IP_PS_TCP);
	CONST(RDMA_IB_IP_PS_UDP);
	CONST(RDMA_IB_PS_IB);

	CONST(RDMA_UDP_QKEY);
	CONST(RDMA_MAX_RESP_RES);
	CONST(RDMA_MAX_INIT_DEPTH);

	CONST(RAI_PASSIVE);
	CONST(RAI_NUMERICHOST);
	CONST(RAI_NOROUTE);
	CONST(RAI_FAMILY);

	CONST(RDMA_CM_JOIN_MC_ATTR_ADDRESS);
	CONST(RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS);
	CONST(RDMA_CM_JOIN_MC_ATTR_RESERVED);
	CONST(RDMA_MC_JOIN_FLAG_FULLMEMBER);
	CONST(RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER);
	CONST(RDMA_MC_JOIN_FLAG_RESERVED);

	CONST(RDMA_OPTION_ID);
	CONST(RDMA_OPTION_IB);
	CONST(RDMA_OPTION_ID_TOS);
	CONST(RDMA_OPTION_ID_REUSEADDR);
	CONST(RDMA_OPTION_ID_AFONLY);
	CONST(RDMA_OPTION_ID_ACK_TIMEOUT);
	CONST(RDMA_OPTION_IB_PATH);

	CONST(SOL_RDMA);
	CONST(RDMA_SQSIZE);
	CONST(RDMA_RQSIZE);
	CONST(RDMA_INLINE);
	CONST(RDMA_IOMAPSIZE);
	CONST(RDMA_ROUTE);

#ifdef PROBE_HAVE_1_4
	NEWCONST(RDMA_CM_EVENT_ADDRINFO_RESOLVED);
	NEWCONST(RDMA_CM_EVENT_ADDRINFO_ERROR);
	NEWCONST(RDMA_CM_EVENT_USER);
	NEWCONST(RDMA_CM_EVENT_INTERNAL);
	NEWCONST(RAI_SA);
	NEWCONST(RAI_DNS);
#endif
}

int main(void)
{
	types();
	fields();
	constants();
	return 0;
}

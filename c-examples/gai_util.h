/* Helpers for the rdma_getaddrinfo examples. */
#ifndef RDMACM_RS_GAI_UTIL_H
#define RDMACM_RS_GAI_UTIL_H

#include <arpa/inet.h>
#include <netdb.h>

#include "check.h"

/* rdma_getaddrinfo, skipping when the library cannot work without a device. */
static inline int gai_or_skip(const char *node, const char *service,
			      const struct rdma_addrinfo *hints, struct rdma_addrinfo **res)
{
	int ret;

	errno = 0;
	ret = rdma_getaddrinfo(node, service, hints, res);
	if (ret == -1 && errno == ENODEV)
		skip("rdma_getaddrinfo failed with ENODEV (no RDMA device)");
	return ret;
}

/* "a.b.c.d:port" / "[v6]:port" / "family N" for diagnostics and checks. */
static inline const char *addr_str(const struct sockaddr *sa, char *buf, size_t len)
{
	char ip[INET6_ADDRSTRLEN];

	if (!sa) {
		snprintf(buf, len, "(null)");
	} else if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *sin = (const void *)sa;

		inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof(ip));
		snprintf(buf, len, "%s:%u", ip, ntohs(sin->sin_port));
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const void *)sa;

		inet_ntop(AF_INET6, &sin6->sin6_addr, ip, sizeof(ip));
		snprintf(buf, len, "[%s]:%u", ip, ntohs(sin6->sin6_port));
	} else {
		snprintf(buf, len, "family %d", sa->sa_family);
	}
	return buf;
}

#endif

/* riomap/riowrite/riounmap (rsocket(7), direct data placement): with
 * RDMA_IOMAPSIZE set on both sides before connecting, a buffer the server
 * maps at offset 0 receives what the client riowrites at that offset,
 * without any receive call; a data transfer after riowrite tells the
 * server the bytes are in place. */
#include "rs_util.h"

#define LEN 65536

int main(int argc, char **argv)
{
	int port = port_arg(argc, argv);
	static unsigned char map[LEN], data[LEN];
	int l, c, s, one = 1;
	off_t off;
	size_t w;
	char b;

	watchdog(30);
	for (int i = 0; i < LEN; i++)
		data[i] = (unsigned char)(i * 7 + 3);
	l = rs_listener(port);
	CHECK(rsetsockopt(l, SOL_RDMA, RDMA_IOMAPSIZE, &one, sizeof(one)) == 0, "RDMA_IOMAPSIZE on the listener",
	      "%s", strerror(errno));
	c = rsocket(AF_INET, SOCK_STREAM, 0);
	rsetsockopt(c, SOL_RDMA, RDMA_IOMAPSIZE, &one, sizeof(one));
	{
		struct sockaddr_in a = lo_addr(port);
		if (rconnect(c, (struct sockaddr *)&a, sizeof(a)))
			fatal("rconnect: %s", strerror(errno));
	}
	s = raccept(l, NULL, NULL);
	CHECK_ERRNO(rsetsockopt(c, SOL_RDMA, RDMA_IOMAPSIZE, &one, sizeof(one)), EINVAL,
		    "SOL_RDMA options after connecting: EINVAL");
	CHECK(riomap(s, map, LEN, PROT_READ, 0, 0) == -1 && errno == EINVAL, "riomap with PROT_READ: EINVAL", "no");
	off = riomap(s, map, LEN, PROT_WRITE, 0, 0);
	CHECK(off == 0, "riomap at offset 0", "got %ld: %s", (long)off, strerror(errno));
	CHECK(riomap(s, data, 16, PROT_WRITE, 0, 4096) == -1 && errno == ENOMEM, "a second map with a table of one: ENOMEM",
	      "errno %d", errno);
	CHECK(rsend(s, "g", 1, 0) == 1, "server: go (a transfer after riomap)", "%s", strerror(errno));
	CHECK(rrecv(c, &b, 1, 0) == 1, "client: go received", "%s", strerror(errno));
	w = riowrite(c, data, LEN, 0, 0);
	CHECK(w == LEN, "riowrite of 64 KiB at offset 0", "got %zd: %s", (ssize_t)w, strerror(errno));
	w = riowrite(c, data, 16, LEN * 4, 0);
	CHECK(w == (size_t)-1 && errno == EINVAL, "riowrite outside every map: (size_t)-1, EINVAL", "got %zd", (ssize_t)w);
	CHECK(rsend(c, "d", 1, 0) == 1, "client: done", "%s", strerror(errno));
	CHECK(rrecv(s, &b, 1, 0) == 1, "server: done received", "%s", strerror(errno));
	CHECK(!memcmp(map, data, LEN), "the mapped buffer holds exactly the written bytes", "differs");
	CHECK(riounmap(s, map, LEN) == 0, "riounmap", "%s", strerror(errno));
	CHECK_ERRNO(riounmap(s, map, LEN), EINVAL, "riounmap again: EINVAL");
	rclose(c);
	rclose(s);
	rclose(l);
	return check_done();
}

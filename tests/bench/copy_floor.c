/* The same-host copy floor make bench compares RDMA bandwidth with, in MB/s (10^6):
 *   memcpy   64 KiB copies between two 1 MiB buffers of this process
 *   cma      64 KiB process_vm_writev into a child's 1 MiB buffer (the copy softverbs'
 *            same-host RDMA WRITE makes)
 * Prints "memcpy N" and "cma N", one per line. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define CHUNK 65536
#define N 40000

static char src[1 << 20], dst[1 << 20];

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void)
{
	pid_t child;
	double t;

	memset(src, 1, sizeof(src));
	memset(dst, 2, sizeof(dst));
	t = now();
	for (int i = 0; i < N; i++)
		memcpy(dst + (i % 16) * CHUNK, src + ((i + 5) % 16) * CHUNK, CHUNK);
	printf("memcpy %.0f\n", (double)N * CHUNK / (now() - t) / 1e6);
	if ((child = fork()) == 0) {
		pause();
		return 0;
	}
	t = now();
	for (int i = 0; i < N; i++) {
		struct iovec l = { src + ((i + 5) % 16) * CHUNK, CHUNK }, r = { dst + (i % 16) * CHUNK, CHUNK };

		if (process_vm_writev(child, &l, 1, &r, 1, 0) != CHUNK) {
			perror("process_vm_writev");
			break;
		}
	}
	printf("cma %.0f\n", (double)N * CHUNK / (now() - t) / 1e6);
	kill(child, SIGKILL);
	return 0;
}

/* c-example: common
 *
 * rdma_get_devices(3): "Return a NULL-terminated array of opened RDMA
 * devices", num_devices "If non-NULL, set to the number of devices
 * returned"; the array is released with rdma_free_devices.  Without a device
 * the list is empty (num_devices 0, list[0] == NULL) but still non-NULL.
 */
#include <stdlib.h>
#include <unistd.h>

#include "check.h"

int main(void)
{
	struct ibv_context **list, **list2;
	int n = -12345, i, nonnull = 1;
	int have_dev_dir = access("/dev/infiniband", F_OK) == 0;

	watchdog(15);
	errno = 0;
	list = rdma_get_devices(&n);
	if (!list && errno == ENODEV)
		skip("rdma_get_devices failed with ENODEV (no RDMA device)");
	CHECK(list != NULL, "rdma_get_devices returns a list", "NULL, errno=%d (%s)", errno,
	      strerror(errno));
	if (!list)
		return check_done();
	CHECK(n >= 0 && list[n] == NULL, "list is NULL-terminated after num_devices entries",
	      "num_devices=%d", n);
	for (i = 0; i < n; i++)
		nonnull &= list[i] != NULL;
	CHECK(nonnull, "the first num_devices entries are non-NULL", "a NULL entry inside the list");
	/* RDMACM_TEST_DEVICES: how many devices the fabric under test has (the
	 * soft fabric has one and no /dev/infiniband). */
	const char *want = getenv("RDMACM_TEST_DEVICES");
	if (want)
		CHECK(n == atoi(want), "device count is the fabric's", "num_devices=%d, want %s", n, want);
	else
		CHECK(have_dev_dir ? n >= 0 : n == 0, "device count consistent with /dev/infiniband",
		      "num_devices=%d without /dev/infiniband", n);

	list2 = rdma_get_devices(NULL);
	CHECK(list2 != NULL, "rdma_get_devices(NULL) works (num_devices is optional)",
	      "NULL, errno=%d (%s)", errno, strerror(errno));
	if (list2) {
		for (i = 0; list2[i]; i++)
			;
		CHECK(i == n, "second list has the same length", "%d vs %d", i, n);
		rdma_free_devices(list2);
	}
	rdma_free_devices(list);
	check(1, "rdma_free_devices returned");
	return check_done();
}

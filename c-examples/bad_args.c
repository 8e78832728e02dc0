/* c-example: ours
 *
 * Bad arguments fail with -1/EINVAL instead of crashing:
 * rdma_get_cm_event(NULL, &ev), rdma_get_cm_event(ch, NULL),
 * rdma_create_id(ch, NULL, ...), rdma_create_id with an unknown port space
 * (and *id left alone), rdma_ack_cm_event(NULL).
 */
#include "check.h"

int main(void)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev = NULL;
	struct rdma_cm_id *id;
	static const int bad_ps[] = { 0, 1, 0x0105, 0x0999, 0xffff, -1 };
	unsigned int i;

	watchdog(15);
	ch = channel_or_skip();

	CHECK_ERRNO(rdma_get_cm_event(NULL, &ev), EINVAL, "rdma_get_cm_event(NULL, &ev) fails with EINVAL");
	CHECK_ERRNO(rdma_get_cm_event(ch, NULL), EINVAL, "rdma_get_cm_event(ch, NULL) fails with EINVAL");
	CHECK_ERRNO(rdma_ack_cm_event(NULL), EINVAL, "rdma_ack_cm_event(NULL) fails with EINVAL");
	CHECK_ERRNO(rdma_create_id(ch, NULL, NULL, RDMA_PS_TCP), EINVAL,
		    "rdma_create_id(ch, NULL, ...) fails with EINVAL");
	CHECK_ERRNO(rdma_create_id(NULL, NULL, NULL, RDMA_PS_TCP), EINVAL,
		    "rdma_create_id(NULL, NULL, ...) fails with EINVAL");

	for (i = 0; i < sizeof(bad_ps) / sizeof(bad_ps[0]); i++) {
		char what[80];

		id = (struct rdma_cm_id *)&id; /* sentinel */
		snprintf(what, sizeof(what), "rdma_create_id with port space 0x%x fails with EINVAL",
			 (unsigned int)bad_ps[i]);
		CHECK_ERRNO(rdma_create_id(ch, &id, NULL, (enum rdma_port_space)bad_ps[i]), EINVAL, what);
		if (id != (struct rdma_cm_id *)&id && id != NULL) {
			check(0, "failed rdma_create_id left no id behind: *id was set");
			rdma_destroy_id(id);
		}
	}
	rdma_destroy_event_channel(ch);
	return check_done();
}

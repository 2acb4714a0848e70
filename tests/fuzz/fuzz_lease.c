/* The lease line and the block-lease line (src/store/lease.c): never crash,
 * and whatever parses re-formats and re-parses equal. */
#include "store/store.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int same(const struct mesh_lease_stamp *a, const struct mesh_lease_stamp *b)
{
	const struct mesh_lease_holder *x = &a->holder, *y = &b->holder;
	return a->deadline_ns == b->deadline_ns && a->started_ns == b->started_ns && a->attempt == b->attempt &&
	       a->token == b->token && !strcmp(a->node, b->node) && a->boot_deadline_ns == b->boot_deadline_ns &&
	       !memcmp(x->boot_id, y->boot_id, sizeof x->boot_id) && x->timens == y->timens && x->pidns == y->pidns &&
	       x->pid == y->pid && x->pid_start == y->pid_start;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *in = (const char *)data;
	char buf[1024];
	struct mesh_lease_stamp st, again;
	uint64_t mask, mask2;
	size_t n;
	if (mesh_lease_parse(in, size, &st) == 0) {
		if (!mesh_node_name_ok(st.node))
			abort();
		n = mesh_lease_format(buf, sizeof buf, &st);
		if (!n || mesh_lease_parse(buf, n, &again) != 0 || !same(&st, &again))
			abort();
	}
	if (mesh_lease_block_parse(in, size, &st, &mask) == 0) {
		n = mesh_lease_block_format(buf, sizeof buf, &st, mask);
		if (!n || mesh_lease_block_parse(buf, n, &again, &mask2) != 0 || !same(&st, &again) || mask != mask2)
			abort();
	}
	return 0;
}

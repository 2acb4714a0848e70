/* Fuzz target for everything meshd reads from a worker: control messages
 * (mesh_ctl_parse, and the worker's command parser), and a slot whose
 * worker-writable bytes are the input (control words, the reply ring's
 * indices and data, the request ring's tail), read through mesh_slot_call,
 * mesh_slot_stats and a raw consumer loop.
 *
 * Input: byte 0 picks the mode; the rest is the payload.
 *   mode % 3 == 0: payload is a control message for both parsers;
 *   mode % 3 == 1: payload = 48 bytes of control words (@64), 256 bytes of
 *                  reply ring control (@512), 8 bytes of request tail, then
 *                  reply ring data;
 *   mode % 3 == 2: payload = 16 bytes {head, tail} then ring data, consumed
 *                  by a raw ring view until it stops. */
#include "base/err.h"
#include "shm/shm.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CAP 4096u

static void fuzz_ctl(const uint8_t *p, size_t n)
{
	struct mesh_ctl_msg m;
	int rc = mesh_ctl_parse(p, n, &m);
	if (rc != 0 && rc != MESH_E_PROTO)
		abort();
	if (strlen(m.text) > MESH_CTL_MAX)
		abort();
	struct mesh_wcmd c;
	rc = mesh__wcmd_parse(p, n, &c);
	if (rc == 0 && c.kind == MESH_WCMD_RUN && c.gen == 0)
		abort();
}

static void fuzz_slot(const uint8_t *p, size_t n)
{
	static struct mesh_slot *s;
	static struct mesh_slot_map map;
	if (!s) {
		if (mesh_slot_create(&s, 0, CAP) < 0)
			abort();
		mesh_slot_arm(s, 1);
		if (mesh__slot_map(mesh_slot_fd(s), mesh_slot_bell(s), 0, &map) < 0)
			abort();
	}
	mesh_slot_arm(s, 1);
	uint8_t *base = (uint8_t *)map.hdr;
	size_t k = n < 48 ? n : 48;
	memcpy(base + 64, p, k);
	p += k, n -= k;
	k = n < 256 ? n : 256;
	memcpy(base + 512, p, k);
	p += k, n -= k;
	if (n >= 8) {
		memcpy(base + 256 + 64, p, 8); /* request ring tail */
		p += 8, n -= 8;
	}
	k = n < CAP ? n : CAP;
	memcpy(base + MESH_SLOT_HDR_SIZE + CAP, p, k);

	void *rep;
	size_t len;
	int rc = mesh_slot_call(s, "req", 3, &rep, &len, 0, 0);
	if (rc == 0 || rc == MESH_E_REFUSED) {
		if (len > mesh_slot_max_msg(s))
			abort();
		free(rep);
	} else if (rep != NULL) {
		abort();
	}
	if (rc == MESH_E_CORRUPT && !mesh_slot_failed(s))
		abort();
	struct mesh_slot_stats st;
	rc = mesh_slot_stats(s, &st);
	if (rc == 0 && (st.state > MESH_SLOT__MAX || st.replies + st.errors > st.requests))
		abort();
}

static void fuzz_ring(const uint8_t *p, size_t n)
{
	static uint8_t mem[256 + CAP] __attribute__((aligned(64)));
	struct mesh_ring_ctl *ctl = (struct mesh_ring_ctl *)mem;
	uint8_t *data = mem + 256;
	memset(mem, 0, sizeof mem);
	uint64_t head = 0, tail = 0;
	if (n >= 16) {
		memcpy(&head, p, 8);
		memcpy(&tail, p + 8, 8);
		p += 16, n -= 16;
	}
	memcpy(data, p, n < CAP ? n : CAP);
	atomic_store(&ctl->head, head);
	atomic_store(&ctl->tail, tail);
	struct mesh_ring r;
	mesh_ring_attach(&r, ctl, data, CAP, 0);
	uint8_t out[CAP];
	for (int i = 0; i < 1000; i++) {
		struct mesh_msg m;
		if (mesh_ring_peek(&r, &m) != 0)
			break;
		if (m.len > MESH_RING_MAX_MSG(CAP) || m.n1 + m.n2 != m.len)
			abort();
		mesh_msg_copy(&m, out);
		mesh_ring_pop(&r);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	switch (data[0] % 3) {
	case 0: fuzz_ctl(data + 1, size - 1); break;
	case 1: fuzz_slot(data + 1, size - 1); break;
	case 2: fuzz_ring(data + 1, size - 1); break;
	}
	return 0;
}

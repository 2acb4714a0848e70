/* The lifecycle table, row by row, and the rules every row must keep. */
#include "base/buf.h"
#include "host/host.h"
#include "runner/t.h"

#include <stdio.h>
#include <string.h>

/* Every cell, as docs/host.md shows it: state, event -> action, next. */
static const char *const want[MESH_IS__N] = {
	/*            warm          launch         halt          exit          ready          online          halted          refused        broken          timeout          died */
	[MESH_IS_DOWN] = "spawn:STARTING spawn:STARTING nop:DOWN nop:DOWN nop:DOWN nop:DOWN nop:DOWN nop:DOWN nop:DOWN nop:DOWN nop:DOWN",
	[MESH_IS_STARTING] = "nop:STARTING pend:STARTING nop:STARTING stop:STOPPING ready:IDLE fail:STOPPING fail:STOPPING fail:STOPPING fail:STOPPING fail:STOPPING reap:DOWN",
	[MESH_IS_IDLE] = "nop:IDLE run:LAUNCHING nop:IDLE stop:STOPPING fail:STOPPING fail:STOPPING nop:IDLE nop:IDLE fail:STOPPING nop:IDLE reap:DOWN",
	[MESH_IS_LAUNCHING] = "nop:LAUNCHING deny:LAUNCHING halt:HALTING stop:STOPPING fail:STOPPING online:RUNNING fail:STOPPING refuse:IDLE fail:STOPPING fail:STOPPING reap:DOWN",
	[MESH_IS_RUNNING] = "nop:RUNNING deny:RUNNING halt:HALTING stop:STOPPING fail:STOPPING fail:STOPPING fail:STOPPING nop:RUNNING fail:STOPPING nop:RUNNING reap:DOWN",
	[MESH_IS_HALTING] = "nop:HALTING deny:HALTING nop:HALTING stop:STOPPING fail:STOPPING nop:HALTING halted:IDLE nop:HALTING fail:STOPPING fail:STOPPING reap:DOWN",
	[MESH_IS_STOPPING] = "deny:STOPPING deny:STOPPING nop:STOPPING nop:STOPPING nop:STOPPING nop:STOPPING nop:STOPPING nop:STOPPING nop:STOPPING escalate:STOPPING reap:DOWN",
};

TEST(lifecycle_rows)
{
	for (int s = 0; s < MESH_IS__N; s++) {
		char row[1024] = "";
		size_t len = 0;
		for (int e = 0; e < MESH_EV__N; e++) {
			const struct mesh_transition *t = &mesh_lifecycle[s][e];
			len += (size_t)snprintf(row + len, sizeof row - len, "%s%s:%s", e ? " " : "",
						mesh_iaction_name(t->action), mesh_istate_name(t->next));
		}
		if (strcmp(row, want[s]) != 0)
			t__fail(__FILE__, __LINE__, "row %s:\n got  %s\n want %s", mesh_istate_name(s), row, want[s]);
	}
}

TEST(lifecycle_rules)
{
	for (int s = 0; s < MESH_IS__N; s++)
		for (int e = 0; e < MESH_EV__N; e++) {
			const struct mesh_transition *t = &mesh_lifecycle[s][e];
			/* nop and deny never move; only a reap reaches DOWN (from a live state). */
			if (t->action == MESH_A_NOP || t->action == MESH_A_DENY)
				EXPECT_EQ(t->next, s);
			if (t->next == MESH_IS_DOWN && s != MESH_IS_DOWN)
				EXPECT_EQ(t->action, MESH_A_REAP);
			/* A death is always reaped, wherever it happens. */
			if (e == MESH_EV_DIED && s != MESH_IS_DOWN)
				EXPECT_EQ(t->action, MESH_A_REAP);
			/* Exit from any live state stops it (or it is stopping already). */
			if (e == MESH_EV_EXIT && s != MESH_IS_DOWN && s != MESH_IS_STOPPING)
				EXPECT_EQ(t->action, MESH_A_STOP);
			/* Deny is for requests only; the worker's events are never "denied". */
			if (t->action == MESH_A_DENY)
				EXPECT_TRUE(e <= MESH_EV_EXIT);
		}
}

TEST(lifecycle_describe_prints_every_cell)
{
	struct mesh_buf b = MESH_BUF_INIT;
	ASSERT_EQ(mesh_lifecycle_describe(&b), 0);
	int lines = 0;
	for (size_t i = 0; i < b.len; i++)
		lines += b.p[i] == '\n';
	EXPECT_EQ(lines, 1 + MESH_IS__N * MESH_EV__N);
	EXPECT_CONTAINS(b.p, "STARTING   died     reap      DOWN\n");
	EXPECT_CONTAINS(b.p, "STOPPING   timeout  escalate  STOPPING\n");
	mesh_buf_release(&b);
}

/* The lifecycle table, row by row, and the rules every row must keep. */
#include "base/buf.h"
#include "host/host.h"
#include "runner/t.h"

#include <stdio.h>
#include <string.h>

/* Every cell, as docs/host.md shows it: state, event -> action, next.  Columns:
 * warm launch halt exit start ready rejected online stale halted refused broken closed timeout died unstarted
 * probe hung */
static const char *const want[MESH_IS__N] = {
	[MESH_IS_DOWN] = "spawn:STARTING spawn:STARTING nop:DOWN nop:DOWN spawn:PROBING nop:DOWN nop:DOWN nop:DOWN nop:DOWN nop:DOWN nop:DOWN nop:DOWN nop:DOWN nop:DOWN nop:DOWN nop:DOWN nop:DOWN nop:DOWN",
	[MESH_IS_STARTING] = "nop:STARTING pend:STARTING unpend:STARTING stop:STOPPING_EXIT deny:STARTING ready:IDLE fail:STOPPING_KILL fail:STOPPING_KILL fail:STOPPING_KILL fail:STOPPING_KILL fail:STOPPING_KILL fail:STOPPING_KILL hangup:STARTING fail:STOPPING_KILL reap:DOWN abort:DOWN nop:STARTING nop:STARTING",
	[MESH_IS_IDLE] = "nop:IDLE run:LAUNCHING nop:IDLE stop:STOPPING_EXIT deny:IDLE fail:STOPPING_KILL fail:STOPPING_KILL fail:STOPPING_KILL fail:STOPPING_KILL nop:IDLE nop:IDLE fail:STOPPING_KILL hangup:IDLE nop:IDLE reap:DOWN nop:IDLE nop:IDLE nop:IDLE",
	[MESH_IS_LAUNCHING] = "nop:LAUNCHING deny:LAUNCHING halt:HALTING stop:STOPPING_EXIT deny:LAUNCHING fail:STOPPING_KILL fail:STOPPING_KILL online:RUNNING fail:STOPPING_KILL fail:STOPPING_KILL refuse:IDLE fail:STOPPING_KILL hangup:LAUNCHING fail:STOPPING_KILL reap:DOWN nop:LAUNCHING nop:LAUNCHING nop:LAUNCHING",
	[MESH_IS_RUNNING] = "nop:RUNNING deny:RUNNING halt:HALTING stop:STOPPING_EXIT deny:RUNNING fail:STOPPING_KILL fail:STOPPING_KILL fail:STOPPING_KILL fail:STOPPING_KILL fail:STOPPING_KILL nop:RUNNING fail:STOPPING_KILL hangup:RUNNING nop:RUNNING reap:DOWN nop:RUNNING nop:RUNNING nop:RUNNING",
	[MESH_IS_HALTING] = "nop:HALTING deny:HALTING nop:HALTING stop:STOPPING_EXIT deny:HALTING fail:STOPPING_KILL fail:STOPPING_KILL nop:HALTING nop:HALTING halted:IDLE nop:HALTING fail:STOPPING_KILL hangup:HALTING fail:STOPPING_KILL reap:DOWN nop:HALTING nop:HALTING nop:HALTING",
	[MESH_IS_STOPPING_EXIT] = "deny:STOPPING_EXIT deny:STOPPING_EXIT nop:STOPPING_EXIT nop:STOPPING_EXIT deny:STOPPING_EXIT nop:STOPPING_EXIT nop:STOPPING_EXIT nop:STOPPING_EXIT nop:STOPPING_EXIT nop:STOPPING_EXIT nop:STOPPING_EXIT nop:STOPPING_EXIT hangup:STOPPING_EXIT term:STOPPING_TERM reap:DOWN nop:STOPPING_EXIT nop:STOPPING_EXIT nop:STOPPING_EXIT",
	[MESH_IS_STOPPING_TERM] = "deny:STOPPING_TERM deny:STOPPING_TERM nop:STOPPING_TERM nop:STOPPING_TERM deny:STOPPING_TERM nop:STOPPING_TERM nop:STOPPING_TERM nop:STOPPING_TERM nop:STOPPING_TERM nop:STOPPING_TERM nop:STOPPING_TERM nop:STOPPING_TERM hangup:STOPPING_TERM kill:STOPPING_KILL reap:DOWN nop:STOPPING_TERM nop:STOPPING_TERM nop:STOPPING_TERM",
	[MESH_IS_STOPPING_KILL] = "deny:STOPPING_KILL deny:STOPPING_KILL nop:STOPPING_KILL nop:STOPPING_KILL deny:STOPPING_KILL nop:STOPPING_KILL nop:STOPPING_KILL nop:STOPPING_KILL nop:STOPPING_KILL nop:STOPPING_KILL nop:STOPPING_KILL nop:STOPPING_KILL hangup:STOPPING_KILL nop:STOPPING_KILL reap:DOWN nop:STOPPING_KILL nop:STOPPING_KILL nop:STOPPING_KILL",
	[MESH_IS_PROBING] = "nop:PROBING deny:PROBING nop:PROBING stop:STOPPING_EXIT nop:PROBING ready:WARM nop:PROBING nop:PROBING nop:PROBING nop:PROBING nop:PROBING fail:STOPPING_KILL nop:PROBING expire:STOPPING_EXIT reap:DOWN abort:DOWN probe:PROBING nop:PROBING",
	[MESH_IS_WARM] = "nop:WARM deny:WARM nop:WARM stop:STOPPING_EXIT nop:WARM nop:WARM nop:WARM nop:WARM nop:WARM nop:WARM nop:WARM fail:STOPPING_KILL nop:WARM nop:WARM reap:DOWN nop:WARM check:WARM fail:STOPPING_KILL",
};

TEST(lifecycle_rows)
{
	for (int s = 0; s < MESH_IS__N; s++) {
		char row[2048] = "";
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

static int live(int s)
{
	return s != MESH_IS_DOWN;
}

/* An HTTP program's own states (no control channel). */
static int http_state(int s)
{
	return s == MESH_IS_PROBING || s == MESH_IS_WARM;
}

TEST(lifecycle_rules)
{
	for (int s = 0; s < MESH_IS__N; s++)
		for (int e = 0; e < MESH_EV__N; e++) {
			const struct mesh_transition *t = &mesh_lifecycle[s][e];
			int stopping = mesh_istate_stopping((enum mesh_istate)s);
			/* nop, deny, pend, unpend and hangup never move. */
			if (t->action == MESH_A_NOP || t->action == MESH_A_DENY || t->action == MESH_A_PEND ||
			    t->action == MESH_A_UNPEND || t->action == MESH_A_HANGUP)
				EXPECT_EQ(t->next, s);
			/* Only a reap (a death) or an abort (a spawn that failed) reaches DOWN. */
			if (t->next == MESH_IS_DOWN && live(s))
				EXPECT_TRUE(t->action == MESH_A_REAP || t->action == MESH_A_ABORT);
			if (t->action == MESH_A_ABORT)
				EXPECT_TRUE((s == MESH_IS_STARTING || s == MESH_IS_PROBING) && e == MESH_EV_UNSTARTED);
			/* A death is always reaped, wherever it happens. */
			if (e == MESH_EV_DIED && live(s))
				EXPECT_EQ(t->action, MESH_A_REAP);
			/* A closed channel is always let go of, wherever it happens
			 * (an HTTP program has none). */
			if (e == MESH_EV_CLOSED && live(s))
				EXPECT_EQ(t->action, http_state(s) ? MESH_A_NOP : MESH_A_HANGUP);
			/* An HTTP program's channel events never come: they do nothing. */
			if (http_state(s) && e >= MESH_EV_REJECTED && e <= MESH_EV_CLOSED && e != MESH_EV_BROKEN)
				EXPECT_EQ(t->action, MESH_A_NOP);
			/* Exit from any live state stops it, unless it is stopping already. */
			if (e == MESH_EV_EXIT && live(s))
				EXPECT_EQ(t->action, stopping ? MESH_A_NOP : MESH_A_STOP);
			/* Each stop action has its one next state: the sub-machine is the table's. */
			if (t->action == MESH_A_STOP || t->action == MESH_A_EXPIRE)
				EXPECT_EQ(t->next, MESH_IS_STOPPING_EXIT);
			if (t->action == MESH_A_EXPIRE)
				EXPECT_TRUE(s == MESH_IS_PROBING && e == MESH_EV_TIMEOUT);
			/* Only an HTTP program is started, probed, hung. */
			if (e == MESH_EV_START && t->action == MESH_A_SPAWN)
				EXPECT_TRUE(s == MESH_IS_DOWN && t->next == MESH_IS_PROBING);
			if (t->action == MESH_A_PROBE)
				EXPECT_TRUE(s == MESH_IS_PROBING && e == MESH_EV_PROBE);
			if (t->action == MESH_A_CHECK)
				EXPECT_TRUE(s == MESH_IS_WARM && e == MESH_EV_PROBE);
			if (e == MESH_EV_HUNG && t->action != MESH_A_NOP)
				EXPECT_TRUE(s == MESH_IS_WARM && t->action == MESH_A_FAIL);
			/* The two kinds meet only in DOWN and the stopping states. */
			if (http_state(s))
				EXPECT_TRUE(http_state(t->next) || t->next == MESH_IS_DOWN ||
					    mesh_istate_stopping(t->next));
			if (live(s) && !http_state(s) && !mesh_istate_stopping((enum mesh_istate)s))
				EXPECT_FALSE(http_state(t->next));
			if (t->action == MESH_A_TERM)
				EXPECT_TRUE(s == MESH_IS_STOPPING_EXIT && e == MESH_EV_TIMEOUT && t->next == MESH_IS_STOPPING_TERM);
			if (t->action == MESH_A_KILL)
				EXPECT_TRUE(s == MESH_IS_STOPPING_TERM && e == MESH_EV_TIMEOUT && t->next == MESH_IS_STOPPING_KILL);
			if (t->action == MESH_A_FAIL)
				EXPECT_EQ(t->next, MESH_IS_STOPPING_KILL);
			/* A stopping worker leaves only by dying or by its next deadline. */
			if (stopping && e != MESH_EV_DIED && e != MESH_EV_TIMEOUT)
				EXPECT_EQ(t->next, s);
			/* Deny is for requests only; the worker's events are never "denied". */
			if (t->action == MESH_A_DENY)
				EXPECT_TRUE(e <= MESH_EV_START);
			/* rejected is a ready and stale an online, except where the difference counts. */
			if (e == MESH_EV_REJECTED && s != MESH_IS_STARTING && !http_state(s))
				EXPECT_EQ(t->action, mesh_lifecycle[s][MESH_EV_READY].action);
			if (e == MESH_EV_STALE && s != MESH_IS_LAUNCHING)
				EXPECT_EQ(t->action, mesh_lifecycle[s][MESH_EV_ONLINE].action);
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
	EXPECT_CONTAINS(b.p, "STATE          EVENT      ACTION  NEXT\n");
	EXPECT_CONTAINS(b.p, "STARTING       died       reap    DOWN\n");
	EXPECT_CONTAINS(b.p, "STARTING       unstarted  abort   DOWN\n");
	EXPECT_CONTAINS(b.p, "STOPPING_EXIT  timeout    term    STOPPING_TERM\n");
	EXPECT_CONTAINS(b.p, "STOPPING_TERM  timeout    kill    STOPPING_KILL\n");
	EXPECT_CONTAINS(b.p, "LAUNCHING      stale      fail    STOPPING_KILL\n");
	EXPECT_CONTAINS(b.p, "DOWN           start      spawn   PROBING\n");
	EXPECT_CONTAINS(b.p, "PROBING        timeout    expire  STOPPING_EXIT\n");
	EXPECT_CONTAINS(b.p, "WARM           hung       fail    STOPPING_KILL\n");
	EXPECT_TRUE(strchr(b.p, '?') == NULL); /* every state, event and action has a name */
	mesh_buf_release(&b);
}

/* `mesh help lifecycle` prints the same table. */
TEST(lifecycle_printed_by_mesh_help)
{
	static char out[65536];
	struct mesh_buf b = MESH_BUF_INIT;
	ASSERT_EQ(mesh_lifecycle_describe(&b), 0);
	ASSERT_EQ(t_sh(out, sizeof out, 0, "'%s' help lifecycle", t_bin("mesh")), 0);
	EXPECT_STREQ(out, b.p);
	mesh_buf_release(&b);
}

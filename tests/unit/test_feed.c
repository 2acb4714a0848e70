/* meshd/core/feed.h: the ring of meshd's events behind GET /v1/events --
 * order, what a late reader is told it lost, the wake hook only while
 * someone follows, texts owned by the ring. */
#include "meshd/core/feed.h"
#include "runner/t.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void post(struct meshd_feed *f, unsigned i)
{
	struct meshd_event e = {.kind = MESHD_EV_JOB, .id = i, .text = malloc(16)};
	snprintf(e.text, 16, "t%u", i);
	snprintf(e.word, sizeof e.word, "progress");
	meshd_feed_post(f, &e);
	if (e.text)
		FAIL("the post did not take the text");
}

static int wakes;
static void wake(void *arg)
{
	(void)arg;
	wakes++;
}

TEST(feed_reads_in_order_and_says_what_a_late_reader_lost)
{
	struct meshd_feed *f;
	struct meshd_event ev[64];
	uint64_t lost;
	ASSERT_EQ(meshd_feed_new(&f, 100), 0);
	EXPECT_EQ(meshd_feed_last(f), 0);
	EXPECT_EQ(meshd_feed_read(f, 0, ev, 64, &lost), 0);
	for (unsigned i = 1; i <= 250; i++)
		post(f, i);
	EXPECT_EQ(meshd_feed_last(f), 250);
	/* After 200: the 50 after, in order. */
	unsigned n = meshd_feed_read(f, 200, ev, 64, &lost);
	EXPECT_EQ(n, 50);
	EXPECT_EQ(lost, 0);
	for (unsigned i = 0; i < n; i++) {
		EXPECT_EQ(ev[i].seq, 201 + i);
		EXPECT_EQ(ev[i].id, 201 + i);
		char want[16];
		snprintf(want, sizeof want, "t%u", 201 + i);
		EXPECT_STREQ(ev[i].text, want);
		meshd_event_release(&ev[i]);
	}
	/* After 100: the ring keeps 151..250, so 101..150 were lost. */
	n = meshd_feed_read(f, 100, ev, 64, &lost);
	EXPECT_EQ(lost, 50);
	EXPECT_EQ(n, 64);
	EXPECT_EQ(ev[0].seq, 151);
	for (unsigned i = 0; i < n; i++)
		meshd_event_release(&ev[i]);
	/* A seq from the future (another life's): nothing, nothing lost. */
	EXPECT_EQ(meshd_feed_read(f, 1000, ev, 64, &lost), 0);
	EXPECT_EQ(lost, 0);
	meshd_feed_free(f);
}

TEST(feed_wakes_only_while_someone_follows_and_lives_are_told_apart)
{
	struct meshd_feed *f, *g;
	ASSERT_EQ(meshd_feed_new(&f, 16), 0);
	ASSERT_EQ(meshd_feed_new(&g, 16), 0);
	EXPECT_NE(meshd_feed_boot(f), meshd_feed_boot(g));
	meshd_feed_set_wake(f, wake, NULL);
	wakes = 0;
	post(f, 1);
	EXPECT_EQ(wakes, 0);
	EXPECT_FALSE(meshd_feed_live(f));
	meshd_feed_follow(f, 1);
	EXPECT_TRUE(meshd_feed_live(f));
	post(f, 2);
	post(f, 3);
	EXPECT_EQ(wakes, 2);
	meshd_feed_set_wake(f, NULL, NULL);
	post(f, 4);
	EXPECT_EQ(wakes, 2);
	meshd_feed_follow(f, -1);
	EXPECT_FALSE(meshd_feed_live(f));
	/* A NULL feed takes the text and does nothing. */
	struct meshd_event e = {.kind = MESHD_EV_CRASH, .text = strdup("x")};
	meshd_feed_post(NULL, &e);
	EXPECT_TRUE(e.text == NULL);
	EXPECT_STREQ(meshd_ev_kind_name(MESHD_EV_SAVINGS), "savings");
	meshd_feed_free(f);
	meshd_feed_free(g);
}

/* meshd's kept image copies (daemon/images.h): the copy is the same image,
 * is kept once, survives in a history, and prune leaves only what is asked. */
#include "base/err.h"
#include "daemon/images.h"
#include "runner/t.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char out[4096];

static void catalog(const char *version)
{
	char path[256], toml[256];
	mkdir("cat", 0755);
	snprintf(path, sizeof path, "cat/%s", mesh_target_triple());
	mkdir(path, 0755);
	ASSERT_EQ(t_sh(out, sizeof out, 1, "cp '%s' cat/%s/.w && mv -f cat/%s/.w cat/%s/w", t_bin("examples/echo_worker"),
		       mesh_target_triple(), mesh_target_triple(), mesh_target_triple()),
		  0);
	snprintf(toml, sizeof toml, "name = \"w\"\nbackends = [\"native\"]\n[source]\nhash = \"%s\"\n", version);
	t_write_file("cat/w.toml", toml);
}

static void prepare(const char *dir, struct mesh_image *img, const struct mesh_limits_caps *caps)
{
	char *err = NULL;
	int rc = mesh_image_prepare(dir, "w", caps, MESH_GPU_NONE, img, &err);
	if (rc)
		FAIL("prepare %s: %s", dir, err ? err : mesh_strerror(rc));
}

static int exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

TEST(images_keep_prune_and_history)
{
	struct mesh_limits_caps caps;
	mesh_limits_detect(&caps, NULL);
	mkdir("logs", 0755);
	struct mesh_image a, b, copy;
	char *da = NULL, *db = NULL, *again = NULL, *err = NULL;
	catalog("v1");
	prepare("cat", &a, &caps);
	ASSERT_EQ(meshd_image_keep("logs", &a, &caps, MESH_GPU_NONE, &da, &err), 0);
	char want[8192], cwd[4096];
	ASSERT_TRUE(getcwd(cwd, sizeof cwd) != NULL);
	snprintf(want, sizeof want, "%s/logs/.images/w/%016" PRIx64, cwd, mesh_image_id(&a));
	EXPECT_STREQ(da, want);
	/* The copy is a catalog of its own, and the same image. */
	prepare(da, &copy, &caps);
	EXPECT_UEQ(mesh_image_id(&copy), mesh_image_id(&a));
	EXPECT_CONTAINS(copy.bin_path, ".images/w/");
	mesh_image_release(&copy);
	/* Kept once: the same directory again. */
	ASSERT_EQ(meshd_image_keep("logs", &a, &caps, MESH_GPU_NONE, &again, &err), 0);
	EXPECT_STREQ(again, da);
	free(again);

	/* A new binary alone is a new image. */
	ASSERT_EQ(t_sh(out, sizeof out, 1, "cp '%s' cat/%s/.w && mv -f cat/%s/.w cat/%s/w", t_bin("tests-workers/job_worker"),
		       mesh_target_triple(), mesh_target_triple(), mesh_target_triple()),
		  0);
	prepare("cat", &b, &caps);
	EXPECT_UEQ(b.image_hash, a.image_hash);
	EXPECT_TRUE(mesh_image_id(&b) != mesh_image_id(&a));
	ASSERT_EQ(meshd_image_keep("logs", &b, &caps, MESH_GPU_NONE, &db, &err), 0);
	EXPECT_STRNE(da, db);

	/* History: b current, a previous. */
	uint64_t prev = 0;
	char *pd = NULL;
	EXPECT_EQ(meshd_image_history_prev("logs", "w", mesh_image_id(&b), &prev, &pd), MESH_E_NOTFOUND);
	ASSERT_EQ(meshd_image_history_save("logs", "w", mesh_image_id(&b), mesh_image_id(&a)), 0);
	ASSERT_EQ(meshd_image_history_prev("logs", "w", mesh_image_id(&b), &prev, &pd), 0);
	EXPECT_UEQ(prev, mesh_image_id(&a));
	EXPECT_STREQ(pd, da);
	free(pd);
	/* Another image is current now: no previous for it. */
	EXPECT_EQ(meshd_image_history_prev("logs", "w", mesh_image_id(&a), &prev, &pd), MESH_E_NOTFOUND);
	/* A damaged history is no history. */
	t_write_file("logs/.images/w/history", "mesh-images 1\ncurrent zz\n");
	EXPECT_EQ(meshd_image_history_prev("logs", "w", mesh_image_id(&b), &prev, &pd), MESH_E_NOTFOUND);
	EXPECT_TRUE(pd == NULL);

	/* Prune keeps what is asked, removes the rest. */
	meshd_image_prune("logs", "w", db, NULL);
	EXPECT_TRUE(exists(db));
	EXPECT_FALSE(exists(da));
	meshd_image_prune("logs", "w", NULL, NULL);
	EXPECT_FALSE(exists(db));
	EXPECT_TRUE(exists("logs/.images/w/history"));
	free(da);
	free(db);
	mesh_image_release(&a);
	mesh_image_release(&b);
}

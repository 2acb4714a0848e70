/* meshd's kept image copies (meshd/core/images.h): the copy is the same image,
 * is kept once, survives in a history, and prune leaves only what is asked. */
#include "base/err.h"
#include "meshd/core/images.h"
#include "runner/t.h"

#include <errno.h>
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
	ASSERT_EQ(meshd_image_keep("logs", &a, NULL, &caps, MESH_GPU_NONE, &da, &err), 0);
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
	ASSERT_EQ(meshd_image_keep("logs", &a, NULL, &caps, MESH_GPU_NONE, &again, &err), 0);
	EXPECT_STREQ(again, da);
	free(again);

	/* A new binary alone is a new image. */
	ASSERT_EQ(t_sh(out, sizeof out, 1, "cp '%s' cat/%s/.w && mv -f cat/%s/.w cat/%s/w", t_bin("tests-workers/job_worker"),
		       mesh_target_triple(), mesh_target_triple(), mesh_target_triple()),
		  0);
	prepare("cat", &b, &caps);
	EXPECT_UEQ(b.image_hash, a.image_hash);
	EXPECT_TRUE(mesh_image_id(&b) != mesh_image_id(&a));
	ASSERT_EQ(meshd_image_keep("logs", &b, NULL, &caps, MESH_GPU_NONE, &db, &err), 0);
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

static unsigned mode_of(const char *path, unsigned *gid)
{
	struct stat st;
	if (lstat(path, &st) != 0)
		FAIL("stat %s", path);
	if (gid)
		*gid = (unsigned)st.st_gid;
	return (unsigned)(st.st_mode & 07777);
}

/* As root, a kept copy is its workers' user's to run and no one else's
 * (issue 31, item 4: it was root's alone, 0700, and a rollback to it left
 * a program without `user` FAILED); a copy an older meshd kept 0700 is
 * mended when it is reused; and whether that user can reach it at all
 * (every directory above it, --logs included) is told before a rollback
 * relies on it. */
TEST(images_a_kept_copy_is_runnable_by_its_workers_user_alone)
{
	if (geteuid() != 0)
		SKIP("needs root (a copy is given to another user only by a root meshd)");
	struct mesh_limits_caps caps;
	struct mesh_run_as ra;
	char *err = NULL, *d = NULL, path[8192];
	mesh_limits_detect(&caps, NULL);
	ASSERT_EQ(mesh_limits_run_as("nobody", &ra, &err), 0);
	mkdir("logs", 0755);
	struct mesh_image a, copy;
	catalog("v1");
	prepare("cat", &a, &caps);
	ASSERT_EQ(meshd_image_keep("logs", &a, &ra, &caps, MESH_GPU_NONE, &d, &err), 0);
	unsigned gid;
	EXPECT_EQ(mode_of("logs/.images", NULL), 0711);
	EXPECT_EQ(mode_of("logs/.images/w", NULL), 0711);
	EXPECT_EQ(mode_of(d, &gid), 0710);
	EXPECT_EQ(gid, ra.gid);
	snprintf(path, sizeof path, "%s/%s", d, mesh_target_triple());
	EXPECT_EQ(mode_of(path, &gid), 0710);
	EXPECT_EQ(gid, ra.gid);
	snprintf(path, sizeof path, "%s/%s/w", d, mesh_target_triple());
	EXPECT_EQ(mode_of(path, &gid), 0510);
	EXPECT_EQ(gid, ra.gid);
	snprintf(path, sizeof path, "%s/w.toml", d);
	EXPECT_EQ(mode_of(path, &gid), 0600);
	EXPECT_EQ(gid, 0);
	/* Still a catalog that loads as the same image. */
	prepare(d, &copy, &caps);
	EXPECT_UEQ(mesh_image_id(&copy), mesh_image_id(&a));
	/* The runner's directories are root's alone: the first one is named. */
	char bin[8300];
	snprintf(bin, sizeof bin, "%s", copy.bin_path);
	EXPECT_EQ(meshd_image_reachable(bin, &ra, &err), -EACCES);
	EXPECT_CONTAINS(err, "user 'nobody' cannot pass '");
	EXPECT_CONTAINS(err, "mode 0700");
	free(err);
	err = NULL;
	ASSERT_EQ(chmod("..", 0711), 0);
	ASSERT_EQ(chmod(".", 0711), 0);
	EXPECT_EQ(meshd_image_reachable(bin, &ra, &err), 0);
	EXPECT_EQ(meshd_image_reachable(bin, NULL, &err), 0); /* meshd's own user */
	/* --logs root's alone: named too. */
	ASSERT_EQ(chmod("logs", 0700), 0);
	EXPECT_EQ(meshd_image_reachable(bin, &ra, &err), -EACCES);
	EXPECT_CONTAINS(err, "/logs' (mode 0700");
	free(err);
	err = NULL;
	ASSERT_EQ(chmod("logs", 0755), 0);
	/* A copy an older meshd kept root's alone is mended at its reuse. */
	ASSERT_EQ(chmod(d, 0700), 0);
	ASSERT_EQ(chmod(bin, 0700), 0);
	EXPECT_EQ(meshd_image_reachable(bin, &ra, &err), -EACCES);
	free(err);
	err = NULL;
	char *again = NULL;
	ASSERT_EQ(meshd_image_keep("logs", &a, &ra, &caps, MESH_GPU_NONE, &again, &err), 0);
	EXPECT_STREQ(again, d);
	EXPECT_EQ(mode_of(bin, NULL), 0510);
	EXPECT_EQ(meshd_image_reachable(bin, &ra, &err), 0);
	/* Run by nobody: it execs. */
	EXPECT_EQ(t_sh(out, sizeof out, 1, "setpriv --reuid=65534 --regid=%u --clear-groups test -x '%s'", ra.gid, bin), 0);
	free(again);
	free(d);
	mesh_image_release(&copy);
	mesh_image_release(&a);
}

#include "runner/netns.h"

#include "runner/leftover.h"
#include "runner/t.h"

#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct t_netns *made;

static void del(const char *name)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "ip netns del %s 2>/dev/null", name);
	if (system(cmd)) {
		/* already gone */
	}
}

void t_netns_down(struct t_netns *ns)
{
	if (!ns || ns->owner != getpid())
		return;
	ns->owner = 0;
	for (int i = 0; i < ns->n; i++)
		if (ns->hosts[i][0])
			del(ns->hosts[i]);
	if (ns->hub[0])
		del(ns->hub);
	if (made == ns)
		made = NULL;
}

static void down_at_exit(void)
{
	t_netns_down(made);
}

int t_netns_up(struct t_netns *ns, int n)
{
	char out[1024];
	memset(ns, 0, sizeof *ns);
	if (n > T_NETNS_MAX)
		FAIL("t_netns_up: at most %d hosts", T_NETNS_MAX);
	ns->owner = getpid();
	snprintf(ns->hub, sizeof ns->hub, "mt-hub-%d", (int)getpid());
	if (t_sh(out, sizeof out, 1, "ip netns add %s", ns->hub) != 0) {
		fprintf(stderr, "    the kernel refuses a network namespace here: %s\n", out);
		ns->hub[0] = 0;
		return 1;
	}
	t_leftover_note("netns", ns->hub);
	if (!made)
		atexit(down_at_exit);
	made = ns;
	if (t_sh(out, sizeof out, 1,
		 "ip -n %s link set lo up && ip -n %s link add br0 type bridge && "
		 "ip -n %s addr add " T_NETNS_HUB_ADDR "/24 dev br0 && ip -n %s link set br0 up",
		 ns->hub, ns->hub, ns->hub, ns->hub) != 0)
		FAIL("bridge: %s", out);
	for (int i = 0; i < n; i++) {
		const char *h = ns->hosts[i];
		snprintf(ns->hosts[i], sizeof ns->hosts[i], "mt-h%d-%d", i, (int)getpid());
		ns->n = i + 1;
		t_leftover_note("netns", h);
		if (t_sh(out, sizeof out, 1,
			 "ip netns add %s && ip -n %s link set lo up && "
			 "ip -n %s link add vh%d type veth peer name eth0 netns %s && "
			 "ip -n %s link set vh%d master br0 up && "
			 "ip -n %s addr add 10.213.0.%d/24 dev eth0 && ip -n %s link set eth0 up",
			 h, h, ns->hub, i, h, ns->hub, i, h, 11 + i, h) != 0)
			FAIL("host %d: %s", i, out);
	}
	return 0;
}

int t_netns_enter(const char *name)
{
	char path[128];
	int back = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	snprintf(path, sizeof path, "/run/netns/%s", name);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (back < 0 || fd < 0 || setns(fd, CLONE_NEWNET) < 0) {
		if (back >= 0)
			close(back);
		back = -1;
	}
	if (fd >= 0)
		close(fd);
	return back;
}

int t_netns_back(int fd)
{
	int rc = fd >= 0 && setns(fd, CLONE_NEWNET) == 0 ? 0 : -1;
	if (fd >= 0)
		close(fd);
	return rc;
}

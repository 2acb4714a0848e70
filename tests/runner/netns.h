/* Several hosts on one machine for the tests (issue 10): network
 * namespaces of the test's own, a hub holding a bridge (10.213.0.1/24)
 * and host namespaces joined to it by veth pairs (host i: eth0,
 * 10.213.0.<11 + i>).  The addresses exist only inside these namespaces;
 * nothing reaches any other host.  Needs root. */
#ifndef MESH_TEST_NETNS_H
#define MESH_TEST_NETNS_H

#include <sys/types.h>

#define T_NETNS_MAX 8
#define T_NETNS_HUB_ADDR "10.213.0.1"
#define T_NETNS_CIDR "10.213.0.0/24"

struct t_netns {
	char hub[32];
	char hosts[T_NETNS_MAX][32];
	int n;
	pid_t owner; /* the process that made them: only it deletes them */
};

/* Makes the hub and n hosts (named after this process).  0; 1 when the
 * kernel refuses a network namespace here (the reason printed: the caller
 * SKIPs); a failure after that fails the test.  They are
 * deleted at exit too (a failed test leaves none). */
int t_netns_up(struct t_netns *ns, int n);
/* Deletes them (a passing test ends without exit handlers). */
void t_netns_down(struct t_netns *ns);
/* Moves this thread into namespace name: what it starts from now on runs
 * there.  The fd of the namespace it was in (for t_netns_back), or -1. */
int t_netns_enter(const char *name);
/* Back into the namespace of fd (closed).  0 or -1. */
int t_netns_back(int fd);

#endif

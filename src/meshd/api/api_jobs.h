/* The control API's job routes (docs/api.md, "Jobs"): meshd/api/api.c hands
 * every /v1/jobs request here from its op thread and sends the answer.
 *
 *   POST /v1/jobs?program=P[&chunks=N][&max_workers=K][&retries=K]
 *        [&timeout=S][&speculate=1][&name=NAME]     body: the input lines
 *   GET  /v1/jobs[?all=1]
 *   GET  /v1/jobs/<id>[?wait=S]
 *   DELETE /v1/jobs/<id>
 *   GET  /v1/jobs/<id>/results[?from=K][&wait=S]
 *   GET  /v1/jobs/<id>/chunks[?buckets=N]
 *   POST /v1/jobs/<id>/cancel */
#ifndef MESH_MESHD_API_API_JOBS_H
#define MESH_MESHD_API_API_JOBS_H

#include <stddef.h>

struct meshd_jobs;
struct evkeyvalq;

struct meshd_api_answer {
	unsigned status;
	char type[128];	    /* Content-Type */
	char *data;	    /* malloc'd */
	size_t len;
	const char *allow;  /* 405: the Allow header (static) */
};

/* 1 when path is a job route (the caller then calls meshd_api_jobs). */
int meshd_api_is_jobs(const char *path);
/* Answers one job request over jobs (NULL: meshd runs none, 503).  a is
 * always filled (data may be NULL only when len is 0). */
void meshd_api_jobs(struct meshd_jobs *jobs, const char *method, const char *path, const struct evkeyvalq *args, const void *body,
		    size_t n, struct meshd_api_answer *a);

#endif

/* meshd_jobs_metrics for a meshd without a job subsystem: the job
 * families are left out of /metrics.  The jobs code replaces this file
 * with its own definition (daemon/metrics.h). */
#include "base/err.h"
#include "daemon/metrics.h"

int meshd_jobs_metrics(struct meshd_core *d, struct meshd_job_metrics *out)
{
	(void)d;
	(void)out;
	return MESH_E_UNSUPPORTED;
}

/* server/job_disk.h - the data disk kept for everyone: running jobs' files measured, and the job
 * that passes --max-job-disk, or takes the most of a disk below its floor, stopped (job_disk.c). */
#ifndef KD_JOB_DISK_H
#define KD_JOB_DISK_H

#include "engine.h"

/* Start the watch (its thread). 0, or < 0 with the error. */
int kd_job_disk_start(kd_engine *e);
/* Stop and join it (before the engine stops its runs). No-op when it never started. */
void kd_job_disk_stop(kd_engine *e);

#endif

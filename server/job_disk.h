/* server/job_disk.h - the data disk kept for everyone: running jobs' files measured, and the job
 * that passes --max-job-disk, or takes the most of a disk below its floor, stopped (job_disk.c). */
#ifndef KD_JOB_DISK_H
#define KD_JOB_DISK_H

#include "engine.h"

/* Start the watch (its thread). 0, or < 0 with the error. */
int kd_job_disk_start(kd_engine *e);
/* Stop and join it (before the engine stops its runs). No-op when it never started. */
void kd_job_disk_stop(kd_engine *e);
/* 1 while the data disk has less than its floor free (disk_floor.h; read at each call): no
 * metric point is stored then (507), nor a job's output (kd_job_disk_log_keep). Thread-safe; not
 * under e->mu. */
int kd_job_disk_low(kd_engine *e);
/* Of job_id's log lines[0..n), those the catalog takes, into out (n + 1 of them): all, but while
 * the disk is below its floor kestreld's own lines only, and, the first time for the job since the
 * disk went below, one saying that its output is dropped. Their count. */
size_t kd_job_disk_log_keep(kd_engine *e, int64_t job_id, const kd_log_line *lines, size_t n, kd_log_line *out);

#endif

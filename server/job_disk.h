/* server/job_disk.h - the data disk kept for everyone: running jobs' files measured, and the job
 * that passes --max-job-disk, or takes the most of a disk below its floor, stopped (job_disk.c). */
#ifndef KD_JOB_DISK_H
#define KD_JOB_DISK_H

#include "engine.h"

/* Start the watch (its thread). 0, or < 0 with the error. */
int kd_job_disk_start(kd_engine *e);
/* Stop and join it (before the engine stops its runs). No-op when it never started. */
void kd_job_disk_stop(kd_engine *e);
/* 1 while the data disk has less than half its floor free (disk_floor.h; read at each call): nothing
 * more is added to the catalog then: no log line (kd_job_disk_log_keep), no metric point, job,
 * priority's change or model's settings (507, api.c kd_refused_at_floor), no log index entry.
 * Thread-safe; not under e->mu. */
int kd_job_disk_low(kd_engine *e);
/* Of job_id's log lines[0..*n), those the catalog takes, *n set to their count: lines themselves (no
 * copy); while the disk is below half its floor none, but, the first time for a running job each
 * time the disk goes below (at most once a minute), *note, saying that its output is dropped. */
const kd_log_line *kd_job_disk_log_keep(kd_engine *e, int64_t job_id, const kd_log_line *lines, size_t *n,
                                        kd_log_line *note);

#endif

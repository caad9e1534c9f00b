/* server/exec_reap.h - /proc, read for the local executor: a process's start time (recorded with a
 * run's pid), and at a start after a crash, stopping what the local jobs of the daemon before left
 * running on this host (before anything of this daemon runs); and for the environment builder,
 * whether its account still runs anything. */
#ifndef KD_EXEC_REAP_H
#define KD_EXEC_REAP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "catalog.h"

/* Start time of a process (clock ticks after boot, /proc's field 22), -1 when gone. Guards against pid reuse. */
int64_t kd_proc_start_time(pid_t pid);

/* 1 when a process of real uid uid runs (zombies are not counted: they run nothing). */
int kd_proc_uid_alive(uid_t uid);

/* Stop (SIGKILL) every process that the local jobs in rows (RUNNING when the daemon before stopped:
 * their ids, recorded pids and start times, and when their runs started) left, and say on stderr
 * what was stopped or left:
 *  1. every process whose environment holds KESTREL_CHECKPOINT_DIR=DATA_DIR/jobs/ID/checkpoint of
 *     one of them, and its process group (a job's group holds only the job's processes: it runs in
 *     a session of its own). This finds a run however early kestreld died, before its pid was
 *     recorded too, and what outlived a gang rank's shell;
 *  2. then each recorded group (a job's, its gang's ranks from DATA_DIR/gangs/ID, forgotten after)
 *     whose leader is that very process (same start time, in a run started this boot): it stops a
 *     run that rewrote its environment (setproctitle). A group that lives on showing neither is
 *     left running, and said to be. */
void kd_exec_reap(const char *data_dir, const kd_job_row *rows, size_t n);

/* At the end of local job id's run (its process group, or every rank's, has ended): stop what it
 * left running outside its group (setsid), found by step 1's mark, and wait for it (2 s at most).
 * A job's account is shared by its user's jobs and counted against --max-job-processes: what a run
 * left would hold that user's later jobs back (a hostile test: a cancelled job's 47 detached
 * processes kept every later job from starting). How many were stopped. */
size_t kd_exec_reap_left(const char *data_dir, int64_t id);

#endif

/* server/job_cgroup.h - each local job's processes in a cgroup v2 of its own (job_cgroup.c): what a
 * job starts stays in it whatever it does (setsid, double fork, a new environment), so its end stops
 * all of it. Without a writable cgroup v2 (kestreld not root, no cgroup2 mount) every call does
 * nothing, and a job's processes are found by their marker alone (exec_reap.c). */
#ifndef KD_JOB_CGROUP_H
#define KD_JOB_CGROUP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Make this data dir's cgroup (beside kestreld's own: kestrel-HASH of the data dir's real path) and
 * stop what jobs of a daemon before left in it (SIGKILL, said on stderr). 1 when jobs get cgroups,
 * 0 when not (why on stderr, once). Before any job starts. */
int kd_cgroup_start(const char *data_dir);
/* Remove this data dir's cgroup at a clean stop (once its jobs ended). */
void kd_cgroup_stop(void);
/* The cgroup of job id made (a leftover of it stopped first); its cgroup.procs opened for writing,
 * for the job's first process to enter it ("0") before it gives up root: an fd to close after the
 * spawn, or -1 (no cgroups, or it could not be made: said on stderr). */
int kd_cgroup_job_open(int64_t id);
/* At the end of job id's run: SIGKILL whatever is left in its cgroup (cgroup.kill), wait for it to
 * empty (2 s at most) and remove it. How many processes were stopped. */
size_t kd_cgroup_job_end(int64_t id);
/* The pids in job id's cgroup, at most max, into pids: how many (0 without cgroups). */
size_t kd_cgroup_job_pids(int64_t id, pid_t *pids, size_t max);

#endif

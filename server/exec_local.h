/* server/exec_local.h - the local executor: jobs as process groups on this host. */
#ifndef KD_EXEC_LOCAL_H
#define KD_EXEC_LOCAL_H

#include <sys/types.h>
#include "engine.h"

extern const kd_executor kd_exec_local;

/* Start time of a process (clock ticks after boot, /proc's field 22), -1 when gone. Guards against pid reuse. */
int64_t kd_proc_start_time(pid_t pid);
/* Stop (SIGKILL) the process group that a daemon before this one (of data_dir) left for job id: its
 * leader pid, started at start (0: not known, or not this boot). The group is the job's while that
 * very leader lives, or while one of its processes carries the job's KESTREL_CHECKPOINT_DIR: the leader
 * gone (a rank's shell dies with kestreld, and what it started lives on) or its start unknown. A pid of
 * another process, whose group holds nothing of the job's, is left alone. 1: stopped; 0: no group
 * there; -1: a group lives that shows nothing of the job (left running). */
int kd_exec_reap_group(const char *data_dir, pid_t pid, int64_t start, int64_t id);
/* Say on stderr what kd_exec_reap_group did about job id's group pid (nothing when it found none). */
void kd_exec_reap_report(int64_t id, pid_t pid, int reaped);
/* Stop the ranks of gang id that a daemon before this one left running (and forget them); their start
 * times count only when this_boot (the run started after the host's last boot). */
void kd_exec_gang_reap(const char *data_dir, int64_t id, int this_boot);

#endif

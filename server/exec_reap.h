/* server/exec_reap.h - at a start after a crash, stop what the local jobs of the daemon before left
 * running on this host (before anything of this daemon runs). */
#ifndef KD_EXEC_REAP_H
#define KD_EXEC_REAP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* One local job that was RUNNING when the daemon before stopped: its id and what was recorded of its
 * process group (pid 0: none yet), its start time counted only when this_boot. */
typedef struct {
    int64_t id;
    pid_t pid;
    int64_t pid_start;
    int this_boot;
} kd_reap_job;

/* Stop (SIGKILL) every process those jobs left, and say on stderr what was stopped or left:
 *  1. every process whose environment holds KESTREL_CHECKPOINT_DIR=DATA_DIR/jobs/ID/checkpoint of
 *     one of them, and its process group (a job's group holds only the job's processes: it runs in
 *     a session of its own). This finds a run however early kestreld died, before its pid was
 *     recorded too, and what outlived a gang rank's shell;
 *  2. then each recorded group (a job's, its gang's ranks from DATA_DIR/gangs/ID, forgotten after)
 *     whose leader is that very process (same start time, this boot): it stops a run that rewrote
 *     its environment (setproctitle). A group that lives on showing neither is left running, and
 *     said to be. */
void kd_exec_reap(const char *data_dir, const kd_reap_job *jobs, size_t n);

#endif

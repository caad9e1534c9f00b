/* server/exec_local.h - the local executor: jobs as process groups on this host. */
#ifndef KD_EXEC_LOCAL_H
#define KD_EXEC_LOCAL_H

#include <sys/types.h>
#include "engine.h"

extern const kd_executor kd_exec_local;

/* Start time of a process (clock ticks after boot, from /proc), -1 when gone. Guards against pid reuse. */
int64_t kd_proc_start_time(pid_t pid);
/* Stop the ranks of gang id that a daemon before this one left running (and forget them). */
void kd_exec_gang_reap(const char *data_dir, int64_t id);

#endif

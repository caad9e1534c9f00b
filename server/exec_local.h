/* server/exec_local.h - the local executor: jobs as process groups on this host. */
#ifndef KD_EXEC_LOCAL_H
#define KD_EXEC_LOCAL_H

#include <sys/types.h>
#include "engine.h"

extern const kd_executor kd_exec_local;

/* Start time of a process (clock ticks after boot, /proc's field 22), -1 when gone. Guards against pid reuse. */
int64_t kd_proc_start_time(pid_t pid);

#endif

/* server/exec_local.h - the local executor: jobs as process groups on this host. */
#ifndef KD_EXEC_LOCAL_H
#define KD_EXEC_LOCAL_H

#include <sys/types.h>
#include "engine.h"

extern const kd_executor kd_exec_local;

#endif

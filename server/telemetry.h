/* server/telemetry.h - the per-job GPU sampler (telemetry.c). */
#ifndef KD_TELEMETRY_H
#define KD_TELEMETRY_H

#include "engine.h"

/* Start sampling when a node has real GPUs (else nothing, 0). */
int kd_telemetry_start(kd_engine *e);
/* Stop and join the sampler (before the engine stops). */
void kd_telemetry_stop(kd_engine *e);

#endif

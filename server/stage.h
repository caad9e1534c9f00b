/* server/stage.h - a job's repository inputs put in place before it starts (stage.c). */
#ifndef KD_STAGE_H
#define KD_STAGE_H

#include <stddef.h>
#include "engine.h"
#include "identity.h"

/* Make work (which must not exist) the job's work dir for its identity: a fresh copy of its code
 * version (or an empty dir), with each dataset linked in at its path, read-only, from the host's
 * one copy (DATA/cache/data). Everything is verified as it is pulled from kestreld's store, built
 * in DATA/staging (root's alone) and renamed into place. 0, or -1 with why. */
int kd_stage_work(kd_engine *e, const kd_ident *id, const Kestrel__V1__JobSpec *spec, const char *work, char *why,
                  size_t n);

/* Whether the spec's datasets are in this host's cache: 1 yes; 0 not yet (a copy is started, or
 * runs: why says so, and the engine is kicked when it ends); -1 the copy failed (why). Run for
 * QUEUED jobs, so that a big dataset is copied before the job holds any GPU. */
int kd_stage_ready(kd_engine *e, const Kestrel__V1__JobSpec *spec, char *why, size_t n);
/* Drop cached datasets whose version no longer exists (after a delete and a collection). */
void kd_stage_sweep(kd_engine *e);
/* Empty DATA/staging: what a killed kestreld left half-made (at start, before any job runs). */
void kd_stage_reset(kd_engine *e);

#endif

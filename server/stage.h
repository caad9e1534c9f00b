/* server/stage.h - a job's repository inputs put in place before it starts (stage.c). */
#ifndef KD_STAGE_H
#define KD_STAGE_H

#include <stddef.h>
#include "engine.h"
#include "identity.h"

/* Make work (which must not exist) a fresh copy of the directory version ref ("NAME@N") for the
 * job's identity: pulled from kestreld's store (every file verified) into DATA/staging, a folder
 * only root can reach, given to the identity there, then renamed into place. 0, or -1 with why. */
int kd_stage_code(kd_engine *e, const kd_ident *id, const char *ref, const char *work, char *why, size_t n);

#endif

/* server/api_inputs.h - a submitted job's repository inputs, checked and pinned (api_inputs.c). */
#ifndef KD_API_INPUTS_H
#define KD_API_INPUTS_H

#include "api.h"

/* Check the spec's code (and data) refs against what the submitter may read and pin each to the
 * exact "NAME@N" version. 0, or KESTREL_EINVALID with the error set (a 400 naming the field). */
int kd_inputs_pin(kd_req *r, Kestrel__V1__JobSpec *spec);

#endif

/* server/api_inputs.h - a submitted job's repository inputs, checked and pinned (api_inputs.c). */
#ifndef KD_API_INPUTS_H
#define KD_API_INPUTS_H

#include <cjson/cJSON.h>
#include "api.h"

/* Check the spec's code (and data) refs against what the submitter may read and pin each to the
 * exact "NAME@N" version. 0, or KESTREL_EINVALID with the error set (a 400 naming the field). */
int kd_inputs_pin(kd_req *r, Kestrel__V1__JobSpec *spec);

/* The inputs of spec (code, datasets) that no longer resolve for the caller, listed in msg
 * ("cannot reproduce: dataset team/mnist@7 ... can no longer be found"). 0 when all are there. */
int kd_inputs_missing(kd_req *r, const Kestrel__V1__JobSpec *spec, char *msg, size_t n);
/* For a push by a job token: what the job ran with, {"job_id", "code" | "git_url" + "git_commit",
 * "data": [{"ref","path"}], "params": {...}, "argv": [...]}, stored as the version's lineage.
 * NULL when the job cannot be read. */
cJSON *kd_inputs_lineage(kd_req *r);

#endif

/* server/policy.h - log policies: kestreld's (--log-policy and the built-ins) and each job's. */
#ifndef KD_POLICY_H
#define KD_POLICY_H

#include "engine.h"

enum { KD_POLICY_LABEL = 1, KD_POLICY_ALERT = 2, KD_POLICY_NO_RETRY = 4, KD_POLICY_EXCLUDE_NODE = 8,
       KD_POLICY_RETRY_LARGER = 16 };

/* Compile the built-ins and cfg->log_policies ("NAME:ACTION[,ACTION...]=REGEX"). */
int kd_policies_init(kd_engine *e);
/* 0 when kestreld can match each of spec's own log policies (bounded_regex.h), else KESTREL_EINVALID
 * naming the first that it cannot. */
int kd_policies_spec_check(const Kestrel__V1__JobSpec *spec);
void kd_policies_free(kd_engine *e);
/* Check "NAME:ACTIONS=REGEX" (for --log-policy and --check-config). */
int kd_policy_parse_check(const char *arg);
/* Match a job's new lines against every policy that applies to it (each fires once a run). */
void kd_policies_scan(kd_engine *e, int64_t job_id, const kd_log_line *lines, size_t n);
/* A run ended: the effects (KD_POLICY_NO_RETRY | _EXCLUDE_NODE | _RETRY_LARGER) its matches asked
 * for, with the names of the policies that asked (why, for the reason); the run's state is gone. */
unsigned kd_policies_run_end(kd_engine *e, int64_t job_id, char *why, size_t whylen);
/* A reported metric: a loss that is NaN raises the nan-loss alert once a run. */
void kd_policies_metric(kd_engine *e, int64_t job_id, const char *name, double value);

#endif

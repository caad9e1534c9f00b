/* lib/job/job_priv.h - private layout of job snapshots and specs; spec validation shared with kestreld. */
#ifndef KESTREL_JOB_PRIV_H
#define KESTREL_JOB_PRIV_H

#include "wire.h"

struct kestrel_job {
    uint32_t magic;
    Kestrel__V1__Job *pb;
    int owns_pb;                 /* 0 inside a list: the list owns the message */
    kestrel_job_event *events;
};

struct kestrel_job_spec {
    uint32_t magic;
    Kestrel__V1__JobSpec *pb;
};

#define KESTREL__NAME_MAX 256
#define KESTREL__SPEC_LIST_MAX (256 * 1024)   /* bytes of a job's argv, and of its env */
#define KESTREL__PARAMS_MAX 256               /* parameters of a job */
#define KESTREL__DATA_MAX 64                  /* datasets of a job */
#define KESTREL__POLICIES_MAX 16              /* log policies of a job */
#define KESTREL__POLICY_PATTERN_MAX 1024
#define KESTREL__REGEX_REPEAT_MAX 1000        /* the product of a regex's {m,n} bounds */
#define KESTREL__REQUIREMENTS_MAX (64 * 1024) /* bytes of a job's requirements file */
#define KESTREL__PARAM_VALUE_MAX 4096         /* bytes of one parameter's value */
#define KESTREL__PARAMS_BYTES (64 * 1024)     /* all of them as KESTREL_PARAMS (one env string: 128 KiB max) */
#define KESTREL__MAX_GPUS 1024
#define KESTREL__MAX_REPLICAS 64

/* A long poll (a job's wait, a log's follow) that the server answered early with nothing new, as a
 * proxy or a server ignoring wait_ms does: the caller sleeps *pause_ms (10 ms doubling to 1 s; 0 again
 * once something came), never past deadline_ms, so it never asks thousands of times a second (a
 * hostile test: 62,588 requests in 8 s). started_ms: when the request went out; waited: the wait_ms
 * it asked for. */
void kestrel__poll_pace(int64_t started_ms, long waited, int nothing_new, long *pause_ms, int64_t deadline_ms);

/* Check a spec as the server will: KESTREL_EINVALID with a message naming the field. */
int kestrel__job_spec_validate(const Kestrel__V1__JobSpec *spec);
/* Initialise dst over pb (events are decoded). */
int kestrel__job_init(struct kestrel_job *dst, Kestrel__V1__Job *pb, int owns_pb);
void kestrel__job_fini(struct kestrel_job *job);
/* Log policies, retries, excluded nodes (job_policy.c). */
int kestrel__log_policy_action_valid(const char *action);
/* A regex whose compile and match costs are bounded: no back-references, {m,n} bounds whose
 * product is at most KESTREL__REGEX_REPEAT_MAX. 0, or KESTREL_EINVALID with why. */
int kestrel__regex_bounded(const char *re);
int kestrel__log_policy_validate(const char *name, const char *pattern, char *const *actions, size_t nactions);
int kestrel__job_spec_validate_failure(const Kestrel__V1__JobSpec *s);

#endif

/* server/api_sched.c - scheduler routes: explain, queue, priority updates, checkpoint acks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include "api.h"
#include "envs.h"
#include "stage.h"

static void describe(kd_req *r, const Kestrel__V1__Job *job, int *position, char *reason, size_t n)
{
    *position = 0;
    switch ((int)job->state) {
    case KESTREL_JOB_STATE_QUEUED: {
        char dir[PATH_MAX], digest[80];
        if (r->e->envs && job->spec && !kd_engine_never_placed(r->e, job->spec) &&
            kd_envs_check(r->e->envs, job->id, job->spec, reason, n, dir, digest) == KD_ENV_WAIT)
            break;   /* "preparing environment NAME (pip: ...)": not in the plan until it is built */
        if (job->spec && job->spec->n_data && !kd_engine_never_placed(r->e, job->spec) &&
            kd_stage_ready(r->e, job->spec, reason, n) == 0)
            break;   /* "copying dataset ... into this host's cache" */
        if (!kd_engine_explain(r->e, job->id, position, reason, n)) {
            kd_engine_fresh_pass(r->e, 2000);   /* submitted after the last pass: take the next one */
            if (!kd_engine_explain(r->e, job->id, position, reason, n))
                snprintf(reason, n, "not yet considered by the scheduler");
        }
        break;
    }
    case KESTREL_JOB_STATE_RUNNING:
        snprintf(reason, n, "running on node %s (%zu device%s)", job->node, job->n_devices, job->n_devices == 1 ? "" : "s");
        break;
    case KESTREL_JOB_STATE_PREEMPTED:
        snprintf(reason, n, "stopping after preemption: %s", job->reason);
        break;
    default:
        snprintf(reason, n, "ended %s: %s", kestrel_job_state_name((int)job->state), job->reason);
    }
}

enum MHD_Result kd_route_explain(kd_req *r, int64_t id)
{
    enum MHD_Result reply = MHD_NO;
    Kestrel__V1__Explanation ex = KESTREL__V1__EXPLANATION__INIT;
    Kestrel__V1__Job *job = kd_visible_job(r, id, 0, &reply);
    char reason[400];
    int position;
    if (job == NULL)
        return reply;
    describe(r, job, &position, reason, sizeof(reason));
    ex.job_id = id;
    ex.state = job->state;
    ex.position = position;
    ex.reason = reason;
    reply = kd_reply_msg(r, 200, &ex.base);
    protobuf_c_message_free_unpacked(&job->base, NULL);
    return reply;
}

enum MHD_Result kd_route_queue(kd_req *r)
{
    enum MHD_Result reply;
    Kestrel__V1__Queue q = KESTREL__V1__QUEUE__INIT;
    Kestrel__V1__QueueEntry *entries;
    size_t n = 0, k = 0;
    kd_wait *w;
    if (strcmp(r->method, "GET"))
        return kd_reply_error(r, 405, "method_not_allowed", "use GET on /api/v1/queue");
    if (r->who.job_id)
        return kd_reply_error(r, 403, "permission_denied", "a job token can only read its own job");
    kd_engine_fresh_pass(r->e, 2000);
    w = kd_engine_queue(r->e, &n);
    entries = calloc(n + 1, sizeof(*entries));
    q.entries = calloc(n + 1, sizeof(*q.entries));
    if (w == NULL || entries == NULL || q.entries == NULL) {
        free(w);
        free(entries);
        free(q.entries);
        return kd_reply_failure(r, kestrel__error_oom());
    }
    for (size_t i = 0; i < n; i++) {
        Kestrel__V1__Job *job = NULL;
        int64_t owner = 0;
        if (kd_catalog_job_load(r->e->cat, w[i].job, 0, &job, &owner) < 0)
            continue;
        if (!r->who.is_admin && owner != r->who.user_id) {
            protobuf_c_message_free_unpacked(&job->base, NULL);
            continue;
        }
        kd_redact_job(job);
        kestrel__v1__queue_entry__init(&entries[k]);
        entries[k].job = job;
        entries[k].position = w[i].position;   /* position in the whole queue, others' jobs included */
        entries[k].reason = w[i].reason;
        q.entries[k] = &entries[k];
        k++;
    }
    q.n_entries = k;
    reply = kd_reply_msg(r, 200, &q.base);
    for (size_t i = 0; i < k; i++)
        protobuf_c_message_free_unpacked(&entries[i].job->base, NULL);
    free(entries);
    free(q.entries);
    free(w);
    return reply;
}

int kd_priority_refused(kd_req *r, int cls, int rerun, enum MHD_Result *reply)
{
    char from[160], msg[600];
    int most = kd_priority_limit_of(&r->e->cfg->priority_limits, &r->who, from, sizeof(from));
    if (cls <= most)
        return 0;
    if (rerun)   /* a rerun keeps the job's class: only a new submission can lower it */
        snprintf(msg, sizeof(msg), "this job's priority, %s, is above what %s may give a job (%s, kestreld "
                 "--max-priority), so it cannot be rerun as it was: submit it again with --priority %s, or ask an admin",
                 kd_priority_name(cls), r->who.user, from, kd_priority_name(most));
    else
        snprintf(msg, sizeof(msg), "priority %s is above what %s may give a job (%s, kestreld --max-priority): ask an "
                 "admin, or use %s", kd_priority_name(cls), r->who.user, from, kd_priority_name(most));
    *reply = kd_reply_error(r, 403, "permission_denied", msg);
    return 1;
}

int kd_exempt_refused(kd_req *r, int rerun, enum MHD_Result *reply)
{
    char from[160], msg[600];
    int most = kd_priority_limit_of(&r->e->cfg->priority_limits, &r->who, from, sizeof(from));
    if (most >= KESTREL_PRIORITY_URGENT)
        return 0;
    snprintf(msg, sizeof(msg), "%s (--not-preemptible) is for those who may give urgent jobs, and %s may give %s at "
             "most (%s, kestreld --max-priority): %s, or ask an admin",
             rerun ? "this job is one no class may preempt" : "a job no class may preempt", r->who.user,
             kd_priority_name(most), from, rerun ? "submit it again without --not-preemptible" : "submit it preemptible");
    *reply = kd_reply_error(r, 403, "permission_denied", msg);
    return 1;
}

int kd_grace_refused(kd_req *r, int grace_s, int rerun, enum MHD_Result *reply)
{
    char from[160], msg[600];
    int most;
    if (grace_s <= r->e->cfg->max_grace_s ||
        (most = kd_priority_limit_of(&r->e->cfg->priority_limits, &r->who, from, sizeof(from))) >= KESTREL_PRIORITY_URGENT)
        return 0;
    snprintf(msg, sizeof(msg), "field 'grace_period_s': %d s is past kestreld's --max-grace %d s, and a longer grace "
             "(which holds a preemption off) is for those who may give urgent jobs; %s may give %s at most (%s, "
             "kestreld --max-priority): %s", grace_s, r->e->cfg->max_grace_s, r->who.user, kd_priority_name(most),
             from, rerun ? "submit it again with a shorter --grace" : "give a shorter --grace, or ask an admin");
    *reply = kd_reply_error(r, 403, "permission_denied", msg);
    return 1;
}

enum MHD_Result kd_route_priority(kd_req *r, int64_t id)
{
    enum MHD_Result reply = MHD_NO;
    Kestrel__V1__JobUpdate *u;
    Kestrel__V1__Job *job;
    int rc;
    if (r->who.job_id)
        return kd_reply_error(r, 403, "permission_denied", "a job token cannot change priorities");
    if ((job = kd_visible_job(r, id, 0, &reply)) == NULL)
        return reply;
    protobuf_c_message_free_unpacked(&job->base, NULL);
    if ((u = (Kestrel__V1__JobUpdate *)kd_body(r, &kestrel__v1__job_update__descriptor, &reply)) == NULL)
        return reply;
    if (u->priority < KESTREL__V1__PRIORITY__NORMAL || u->priority > KESTREL__V1__PRIORITY__URGENT) {
        protobuf_c_message_free_unpacked(&u->base, NULL);
        return kd_reply_error(r, 400, "invalid_argument", "field 'priority': normal, high or urgent");
    }
    if (kd_priority_refused(r, (int)u->priority, 0, &reply) || kd_refused_at_floor(r, &reply)) {
        protobuf_c_message_free_unpacked(&u->base, NULL);
        return reply;
    }
    rc = kd_engine_set_priority(r->e, id, (int)u->priority);
    protobuf_c_message_free_unpacked(&u->base, NULL);
    if (rc == 1)
        return kd_reply_error(r, 409, "conflict", "only a QUEUED job can change its priority");
    if (rc < 0)
        return kd_reply_failure(r, rc);
    if ((job = kd_visible_job(r, id, 1, &reply)) == NULL)
        return reply;
    return kd_reply_owned(r, 200, &job->base);
}

enum MHD_Result kd_route_checkpoint(kd_req *r, int64_t id)
{
    enum MHD_Result reply = MHD_NO;
    Kestrel__V1__Job *job = kd_visible_job(r, id, 0, &reply);
    int rc;
    if (job == NULL)
        return reply;
    protobuf_c_message_free_unpacked(&job->base, NULL);
    if ((rc = kd_engine_checkpoint(r->e, id)) < 0)
        return kd_reply_failure(r, rc);
    if ((job = kd_visible_job(r, id, 0, &reply)) == NULL)
        return reply;
    return kd_reply_owned(r, 200, &job->base);
}

enum MHD_Result kd_route_nodes(kd_req *r)
{
    Kestrel__V1__NodeList *l;
    int rc;
    if (strcmp(r->method, "GET"))
        return kd_reply_error(r, 405, "method_not_allowed", "use GET on /api/v1/nodes");
    if (r->who.job_id)
        return kd_reply_error(r, 403, "permission_denied", "a job token can only read its own job");
    if ((rc = kd_engine_nodes(r->e, &l)) < 0)
        return kd_reply_failure(r, rc);
    return kd_reply_owned(r, 200, &l->base);
}

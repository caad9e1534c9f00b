/* server/api_jobs.c - /api/v1/jobs routes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "api.h"
#include "metrics.h"
#include "policy.h"
#include "api_inputs.h"
#include "envs.h"
#include "job_disk.h"
#include "route.h"
#include "job_priv.h"

#define MAX_WAIT_MS 60000
#define LOG_PAGE 1000
#define MAX_METRICS 10000

static int is_final(int s)
{
    return s == KESTREL_JOB_STATE_SUCCEEDED || s == KESTREL_JOB_STATE_FAILED || s == KESTREL_JOB_STATE_CANCELLED;
}

/* Parse a decimal query value in [lo, hi]; def when absent. -1 and a 400 reply on junk. */
static int query_int(kd_req *r, const char *key, long long lo, long long hi, long long def, long long *out,
                     enum MHD_Result *reply)
{
    const char *v = kd_query(r, key);
    char msg[160];
    if (v == NULL || !*v) {
        *out = def;
        return 0;
    }
    if (kd_parse_int(v, lo, hi, out) < 0) {
        snprintf(msg, sizeof(msg), "query parameter '%s' must be an integer in %lld..%lld", key, lo, hi);
        *reply = kd_reply_error(r, 400, "invalid_argument", msg);
        return -1;
    }
    return 0;
}

void kd_redact_job(Kestrel__V1__Job *job)
{
    for (size_t i = 0; job && job->spec && i < job->spec->n_secret_env; i++) {
        char *old = job->spec->secret_env[i]->value, *v;
        if (old == protobuf_c_empty_string)
            continue;
        if ((v = strdup("***")) == NULL) {   /* never leak it: blank it in place */
            memset(old, '*', strlen(old));
            continue;
        }
        free(old);
        job->spec->secret_env[i]->value = v;
    }
}

/* Load a job the caller may see; 404 for missing and for other users' jobs alike. */
Kestrel__V1__Job *kd_visible_job(kd_req *r, int64_t id, int with_events, enum MHD_Result *reply)
{
    Kestrel__V1__Job *job = NULL;
    int64_t owner = 0;
    int rc = kd_catalog_job_load(r->e->cat, id, with_events, &job, &owner);
    int ok;
    if (rc < 0) {
        *reply = kd_reply_failure(r, rc);
        return NULL;
    }
    ok = r->who.job_id ? r->who.job_id == id : (r->who.is_admin || r->who.user_id == owner);
    if (!ok) {
        char msg[64];
        protobuf_c_message_free_unpacked(&job->base, NULL);
        snprintf(msg, sizeof(msg), "job %lld not found", (long long)id);
        *reply = kd_reply_error(r, 404, "not_found", msg);
        return NULL;
    }
    kd_redact_job(job);
    return job;
}

/* A dependency or affinity target must be a job the submitter may see: another user's job is
 * refused exactly like a missing one, so neither its existence nor its state leaks. */
static int refs_visible(kd_req *r, const Kestrel__V1__JobSpec *spec)
{
    size_t total = spec->n_after_ok + spec->n_after_any + (spec->affinity_job ? 1 : 0);
    for (size_t i = 0; i < total; i++) {
        int64_t id = i < spec->n_after_ok ? spec->after_ok[i]
                     : i < spec->n_after_ok + spec->n_after_any ? spec->after_any[i - spec->n_after_ok]
                                                                : spec->affinity_job;
        const char *field = i < spec->n_after_ok ? "after_ok"
                            : i < spec->n_after_ok + spec->n_after_any ? "after_any" : "affinity_job";
        Kestrel__V1__Job *job = NULL;
        int64_t owner = 0;
        int ok = kd_catalog_job_load(r->e->cat, id, 0, &job, &owner) == 0 &&
                 (r->who.is_admin || owner == r->who.user_id);
        if (job)
            protobuf_c_message_free_unpacked(&job->base, NULL);
        if (!ok)
            return kestrel__error_set(KESTREL_EINVALID, "field '%s': job %lld does not exist", field, (long long)id);
    }
    return 0;
}

/* Queue spec (owned: freed here) for the caller: the checks every submission passes, then the insert
 * (rerun: a job again, as it was). */
static enum MHD_Result submit_spec(kd_req *r, Kestrel__V1__JobSpec *spec, int rerun)
{
    enum MHD_Result reply = MHD_NO;
    Kestrel__V1__Job *job;
    int64_t id;
    int rc;
    if (kd_refused_at_floor(r, &reply))
        goto out;
    if ((rc = kestrel__job_spec_validate(spec)) < 0 || (rc = kd_policies_spec_check(spec)) < 0 ||
        (rc = refs_visible(r, spec)) < 0 || (rc = kd_inputs_pin(r, spec)) < 0) {
        reply = kd_reply_failure(r, rc);
        goto out;
    }
    if (r->e->envs && kd_envs_unknown(r->e->envs, spec)) {
        char msg[200];
        snprintf(msg, sizeof(msg), "field 'environment': no environment '%s' (kestrel envs lists them)",
                 spec->environment);
        reply = kd_reply_error(r, 400, "invalid_argument", msg);
        goto out;
    }
    if (spec->replicas == 1)
        spec->replicas = 0;   /* one process, as the library writes it */
    if (!kd_engine_pool_external(r->e, spec->pool)) {   /* Slurm says itself whether a job can ever fit */
        int most = 0;
        for (size_t n = 0; n < r->e->cfg->nnodes; n++)
            if (r->e->cfg->nodes[n].ndev > most)
                most = r->e->cfg->nodes[n].ndev;
        if (spec->gpus > most) {
            char msg[128];
            snprintf(msg, sizeof(msg), "field 'gpus': the job needs %d GPUs but the largest node has %d", spec->gpus,
                     most);
            reply = kd_reply_error(r, 400, "invalid_argument", msg);
            goto out;
        }
        if (spec->replicas > 1 && spec->gpus > 0) {   /* a gang: every rank's GPUs on one node of its pool */
            int ranks = 0;
            for (size_t n = 0; n < r->e->cfg->nnodes; n++)
                if (!spec->pool[0] || !strcmp(r->e->cfg->nodes[n].pool, spec->pool))
                    ranks += r->e->cfg->nodes[n].ndev / spec->gpus;
            if (ranks < spec->replicas) {
                char msg[200];
                snprintf(msg, sizeof(msg), "field 'replicas': %d ranks of %d GPUs each, but the nodes%s%s hold at "
                         "most %d such ranks", spec->replicas, spec->gpus, spec->pool[0] ? " of pool " : "",
                         spec->pool, ranks);
                reply = kd_reply_error(r, 400, "invalid_argument", msg);
                goto out;
            }
        }
        for (size_t q = 0; q < r->e->cfg->nquotas; q++) {   /* past a quota it would wait for good */
            const kd_quota *k = &r->e->cfg->quotas[q];
            int need = kd_job_gpus(spec->gpus, spec->replicas);
            if (kd_quota_covers(k, r->who.user_id, r->who.team) && need > k->max_gpus) {
                char msg[300];
                snprintf(msg, sizeof(msg), "field 'gpus': the job needs %d GPUs but the quota of %s %s is %d (--quota)",
                         need, k->is_team ? "team" : "user", k->is_team ? k->team : r->who.user, k->max_gpus);
                reply = kd_reply_error(r, 400, "invalid_argument", msg);
                goto out;
            }
        }
    }
    {
        int64_t queued = kd_catalog_count_queued(r->e->cat, r->who.user_id);
        if (queued >= r->e->cfg->max_queued) {
            char msg[200];
            snprintf(msg, sizeof(msg), "you have %lld jobs queued, the most kestreld takes per user "
                     "(--max-queued %d): wait for some to start, or cancel some", (long long)queued,
                     r->e->cfg->max_queued);
            reply = kd_reply_error(r, 429, "resource_exhausted", msg);
            goto out;
        }
    }
    if (spec->priority == KESTREL__V1__PRIORITY__PRIORITY_UNSPECIFIED)
        spec->priority = KESTREL__V1__PRIORITY__NORMAL;
    if (kd_priority_refused(r, (int)spec->priority, rerun, &reply) ||
        (spec->not_preemptible && kd_exempt_refused(r, rerun, &reply)) ||
        kd_grace_refused(r, spec->grace_period_s, rerun, &reply))
        goto out;
    /* the reply shows the job as committed (QUEUED), whatever the scheduler does next */
    rc = kd_catalog_job_insert(r->e->cat, r->who.user_id, spec, kestrel__now_ms(), &id, &job);
    kd_engine_kick(r->e);
    kd_engine_changed(r->e);
    if (rc < 0) {
        reply = kd_reply_failure(r, rc);
        goto out;
    }
    kd_metrics_submitted(r->e->metrics, spec->priority ? (int)spec->priority : KESTREL_PRIORITY_NORMAL);
    kd_redact_job(job);
    reply = kd_reply_owned(r, 201, &job->base);
out:
    protobuf_c_message_free_unpacked(&spec->base, NULL);
    return reply;
}

static enum MHD_Result submit(kd_req *r)
{
    enum MHD_Result reply = MHD_NO;
    Kestrel__V1__JobSpec *spec = (Kestrel__V1__JobSpec *)kd_body(r, &kestrel__v1__job_spec__descriptor, &reply);
    return spec ? submit_spec(r, spec, 0) : reply;
}

/* POST /jobs/{id}/rerun: the job again, for its owner, with the same code, data, params, argv and
 * env (its git source at the commit it ran); not its dependencies, which were of that run. Every
 * input that can no longer be found is named (404), and nothing is queued then. */
/* GET /jobs/ID/gpu: whoever may see the job. */
static enum MHD_Result gpu_telemetry(kd_req *r, int64_t id)
{
    Kestrel__V1__GpuTelemetry *t = NULL;
    Kestrel__V1__Job *job;
    enum MHD_Result reply = MHD_NO;
    int rc;
    if ((job = kd_visible_job(r, id, 0, &reply)) == NULL)
        return reply;
    protobuf_c_message_free_unpacked(&job->base, NULL);
    if ((rc = kd_catalog_gpu_telemetry(r->e->cat, id, 100000, &t)) < 0)
        return kd_reply_failure(r, rc);
    return kd_reply_owned(r, 200, &t->base);
}

static enum MHD_Result rerun(kd_req *r, int64_t id)
{
    Kestrel__V1__Job *old = NULL;
    Kestrel__V1__JobSpec *spec = NULL;
    kestrel_buf b = KESTREL_BUF_INIT;
    int64_t owner = 0;
    char msg[2048];
    int rc;
    if (r->who.job_id)
        return kd_reply_error(r, 403, "permission_denied", "a job token cannot rerun jobs");
    if ((rc = kd_catalog_job_load(r->e->cat, id, 0, &old, &owner)) < 0)
        return kd_reply_failure(r, rc);
    if (owner != r->who.user_id || old->spec == NULL) {   /* its secrets are its owner's alone */
        protobuf_c_message_free_unpacked(&old->base, NULL);
        snprintf(msg, sizeof(msg), "job %lld not found", (long long)id);
        return kd_reply_error(r, 404, "not_found", msg);
    }
    if (kestrel__wire_pack(&b, &old->spec->base) < 0 ||
        (spec = (Kestrel__V1__JobSpec *)protobuf_c_message_unpack(&kestrel__v1__job_spec__descriptor, NULL, b.size,
                                                                 (const uint8_t *)b.ptr)) == NULL) {
        kestrel_buf_dispose(&b);
        protobuf_c_message_free_unpacked(&old->base, NULL);
        return kd_reply_error(r, 500, "internal", "cannot copy the job's spec");
    }
    kestrel_buf_dispose(&b);
    if (old->git_commit[0] && spec->git_url[0] && kestrel__wire_set_string(&spec->git_ref, old->git_commit) < 0) {
        protobuf_c_message_free_unpacked(&old->base, NULL);
        protobuf_c_message_free_unpacked(&spec->base, NULL);
        return kd_reply_error(r, 500, "internal", "out of memory");
    }
    protobuf_c_message_free_unpacked(&old->base, NULL);
    free(spec->after_ok);
    free(spec->after_any);
    spec->after_ok = spec->after_any = NULL;
    spec->n_after_ok = spec->n_after_any = 0;
    spec->affinity_job = 0;
    if (kd_inputs_missing(r, spec, msg, sizeof(msg)) < 0) {
        protobuf_c_message_free_unpacked(&spec->base, NULL);
        return kd_reply_error(r, 404, "not_found", msg);
    }
    return submit_spec(r, spec, 1);
}

static enum MHD_Result list(kd_req *r)
{
    enum MHD_Result reply = MHD_NO;
    kd_job_filter f = { 0 };
    Kestrel__V1__JobList *jobs;
    const char *state = kd_query(r, "state"), *label = kd_query(r, "label"), *param = kd_query(r, "param");
    const char *metric = kd_query(r, "metric"), *user;
    char key[300], pkey[80];
    long long size, before;
    int rc;

    if (query_int(r, "page_size", 1, 1000, 100, &size, &reply) < 0 ||
        query_int(r, "page_token", 1, INT64_MAX, 0, &before, &reply) < 0)
        return reply;
    f.limit = (int)size;
    f.before_id = before;
    f.owner_id = r->who.is_admin ? 0 : r->who.user_id;
    f.name = kd_query(r, "name");
    if (f.name && !*f.name)
        f.name = NULL;
    if ((user = kd_query(r, "user")) != NULL && *user) {   /* ?user=NAME: an admin's filter; yours: only you */
        kd_user u;
        if (strlen(user) >= sizeof(u.name) || kd_catalog_user_get(r->e->cat, user, &u) < 0 ||
            (!r->who.is_admin && u.id != r->who.user_id))
            f.owner_id = -1;   /* no such user, or not one the caller may list: no jobs */
        else
            f.owner_id = u.id;
    }
    if (metric && strlen(metric) > 200)
        return kd_reply_error(r, 400, "invalid_argument", "query parameter 'metric': a metric name of at most 200 bytes");
    if (state && *state) {
        if ((f.state = kd_parse_state(state)) == 0)
            return kd_reply_error(r, 400, "invalid_argument", "query parameter 'state': unknown job state");
    }
    if (label && *label) {
        if (kd_parse_label(label, key, sizeof(key), &f.label_value) < 0)
            return kd_reply_error(r, 400, "invalid_argument", "query parameter 'label' must be key=value");
        f.label_key = key;
    }
    if (param && *param) {
        if (kd_parse_label(param, pkey, sizeof(pkey), &f.param_value) < 0)
            return kd_reply_error(r, 400, "invalid_argument", "query parameter 'param' must be key=value");
        f.param_key = pkey;
    }
    if ((rc = kd_catalog_job_list(r->e->cat, &f, &jobs)) < 0)
        return kd_reply_failure(r, rc);
    for (size_t i = 0; i < jobs->n_jobs; i++) {
        kd_redact_job(jobs->jobs[i]);
        if (metric && *metric)   /* ?metric=NAME: each job's latest value of it, for a listing's column */
            kd_catalog_metric_last(r->e->cat, jobs->jobs[i]->id, metric, &jobs->jobs[i]->key_metric);
    }
    return kd_reply_owned(r, 200, &jobs->base);
}

/* GET /jobs/{id}[?wait_ms=N]: with wait_ms, hold the request until the job is final. */
static enum MHD_Result get(kd_req *r, int64_t id)
{
    enum MHD_Result reply = MHD_NO;
    long long wait;
    int64_t deadline;
    if (query_int(r, "wait_ms", 0, MAX_WAIT_MS, 0, &wait, &reply) < 0)
        return reply;
    deadline = kd_wait_deadline(r, wait);
    for (;;) {
        uint64_t gen = kd_engine_generation(r->e);
        Kestrel__V1__Job *job = kd_visible_job(r, id, 1, &reply);
        if (job == NULL)
            return reply;
        if (is_final((int)job->state) || kestrel__now_ms() >= deadline || r->e->stopping) {
            return kd_reply_owned(r, 200, &job->base);
        }
        protobuf_c_message_free_unpacked(&job->base, NULL);
        if (kd_wait_suspend(r, gen))
            return MHD_YES;   /* no thread held: this runs again once resumed */
        deadline = r->deadline;
    }
}

static enum MHD_Result cancel(kd_req *r, int64_t id)
{
    enum MHD_Result reply = MHD_NO;
    Kestrel__V1__Job *job;
    int rc;
    if (r->who.job_id)
        return kd_reply_error(r, 403, "permission_denied", "a job token cannot cancel jobs");
    if ((job = kd_visible_job(r, id, 0, &reply)) == NULL)
        return reply;
    if (is_final((int)job->state)) {   /* nothing to cancel: say so, rather than "cancelling" */
        char msg[160];
        snprintf(msg, sizeof(msg), "job %lld already ended %s: nothing to cancel", (long long)id,
                 protobuf_c_enum_descriptor_get_value(&kestrel__v1__job_state__descriptor, (int)job->state)->name);
        protobuf_c_message_free_unpacked(&job->base, NULL);
        return kd_reply_error(r, 409, "conflict", msg);
    }
    protobuf_c_message_free_unpacked(&job->base, NULL);
    if ((rc = kd_engine_cancel(r->e, id, r->who.user)) < 0)
        return kd_reply_failure(r, rc);
    if ((job = kd_visible_job(r, id, 1, &reply)) == NULL)
        return reply;
    return kd_reply_owned(r, 200, &job->base);
}

/* GET /jobs/{id}/logs?offset=N&wait_ms=W: lines from offset; waits up to W for new ones. */
static enum MHD_Result logs(kd_req *r, int64_t id)
{
    enum MHD_Result reply = MHD_NO;
    long long offset, wait;
    int64_t deadline;
    Kestrel__V1__Job *job;
    if (query_int(r, "offset", 0, INT64_MAX, 0, &offset, &reply) < 0 ||
        query_int(r, "wait_ms", 0, MAX_WAIT_MS, 0, &wait, &reply) < 0)
        return reply;
    if ((job = kd_visible_job(r, id, 0, &reply)) == NULL)
        return reply;
    protobuf_c_message_free_unpacked(&job->base, NULL);
    deadline = kd_wait_deadline(r, wait);
    for (;;) {
        Kestrel__V1__LogChunk *chunk = malloc(sizeof(*chunk));
        uint64_t gen = kd_engine_generation(r->e);
        int state = 0, rc;
        if (chunk == NULL)
            return kd_reply_failure(r, kestrel__error_oom());
        kestrel__v1__log_chunk__init(chunk);
        /* state first: every line is stored before a job turns final, so final + short page = eof */
        if ((rc = kd_catalog_job_state(r->e->cat, id, &state)) < 0 ||
            (rc = kd_catalog_log_read(r->e->cat, id, offset, LOG_PAGE, chunk)) < 0) {
            protobuf_c_message_free_unpacked(&chunk->base, NULL);
            return kd_reply_failure(r, rc);
        }
        chunk->state = (Kestrel__V1__JobState)state;
        chunk->eof = is_final(state) && chunk->n_lines < LOG_PAGE;
        if (chunk->n_lines || chunk->eof || kestrel__now_ms() >= deadline || r->e->stopping) {
            return kd_reply_owned(r, 200, &chunk->base);
        }
        protobuf_c_message_free_unpacked(&chunk->base, NULL);
        if (kd_wait_suspend(r, gen))
            return MHD_YES;
        deadline = r->deadline;
    }
}

#define LATE_METRICS_MS (5 * 60 * 1000)

static enum MHD_Result metrics(kd_req *r, int64_t id)
{
    int running, late;
    enum MHD_Result reply = MHD_NO;
    Kestrel__V1__Job *job;
    Kestrel__V1__MetricBatch *b;
    int rc;
    if ((job = kd_visible_job(r, id, 0, &reply)) == NULL)
        return reply;
    running = job->state == KESTREL__V1__JOB_STATE__RUNNING;
    /* a report may come a little after its run ended (a reporter flushed at exit), not for ever after
     * (a hostile test stored points in a job long ended); an admin's may (a backfill) */
    late = !running && strcmp(r->method, "GET") && !r->who.is_admin &&
           !(job->state == KESTREL__V1__JOB_STATE__QUEUED && job->restart_count > 0) &&   /* a run preempted or
                                                                                            retried: its flush */
           (job->end_time_ms == 0 || kestrel__now_ms() - job->end_time_ms > LATE_METRICS_MS);
    protobuf_c_message_free_unpacked(&job->base, NULL);
    if (late)
        return kd_reply_error(r, 409, "conflict", "the job is not running: metrics are taken while it runs and for "
                              "5 minutes after it ended");
    if (!strcmp(r->method, "GET")) {
        long long max = 0;
        if (query_int(r, "max_points", 1, 100000, 0, &max, &reply) < 0)
            return reply;
        /* ?max_points=N: each series whole, or about N of its points (what a chart draws) */
        rc = max ? kd_catalog_metrics_sampled(r->e->cat, id, kd_query(r, "name"), (long)max, &b)
                 : kd_catalog_metrics_read(r->e->cat, id, kd_query(r, "name"), &b);
        if (rc < 0)
            return kd_reply_failure(r, rc);
        return kd_reply_owned(r, 200, &b->base);
    }
    if ((b = (Kestrel__V1__MetricBatch *)kd_body(r, &kestrel__v1__metric_batch__descriptor, &reply)) == NULL)
        return reply;
    rc = b->n_metrics > MAX_METRICS ? kestrel__error_set(KESTREL_EINVALID, "more than %d points in one batch", MAX_METRICS) : 0;
    for (size_t i = 0; rc == 0 && i < b->n_metrics; i++)
        if (!b->metrics[i]->name[0] || !kestrel__text_is_clean(b->metrics[i]->name, KESTREL__NAME_MAX))
            rc = kestrel__error_set(KESTREL_EINVALID, "field 'metrics.name': must be printable, 1..%d bytes",
                                    KESTREL__NAME_MAX);
    if (rc == 0 && kd_refused_at_floor(r, &reply)) {
        protobuf_c_message_free_unpacked(&b->base, NULL);
        return reply;
    }
    if (rc == 0)
        rc = kd_catalog_metrics_add(r->e->cat, id, b, r->e->cfg->max_metric_points, r->e->cfg->max_metric_series);
    for (size_t i = 0; rc == 0 && running && i < b->n_metrics; i++)   /* a run's NaN loss, not a late report's */
        kd_policies_metric(r->e, id, b->metrics[i]->name, b->metrics[i]->value);
    if (rc == 0) {
        Kestrel__V1__MetricBatch empty = KESTREL__V1__METRIC_BATCH__INIT;
        reply = kd_reply_msg(r, 200, &empty.base);
    } else {
        reply = kd_reply_failure(r, rc);
    }
    protobuf_c_message_free_unpacked(&b->base, NULL);
    return reply;
}

enum MHD_Result kd_route_jobs(kd_req *r, const char *rest)
{
    int get_ = !strcmp(r->method, "GET"), post = !strcmp(r->method, "POST");
    const char *sub;
    long long id;

    if (*rest == '\0') {
        if (r->who.job_id)
            return kd_reply_error(r, 403, "permission_denied", "a job token can only read its own job");
        if (post)
            return submit(r);
        if (get_)
            return list(r);
        return kd_reply_error(r, 405, "method_not_allowed", "use GET or POST on /api/v1/jobs");
    }
    if (kd_route_id(rest, &id, &sub) < 0)
        return kd_reply_error(r, 404, "not_found", "no such job");
    if (*sub == '\0' && get_)
        return get(r, id);
    if (!strcmp(sub, "/cancel") && post)
        return cancel(r, id);
    if (!strcmp(sub, "/logs") && get_)
        return logs(r, id);
    if (!strcmp(sub, "/metrics") && (get_ || post))
        return metrics(r, id);
    if (!strcmp(sub, "/explain") && get_)
        return kd_route_explain(r, id);
    if (!strcmp(sub, "/priority") && post)
        return kd_route_priority(r, id);
    if (!strcmp(sub, "/rerun") && post)
        return rerun(r, id);
    if (!strcmp(sub, "/checkpoint") && post)
        return kd_route_checkpoint(r, id);
    if (!strcmp(sub, "/gpu") && get_)
        return gpu_telemetry(r, id);
    if (!strcmp(sub, "/models") && get_)
        return kd_route_job_models(r, id);
    return kd_reply_error(r, 404, "not_found", "no such endpoint");
}

/* lib/job/job.c - submit, get, wait, cancel, and job snapshot accessors. */
#include <inttypes.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "client.h"
#include "http.h"
#include "job_priv.h"

static const char *const state_names[] = {
    "UNKNOWN", "QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "PREEMPTED"
};
static const char *const priority_names[] = { NULL, "normal", "high", "urgent" };

const char *kestrel_job_state_name(int state)
{
    return (state >= 0 && state < (int)KESTREL__ARRAY_SIZE(state_names)) ? state_names[state] : "UNKNOWN";
}

int kestrel_job_state_is_final(int state)
{
    return state == KESTREL_JOB_STATE_SUCCEEDED || state == KESTREL_JOB_STATE_FAILED ||
           state == KESTREL_JOB_STATE_CANCELLED;
}

const char *kestrel_priority_name(int p)
{
    return (p >= 1 && p <= 3) ? priority_names[p] : NULL;
}

int kestrel_priority_parse(int *out, const char *name)
{
    if (out == NULL || name == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "NULL argument");
    for (int p = 1; p <= 3; p++) {
        if (!strcasecmp(name, priority_names[p])) {
            *out = p;
            return 0;
        }
    }
    return kestrel__error_set(KESTREL_EINVALID, "unknown priority '%.32s' (normal, high or urgent)", name);
}

int kestrel__job_init(struct kestrel_job *j, Kestrel__V1__Job *pb, int owns_pb)
{
    memset(j, 0, sizeof(*j));
    if (pb->n_events && (j->events = calloc(pb->n_events, sizeof(kestrel_job_event))) == NULL)
        return kestrel__error_oom();
    for (size_t i = 0; i < pb->n_events; i++) {
        j->events[i].version = 1;
        j->events[i].time_ms = pb->events[i]->time_ms;
        j->events[i].from_state = (int)pb->events[i]->from_state;
        j->events[i].to_state = (int)pb->events[i]->to_state;
        j->events[i].reason = pb->events[i]->reason;
    }
    j->pb = pb;
    j->owns_pb = owns_pb;
    j->magic = KESTREL__MAGIC_JOB;
    return 0;
}

void kestrel__job_fini(struct kestrel_job *j)
{
    j->magic = KESTREL__MAGIC_DEAD;
    free(j->events);
    if (j->owns_pb && j->pb)
        protobuf_c_message_free_unpacked(&j->pb->base, NULL);
    j->pb = NULL;
}

/* Wrap a decoded Job message into a new owned handle (takes m in all cases). */
static int job_new(kestrel_job **out, ProtobufCMessage *m)
{
    kestrel_job *j = malloc(sizeof(*j));
    int rc;
    if (j == NULL) {
        protobuf_c_message_free_unpacked(m, NULL);
        return kestrel__error_oom();
    }
    if ((rc = kestrel__job_init(j, (Kestrel__V1__Job *)m, 1)) < 0) {
        protobuf_c_message_free_unpacked(m, NULL);
        free(j);
        return rc;
    }
    *out = j;
    return 0;
}

static int job_call(kestrel_job **out, kestrel_client *c, const kestrel__request *req)
{
    ProtobufCMessage *m;
    int rc;
    if ((rc = kestrel__http_call(&m, c, req)) < 0)
        return rc;
    if (out == NULL) {
        protobuf_c_message_free_unpacked(m, NULL);
        return 0;
    }
    return job_new(out, m);
}

int kestrel_job_submit(kestrel_job **out, kestrel_client *c, const kestrel_job_spec *spec)
{
    kestrel__request req = { "POST", "/api/v1/jobs", NULL, &kestrel__v1__job__descriptor, 0, 0 };
    int rc;
    if (out == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "out is NULL");
    *out = NULL;
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    KESTREL__CHECK(spec, KESTREL__MAGIC_SPEC, "spec");
    if ((rc = kestrel__job_spec_validate(spec->pb)) < 0)
        return rc;
    req.body = &spec->pb->base;
    return job_call(out, c, &req);
}

static int job_path(char *path, size_t n, int64_t id, const char *suffix)
{
    if (id <= 0)
        return kestrel__error_set(KESTREL_EINVALID, "job id must be positive, got %" PRId64, id);
    snprintf(path, n, "/api/v1/jobs/%" PRId64 "%s", id, suffix);
    return 0;
}

/* method on /api/v1/jobs/{id}{suffix}, the job it answers with into *out (required). */
static int job_request(kestrel_job **out, kestrel_client *c, int64_t id, const char *method, const char *suffix,
                       int idempotent)
{
    char path[96];
    kestrel__request req = { method, path, NULL, &kestrel__v1__job__descriptor, idempotent, 0 };
    int rc;
    if (out == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "out is NULL");
    *out = NULL;
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    if ((rc = job_path(path, sizeof(path), id, suffix)) < 0)
        return rc;
    return job_call(out, c, &req);
}

int kestrel_job_get(kestrel_job **out, kestrel_client *c, int64_t id)
{
    return job_request(out, c, id, "GET", "", 1);
}

int kestrel_job_wait(kestrel_job **out, kestrel_client *c, int64_t id, long timeout_ms)
{
    int64_t deadline = timeout_ms < 0 ? INT64_MAX : kestrel__now_ms() + timeout_ms;
    char path[128];
    kestrel__request req = { "GET", path, NULL, &kestrel__v1__job__descriptor, 1, 0 };
    int rc;
    if (out == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "out is NULL");
    *out = NULL;
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    if ((rc = job_path(path, sizeof(path), id, "")) < 0)
        return rc;
    for (long pause = 0;;) {
        /* the server holds the request until the job is final or wait_ms passes */
        int64_t left = deadline - kestrel__now_ms(), started = kestrel__now_ms();
        long wait = left > 25000 ? 25000 : (left < 0 ? 0 : (long)left);
        kestrel_job *j;
        snprintf(path, sizeof(path), "/api/v1/jobs/%" PRId64 "?wait_ms=%ld", id, wait);
        req.extra_timeout_ms = wait;
        if ((rc = job_call(&j, c, &req)) < 0)
            return rc;
        if (kestrel_job_state_is_final(kestrel_job_state(j))) {
            *out = j;
            return 0;
        }
        kestrel_job_free(j);
        if (kestrel__now_ms() >= deadline)
            return kestrel__error_set(KESTREL_ETIMEOUT, "job %" PRId64 " did not finish within %ld ms", id, timeout_ms);
        kestrel__poll_pace(started, wait, 1, &pause, deadline);
    }
}

void kestrel__poll_pace(int64_t started_ms, long waited, int nothing_new, long *pause_ms, int64_t deadline_ms)
{
    struct timespec ts;
    int64_t now = kestrel__now_ms(), sleep_ms;
    if (!nothing_new || now - started_ms >= waited) {
        *pause_ms = 0;
        return;
    }
    *pause_ms = *pause_ms == 0 ? 10 : *pause_ms >= 500 ? 1000 : *pause_ms * 2;
    sleep_ms = deadline_ms - now < *pause_ms ? deadline_ms - now : *pause_ms;
    if (sleep_ms <= 0)
        return;
    ts.tv_sec = (time_t)(sleep_ms / 1000);
    ts.tv_nsec = (long)(sleep_ms % 1000) * 1000000L;
    nanosleep(&ts, NULL);
}

int kestrel_job_cancel(kestrel_job **out, kestrel_client *c, int64_t id)
{
    char path[96];
    kestrel__request req = { "POST", path, NULL, &kestrel__v1__job__descriptor, 1, 0 };
    int rc;
    if (out)
        *out = NULL;
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    if ((rc = job_path(path, sizeof(path), id, "/cancel")) < 0)
        return rc;
    rc = job_call(out, c, &req);
    /* kestreld answers 409 for a job that already ended (people should hear it); this call keeps
     * its promise: cancelling a final job is a no-op, with the job in *out */
    if (rc == KESTREL_EEXISTS && kestrel_error_last()->http_status == 409)
        rc = out ? kestrel_job_get(out, c, id) : 0;
    return rc;
}

int kestrel_job_rerun(kestrel_job **out, kestrel_client *c, int64_t id)
{
    return job_request(out, c, id, "POST", "/rerun", 0);   /* never retried: it queues a job */
}

void kestrel_job_free(kestrel_job *j)
{
    if (j == NULL || j->magic != KESTREL__MAGIC_JOB || !j->owns_pb)
        return;
    kestrel__job_fini(j);
    free(j);
}

#define JOB_OK(j) ((j) && (j)->magic == KESTREL__MAGIC_JOB)

int64_t kestrel_job_id(const kestrel_job *j) { return JOB_OK(j) ? j->pb->id : 0; }
int kestrel_job_state(const kestrel_job *j) { return JOB_OK(j) ? (int)j->pb->state : 0; }
int kestrel_job_exit_code(const kestrel_job *j) { return JOB_OK(j) ? j->pb->exit_code : -1; }
const char *kestrel_job_owner(const kestrel_job *j) { return JOB_OK(j) ? j->pb->owner : ""; }
const char *kestrel_job_reason(const kestrel_job *j) { return JOB_OK(j) ? j->pb->reason : ""; }
const char *kestrel_job_git_commit(const kestrel_job *j) { return JOB_OK(j) ? j->pb->git_commit : ""; }
int kestrel_job_restart_count(const kestrel_job *j) { return JOB_OK(j) ? j->pb->restart_count : 0; }
int64_t kestrel_job_submit_time(const kestrel_job *j) { return JOB_OK(j) ? j->pb->submit_time_ms : 0; }
int64_t kestrel_job_start_time(const kestrel_job *j) { return JOB_OK(j) ? j->pb->start_time_ms : 0; }
int64_t kestrel_job_end_time(const kestrel_job *j) { return JOB_OK(j) ? j->pb->end_time_ms : 0; }
size_t kestrel_job_event_count(const kestrel_job *j) { return JOB_OK(j) ? j->pb->n_events : 0; }
const char *kestrel_job_node(const kestrel_job *j) { return JOB_OK(j) ? j->pb->node : ""; }
const char *kestrel_job_code(const kestrel_job *j) { return JOB_OK(j) && j->pb->spec ? j->pb->spec->code : ""; }
const char *kestrel_job_environment(const kestrel_job *j) { return JOB_OK(j) ? j->pb->environment : ""; }
const char *kestrel_job_packages(const kestrel_job *j) { return JOB_OK(j) ? j->pb->packages : ""; }
size_t kestrel_job_data_count(const kestrel_job *j) { return JOB_OK(j) && j->pb->spec ? j->pb->spec->n_data : 0; }

int kestrel_job_data_at(const kestrel_job *j, size_t i, const char **ref, const char **path)
{
    KESTREL__CHECK(j, KESTREL__MAGIC_JOB, "job");
    if (ref == NULL || path == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "ref or path is NULL");
    if (j->pb->spec == NULL || i >= j->pb->spec->n_data)
        return kestrel__error_set(KESTREL_EINVALID, "dataset %zu of %zu", i, kestrel_job_data_count(j));
    *ref = j->pb->spec->data[i]->ref;
    *path = j->pb->spec->data[i]->path;
    return 0;
}

size_t kestrel_job_param_count(const kestrel_job *j) { return JOB_OK(j) && j->pb->spec ? j->pb->spec->n_params : 0; }

int kestrel_job_param_at(const kestrel_job *j, size_t i, const char **key, const char **value)
{
    KESTREL__CHECK(j, KESTREL__MAGIC_JOB, "job");
    if (key == NULL || value == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "key or value is NULL");
    if (j->pb->spec == NULL || i >= j->pb->spec->n_params)
        return kestrel__error_set(KESTREL_EINVALID, "parameter %zu of %zu", i, kestrel_job_param_count(j));
    *key = j->pb->spec->params[i]->key;
    *value = j->pb->spec->params[i]->value;
    return 0;
}
int64_t kestrel_job_checkpoint_time(const kestrel_job *j) { return JOB_OK(j) ? j->pb->checkpoint_time_ms : 0; }

const char *kestrel_job_name(const kestrel_job *j)
{
    return (JOB_OK(j) && j->pb->spec) ? j->pb->spec->name : "";
}

int kestrel_job_priority(const kestrel_job *j)
{
    int p = (JOB_OK(j) && j->pb->spec) ? (int)j->pb->spec->priority : 0;
    return p ? p : KESTREL_PRIORITY_NORMAL;
}

int kestrel_job_gpus(const kestrel_job *j)
{
    return (JOB_OK(j) && j->pb->spec) ? j->pb->spec->gpus : 0;
}

int kestrel_job_replicas(const kestrel_job *j)
{
    return (JOB_OK(j) && j->pb->spec && j->pb->spec->replicas > 1) ? j->pb->spec->replicas : 1;
}

const kestrel_job_event *kestrel_job_event_at(const kestrel_job *j, size_t i)
{
    return (JOB_OK(j) && i < j->pb->n_events) ? &j->events[i] : NULL;
}

int kestrel_job_to_json(kestrel_buf *out, const kestrel_job *j)
{
    if (out == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "out is NULL");
    KESTREL__CHECK(j, KESTREL__MAGIC_JOB, "job");
    return kestrel__wire_to_json(out, &j->pb->base, 1);
}

int kestrel_environments_get(kestrel_buf *out, kestrel_client *c)
{
    kestrel__request req = { "GET", "/api/v1/environments", NULL, &kestrel__v1__environment_list__descriptor, 1, 0 };
    ProtobufCMessage *m = NULL;
    int rc;
    if (out == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "out is NULL");
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    if ((rc = kestrel__http_call(&m, c, &req)) < 0)
        return rc;
    rc = kestrel__wire_to_json(out, m, 1);
    protobuf_c_message_free_unpacked(m, NULL);
    return rc;
}

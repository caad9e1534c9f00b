/* lib/job/queue.c - queue order, explanations, priority changes and checkpoint acks. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "client.h"
#include "http.h"
#include "job_priv.h"

struct kestrel_queue {
    uint32_t magic;
    Kestrel__V1__Queue *pb;
    struct kestrel_job *jobs;
};

int kestrel_job_explain(kestrel_buf *reason_out, int *position_out, kestrel_client *c, int64_t id)
{
    char path[96];
    kestrel__request req = { "GET", path, NULL, &kestrel__v1__explanation__descriptor, 1, 0 };
    ProtobufCMessage *m;
    int rc;
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    if (id <= 0)
        return kestrel__error_set(KESTREL_EINVALID, "job id must be positive");
    snprintf(path, sizeof(path), "/api/v1/jobs/%" PRId64 "/explain", id);
    if ((rc = kestrel__http_call(&m, c, &req)) < 0)
        return rc;
    if (position_out)
        *position_out = ((Kestrel__V1__Explanation *)m)->position;
    if (reason_out)
        rc = kestrel__buf_puts(reason_out, ((Kestrel__V1__Explanation *)m)->reason);
    protobuf_c_message_free_unpacked(m, NULL);
    return rc;
}

int kestrel_job_set_priority(kestrel_job **out, kestrel_client *c, int64_t id, int priority)
{
    char path[96];
    Kestrel__V1__JobUpdate u = KESTREL__V1__JOB_UPDATE__INIT;
    kestrel__request req = { "POST", path, &u.base, &kestrel__v1__job__descriptor, 1, 0 };
    ProtobufCMessage *m;
    kestrel_job *j;
    int rc;
    if (out)
        *out = NULL;
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    if (id <= 0 || priority < KESTREL_PRIORITY_NORMAL || priority > KESTREL_PRIORITY_URGENT)
        return kestrel__error_set(KESTREL_EINVALID, "need a positive job id and a kestrel_priority_t");
    u.priority = (Kestrel__V1__Priority)priority;
    snprintf(path, sizeof(path), "/api/v1/jobs/%" PRId64 "/priority", id);
    if ((rc = kestrel__http_call(&m, c, &req)) < 0)
        return rc;
    if (out == NULL) {
        protobuf_c_message_free_unpacked(m, NULL);
        return 0;
    }
    if ((j = malloc(sizeof(*j))) == NULL || kestrel__job_init(j, (Kestrel__V1__Job *)m, 1) < 0) {
        free(j);
        protobuf_c_message_free_unpacked(m, NULL);
        return kestrel__error_oom();
    }
    *out = j;
    return 0;
}

int kestrel_job_ack_preempt(kestrel_client *c, int64_t id)
{
    char path[96];
    kestrel__request req = { "POST", path, NULL, NULL, 1, 0 };
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    if (id <= 0)
        return kestrel__error_set(KESTREL_EINVALID, "job id must be positive");
    snprintf(path, sizeof(path), "/api/v1/jobs/%" PRId64 "/checkpoint", id);
    return kestrel__http_call(NULL, c, &req);
}

int kestrel_queue_get(kestrel_queue **out, kestrel_client *c)
{
    kestrel__request req = { "GET", "/api/v1/queue", NULL, &kestrel__v1__queue__descriptor, 1, 0 };
    ProtobufCMessage *m;
    kestrel_queue *q;
    int rc;
    if (out == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "out is NULL");
    *out = NULL;
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    if ((rc = kestrel__http_call(&m, c, &req)) < 0)
        return rc;
    if ((q = calloc(1, sizeof(*q))) == NULL) {
        protobuf_c_message_free_unpacked(m, NULL);
        return kestrel__error_oom();
    }
    q->pb = (Kestrel__V1__Queue *)m;
    q->magic = KESTREL__MAGIC_QUEUE;
    if (q->pb->n_entries && (q->jobs = calloc(q->pb->n_entries, sizeof(*q->jobs))) == NULL) {
        kestrel_queue_free(q);
        return kestrel__error_oom();
    }
    for (size_t i = 0; i < q->pb->n_entries; i++) {
        if (q->pb->entries[i]->job == NULL) {
            kestrel_queue_free(q);
            return kestrel__error_set(KESTREL_EPROTO, "queue entry without a job");
        }
        if ((rc = kestrel__job_init(&q->jobs[i], q->pb->entries[i]->job, 0)) < 0) {
            kestrel_queue_free(q);
            return rc;
        }
    }
    *out = q;
    return 0;
}

#define QUEUE_OK(q, i) ((q) && (q)->magic == KESTREL__MAGIC_QUEUE && (i) < (q)->pb->n_entries)

size_t kestrel_queue_count(const kestrel_queue *q)
{
    return (q && q->magic == KESTREL__MAGIC_QUEUE) ? q->pb->n_entries : 0;
}

const kestrel_job *kestrel_queue_job(const kestrel_queue *q, size_t i)
{
    return QUEUE_OK(q, i) ? &q->jobs[i] : NULL;
}

int kestrel_queue_position(const kestrel_queue *q, size_t i)
{
    return QUEUE_OK(q, i) ? q->pb->entries[i]->position : 0;
}

const char *kestrel_queue_reason(const kestrel_queue *q, size_t i)
{
    return QUEUE_OK(q, i) ? q->pb->entries[i]->reason : "";
}

void kestrel_queue_free(kestrel_queue *q)
{
    if (q == NULL || q->magic != KESTREL__MAGIC_QUEUE)
        return;
    q->magic = KESTREL__MAGIC_DEAD;
    for (size_t i = 0; q->jobs && i < q->pb->n_entries; i++)
        kestrel__job_fini(&q->jobs[i]);
    free(q->jobs);
    protobuf_c_message_free_unpacked(&q->pb->base, NULL);
    free(q);
}

/* lib/job/gpu_telemetry.c - a job's GPU series and totals, as kestreld sampled them. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "client.h"
#include "http.h"
#include "job_priv.h"

struct kestrel_gpu_telemetry {
    uint32_t magic;
    Kestrel__V1__GpuTelemetry *pb;
    kestrel_gpu_sample *samples;
    kestrel_gpu_usage *usage;
};

static void fill_usage(kestrel_gpu_usage *u, const Kestrel__V1__GpuUsage *pb)
{
    u->version = 1;
    u->uuid = pb->uuid;
    u->samples = pb->samples;
    u->mean_utilization = pb->mean_utilization;
    u->max_utilization = pb->max_utilization;
    u->peak_memory = pb->peak_memory_bytes;
}

int kestrel_job_gpu_telemetry(kestrel_gpu_telemetry **out, kestrel_client *c, int64_t id)
{
    char path[96];
    kestrel__request req = { "GET", path, NULL, &kestrel__v1__gpu_telemetry__descriptor, 1, 0 };
    ProtobufCMessage *m = NULL;
    kestrel_gpu_telemetry *t;
    int rc;
    if (out == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "out is NULL");
    *out = NULL;
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    if (id <= 0)
        return kestrel__error_set(KESTREL_EINVALID, "job id must be positive");
    snprintf(path, sizeof(path), "/api/v1/jobs/%" PRId64 "/gpu", id);
    if ((rc = kestrel__http_call(&m, c, &req)) < 0)
        return rc;
    if ((t = calloc(1, sizeof(*t))) == NULL)
        goto oom;
    t->pb = (Kestrel__V1__GpuTelemetry *)m;
    if ((t->samples = calloc(t->pb->n_samples + 1, sizeof(*t->samples))) == NULL ||
        (t->usage = calloc(t->pb->n_usage + 1, sizeof(*t->usage))) == NULL)
        goto oom;
    for (size_t i = 0; i < t->pb->n_samples; i++) {
        const Kestrel__V1__GpuSample *s = t->pb->samples[i];
        t->samples[i] = (kestrel_gpu_sample){ 1, s->time_ms, s->uuid, s->utilization, s->memory_used_bytes };
    }
    for (size_t i = 0; i < t->pb->n_usage; i++)
        fill_usage(&t->usage[i], t->pb->usage[i]);
    t->magic = KESTREL__MAGIC_GPUTEL;
    *out = t;
    return 0;
oom:
    if (t) {
        free(t->samples);
        free(t);
    }
    protobuf_c_message_free_unpacked(m, NULL);
    return kestrel__error_oom();
}

#define TEL_OK(t) ((t) && (t)->magic == KESTREL__MAGIC_GPUTEL)

size_t kestrel_gpu_telemetry_sample_count(const kestrel_gpu_telemetry *t) { return TEL_OK(t) ? t->pb->n_samples : 0; }
size_t kestrel_gpu_telemetry_usage_count(const kestrel_gpu_telemetry *t) { return TEL_OK(t) ? t->pb->n_usage : 0; }

const kestrel_gpu_sample *kestrel_gpu_telemetry_sample_at(const kestrel_gpu_telemetry *t, size_t i)
{
    return TEL_OK(t) && i < t->pb->n_samples ? &t->samples[i] : NULL;
}

const kestrel_gpu_usage *kestrel_gpu_telemetry_usage_at(const kestrel_gpu_telemetry *t, size_t i)
{
    return TEL_OK(t) && i < t->pb->n_usage ? &t->usage[i] : NULL;
}

void kestrel_gpu_telemetry_free(kestrel_gpu_telemetry *t)
{
    if (!TEL_OK(t))
        return;
    t->magic = KESTREL__MAGIC_DEAD;
    protobuf_c_message_free_unpacked(&t->pb->base, NULL);
    free(t->samples);
    free(t->usage);
    free(t);
}

size_t kestrel_job_gpu_usage_count(const kestrel_job *j)
{
    return j && j->magic == KESTREL__MAGIC_JOB ? j->pb->n_gpu_usage : 0;
}

int kestrel_job_gpu_usage_at(const kestrel_job *j, size_t i, kestrel_gpu_usage *out)
{
    KESTREL__CHECK(j, KESTREL__MAGIC_JOB, "job");
    if (out == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "out is NULL");
    if (i >= j->pb->n_gpu_usage)
        return kestrel__error_set(KESTREL_EINVALID, "device %zu of %zu", i, j->pb->n_gpu_usage);
    fill_usage(out, j->pb->gpu_usage[i]);
    return 0;
}

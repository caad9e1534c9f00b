/* lib/job/metrics.c - metric batches: reporting and reading. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "client.h"
#include "http.h"
#include "job_priv.h"

struct kestrel_metric_list {
    uint32_t magic;
    kestrel_metric *items;
    size_t n, cap;
    int more;   /* kestrel_job_metrics: the job holds more points than these */
};

int kestrel_metric_list_new(kestrel_metric_list **out)
{
    kestrel_metric_list *l;
    if (out == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "out is NULL");
    *out = NULL;
    if ((l = calloc(1, sizeof(*l))) == NULL)
        return kestrel__error_oom();
    l->magic = KESTREL__MAGIC_METRIC;
    *out = l;
    return 0;
}

static int add(kestrel_metric_list *l, const char *name, int64_t step, double value, int64_t wall)
{
    char *copy;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        kestrel_metric *p = realloc(l->items, cap * sizeof(*p));
        if (p == NULL)
            return kestrel__error_oom();
        l->items = p;
        l->cap = cap;
    }
    if ((copy = kestrel__strdup(name)) == NULL)
        return kestrel__error_oom();
    l->items[l->n].version = 1;
    l->items[l->n].name = copy;
    l->items[l->n].step = step;
    l->items[l->n].value = value;
    l->items[l->n].wall_time_ms = wall;
    l->n++;
    return 0;
}

int kestrel_metric_list_add(kestrel_metric_list *l, const char *name, int64_t step, double value, int64_t wall)
{
    KESTREL__CHECK(l, KESTREL__MAGIC_METRIC, "metric list");
    if (name == NULL || !name[0] || !kestrel__text_is_clean(name, KESTREL__NAME_MAX))
        return kestrel__error_set(KESTREL_EINVALID, "metric name must be printable, 1..%d bytes", KESTREL__NAME_MAX);
    return add(l, name, step, value, wall ? wall : kestrel__now_ms());
}

size_t kestrel_metric_list_count(const kestrel_metric_list *l)
{
    return (l && l->magic == KESTREL__MAGIC_METRIC) ? l->n : 0;
}

int kestrel_metric_list_more(const kestrel_metric_list *l)
{
    return (l && l->magic == KESTREL__MAGIC_METRIC) ? l->more : 0;
}

const kestrel_metric *kestrel_metric_list_at(const kestrel_metric_list *l, size_t i)
{
    return (l && l->magic == KESTREL__MAGIC_METRIC && i < l->n) ? &l->items[i] : NULL;
}

void kestrel_metric_list_free(kestrel_metric_list *l)
{
    if (l == NULL || l->magic != KESTREL__MAGIC_METRIC)
        return;
    l->magic = KESTREL__MAGIC_DEAD;
    for (size_t i = 0; i < l->n; i++)
        free((char *)l->items[i].name);
    free(l->items);
    free(l);
}

int kestrel_job_report_metrics(kestrel_client *c, int64_t id, const kestrel_metric_list *l)
{
    char path[96];
    kestrel__request req = { "POST", path, NULL, NULL, 0, 0 };
    Kestrel__V1__MetricBatch batch = KESTREL__V1__METRIC_BATCH__INIT;
    Kestrel__V1__Metric *pts;
    Kestrel__V1__Metric **ptrs;
    int rc;

    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    KESTREL__CHECK(l, KESTREL__MAGIC_METRIC, "metric list");
    if (id <= 0)
        return kestrel__error_set(KESTREL_EINVALID, "job id must be positive");
    if (l->n == 0)
        return 0;
    pts = calloc(l->n, sizeof(*pts));
    ptrs = calloc(l->n, sizeof(*ptrs));
    if (pts == NULL || ptrs == NULL) {
        free(pts);
        free(ptrs);
        return kestrel__error_oom();
    }
    for (size_t i = 0; i < l->n; i++) {
        kestrel__v1__metric__init(&pts[i]);
        pts[i].name = (char *)l->items[i].name;
        pts[i].step = l->items[i].step;
        pts[i].value = l->items[i].value;
        pts[i].wall_time_ms = l->items[i].wall_time_ms;
        ptrs[i] = &pts[i];
    }
    batch.metrics = ptrs;
    batch.n_metrics = l->n;
    snprintf(path, sizeof(path), "/api/v1/jobs/%" PRId64 "/metrics", id);
    req.body = &batch.base;
    rc = kestrel__http_call(NULL, c, &req);
    free(pts);
    free(ptrs);
    return rc;
}

int kestrel_job_metrics(kestrel_metric_list **out, kestrel_client *c, int64_t id, const char *name)
{
    kestrel_buf path = KESTREL_BUF_INIT;
    kestrel__request req = { "GET", NULL, NULL, &kestrel__v1__metric_batch__descriptor, 1, 0 };
    ProtobufCMessage *m = NULL;
    const Kestrel__V1__MetricBatch *b;
    kestrel_metric_list *l;
    int rc;

    if (out == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "out is NULL");
    *out = NULL;
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    if (id <= 0)
        return kestrel__error_set(KESTREL_EINVALID, "job id must be positive");
    rc = kestrel__buf_printf(&path, "/api/v1/jobs/%" PRId64 "/metrics", id);
    if (rc == 0 && name)
        rc = kestrel__query_add(&path, "name", name);
    req.path = path.ptr;
    if (rc == 0)
        rc = kestrel__http_call(&m, c, &req);
    kestrel_buf_dispose(&path);
    if (rc < 0)
        return rc;
    b = (const Kestrel__V1__MetricBatch *)m;
    if ((rc = kestrel_metric_list_new(&l)) == 0) {
        for (size_t i = 0; i < b->n_metrics && rc == 0; i++)
            rc = add(l, b->metrics[i]->name, b->metrics[i]->step, b->metrics[i]->value, b->metrics[i]->wall_time_ms);
        l->more = b->more_points;
        if (rc < 0)
            kestrel_metric_list_free(l);
        else
            *out = l;
    }
    protobuf_c_message_free_unpacked(m, NULL);
    return rc;
}

/* server/engine_nodes.c - real GPUs in kestreld: live readings, the /nodes view, and exact device
 * choice through libkestrel's selector (NVLink-aware) for the devices the scheduler grants. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine.h"
#include "metrics.h"

#define REFRESH_MS 10000

int kd_engine_has_real_gpus(const kd_engine *e)
{
    for (size_t n = 0; n < e->cfg->nnodes; n++)
        for (int d = 0; d < e->cfg->nodes[n].ndev; d++)
            if (e->cfg->nodes[n].devs[d].uuid)
                return 1;
    return 0;
}

void kd_engine_refresh_gpus(kd_engine *e, int64_t max_age_ms)
{
    kestrel_gpu_list *fresh = NULL, *old;
    int64_t now = kestrel__now_ms();
    pthread_mutex_lock(&e->mu);
    if (!kd_engine_has_real_gpus(e) || (e->gpus && now - e->gpus_ms < max_age_ms)) {
        pthread_mutex_unlock(&e->mu);
        return;
    }
    pthread_mutex_unlock(&e->mu);
    if (kestrel_gpu_list_query(&fresh, 0) < 0)
        return;
    pthread_mutex_lock(&e->mu);
    old = e->gpus;
    e->gpus = fresh;
    e->gpus_ms = now;
    pthread_mutex_unlock(&e->mu);
    kestrel_gpu_list_free(old);
}

/* Live entry of a real device (engine lock held). */
static const kestrel_gpu *live(const kd_engine *e, const char *uuid)
{
    for (size_t i = 0; uuid && i < kestrel_gpu_list_count(e->gpus); i++)
        if (!strcmp(kestrel_gpu_list_get(e->gpus, i)->uuid, uuid))
            return kestrel_gpu_list_get(e->gpus, i);
    return NULL;
}

static int64_t holder(const kd_engine *e, int node, int dev)
{
    for (const kd_run *r = e->runs; r; r = r->next)
        for (int k = 0; k < r->ndev; k++)
            if (r->devices[k] == dev && kd_run_dev_node(r, k) == node)
                return r->id;
    return 0;
}

int kd_engine_nodes(kd_engine *e, Kestrel__V1__NodeList **out)
{
    Kestrel__V1__NodeList *l = calloc(1, sizeof(*l));
    int rc = 0;
    kd_engine_refresh_gpus(e, REFRESH_MS);
    if (l == NULL)
        return kestrel__error_oom();
    kestrel__v1__node_list__init(l);
    pthread_mutex_lock(&e->mu);
    if ((l->nodes = calloc(e->cfg->nnodes + 1, sizeof(*l->nodes))) == NULL)
        goto oom;
    for (size_t n = 0; n < e->cfg->nnodes; n++) {
        const kd_node *cfg = &e->cfg->nodes[n];
        Kestrel__V1__Node *node = malloc(sizeof(*node));
        if (node == NULL)
            goto oom;
        kestrel__v1__node__init(node);
        l->nodes[l->n_nodes++] = node;
        node->name = kestrel__strdup(cfg->name);
        node->pool = kestrel__strdup(cfg->pool);
        node->refreshed_ms = e->gpus_ms;
        if (!node->name || !node->pool || (node->devices = calloc((size_t)cfg->ndev + 1, sizeof(*node->devices))) == NULL)
            goto oom;
        for (int d = 0; d < cfg->ndev; d++) {
            const kd_dev *dev = &cfg->devs[d];
            const kestrel_gpu *g = live(e, dev->uuid);
            Kestrel__V1__Device *out_dev = malloc(sizeof(*out_dev));
            char cc[16], vuuid[64];
            if (out_dev == NULL)
                goto oom;
            kestrel__v1__device__init(out_dev);
            node->devices[node->n_devices++] = out_dev;
            snprintf(cc, sizeof(cc), "%d.%d", dev->cc / 10, dev->cc % 10);
            snprintf(vuuid, sizeof(vuuid), "GPU-00000000-0000-4000-8000-%06d%06d", (int)n, d);
            out_dev->index = d;
            out_dev->uuid = kestrel__strdup(dev->uuid ? dev->uuid : vuuid);
            out_dev->type = kestrel__strdup(dev->type);
            out_dev->name = kestrel__strdup(g ? g->name : dev->type);
            out_dev->compute_capability = kestrel__strdup(cc);
            out_dev->memory_total_mb = dev->mem_mb;
            out_dev->memory_free_mb = g && g->memory_free >= 0 ? g->memory_free >> 20 : -1;
            out_dev->utilization = g ? g->utilization_gpu : -1;
            out_dev->job_id = holder(e, (int)n, d);
            if (!out_dev->uuid || !out_dev->type || !out_dev->name || !out_dev->compute_capability)
                goto oom;
        }
    }
    pthread_mutex_unlock(&e->mu);
    *out = l;
    return rc;
oom:
    pthread_mutex_unlock(&e->mu);
    protobuf_c_message_free_unpacked(&l->base, NULL);
    return kestrel__error_oom();
}

static int matches(const kd_dev *d, const Kestrel__V1__JobSpec *s, int min_cc)
{
    return (!s->gpu_type[0] || !strcmp(d->type, s->gpu_type)) && d->mem_mb >= s->min_gpu_memory_mb && d->cc >= min_cc;
}

void kd_engine_refine_devices(kd_engine *e, kd_run *r, const Kestrel__V1__JobSpec *spec)
{
    const kd_node *node = &e->cfg->nodes[r->node];
    const char **exclude;
    kestrel_gpu_select_options o = KESTREL_GPU_SELECT_OPTIONS_INIT;
    kestrel_gpu_selection *sel = NULL;
    size_t k = 0;
    int min_cc = kd_sched_parse_cc(spec->min_compute_capability), ok = 1;

    if (r->ndev < 1 || e->gpus == NULL || !node->devs[r->devices[0]].uuid)
        return;   /* nothing to arrange: no device, or virtual ones */
    if ((exclude = calloc((size_t)node->ndev + 1, sizeof(*exclude))) == NULL)
        return;
    /* offer the selector exactly what the scheduler could have granted: free, matching devices */
    for (int d = 0; d < node->ndev; d++) {
        int mine = 0;
        for (int q = 0; q < r->ndev; q++)
            mine |= r->devices[q] == d;
        if (!mine && (holder(e, r->node, d) || !matches(&node->devs[d], spec, min_cc < 0 ? 0 : min_cc)))
            exclude[k++] = node->devs[d].uuid;
    }
    o.count = r->ndev;
    o.prefer_nvlink = 1;
    o.exclude = exclude;
    if (kestrel_gpu_select(&sel, e->gpus, &o) == 0 && kestrel_gpu_selection_count(sel) == (size_t)r->ndev) {
        int chosen[64];
        for (size_t i = 0; i < kestrel_gpu_selection_count(sel) && ok; i++) {
            const char *uuid = kestrel_gpu_list_get(e->gpus, kestrel_gpu_selection_at(sel, i))->uuid;
            int found = -1;
            for (int d = 0; d < node->ndev; d++)
                if (!strcmp(node->devs[d].uuid, uuid))
                    found = d;
            ok = found >= 0;
            chosen[i] = found;
        }
        if (ok)
            memcpy(r->devices, chosen, (size_t)r->ndev * sizeof(int));
    }
    kestrel_gpu_selection_free(sel);
    free(exclude);
}

/* One gauge family over every device (engine lock held); value() < 0 leaves a device out. */
typedef double (*dev_value)(const kd_dev *dev, const kestrel_gpu *g, int64_t job);

static double v_alloc(const kd_dev *d, const kestrel_gpu *g, int64_t job) { (void)d; (void)g; return job ? 1 : 0; }
static double v_util(const kd_dev *d, const kestrel_gpu *g, int64_t job)
{
    (void)d; (void)job;
    return g && g->utilization_gpu >= 0 ? g->utilization_gpu / 100.0 : -1;
}
static double v_mem_used(const kd_dev *d, const kestrel_gpu *g, int64_t job)
{
    (void)d; (void)job;
    return g && g->memory_used >= 0 ? (double)g->memory_used : -1;
}
static double v_mem_total(const kd_dev *d, const kestrel_gpu *g, int64_t job)
{
    (void)job;
    return g && g->memory_total >= 0 ? (double)g->memory_total : d->mem_mb > 0 ? (double)d->mem_mb * 1048576.0 : -1;
}
static double v_temp(const kd_dev *d, const kestrel_gpu *g, int64_t job)
{
    (void)d; (void)job;
    return g && g->temperature >= 0 ? g->temperature : -1;
}
static double v_power(const kd_dev *d, const kestrel_gpu *g, int64_t job)
{
    (void)d; (void)job;
    return g && g->power_mw >= 0 ? g->power_mw / 1000.0 : -1;
}

static void dev_uuid(const kd_dev *dev, size_t n, int d, char *out, size_t len)
{
    if (dev->uuid)
        snprintf(out, len, "%s", dev->uuid);
    else
        snprintf(out, len, "GPU-00000000-0000-4000-8000-%06d%06d", (int)n, d);
}

static int gpu_family(kd_engine *e, kestrel_buf *out, const char *name, const char *help, dev_value value)
{
    int rc = kd_expo_family(out, name, "gauge", help);
    for (size_t n = 0; n < e->cfg->nnodes && rc == 0; n++) {
        const kd_node *node = &e->cfg->nodes[n];
        for (int d = 0; d < node->ndev && rc == 0; d++) {
            const kd_dev *dev = &node->devs[d];
            const kestrel_gpu *g = live(e, dev->uuid);
            char index[16], uuid[96];
            const char *labels[] = { "node", node->name, "pool", node->pool, "index", index, "uuid", uuid,
                                     "model", g ? g->name : dev->type, NULL };
            double v = value(dev, g, holder(e, (int)n, d));
            snprintf(index, sizeof(index), "%d", d);
            dev_uuid(dev, n, d, uuid, sizeof(uuid));
            if (v >= 0)
                rc = kd_expo_sample(out, name, labels, v);
        }
    }
    return rc;
}

int kd_engine_gpu_metrics(kd_engine *e, kestrel_buf *out)
{
    int rc;
    kd_engine_refresh_gpus(e, REFRESH_MS);
    pthread_mutex_lock(&e->mu);
    rc = gpu_family(e, out, "kestrel_gpu_allocated", "1 while a job holds the device.", v_alloc);
    if (rc == 0)
        rc = gpu_family(e, out, "kestrel_gpu_utilization_ratio",
                        "Fraction of the last sample period a kernel ran (NVML), real GPUs only.", v_util);
    if (rc == 0)
        rc = gpu_family(e, out, "kestrel_gpu_memory_used_bytes", "Device memory in use (NVML).", v_mem_used);
    if (rc == 0)
        rc = gpu_family(e, out, "kestrel_gpu_memory_total_bytes", "Device memory (NVML, or as declared).",
                        v_mem_total);
    if (rc == 0)
        rc = gpu_family(e, out, "kestrel_gpu_temperature_celsius", "GPU temperature (NVML).", v_temp);
    if (rc == 0)
        rc = gpu_family(e, out, "kestrel_gpu_power_watts", "Power draw (NVML).", v_power);
    if (rc == 0)
        rc = kd_expo_family(out, "kestrel_job_gpu_info", "gauge",
                            "1 for each device a running job holds: join on gpu_uuid with DCGM's metrics.");
    for (const kd_run *r = e->runs; r && rc == 0; r = r->next) {
        for (int k = 0; k < r->ndev && rc == 0; k++) {
            const kd_node *node = &e->cfg->nodes[kd_run_dev_node(r, k)];
            char job[32], index[16], uuid[96];
            const char *labels[] = { "job_id", job, "node", node->name, "index", index, "gpu_uuid", uuid, NULL };
            snprintf(job, sizeof(job), "%lld", (long long)r->id);
            snprintf(index, sizeof(index), "%d", r->devices[k]);
            dev_uuid(&node->devs[r->devices[k]], (size_t)kd_run_dev_node(r, k), r->devices[k], uuid, sizeof(uuid));
            rc = kd_expo_sample(out, "kestrel_job_gpu_info", labels, 1);
        }
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

int kd_engine_held_gpus(kd_engine *e, kd_held_gpu **out, size_t *n)
{
    size_t cap = 0;
    int rc = 0;
    *out = NULL;
    *n = 0;
    kd_engine_refresh_gpus(e, 0);
    pthread_mutex_lock(&e->mu);
    for (const kd_run *r = e->runs; r && rc == 0; r = r->next) {
        for (int k = 0; k < r->ndev && rc == 0; k++) {
            const kd_dev *dev = &e->cfg->nodes[kd_run_dev_node(r, k)].devs[r->devices[k]];
            const kestrel_gpu *g = live(e, dev->uuid);
            kd_held_gpu *h;
            if (g == NULL || g->utilization_gpu < 0 || (rc = kestrel__array_grow(out, &cap, *n + 1, sizeof(**out))) < 0)
                continue;
            h = &(*out)[(*n)++];
            h->job_id = r->id;
            h->start_ms = r->start_ms;
            snprintf(h->uuid, sizeof(h->uuid), "%s", dev->uuid);
            h->util = g->utilization_gpu;
            h->mem_used = g->memory_used;
        }
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

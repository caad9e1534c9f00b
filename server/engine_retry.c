/* server/engine_retry.c - what a failed run becomes: queued again (--retries, retry-larger, with
 * the nodes exclude-node policies named left out) or FAILED, as its log policies and spec say. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine.h"
#include "policy.h"
#include "sched_plan.h"

/* The memory of the devices the run held (MiB): the smallest, as declared or as NVML says. */
static int64_t run_memory_mb(kd_engine *e, const kd_run *run)
{
    int64_t mem = 0;
    pthread_mutex_lock(&e->mu);
    for (int k = 0; k < run->ndev; k++) {
        const kd_dev *d = &e->cfg->nodes[kd_run_dev_node(run, k)].devs[run->devices[k]];
        int64_t m = d->mem_mb;
        for (size_t i = 0; d->uuid && i < kestrel_gpu_list_count(e->gpus); i++) {
            const kestrel_gpu *g = kestrel_gpu_list_get(e->gpus, i);
            if (!strcmp(g->uuid, d->uuid) && g->memory_total > 0)
                m = g->memory_total >> 20;
        }
        if (m > 0 && (mem == 0 || m < mem))
            mem = m;
    }
    pthread_mutex_unlock(&e->mu);
    return mem;
}

/* Whether a node of the job's pool, not excluded, has spec->gpus devices it may use (type and
 * compute capability as the scheduler checks them) with more than mem MiB (mem 0: any). */
static int node_exists(kd_engine *e, const Kestrel__V1__JobSpec *spec, int64_t mem)
{
    int min_cc = spec->min_compute_capability[0] ? kd_sched_parse_cc(spec->min_compute_capability) : 0;
    if (min_cc < 0)
        min_cc = 0;
    for (size_t n = 0; n < e->cfg->nnodes; n++) {
        const kd_node *node = &e->cfg->nodes[n];
        int fit = 0, excluded = 0;
        if (spec->pool[0] && strcmp(spec->pool, node->pool))
            continue;
        for (size_t x = 0; x < spec->n_exclude_nodes; x++)
            excluded |= !strcmp(spec->exclude_nodes[x], node->name);
        for (int d = 0; !excluded && d < node->ndev; d++) {
            const kd_dev *dv = &node->devs[d];
            fit += (mem == 0 || dv->mem_mb > mem) && dv->mem_mb >= spec->min_gpu_memory_mb && dv->cc >= min_cc &&
                   (!spec->gpu_type[0] || !strcmp(dv->type, spec->gpu_type));
        }
        if (!excluded && (spec->gpus <= 0 || fit >= spec->gpus))
            return 1;
    }
    return 0;
}

static int add_excluded(Kestrel__V1__JobSpec *spec, const char *node)
{
    char **grown;
    for (size_t i = 0; i < spec->n_exclude_nodes; i++)
        if (!strcmp(spec->exclude_nodes[i], node))
            return 0;
    if (spec->n_exclude_nodes >= 64 || (grown = realloc(spec->exclude_nodes, (spec->n_exclude_nodes + 1) *
                                                                                 sizeof(*grown))) == NULL)
        return -1;
    spec->exclude_nodes = grown;
    if ((grown[spec->n_exclude_nodes] = kestrel__strdup(node)) == NULL)
        return -1;
    spec->n_exclude_nodes++;
    return 0;
}

int kd_engine_retry(kd_engine *e, kd_run *run, int failed, const char *failure, char *reason, size_t n)
{
    char why[400];
    unsigned fx = kd_policies_run_end(e, run->id, why, sizeof(why));
    Kestrel__V1__Job *job = NULL;
    Kestrel__V1__JobSpec *spec;
    const char *node = e->cfg->nodes[run->node].name;
    int retries, requeue = 0, changed = 0;
    if (!failed)
        return 0;
    if (kd_catalog_job_load(e->cat, run->id, 0, &job, NULL) < 0 || job->spec == NULL) {
        if (job)
            protobuf_c_message_free_unpacked(&job->base, NULL);
        return 0;
    }
    spec = job->spec;
    retries = kd_catalog_job_retries(e->cat, run->id, 0);
    if (fx & KD_POLICY_EXCLUDE_NODE)
        changed = add_excluded(spec, node) == 0;
    if ((fx & KD_POLICY_RETRY_LARGER) && spec->gpus > 0 && run_memory_mb(e, run) > 0) {
        /* (a job on no GPU, or on devices of unknown memory: the other rules decide) */
        int64_t mem = run_memory_mb(e, run);
        if (node_exists(e, spec, mem)) {
            spec->min_gpu_memory_mb = mem + 1;
            changed = requeue = 1;
            snprintf(reason, n, "requeued: %s; out of memory on %lld MiB devices (%s), now asks for more memory "
                     "(retry-larger)", failure, (long long)mem, why);
        } else {
            snprintf(reason, n, "%s; out of memory (%s) and the pool has no device with more than %lld MiB",
                     failure, why, (long long)mem);
            fx |= KD_POLICY_NO_RETRY;
        }
    }
    if (!requeue && (fx & KD_POLICY_EXCLUDE_NODE) && !node_exists(e, spec, 0)) {
        snprintf(reason, n, "%s; not retried: log policy %s excluded node %s, and no other node of the pool can "
                 "hold the job", failure, why, node);
        fx |= KD_POLICY_NO_RETRY;
    }
    if (!requeue && !(fx & KD_POLICY_NO_RETRY) && retries < spec->max_retries) {
        requeue = 1;
        snprintf(reason, n, "requeued: %s, retry %d of %d%s%s%s", failure, retries + 1, spec->max_retries,
                 fx & KD_POLICY_EXCLUDE_NODE ? "; avoids node " : "", fx & KD_POLICY_EXCLUDE_NODE ? node : "",
                 fx & KD_POLICY_EXCLUDE_NODE ? " (exclude-node)" : "");
    } else if (!requeue && why[0] && (fx & KD_POLICY_NO_RETRY) && !strstr(reason, "no device with more") &&
               !strstr(reason, "no other node")) {
        snprintf(reason, n, "%s; not retried: log policy %s", failure, why);
    }
    if (requeue || changed) {
        if (changed && kd_catalog_job_spec_replace(e->cat, run->id, spec) < 0)
            fprintf(stderr, "kestreld: job %lld: %s\n", (long long)run->id, kestrel_error_last()->message);
        if (requeue)
            kd_catalog_job_retries(e->cat, run->id, 1);
    }
    protobuf_c_message_free_unpacked(&job->base, NULL);
    return requeue;
}

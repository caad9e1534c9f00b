/* server/engine_sched.c - builds the scheduler's snapshot from the catalog and the running jobs,
 * runs the pure pass, and applies its actions (start, preempt, fail). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <time.h>
#include "engine.h"
#include "metrics.h"
#include "envs.h"
#include "stage.h"

#define QUEUE_WINDOW 1000   /* queued jobs considered per pass */

int kd_engine_never_placed(const kd_engine *e, const Kestrel__V1__JobSpec *s)
{
    int ranks = s->replicas > 1 ? s->replicas : 1, room = 0;
    kd_qjob want = { 0 };
    want.gpu_type = s->gpu_type;
    want.min_mem_mb = s->min_gpu_memory_mb;
    want.min_cc = kd_sched_parse_cc(s->min_compute_capability) > 0 ? kd_sched_parse_cc(s->min_compute_capability) : 0;
    if (kd_engine_pool_external(e, s->pool))
        return 0;   /* Slurm says itself */
    for (size_t n = 0; n < e->cfg->nnodes && room < ranks; n++) {
        const kd_node *node = &e->cfg->nodes[n];
        int fit = 0;
        for (int d = 0; d < node->ndev; d++)   /* of its type, memory and compute capability */
            fit += kd_sched_dev_matches(&node->devs[d], &want);
        if ((s->pool[0] && strcmp(node->pool, s->pool)) || fit < s->gpus)
            continue;
        room += s->gpus > 0 ? fit / s->gpus : ranks;
    }
    return room < ranks;
}

static int node_index(const kd_engine *e, const char *name)
{
    for (size_t n = 0; n < e->cfg->nnodes; n++)
        if (!strcmp(e->cfg->nodes[n].name, name))
            return (int)n;
    return -1;
}

static int id_cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* A real GPU's UUID; virtual devices look like GPU UUIDs so that CUDA_VISIBLE_DEVICES keeps its contract. */
static void device_uuid(const kd_engine *e, char *out, size_t n, int node, int index)
{
    const char *real = e->cfg->nodes[node].devs[index].uuid;
    if (real)
        snprintf(out, n, "%s", real);
    else
        snprintf(out, n, "GPU-00000000-0000-4000-8000-%06d%06d", node, index);
}

/* Move one planned start into RUNNING and hand it to the executor. The catalog records every
 * device, comma-separated; the executor gets a gang's devices rank by rank, separated by ';'. */
void kd_engine_launch(kd_engine *e, kd_run *run)
{
    kestrel_buf devs = KESTREL_BUF_INIT, ranked = KESTREL_BUF_INIT;   /* any number of devices, whole */
    char token[80], reason[160], where[96];
    Kestrel__V1__Job *job = NULL;
    const char *node = e->cfg->nodes[run->node].name;
    kd_transition t = { kestrel__now_ms(), reason, 0, 0, "", 0, node };
    int rc, per = run->nranks > 1 ? run->ndev / run->nranks : run->ndev, oom = 0;

    for (int i = 0; i < run->ndev; i++) {
        char u[100];
        device_uuid(e, u, sizeof(u), kd_run_dev_node(run, i), run->devices[i]);
        oom |= kestrel__buf_printf(&devs, "%s%s", i ? "," : "", u) < 0;
        oom |= kestrel__buf_printf(&ranked, "%s%s", !i ? "" : i % per ? "," : ";", u) < 0;
    }
    for (int r = 1; per == 0 && r < run->nranks; r++)
        oom |= kestrel__buf_puts(&ranked, ";") < 0;   /* no devices: still one field a rank */
    t.devices = devs.ptr ? devs.ptr : "";
    if (run->nranks > 1) {
        int spread = 0;
        for (int r = 1; r < run->nranks; r++)
            spread |= run->rank_nodes[r] != run->node;
        snprintf(where, sizeof(where), "%d ranks on node%s %s%s", run->nranks, spread ? "s" : "", node,
                 spread ? " and others" : "");   /* "started 2 ranks on node local" */
    } else {
        snprintf(where, sizeof(where), "on node %s", node);
    }
    if (run->restart_count > 0)
        snprintf(reason, sizeof(reason), "resumed %s (run %d)", where, run->restart_count + 1);
    else
        snprintf(reason, sizeof(reason), "started %s by the %s executor", where, e->exec->name);
    run->start_ms = t.now_ms;
    rc = oom ? kestrel__error_oom()   /* the job stays QUEUED: the next pass tries again */
             : kd_catalog_job_transition(e->cat, run->id, KESTREL_JOB_STATE_QUEUED, KESTREL_JOB_STATE_RUNNING, &t);
    if (rc == 0)
        rc = kd_catalog_job_load(e->cat, run->id, 0, &job, &run->owner_id);
    if (rc == 0) {
        pthread_mutex_lock(&e->mu);
        run->checkpoint_ms = job->checkpoint_time_ms;
        pthread_mutex_unlock(&e->mu);
        rc = kd_token_issue(e->cat, run->owner_id, run->id, token, sizeof(token));
        if (rc == 0) {
            kd_engine_changed(e);
            rc = e->exec->start(e, run, job, token, ranked.ptr ? ranked.ptr : "");
            kestrel_buf_dispose(&devs);
            kestrel_buf_dispose(&ranked);
            if (rc == 0)
                return;
            kd_engine_finished(e, run, KD_END_NOT_STARTED, 0, kestrel_error_last()->message);
            return;
        }
        protobuf_c_message_free_unpacked(&job->base, NULL);
        kestrel_buf_dispose(&devs);
        kestrel_buf_dispose(&ranked);
        kd_engine_finished(e, run, KD_END_NOT_STARTED, 0, kestrel_error_last()->message);
        return;
    }
    kestrel_buf_dispose(&devs);
    kestrel_buf_dispose(&ranked);
    /* cancelled between planning and launch, or a catalog failure: give the slot back */
    pthread_mutex_lock(&e->mu);
    kd_engine_release_locked(e, run);
    pthread_mutex_unlock(&e->mu);
    kd_run_free(run);
}

/* The queued jobs as the pure scheduler sees them (pointers into q's specs). */
static int to_qjobs(const kd_queued *q, size_t n, kd_qjob *out)
{
    for (size_t i = 0; i < n; i++) {
        const Kestrel__V1__JobSpec *s = q[i].spec;
        kd_qjob *j = &out[i];
        j->id = q[i].id;
        j->priority = q[i].priority;
        j->submit_ms = q[i].submit_ms;
        j->gpus = s->gpus;
        j->gpu_type = s->gpu_type;
        j->min_mem_mb = s->min_gpu_memory_mb;
        j->min_cc = kd_sched_parse_cc(s->min_compute_capability);
        if (j->min_cc < 0)
            j->min_cc = 0;   /* validated at submit */
        j->pool = s->pool;
        j->exclude = s->exclude_nodes;
        j->nexclude = s->n_exclude_nodes;
        j->owner = q[i].owner_id;
        j->owner_name = q[i].owner;
        j->team = q[i].team;
        j->after_ok = s->after_ok;
        j->n_after_ok = s->n_after_ok;
        j->after_any = s->after_any;
        j->n_after_any = s->n_after_any;
        j->affinity_job = s->affinity_job;
        j->affinity_group = s->affinity_group;
        j->affinity_required = s->affinity_required;
        j->preemptible = !s->not_preemptible;
        j->replicas = s->replicas;
    }
    return 0;
}

/* Dependencies and affinity targets, sorted by id, with node indices. */
static kd_ref *load_refs(kd_engine *e, const kd_qjob *q, size_t n, size_t *nrefs)
{
    size_t nids = 0, cap = 0, found = 0;
    int64_t *ids = NULL;
    kd_catref *cr;
    kd_ref *refs;
    for (size_t i = 0; i < n; i++) {
        size_t need = nids + q[i].n_after_ok + q[i].n_after_any + 1;
        if (need > cap) {
            int64_t *p = realloc(ids, (cap = need * 2) * sizeof(*ids));
            if (p == NULL) {
                free(ids);
                return NULL;
            }
            ids = p;
        }
        for (size_t k = 0; k < q[i].n_after_ok; k++)
            ids[nids++] = q[i].after_ok[k];
        for (size_t k = 0; k < q[i].n_after_any; k++)
            ids[nids++] = q[i].after_any[k];
        if (q[i].affinity_job)
            ids[nids++] = q[i].affinity_job;
    }
    if (nids > 1)
        qsort(ids, nids, sizeof(*ids), id_cmp);
    {
        size_t u = 0;
        for (size_t i = 0; i < nids; i++)
            if (u == 0 || ids[u - 1] != ids[i])
                ids[u++] = ids[i];
        nids = u;
    }
    cr = calloc(nids + 1, sizeof(*cr));
    refs = calloc(nids + 1, sizeof(*refs));
    if (cr == NULL || refs == NULL || kd_catalog_refs(e->cat, ids, nids, cr, &found) < 0) {
        free(ids);
        free(cr);
        free(refs);
        return NULL;
    }
    for (size_t i = 0; i < found; i++) {
        refs[i].id = cr[i].id;
        refs[i].state = cr[i].state;
        refs[i].node = cr[i].node[0] ? node_index(e, cr[i].node) : -1;
    }
    free(ids);
    free(cr);
    *nrefs = found;
    return refs;
}

static kd_group_ref *load_groups(kd_engine *e, const kd_qjob *q, size_t n, size_t *ngroups)
{
    kd_group_ref *g = calloc(n + 1, sizeof(*g));
    size_t k = 0;
    if (g == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        char node[64];
        int seen = 0;
        if (!q[i].affinity_group[0])
            continue;
        for (size_t x = 0; x < k && !seen; x++)
            seen = g[x].owner == q[i].owner && !strcmp(g[x].group, q[i].affinity_group);
        if (seen || kd_catalog_group_node(e->cat, q[i].owner, q[i].affinity_group, node, sizeof(node)) != 0)
            continue;
        g[k].group = q[i].affinity_group;
        g[k].owner = q[i].owner;
        g[k].node = node_index(e, node);
        k++;
    }
    *ngroups = k;
    return g;
}

static int wait_by_job(const void *a, const void *b)
{
    int64_t x = ((const kd_wait *)a)->job, y = ((const kd_wait *)b)->job;
    return (x > y) - (x < y);
}

static void schedule_pass(kd_engine *e);

void kd_engine_schedule(kd_engine *e)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    schedule_pass(e);
    clock_gettime(CLOCK_MONOTONIC, &b);
    kd_metrics_sched_pass(e->metrics, (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9);
}

static void schedule_pass(kd_engine *e)
{
    kd_queued *queued = NULL;
    kd_qjob *q = NULL;
    kd_ref *refs = NULL;
    kd_group_ref *groups = NULL;
    kd_alloc *allocs = NULL;
    kd_run **started = NULL;
    kd_snapshot snap;
    kd_plan plan;
    size_t n = 0, nrefs = 0, ngroups = 0, nstarted = 0;

    if (kd_catalog_queue(e->cat, QUEUE_WINDOW, &queued, &n) < 0)
        return;
    if (e->envs) {
        /* a job whose environment is not built yet waits out of the plan, holding nothing; one whose
         * build failed fails with pip's own words. One no node can ever hold goes to the plan as it is
         * (which says so), nothing built or copied for it: it held the one builder for nothing up to
         * --env-build-timeout (a hostile test) */
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            char why[1400], dir[PATH_MAX], digest[80];
            int st;
            if (kd_engine_never_placed(e, queued[i].spec)) {
                queued[k++] = queued[i];
                continue;
            }
            st = kd_envs_check(e->envs, queued[i].id, queued[i].spec, why, sizeof(why), dir, digest);
            if (st == KD_ENV_NONE || st == KD_ENV_READY) {   /* and its datasets copied, also while QUEUED */
                int data = queued[i].spec->n_data ? kd_stage_ready(e, queued[i].spec, why, sizeof(why)) : 1;
                st = data == 1 ? KD_ENV_READY : data == 0 ? KD_ENV_WAIT : KD_ENV_FAILED;
            }
            if (st == KD_ENV_READY) {
                queued[k++] = queued[i];
                continue;
            }
            if (st == KD_ENV_FAILED) {
                kd_transition t = { kestrel__now_ms(), why, 0, 0, NULL, 0, NULL };
                kd_catalog_job_transition(e->cat, queued[i].id, KESTREL_JOB_STATE_QUEUED, KESTREL_JOB_STATE_FAILED, &t);
                kd_engine_changed(e);
            }
            protobuf_c_message_free_unpacked(&queued[i].spec->base, NULL);
        }
        n = k;
    }
    if (e->ext) {
        /* jobs of pools an external cluster places never enter our plan: hand them over */
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            if (kd_engine_pool_external(e, queued[i].spec->pool)) {
                e->ext->hand_over(e, queued[i].id);
                protobuf_c_message_free_unpacked(&queued[i].spec->base, NULL);
            } else {
                queued[k++] = queued[i];
            }
        }
        n = k;
    }
    q = calloc(n + 1, sizeof(*q));
    if (q == NULL || to_qjobs(queued, n, q) < 0 || (refs = load_refs(e, q, n, &nrefs)) == NULL ||
        (groups = load_groups(e, q, n, &ngroups)) == NULL)
        goto done;

    pthread_mutex_lock(&e->mu);
    {
        size_t na = 0;
        for (kd_run *r = e->runs; r; r = r->next)
            na += r->nranks > 1 ? (size_t)r->nranks : 1;
        allocs = calloc(na + 1, sizeof(*allocs));
        started = calloc(n + 1, sizeof(*started));
        if (allocs == NULL || started == NULL) {
            pthread_mutex_unlock(&e->mu);
            goto done;
        }
        na = 0;
        for (kd_run *r = e->runs; r; r = r->next)
            for (int rank = 0; rank < (r->nranks > 1 ? r->nranks : 1); rank++) {   /* an allocation a rank */
                kd_alloc *a = &allocs[na++];
                int per = r->nranks > 1 ? r->ndev / r->nranks : r->ndev;
                a->id = r->id;
                a->node = r->nranks > 1 ? r->rank_nodes[rank] : r->node;
                a->ndev = per;
                a->devs = per ? r->devices + rank * per : r->devices;
                a->priority = r->priority;
                a->preemptible = r->preemptible;
                a->start_ms = r->start_ms;
                a->checkpoint_ms = r->checkpoint_ms;
                a->owner = r->owner_id;
                a->team = r->team;
                a->terminating = r->term != KD_TERM_NONE;
                a->backfill_for = r->backfill_for;
                a->ranks = r->nranks;
            }
        snap = (kd_snapshot){ e->cfg->nodes, e->cfg->nnodes, allocs, na, q, n, refs, nrefs, groups, ngroups,
                              e->cfg->quotas, e->cfg->nquotas, e->cfg->max_jobs - e->running, kestrel__now_ms(), 0 };
    }
    if (kd_sched_plan(&snap, &plan) < 0) {
        pthread_mutex_unlock(&e->mu);
        goto done;
    }
    for (size_t i = 0; i < plan.nacts; i++) {
        const kd_action *a = &plan.acts[i];
        if (a->kind == KD_ACT_START) {
            const kd_queued *src = NULL;
            int ranks = a->replicas > 1 ? a->replicas : 1;
            kd_run *r;
            if (a->rank > 0)
                continue;   /* a gang's other ranks: taken with rank 0, the actions that follow it */
            r = calloc(1, sizeof(*r));
            for (size_t k = 0; k < n && !src; k++)
                if (queued[k].id == a->job)
                    src = &queued[k];
            if (r == NULL || src == NULL || i + (size_t)ranks > plan.nacts ||
                (a->ndev && (r->devices = calloc((size_t)(a->ndev * ranks), sizeof(int))) == NULL) ||
                (ranks > 1 && ((r->rank_nodes = calloc((size_t)ranks, sizeof(int))) == NULL ||
                               (r->rank_pgids = calloc((size_t)ranks, sizeof(pid_t))) == NULL))) {
                kd_run_free(r);
                continue;
            }
            r->id = a->job;
            r->node = a->node;
            r->ndev = a->ndev * ranks;
            r->nranks = ranks > 1 ? ranks : 0;
            for (int k = 0; k < ranks; k++) {
                const kd_action *ak = &plan.acts[i + (size_t)k];
                if (ranks > 1)
                    r->rank_nodes[k] = ak->node;
                if (a->ndev)
                    memcpy(r->devices + k * a->ndev, plan.devs + ak->dev_off, (size_t)a->ndev * sizeof(int));
            }
            if (ranks == 1)
                kd_engine_refine_devices(e, r, src->spec);   /* real GPUs: the best-connected free set */
            r->priority = src->priority;
            r->preemptible = !src->spec->not_preemptible;
            r->grace_s = src->spec->grace_period_s;
            r->no_retry = src->spec->no_retry;
            r->owner_id = src->owner_id;
            r->restart_count = src->restart_count;
            r->backfill_for = a->cause;
            snprintf(r->team, sizeof(r->team), "%s", src->team);
            r->start_ms = snap.now_ms;
            e->running++;
            r->next = e->runs;
            e->runs = r;
            started[nstarted++] = r;
        } else if (a->kind == KD_ACT_PREEMPT) {
            for (kd_run *r = e->runs; r; r = r->next)
                if (r->id == a->job && r->term == KD_TERM_NONE)
                    kd_engine_terminate_locked(e, r, KD_TERM_PREEMPT, a->reason);
        }
    }
    free(e->waits);
    e->waits = plan.waits;
    e->nwaits = plan.nwaits;
    plan.waits = NULL;
    if (e->nwaits > 1)
        qsort(e->waits, e->nwaits, sizeof(kd_wait), wait_by_job);
    e->passes++;
    pthread_cond_broadcast(&e->changed);
    pthread_mutex_unlock(&e->mu);

    for (size_t i = 0; i < plan.nacts; i++) {
        const kd_action *a = &plan.acts[i];
        if (a->kind == KD_ACT_PREEMPT) {   /* the event on the preempting job's side */
            char note[200];
            snprintf(note, sizeof(note), "preempting job %lld on node %s", (long long)a->job,
                     e->cfg->nodes[a->node].name);
            kd_catalog_job_note(e->cat, a->cause, kestrel__now_ms(), note);
        } else if (a->kind == KD_ACT_FAIL) {
            kd_transition t = { kestrel__now_ms(), a->reason, 0, 0, NULL, 0, NULL };
            kd_catalog_job_transition(e->cat, a->job, KESTREL_JOB_STATE_QUEUED, KESTREL_JOB_STATE_FAILED, &t);
            kd_engine_changed(e);
            kd_engine_kick(e);   /* its own dependents may now fail too */
        }
    }
    for (size_t i = 0; i < nstarted; i++)
        kd_engine_launch(e, started[i]);
    kd_plan_free(&plan);
    kd_engine_changed(e);
done:
    kd_queued_free(queued, n);
    free(q);
    free(refs);
    free(groups);
    free(allocs);
    free(started);
}

/* server/telemetry.c - per-job GPU telemetry: a thread reads every real device each
 * --gpu-sample-interval seconds (NVML, through the engine) and records, for each running job, the
 * readings of the devices it holds. Totals (mean, max, peak memory) count every reading; the series
 * keeps a reading when the last kept one of that device is older than max(interval, run time / 512),
 * so a job's series stays near 512 points a device in its first hours and grows slowly after.
 * A job whose devices all stayed under 5% for its first --idle-gpu-after seconds gets an event
 * (once a run): a GPU held and not used is what admins ask about first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "engine.h"
#include "metrics.h"
#include "telemetry.h"
#include "worker.h"

#define IDLE_PERCENT 5
#define SERIES_POINTS 512

typedef struct {
    int64_t job_id, start_ms;
    char uuid[96];
    int64_t kept_ms;           /* time of the last point kept in the series */
    int busy;                  /* a reading at or above IDLE_PERCENT during the watch */
    int done;                  /* the idle watch of this run is over */
} track;

struct kd_telemetry {
    kd_engine *e;
    kd_worker w;
    track *t;
    size_t nt, cap;
};

static track *find(struct kd_telemetry *tm, const kd_held_gpu *h)
{
    for (size_t i = 0; i < tm->nt; i++)
        if (tm->t[i].job_id == h->job_id && tm->t[i].start_ms == h->start_ms && !strcmp(tm->t[i].uuid, h->uuid))
            return &tm->t[i];
    if (kestrel__array_grow(&tm->t, &tm->cap, tm->nt + 1, sizeof(*tm->t)) < 0)
        return NULL;
    memset(&tm->t[tm->nt], 0, sizeof(track));
    tm->t[tm->nt].job_id = h->job_id;
    tm->t[tm->nt].start_ms = h->start_ms;
    snprintf(tm->t[tm->nt].uuid, sizeof(tm->t[0].uuid), "%s", h->uuid);
    return &tm->t[tm->nt++];
}

/* One job's idle watch, once its devices were watched for idle_gpu_s. */
static void idle_check(struct kd_telemetry *tm, int64_t job_id, int64_t start_ms, int64_t now)
{
    const kd_config *cfg = tm->e->cfg;
    char note[400], list[300] = "";
    int busy = 0, watched = 0;
    if (cfg->idle_gpu_s <= 0 || now - start_ms < (int64_t)cfg->idle_gpu_s * 1000)
        return;
    for (size_t i = 0; i < tm->nt; i++) {
        track *t = &tm->t[i];
        if (t->job_id != job_id || t->start_ms != start_ms || t->done)
            continue;
        watched = 1;
        busy |= t->busy;
        t->done = 1;
        if (strlen(list) + strlen(t->uuid) + 3 < sizeof(list))
            snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", list[0] ? ", " : "", t->uuid);
    }
    if (!watched || busy)
        return;
    snprintf(note, sizeof(note), "idle GPU: %s under %d%% utilisation for the first %d s of the run", list,
             IDLE_PERCENT, cfg->idle_gpu_s);
    kd_catalog_job_note(tm->e->cat, job_id, now, note);
    kd_engine_alert(tm->e, job_id, "idle-gpu", "warning", note);
}

static void sample(struct kd_telemetry *tm)
{
    kd_held_gpu *h = NULL;
    kd_gpu_reading *r;
    size_t n = 0, k = 0;
    int64_t now = kestrel__now_ms(), step = (int64_t)tm->e->cfg->gpu_sample_s * 1000;
    if (kd_engine_held_gpus(tm->e, &h, &n) < 0 || (r = calloc(n + 1, sizeof(*r))) == NULL) {
        free(h);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        track *t = find(tm, &h[i]);
        int64_t every = (now - h[i].start_ms) / SERIES_POINTS;
        if (t == NULL)
            continue;
        if (every < step)
            every = step;
        r[k].job_id = h[i].job_id;
        r[k].time_ms = now;
        r[k].uuid = h[i].uuid;
        r[k].util = h[i].util;
        r[k].mem_used = h[i].mem_used < 0 ? 0 : h[i].mem_used;
        /* a little slack: samples come every step, never exactly on it */
        r[k].keep = t->kept_ms == 0 || now - t->kept_ms >= every - step / 4;
        if (r[k].keep)
            t->kept_ms = now;
        if (h[i].util >= IDLE_PERCENT)
            t->busy = 1;
        k++;
    }
    if (kd_catalog_gpu_record(tm->e->cat, r, k) < 0)
        fprintf(stderr, "kestreld: GPU telemetry: %s\n", kestrel_error_last()->message);
    for (size_t i = 0; i < n; i++)
        idle_check(tm, h[i].job_id, h[i].start_ms, now);
    /* forget runs that are gone */
    for (size_t i = 0; i < tm->nt;) {
        int live = 0;
        for (size_t j = 0; j < n && !live; j++)
            live = h[j].job_id == tm->t[i].job_id && h[j].start_ms == tm->t[i].start_ms;
        if (live)
            i++;
        else
            tm->t[i] = tm->t[--tm->nt];
    }
    free(r);
    free(h);
}

static void tick(void *ctx)
{
    struct kd_telemetry *tm = ctx;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    sample(tm);
    clock_gettime(CLOCK_MONOTONIC, &b);
    kd_metrics_gpu_sample(tm->e->metrics, (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9);
}

int kd_telemetry_start(kd_engine *e)
{
    struct kd_telemetry *tm;
    if (!kd_engine_has_real_gpus(e) || e->cfg->gpu_sample_s <= 0)
        return 0;
    if ((tm = calloc(1, sizeof(*tm))) == NULL)
        return kestrel__error_oom();
    tm->e = e;
    if (kd_worker_start(&tm->w, (int64_t)e->cfg->gpu_sample_s * 1000, tick, tm, "GPU telemetry") < 0) {
        free(tm);
        return KESTREL_ERROR;
    }
    e->telemetry = tm;
    return 0;
}

void kd_telemetry_stop(kd_engine *e)
{
    struct kd_telemetry *tm = e->telemetry;
    if (tm == NULL)
        return;
    kd_worker_fini(&tm->w);
    free(tm->t);
    free(tm);
    e->telemetry = NULL;
}

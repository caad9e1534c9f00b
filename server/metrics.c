/* server/metrics.c - counters and histograms of kestreld's events (see metrics.h). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "metrics.h"
#include "sched_plan.h"

#define NCLASS 4          /* index by KESTREL_PRIORITY_* (1..3); 0 unused */
#define MAX_HTTP 512      /* (route, method, code) series; more fold into route "other" */
#define MAX_ROUTES 64

static const double http_bounds[] = { .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10 };
static const double wait_bounds[] = { .01, .1, .5, 1, 5, 15, 30, 60, 300, 900, 1800, 3600, 7200, 21600, 86400 };
static const double pass_bounds[] = { .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1 };
#define NB_HTTP (sizeof(http_bounds) / sizeof(http_bounds[0]))
#define NB_WAIT (sizeof(wait_bounds) / sizeof(wait_bounds[0]))
#define NB_PASS (sizeof(pass_bounds) / sizeof(pass_bounds[0]))

typedef struct {
    uint64_t count;
    double sum;
    uint64_t bucket[16];   /* non-cumulative; the +Inf bucket is count */
} histo;

_Static_assert(NB_HTTP <= 16 && NB_WAIT <= 16 && NB_PASS <= 16, "histo holds 16 buckets");

static const char *const preempt_reasons[KD_PREEMPT_REASONS] = { "priority", "reservation", "cluster" };
static const char *const end_states[] = { "succeeded", "failed", "cancelled" };

struct kd_metrics {
    pthread_mutex_t mu;
    uint64_t submitted[NCLASS], started[NCLASS], ended[NCLASS][3];
    uint64_t preempted[NCLASS][KD_PREEMPT_REASONS];
    histo wait[NCLASS], to_running[NCLASS], pass, gpu_sample;
    struct { const char *route; char method[8]; int code; uint64_t n; } http[MAX_HTTP];
    size_t nhttp;
    struct { const char *route; histo h; } routes[MAX_ROUTES];
    size_t nroutes;
    uint64_t pushed, pulled, named, log_lines;
    uint64_t digest_bytes[KD_DIGEST_SOURCES];   /* file bytes a commit's digests came from, by source */
};

static int cix(int cls) { return cls >= 1 && cls <= 3 ? cls : 1; }

static void observe(histo *h, const double *bounds, size_t nb, double v)
{
    size_t i = 0;
    if (!(v >= 0))
        v = 0;   /* clocks step back; NaN */
    while (i < nb && v > bounds[i])
        i++;
    if (i < nb)
        h->bucket[i]++;
    h->count++;
    h->sum += v;
}

int kd_metrics_new(kd_metrics **out)
{
    kd_metrics *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return kestrel__error_oom();
    pthread_mutex_init(&m->mu, NULL);
    *out = m;
    return 0;
}

void kd_metrics_free(kd_metrics *m)
{
    if (m == NULL)
        return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void kd_metrics_submitted(kd_metrics *m, int cls)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->submitted[cix(cls)]++;
    pthread_mutex_unlock(&m->mu);
}

void kd_metrics_started(kd_metrics *m, int cls, double wait_s, double since_submit_s)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->started[cix(cls)]++;
    observe(&m->wait[cix(cls)], wait_bounds, NB_WAIT, wait_s);
    if (since_submit_s >= 0)
        observe(&m->to_running[cix(cls)], wait_bounds, NB_WAIT, since_submit_s);
    pthread_mutex_unlock(&m->mu);
}

void kd_metrics_preempted(kd_metrics *m, int cls, int reason)
{
    if (m == NULL || reason < 0 || reason >= KD_PREEMPT_REASONS)
        return;
    pthread_mutex_lock(&m->mu);
    m->preempted[cix(cls)][reason]++;
    pthread_mutex_unlock(&m->mu);
}

void kd_metrics_ended(kd_metrics *m, int cls, int state)
{
    int k = state == KESTREL_JOB_STATE_SUCCEEDED ? 0 : state == KESTREL_JOB_STATE_FAILED ? 1
          : state == KESTREL_JOB_STATE_CANCELLED ? 2 : -1;
    if (m == NULL || k < 0)
        return;
    pthread_mutex_lock(&m->mu);
    m->ended[cix(cls)][k]++;
    pthread_mutex_unlock(&m->mu);
}

void kd_metrics_sched_pass(kd_metrics *m, double seconds)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    observe(&m->pass, pass_bounds, NB_PASS, seconds);
    pthread_mutex_unlock(&m->mu);
}

void kd_metrics_gpu_sample(kd_metrics *m, double seconds)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    observe(&m->gpu_sample, pass_bounds, NB_PASS, seconds);
    pthread_mutex_unlock(&m->mu);
}

void kd_metrics_http(kd_metrics *m, const char *route, const char *method, int code, double seconds)
{
    size_t i;
    if (m == NULL)
        return;
    if (strcmp(method, "GET") && strcmp(method, "POST") && strcmp(method, "PUT") && strcmp(method, "DELETE") &&
        strcmp(method, "HEAD"))
        method = "other";
    pthread_mutex_lock(&m->mu);
    for (i = 0; i < m->nroutes && m->routes[i].route != route; i++)
        ;
    if (i == m->nroutes && i < MAX_ROUTES)
        m->routes[m->nroutes++].route = route;
    if (i < m->nroutes)
        observe(&m->routes[i].h, http_bounds, NB_HTTP, seconds);
    for (i = 0; i < m->nhttp; i++)
        if (m->http[i].route == route && m->http[i].code == code && !strcmp(m->http[i].method, method))
            break;
    if (i == m->nhttp && i < MAX_HTTP) {
        m->http[i].route = route;
        snprintf(m->http[i].method, sizeof(m->http[i].method), "%s", method);
        m->http[i].code = code;
        m->nhttp++;
    }
    if (i < m->nhttp)
        m->http[i].n++;
    pthread_mutex_unlock(&m->mu);
}

void kd_metrics_repo_bytes(kd_metrics *m, int pushed, uint64_t bytes)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    *(pushed ? &m->pushed : &m->pulled) += bytes;
    pthread_mutex_unlock(&m->mu);
}

void kd_metrics_repo_named(kd_metrics *m, uint64_t bytes)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->named += bytes;
    pthread_mutex_unlock(&m->mu);
}

void kd_metrics_repo_digests(kd_metrics *m, enum kd_digest_source from, uint64_t bytes)
{
    if (m == NULL || (unsigned)from >= KD_DIGEST_SOURCES)
        return;
    pthread_mutex_lock(&m->mu);
    m->digest_bytes[from] += bytes;
    pthread_mutex_unlock(&m->mu);
}

void kd_metrics_log_lines(kd_metrics *m, uint64_t lines)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->log_lines += lines;
    pthread_mutex_unlock(&m->mu);
}

/* ---- exposition ---- */

static int put_escaped(kestrel_buf *out, const char *v)
{
    for (; *v; v++) {
        const char *s = *v == '\\' ? "\\\\" : *v == '"' ? "\\\"" : *v == '\n' ? "\\n" : NULL;
        if (s ? kestrel__buf_puts(out, s) < 0 : kestrel__buf_put(out, v, 1) < 0)
            return KESTREL_ENOMEM;
    }
    return 0;
}

int kd_expo_family(kestrel_buf *out, const char *name, const char *type, const char *help)
{
    return kestrel__buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static int put_value(kestrel_buf *out, double v)
{
    if (isnan(v))
        return kestrel__buf_puts(out, " NaN\n");
    if (isinf(v))
        return kestrel__buf_puts(out, v > 0 ? " +Inf\n" : " -Inf\n");
    if (v == (double)(int64_t)v && fabs(v) < 9e15)
        return kestrel__buf_printf(out, " %lld\n", (long long)v);
    {   /* the shortest form that reads back as the same double */
        char s[40];
        for (int prec = 6; prec <= 17; prec++) {
            snprintf(s, sizeof(s), "%.*g", prec, v);
            if (strtod(s, NULL) == v)
                break;
        }
        return kestrel__buf_printf(out, " %s\n", s);
    }
}

int kd_expo_sample(kestrel_buf *out, const char *name, const char *const *labels, double value)
{
    if (kestrel__buf_puts(out, name) < 0)
        return KESTREL_ENOMEM;
    if (labels && labels[0]) {
        for (size_t i = 0; labels[i]; i += 2) {
            if (kestrel__buf_printf(out, "%s%s=\"", i ? "," : "{", labels[i]) < 0 || put_escaped(out, labels[i + 1]) < 0 ||
                kestrel__buf_puts(out, "\"") < 0)
                return KESTREL_ENOMEM;
        }
        if (kestrel__buf_puts(out, "}") < 0)
            return KESTREL_ENOMEM;
    }
    return put_value(out, value);
}

/* A histogram's _bucket (cumulative), _sum and _count samples, with one label pair (or none). */
static int put_histo(kestrel_buf *out, const char *name, const char *lk, const char *lv, const histo *h,
                     const double *bounds, size_t nb)
{
    char metric[160], le[32];
    uint64_t cum = 0;
    int rc = 0;
    snprintf(metric, sizeof(metric), "%s_bucket", name);
    for (size_t i = 0; i <= nb && rc == 0; i++) {
        const char *labels[] = { lk ? lk : "le", lk ? lv : le, lk ? "le" : NULL, le, NULL };
        cum += i < nb ? h->bucket[i] : 0;
        if (i < nb)
            snprintf(le, sizeof(le), "%g", bounds[i]);
        else
            snprintf(le, sizeof(le), "+Inf");
        rc = kd_expo_sample(out, metric, labels, (double)(i < nb ? cum : h->count));
    }
    {
        const char *labels[] = { lk, lv, NULL };
        snprintf(metric, sizeof(metric), "%s_sum", name);
        if (rc == 0)
            rc = kd_expo_sample(out, metric, lk ? labels : NULL, h->sum);
        snprintf(metric, sizeof(metric), "%s_count", name);
        if (rc == 0)
            rc = kd_expo_sample(out, metric, lk ? labels : NULL, (double)h->count);
    }
    return rc;
}

static int per_class(kestrel_buf *out, const char *name, const char *type, const char *help, const uint64_t *v)
{
    int rc = kd_expo_family(out, name, type, help);
    for (int c = 1; c < NCLASS && rc == 0; c++) {
        const char *labels[] = { "class", kd_priority_name(c), NULL };
        rc = kd_expo_sample(out, name, labels, (double)v[c]);
    }
    return rc;
}

int kd_metrics_write(kd_metrics *m, kestrel_buf *out)
{
    int rc;
    char code[16];
    pthread_mutex_lock(&m->mu);
    rc = per_class(out, "kestrel_job_submissions_total", "counter", "Jobs submitted, by class.", m->submitted);
    if (rc == 0)
        rc = per_class(out, "kestrel_job_starts_total", "counter", "Job starts (a resumed job starts again), by class.",
                       m->started);
    if (rc == 0)
        rc = kd_expo_family(out, "kestrel_job_preemptions_total", "counter",
                            "Running jobs stopped to make room, by class and reason (priority: a higher class; "
                            "reservation: the job whose reservation it borrowed; cluster: Slurm preempted it).");
    for (int c = 1; c < NCLASS && rc == 0; c++)
        for (int k = 0; k < KD_PREEMPT_REASONS && rc == 0; k++) {
            const char *labels[] = { "class", kd_priority_name(c), "reason", preempt_reasons[k], NULL };
            rc = kd_expo_sample(out, "kestrel_job_preemptions_total", labels, (double)m->preempted[c][k]);
        }
    if (rc == 0)
        rc = kd_expo_family(out, "kestrel_job_ends_total", "counter",
                            "Jobs that ended, by class and final state.");
    for (int c = 1; c < NCLASS && rc == 0; c++)
        for (int k = 0; k < 3 && rc == 0; k++) {
            const char *labels[] = { "class", kd_priority_name(c), "state", end_states[k], NULL };
            rc = kd_expo_sample(out, "kestrel_job_ends_total", labels, (double)m->ended[c][k]);
        }
    if (rc == 0) {
        uint64_t failed[NCLASS] = { 0 };
        for (int c = 1; c < NCLASS; c++)
            failed[c] = m->ended[c][1];
        rc = per_class(out, "kestrel_job_failures_total", "counter", "Jobs that failed, by class.", failed);
    }
    if (rc == 0)
        rc = kd_expo_family(out, "kestrel_job_queue_wait_seconds", "histogram",
                            "Time from becoming QUEUED (submitted or requeued) to a start, by class.");
    for (int c = 1; c < NCLASS && rc == 0; c++)
        rc = put_histo(out, "kestrel_job_queue_wait_seconds", "class", kd_priority_name(c), &m->wait[c], wait_bounds,
                       NB_WAIT);
    if (rc == 0)
        rc = kd_expo_family(out, "kestrel_job_submit_to_running_seconds", "histogram",
                            "Time from submission to the first start, by class.");
    for (int c = 1; c < NCLASS && rc == 0; c++)
        rc = put_histo(out, "kestrel_job_submit_to_running_seconds", "class", kd_priority_name(c), &m->to_running[c],
                       wait_bounds, NB_WAIT);
    if (rc == 0)
        rc = kd_expo_family(out, "kestrel_scheduler_pass_duration_seconds", "histogram",
                            "Duration of a scheduling pass (snapshot, plan, apply).");
    if (rc == 0)
        rc = put_histo(out, "kestrel_scheduler_pass_duration_seconds", NULL, NULL, &m->pass, pass_bounds, NB_PASS);
    if (rc == 0)
        rc = kd_expo_family(out, "kestrel_gpu_sample_duration_seconds", "histogram",
                            "Duration of one GPU telemetry tick (read every device, record the running jobs').");
    if (rc == 0)
        rc = put_histo(out, "kestrel_gpu_sample_duration_seconds", NULL, NULL, &m->gpu_sample, pass_bounds, NB_PASS);
    if (rc == 0)
        rc = kd_expo_family(out, "kestrel_http_requests_total", "counter",
                            "HTTP requests answered, by route template, method and status code.");
    for (size_t i = 0; i < m->nhttp && rc == 0; i++) {
        const char *labels[] = { "route", m->http[i].route, "method", m->http[i].method, "code", code, NULL };
        snprintf(code, sizeof(code), "%d", m->http[i].code);
        rc = kd_expo_sample(out, "kestrel_http_requests_total", labels, (double)m->http[i].n);
    }
    if (rc == 0)
        rc = kd_expo_family(out, "kestrel_http_request_duration_seconds", "histogram",
                            "Time from a request's headers to its reply, by route template.");
    for (size_t i = 0; i < m->nroutes && rc == 0; i++)
        rc = put_histo(out, "kestrel_http_request_duration_seconds", "route", m->routes[i].route, &m->routes[i].h,
                       http_bounds, NB_HTTP);
    if (rc == 0 && (rc = kd_expo_family(out, "kestrel_repo_push_bytes_total", "counter",
                                        "Chunk bytes received by pushes (packs), before deduplication.")) == 0)
        rc = kd_expo_sample(out, "kestrel_repo_push_bytes_total", NULL, (double)m->pushed);
    if (rc == 0 && (rc = kd_expo_family(out, "kestrel_repo_push_named_bytes_total", "counter",
                                        "Of the chunk bytes received by pushes, those of chunks sent unnamed, which "
                                        "kestreld named by hashing them (a big new file: the client leaves it the "
                                        "digests).")) == 0)
        rc = kd_expo_sample(out, "kestrel_repo_push_named_bytes_total", NULL, (double)m->named);
    if (rc == 0 && (rc = kd_expo_family(out, "kestrel_repo_pull_bytes_total", "counter",
                                        "Chunk bytes sent to pulls.")) == 0)
        rc = kd_expo_sample(out, "kestrel_repo_pull_bytes_total", NULL, (double)m->pulled);
    if (rc == 0 && (rc = kd_expo_family(out, "kestrel_repo_commit_digest_bytes_total", "counter",
                                        "Bytes of the files whose whole-file SHA-256 a commit settled: hashed as their "
                                        "chunks streamed in (source=stream), read back from the store (source=store), "
                                        "a file of one chunk, whose digest is that chunk's (source=chunk), or the same "
                                        "files as the latest version, whose digests it has (source=latest); read back from the store "
                                        "after the commit, once the repository was quiet or at the version's first "
                                        "read (source=later).")) == 0) {
        static const char *const sources[] = { [KD_DIGEST_STREAM] = "stream", [KD_DIGEST_STORE] = "store",
                                               [KD_DIGEST_CHUNK] = "chunk", [KD_DIGEST_LATEST] = "latest",
                                               [KD_DIGEST_LATER] = "later" };
        _Static_assert(sizeof(sources) / sizeof(sources[0]) == KD_DIGEST_SOURCES, "a name for every digest source");
        for (int i = 0; rc == 0 && i < KD_DIGEST_SOURCES; i++) {
            const char *labels[] = { "source", sources[i], NULL };
            rc = kd_expo_sample(out, "kestrel_repo_commit_digest_bytes_total", labels, (double)m->digest_bytes[i]);
        }
    }
    if (rc == 0 && (rc = kd_expo_family(out, "kestrel_log_lines_total", "counter",
                                        "Job log lines stored (and indexed for search).")) == 0)
        rc = kd_expo_sample(out, "kestrel_log_lines_total", NULL, (double)m->log_lines);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

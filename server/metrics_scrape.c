/* server/metrics_scrape.c - GET /metrics: the gauges read at scrape time, then the counters.
 *
 * Cost: one GROUP BY over a covering index for the jobs, the engine's in-memory device table, three
 * /proc files, the running jobs' latest training metrics, and the repository's totals, which are
 * walked at most once a minute (a big store has many files). */
#include <dirent.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "engine.h"
#include "metrics.h"
#include "store.h"

#define REPO_WALK_MS 60000
#define TRAIN_PER_JOB 32       /* metric names a running job exports */
#define TRAIN_MAX 20000        /* training samples in all */

static const char *state_label(int st)
{
    static const char *const names[] = { "unknown", "queued", "running", "succeeded", "failed", "cancelled",
                                         "preempted" };
    return st >= 0 && st <= 6 ? names[st] : "unknown";
}

/* pool, a pool a node or a Slurm partition serves (or "", any): else any user could add a series
 * a name (a hostile test: each job asking for a pool of its own grew the scrape by one). */
static int pool_served(const kd_engine *e, const char *pool)
{
    if (!pool[0] || kd_engine_pool_external(e, pool))
        return 1;
    for (size_t i = 0; i < e->cfg->nnodes; i++)
        if (!strcmp(e->cfg->nodes[i].pool, pool))
            return 1;
    return 0;
}

static int jobs_gauge(kd_engine *e, kestrel_buf *out)
{
    kd_job_count *c = NULL;
    size_t n = 0;
    int rc = kd_catalog_job_counts(e->cat, &c, &n);
    if (rc == 0)
        rc = kd_expo_family(out, "kestrel_jobs", "gauge", "Jobs in the catalog, by state, pool (\"\": any; \"other\": "
                            "one no node or Slurm partition serves) and class.");
    for (size_t i = 0; i < n; i++)   /* pools no one serves, as "other": their counts summed into the first */
        if (!pool_served(e, c[i].pool)) {
            snprintf(c[i].pool, sizeof(c[i].pool), "%s", "other");
            for (size_t k = 0; k < i; k++)
                if (c[k].n >= 0 && !strcmp(c[k].pool, "other") && c[k].state == c[i].state &&
                    c[k].priority == c[i].priority) {
                    c[k].n += c[i].n;
                    c[i].n = -1;   /* counted */
                    break;
                }
        }
    for (size_t i = 0; i < n && rc == 0; i++) {
        const char *labels[] = { "state", state_label(c[i].state), "pool", c[i].pool, "class",
                                 kd_priority_name(c[i].priority), NULL };
        if (c[i].n >= 0)
            rc = kd_expo_sample(out, "kestrel_jobs", labels, (double)c[i].n);
    }
    free(c);
    return rc;
}

static int training_gauges(kd_engine *e, kestrel_buf *out)
{
    kd_latest_metric *m = NULL;
    size_t n = 0;
    int rc = kd_catalog_running_metrics(e->cat, TRAIN_PER_JOB, TRAIN_MAX, &m, &n);
    if (rc == 0)
        rc = kd_expo_family(out, "kestrel_job_training_metric", "gauge",
                            "A running job's latest value of each metric it reports (loss, lr, batch speed...).");
    for (size_t i = 0; i < n && rc == 0; i++) {
        char job[32];
        const char *labels[] = { "job_id", job, "name", m[i].name, NULL };
        snprintf(job, sizeof(job), "%lld", (long long)m[i].job_id);
        rc = kd_expo_sample(out, "kestrel_job_training_metric", labels, m[i].value);
    }
    if (rc == 0)
        rc = kd_expo_family(out, "kestrel_job_training_step", "gauge", "A running job's latest step of each metric.");
    for (size_t i = 0; i < n && rc == 0; i++) {
        char job[32];
        const char *labels[] = { "job_id", job, "name", m[i].name, NULL };
        snprintf(job, sizeof(job), "%lld", (long long)m[i].job_id);
        rc = kd_expo_sample(out, "kestrel_job_training_step", labels, (double)m[i].step);
    }
    free(m);
    return rc;
}

/* ---- the host kestreld runs on ---- */

static int node_cpu(kestrel_buf *out, const char *host)
{
    static const char *const modes[] = { "user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal" };
    unsigned long long v[8] = { 0 };
    double hz = (double)sysconf(_SC_CLK_TCK);
    FILE *f = fopen("/proc/stat", "r");
    int rc, got = 0;
    if (f) {
        got = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                     &v[6], &v[7]);
        fclose(f);
    }
    rc = kd_expo_family(out, "kestrel_node_cpu_seconds_total", "counter", "CPU time of kestreld's host, by mode.");
    for (int i = 0; i < got && i < 8 && rc == 0 && hz > 0; i++) {
        const char *labels[] = { "node", host, "mode", modes[i], NULL };
        rc = kd_expo_sample(out, "kestrel_node_cpu_seconds_total", labels, (double)v[i] / hz);
    }
    return rc;
}

static int node_memory(kestrel_buf *out, const char *host)
{
    long long total = -1, avail = -1, kb;
    char key[64];
    FILE *f = fopen("/proc/meminfo", "r");
    const char *labels[] = { "node", host, NULL };
    int rc;
    while (f && fscanf(f, "%63s %lld kB\n", key, &kb) == 2) {
        if (!strcmp(key, "MemTotal:"))
            total = kb * 1024;
        else if (!strcmp(key, "MemAvailable:"))
            avail = kb * 1024;
    }
    if (f)
        fclose(f);
    rc = kd_expo_family(out, "kestrel_node_memory_total_bytes", "gauge", "Memory of kestreld's host.");
    if (rc == 0 && total >= 0)
        rc = kd_expo_sample(out, "kestrel_node_memory_total_bytes", labels, (double)total);
    if (rc == 0)
        rc = kd_expo_family(out, "kestrel_node_memory_available_bytes", "gauge",
                            "Memory available for new work on kestreld's host (MemAvailable).");
    if (rc == 0 && avail >= 0)
        rc = kd_expo_sample(out, "kestrel_node_memory_available_bytes", labels, (double)avail);
    return rc;
}

static int node_network(kestrel_buf *out, const char *host)
{
    FILE *f = fopen("/proc/net/dev", "r");
    char line[512];
    struct { char dev[64]; unsigned long long rx, tx; } ifs[64];
    int nifs = 0, rc;
    while (f && fgets(line, sizeof(line), f) && nifs < 64) {
        char *colon = strchr(line, ':'), *name = line;
        unsigned long long rx, tx, skip;
        if (colon == NULL)
            continue;   /* the two header lines */
        *colon = '\0';
        while (*name == ' ')
            name++;
        if (!strcmp(name, "lo") ||
            sscanf(colon + 1, "%llu %llu %llu %llu %llu %llu %llu %llu %llu", &rx, &skip, &skip, &skip, &skip, &skip,
                   &skip, &skip, &tx) != 9)
            continue;
        snprintf(ifs[nifs].dev, sizeof(ifs[nifs].dev), "%s", name);
        ifs[nifs].rx = rx;
        ifs[nifs++].tx = tx;
    }
    if (f)
        fclose(f);
    rc = kd_expo_family(out, "kestrel_node_network_receive_bytes_total", "counter",
                        "Bytes received by kestreld's host, by interface (not lo).");
    for (int i = 0; i < nifs && rc == 0; i++) {
        const char *labels[] = { "node", host, "device", ifs[i].dev, NULL };
        rc = kd_expo_sample(out, "kestrel_node_network_receive_bytes_total", labels, (double)ifs[i].rx);
    }
    if (rc == 0)
        rc = kd_expo_family(out, "kestrel_node_network_transmit_bytes_total", "counter",
                            "Bytes sent by kestreld's host, by interface (not lo).");
    for (int i = 0; i < nifs && rc == 0; i++) {
        const char *labels[] = { "node", host, "device", ifs[i].dev, NULL };
        rc = kd_expo_sample(out, "kestrel_node_network_transmit_bytes_total", labels, (double)ifs[i].tx);
    }
    return rc;
}

/* ---- the repository's totals, walked at most once a minute ---- */

static pthread_mutex_t repo_mu = PTHREAD_MUTEX_INITIALIZER;
static struct { int64_t at_ms, chunks, bytes, versions, models; } repo;
static _Thread_local int64_t walk_chunks, walk_bytes, walk_versions;

static int count_file(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    size_t n = strlen(path);
    const char *base = path + ftw->base;
    if (type != FTW_F)
        return 0;
    if (strlen(base) == 62 && strspn(base, "0123456789abcdef") == 62) {   /* chunks/ab/<62 hex> */
        walk_chunks++;
        walk_bytes += st->st_size;
    } else if (n > 5 && !strcmp(path + n - 5, ".json") && strstr(path, "/versions/")) {
        walk_versions++;
    }
    return 0;
}

static int repo_gauges(kd_engine *e, kestrel_buf *out)
{
    static const char *const names[4][2] = {
        { "kestrel_repo_chunks", "Chunks stored in the repository (each once, however many versions use it)." },
        { "kestrel_repo_stored_bytes", "Bytes of the stored chunks (after deduplication)." },
        { "kestrel_repo_versions", "Model and dataset versions in the repository." },
        { "kestrel_repo_models", "Model and dataset names in the repository." },
    };
    int64_t now = kestrel__now_ms(), v[4];
    int rc = 0;
    pthread_mutex_lock(&repo_mu);
    if (repo.at_ms == 0 || now - repo.at_ms > REPO_WALK_MS) {
        char path[4200];
        kestrel_buf list = KESTREL_BUF_INIT;
        walk_chunks = walk_bytes = walk_versions = 0;
        snprintf(path, sizeof(path), "%s/chunks", kd_store_root(e));
        nftw(path, count_file, 16, FTW_PHYS);
        snprintf(path, sizeof(path), "%s/models", kd_store_root(e));
        nftw(path, count_file, 16, FTW_PHYS);
        repo.chunks = walk_chunks;
        repo.bytes = walk_bytes;
        repo.versions = walk_versions;
        repo.models = 0;
        if (kestrel__store_list(e->store, &list) == 0)
            for (size_t i = 0; i < list.size; i++)
                repo.models += ((const char *)list.ptr)[i] == '\n';
        kestrel_buf_dispose(&list);
        repo.at_ms = now;
    }
    v[0] = repo.chunks;
    v[1] = repo.bytes;
    v[2] = repo.versions;
    v[3] = repo.models;
    pthread_mutex_unlock(&repo_mu);
    for (int i = 0; i < 4 && rc == 0; i++)
        if ((rc = kd_expo_family(out, names[i][0], "gauge", names[i][1])) == 0)
            rc = kd_expo_sample(out, names[i][0], NULL, (double)v[i]);
    return rc;
}

int kd_metrics_scrape(kd_engine *e, kestrel_buf *out)
{
    char host[256] = "localhost";
    const char *info[] = { "version", KESTREL_VERSION_STRING, NULL };
    int rc;
    gethostname(host, sizeof(host) - 1);
    rc = kd_expo_family(out, "kestrel_build_info", "gauge", "Always 1: the version of this kestreld.");
    if (rc == 0)
        rc = kd_expo_sample(out, "kestrel_build_info", info, 1);
    if (rc == 0)
        rc = jobs_gauge(e, out);
    if (rc == 0 && (rc = kd_expo_family(out, "kestrel_scheduler_passes_total", "counter",
                                        "Scheduling passes completed.")) == 0) {
        uint64_t passes;
        pthread_mutex_lock(&e->mu);
        passes = e->passes;
        pthread_mutex_unlock(&e->mu);
        rc = kd_expo_sample(out, "kestrel_scheduler_passes_total", NULL, (double)passes);
    }
    if (rc == 0 && (rc = kd_expo_family(out, "kestrel_log_index_queue_lines", "gauge",
                                        "Log lines stored and not yet in the search index (the indexer's backlog).")) == 0)
        rc = kd_expo_sample(out, "kestrel_log_index_queue_lines", NULL, (double)kd_catalog_log_index_queue(e->cat));
    if (rc == 0)
        rc = kd_engine_gpu_metrics(e, out);
    if (rc == 0)
        rc = training_gauges(e, out);
    if (rc == 0)
        rc = node_cpu(out, host);
    if (rc == 0)
        rc = node_memory(out, host);
    if (rc == 0)
        rc = node_network(out, host);
    if (rc == 0 && e->store)
        rc = repo_gauges(e, out);
    if (rc == 0)
        rc = kd_metrics_write(e->metrics, out);
    return rc;
}

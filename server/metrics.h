/* server/metrics.h - kestreld's own counters and histograms, and the Prometheus text exposition.
 *
 * Events are counted where they happen (submit, start, preemption, end, scheduler pass, HTTP
 * request, repository traffic); gauges (jobs by state, GPUs, the node, the repository) are read
 * when /metrics is scraped (metrics_scrape.c). Every label takes values from a fixed set or from
 * the configuration (route templates, classes, pools, nodes), never from a request, so the number
 * of series is bounded; job ids appear only on running jobs' gauges and the job-GPU join gauge,
 * as job_id (a label named job would clash with the target label Prometheus adds, and be renamed).
 * Names follow Prometheus' conventions: the kestrel_ prefix, base units (seconds, bytes, ratios),
 * _total on counters. No C client library is packaged for Debian (prometheus-cpp is C++), so the
 * text format (version 0.0.4) is written here; `promtool check metrics` checks it in the tests. */
#ifndef KD_METRICS_H
#define KD_METRICS_H

#include <stdint.h>
#include "kestrel.h"

typedef struct kd_metrics kd_metrics;

/* Why a job was preempted (the reason label). */
enum { KD_PREEMPT_PRIORITY = 0, KD_PREEMPT_RESERVATION, KD_PREEMPT_CLUSTER, KD_PREEMPT_REASONS };

int kd_metrics_new(kd_metrics **out);
void kd_metrics_free(kd_metrics *m);

/* cls: KESTREL_PRIORITY_* (anything else counts as "normal"). All take m == NULL as a no-op. */
void kd_metrics_submitted(kd_metrics *m, int cls);
/* A start: wait_s since the job last became QUEUED; since_submit_s only on its first start (< 0: a
 * restart). */
void kd_metrics_started(kd_metrics *m, int cls, double wait_s, double since_submit_s);
void kd_metrics_preempted(kd_metrics *m, int cls, int reason);
/* An end in a final state (KESTREL_JOB_STATE_*; other states are not counted). */
void kd_metrics_ended(kd_metrics *m, int cls, int state);
void kd_metrics_sched_pass(kd_metrics *m, double seconds);
void kd_metrics_gpu_sample(kd_metrics *m, double seconds);
/* route: a template from kd_route_template(); method and code as sent. */
void kd_metrics_http(kd_metrics *m, const char *route, const char *method, int code, double seconds);
void kd_metrics_repo_bytes(kd_metrics *m, int pushed, uint64_t bytes);
/* Of the bytes pushed, those of chunks sent unnamed, which kestreld named (repo_pack.c). */
void kd_metrics_repo_named(kd_metrics *m, uint64_t bytes);
/* Where a commit's whole-file digests over bytes came from. */
enum kd_digest_source {
    KD_DIGEST_STREAM,   /* hashed as the chunks streamed in (a run) */
    KD_DIGEST_STORE,    /* read back from the store */
    KD_DIGEST_CHUNK,    /* a file of one chunk: that chunk's digest, nothing read */
    KD_DIGEST_LATEST,   /* the same files as the latest version: its digests */
    KD_DIGEST_LATER,    /* read back from the store after the commit (repo_settle.h) */
    KD_DIGEST_SOURCES
};
void kd_metrics_repo_digests(kd_metrics *m, enum kd_digest_source from, uint64_t bytes);
void kd_metrics_log_lines(kd_metrics *m, uint64_t lines);

/* Append the counters and histograms to out. */
int kd_metrics_write(kd_metrics *m, kestrel_buf *out);

/* Exposition helpers: a family's HELP and TYPE lines, then samples. labels is a NULL-terminated
 * list of name, value pairs (values escaped here). */
int kd_expo_family(kestrel_buf *out, const char *name, const char *type, const char *help);
int kd_expo_sample(kestrel_buf *out, const char *name, const char *const *labels, double value);

struct kd_engine;
/* The whole exposition of GET /metrics (metrics_scrape.c). */
int kd_metrics_scrape(struct kd_engine *e, kestrel_buf *out);

#endif

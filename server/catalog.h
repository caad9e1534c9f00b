/* server/catalog.h - kestreld's SQLite catalog (WAL): users, tokens, jobs, events, logs, metrics.
 * Every function is safe from any thread (one connection behind one mutex). */
#ifndef KD_CATALOG_H
#define KD_CATALOG_H

#include <stdint.h>
#include "wire.h"

typedef struct kd_catalog kd_catalog;

/* Token scopes: read (GET only), write (a user's rights), admin (an admin user's rights). */
/* METRICS: GET /metrics only (made by an admin for a Prometheus server) */
enum { KD_SCOPE_READ = 1, KD_SCOPE_WRITE = 2, KD_SCOPE_ADMIN = 3, KD_SCOPE_METRICS = 4 };
/* Who may read a model: every user (default), its namespace's team, its namespace's writers. */
enum { KD_VIS_ALL = 0, KD_VIS_TEAM = 1, KD_VIS_PRIVATE = 2 };

/* Who is calling: a user token, or a job-scoped token (job_id != 0). */
typedef struct {
    int64_t user_id;
    char user[128];
    int is_admin;               /* an admin user with an admin-scoped token */
    int64_t job_id;
    char team[128];
    int scope;                  /* KD_SCOPE_* */
    int64_t token_id;
    int owner_admin;            /* the user (for a job token: the job's owner) is an admin */
    int64_t expires_ms;         /* the token's expiry (0: never) */
} kd_principal;

typedef struct {
    int64_t id;
    char name[128];
    char team[128];
    int is_admin;
} kd_user;

typedef struct {
    int64_t id;
    int64_t user_id;
    char user[128];
    int64_t job_id;
    int scope;
    int64_t created_ms, expires_ms, revoked_ms;   /* expires 0: never; revoked 0: live */
    char name[128];
    char hint[8];
    int64_t parent_id;          /* the token of the same user that made it (revoked with it); 0 none */
} kd_token;

/* A job as the scheduler and executors need it. */
typedef struct {
    int64_t id;
    int priority;
    int gpus;
    int64_t submit_ms;
    int no_retry;
    int restart_count;
    int64_t pid;
    int64_t pid_start;      /* process start time (clock ticks since boot) to guard pid reuse */
    int64_t start_ms;       /* when its latest run started (wall clock): was that this boot? */
} kd_job_row;

/* Filters for listing. */
typedef struct {
    int64_t owner_id;       /* 0: all owners (admin) */
    int state;              /* 0: any */
    const char *name;       /* NULL: any */
    const char *label_key, *label_value;
    const char *param_key, *param_value;   /* NULL: any */
    int64_t before_id;      /* pagination: ids < before_id; 0: from the newest */
    int limit;
} kd_job_filter;

int kd_catalog_open(kd_catalog **out, const char *path);
/* After a write failed for lack of space: give back the reserve (8 MiB set aside next to the
 * catalog at open) so that what must be recorded can be. 1 when it was given back. */
int kd_catalog_release_reserve(kd_catalog *cat);
/* A consistent copy of the catalog at path (SQLite's online backup). */
int kd_catalog_backup(kd_catalog *cat, const char *path);
void kd_catalog_close(kd_catalog *cat);

/* users and tokens (hashes only: tokens themselves are never stored); catalog_users.c */
/* A user's or a team's name: 1..64 printable bytes, no space or '/', not env-builder* (the accounts
 * environments are built by: kestrel-env-builder-...). */
int kd_name_ok(const char *s);
/* Create the user when missing (with team); an existing user is left as it is. */
int kd_catalog_user_ensure(kd_catalog *cat, const char *name, int is_admin, const char *team, int64_t *id_out,
                           int *created);
int kd_catalog_user_get(kd_catalog *cat, const char *name, kd_user *out);   /* KESTREL_ENOTFOUND */
int kd_catalog_user_set_team(kd_catalog *cat, const char *name, const char *team);
/* 1 when some user is in team, 0 when none, < 0 on error. */
int kd_catalog_team_exists(kd_catalog *cat, const char *team);
int kd_catalog_token_insert(kd_catalog *cat, const char *hash, const kd_token *t, int64_t *id_out);
/* The principal of a live token; KESTREL_ENOTFOUND (with why) when unknown, expired or revoked. */
int kd_catalog_token_find(kd_catalog *cat, const char *hash, int64_t now_ms, kd_principal *out);
int kd_catalog_token_drop_job(kd_catalog *cat, int64_t job_id);
/* Live (not revoked, not expired) user tokens of one user. */
int64_t kd_catalog_count_live_tokens(kd_catalog *cat, int64_t user_id, int64_t now_ms);
/* User tokens (not jobs'), of one user (user_id 0: all), by id. free() the rows. */
int kd_catalog_token_list(kd_catalog *cat, int64_t user_id, kd_token **out, size_t *n);
/* Revoke token id (of user_id; 0: anyone's) and every token made with it, transitively.
 * KESTREL_ENOTFOUND when there is none to revoke. */
int kd_catalog_token_revoke(kd_catalog *cat, int64_t id, int64_t user_id, int64_t now_ms);
/* who may read a model (KD_VIS_*; KD_VIS_ALL when never set) */
int kd_catalog_model_visibility(kd_catalog *cat, const char *name, int *vis_out);
int kd_catalog_model_set_visibility(kd_catalog *cat, const char *name, int vis);

/* jobs */
/* Insert a QUEUED job; job_out (may be NULL) receives it as committed. */
int kd_catalog_job_insert(kd_catalog *cat, int64_t owner_id, const Kestrel__V1__JobSpec *spec, int64_t now_ms,
                          int64_t *id_out, Kestrel__V1__Job **job_out);
/* Load a job (and its events). *owner_out may be NULL. KESTREL_ENOTFOUND. */
int kd_catalog_job_load(kd_catalog *cat, int64_t id, int with_events, Kestrel__V1__Job **out, int64_t *owner_out);
int kd_catalog_job_state(kd_catalog *cat, int64_t id, int *state_out);
/* How many jobs of owner are QUEUED. */
int64_t kd_catalog_count_queued(kd_catalog *cat, int64_t owner_id);
/* A page holds at most f->limit jobs and ends early past KD_LIST_MAX_BYTES of specs (its
 * next_page_token says where the next begins), so no listing builds 100s of MB. */
#define KD_LIST_MAX_BYTES (8u << 20)
int kd_catalog_job_list(kd_catalog *cat, const kd_job_filter *f, Kestrel__V1__JobList **out);
/* Jobs in one state, in queue order (class desc, submit time, id) up to limit. */
int kd_catalog_jobs_in_state(kd_catalog *cat, int state, size_t limit, kd_job_row **out, size_t *n);

/* A state transition with its event. Only applies when the current state is `from`
 * (or any non-final state when from == -1); returns 1 when it did not apply. */
typedef struct {
    int64_t now_ms;
    const char *reason;
    int exit_code;              /* written when set_exit */
    int set_exit;
    const char *devices;        /* written on RUNNING */
    int bump_restart;           /* requeue: restart_count + 1 */
    const char *node;           /* written on RUNNING */
} kd_transition;
/* What a committed transition changed, for observers (the metrics). */
typedef struct {
    int64_t id;
    int from, to;              /* KESTREL_JOB_STATE_* */
    int priority;
    int restart_count;         /* before this transition */
    int64_t now_ms, submit_ms;
    int64_t queued_ms;         /* when it last became QUEUED */
    const char *reason;
} kd_transition_seen;
/* fn is called after every committed transition, outside the catalog's lock (one observer). */
void kd_catalog_on_transition(kd_catalog *cat, void (*fn)(void *ctx, const kd_transition_seen *t), void *ctx);
int kd_catalog_job_transition(kd_catalog *cat, int64_t id, int from, int to, const kd_transition *t);
int kd_catalog_job_set_process(kd_catalog *cat, int64_t id, int64_t pid, int64_t pid_start);
int kd_catalog_job_set_commit(kd_catalog *cat, int64_t id, const char *sha);
/* Store a changed spec (its labels and pool columns with it). */
int kd_catalog_job_spec_replace(kd_catalog *cat, int64_t id, const Kestrel__V1__JobSpec *spec);
/* Give a job a label (in its spec, as shown, and for --label filters). */
int kd_catalog_job_label_set(kd_catalog *cat, int64_t id, const char *key, const char *value);
/* The failed runs a job was retried after (bump: one more first). */
int kd_catalog_job_retries(kd_catalog *cat, int64_t id, int bump);
/* The environment a job runs in ("sha256:...") and its `pip freeze`. */
int kd_catalog_job_set_env(kd_catalog *cat, int64_t id, const char *digest, const char *packages);
/* 1 when a RUNNING job uses the environment (it must not be evicted). */
int kd_catalog_env_in_use(kd_catalog *cat, const char *digest);

/* A queued job with what the scheduler needs (spec owned: free with kd_queued_free). */
typedef struct {
    int64_t id;
    int priority;
    int64_t submit_ms;
    int64_t owner_id;
    char owner[128];
    char team[128];
    int restart_count;
    Kestrel__V1__JobSpec *spec;
} kd_queued;
/* The scheduler's window of local QUEUED jobs, at most limit, in queue order: each user's first 64
 * (round-robin across users when they are more than limit) and then the queue's first. */
int kd_catalog_queue(kd_catalog *cat, size_t limit, kd_queued **out, size_t *n);
void kd_queued_free(kd_queued *q, size_t n);

/* State and node of jobs by id; missing ids are left out. */
typedef struct {
    int64_t id;
    int state;
    char node[64];
} kd_catref;
int kd_catalog_refs(kd_catalog *cat, const int64_t *ids, size_t n, kd_catref *out, size_t *found);
/* Node of the last started job of owner's group; KESTREL_ENOTFOUND when none. */
int kd_catalog_group_node(kd_catalog *cat, int64_t owner, const char *group, char *node, size_t len);
/* An event that does not change the state (e.g. "preempting job 7 on node a"). */
int kd_catalog_job_note(kd_catalog *cat, int64_t id, int64_t now_ms, const char *reason);
/* A RUNNING job saved a checkpoint (KESTREL_EEXISTS when it is not running): its time, and with note
 * an event, unless its last event says so already. */
int kd_catalog_job_checkpoint(kd_catalog *cat, int64_t id, int64_t now_ms, int note);
/* Change the class of a QUEUED job; returns 1 when the job is not queued. */
int kd_catalog_job_set_priority(kd_catalog *cat, int64_t id, int priority, int64_t now_ms);

/* Jobs handed to an external cluster (Slurm): its id for the job, set once while the job is QUEUED
 * (returns 1 when the job is no longer queued, e.g. cancelled meanwhile). */
int kd_catalog_job_set_ext(kd_catalog *cat, int64_t id, const char *ext_id);
typedef struct {
    int64_t id;
    char ext_id[32];
    int state;
    int priority;
    int restart_count;
} kd_ext_row;
/* Unfinished jobs with an external id (QUEUED, RUNNING, PREEMPTED), by id. free() the rows. */
int kd_catalog_ext_jobs(kd_catalog *cat, kd_ext_row **out, size_t *n);

/* logs: append a batch of lines in one transaction; read from an offset */
typedef struct {
    int64_t time_ms;
    int stream;
    const char *text;
    size_t len;
} kd_log_line;
/* Past max_bytes (0: no bound) the log keeps its head and tail around a "N bytes dropped" line;
 * *first_drop is 1 the first time that happens to the job. src_off >= 0: the lines were read from a
 * file of the job's stream src_stream up to that offset, kept with them (kd_catalog_log_source). */
int kd_catalog_log_append(kd_catalog *cat, int64_t job_id, const kd_log_line *lines, size_t n, int64_t max_bytes,
                          int src_stream, int64_t src_off, int *first_drop);
/* How far the file of a job's stream was read (kd_catalog_log_append's src_off), -1 when not known. */
int64_t kd_catalog_log_source(kd_catalog *cat, int64_t job_id, int stream);
int kd_catalog_log_read(kd_catalog *cat, int64_t job_id, int64_t offset, int limit, Kestrel__V1__LogChunk *out);
int64_t kd_catalog_log_count(kd_catalog *cat, int64_t job_id);
/* Bytes of one stream's lines, a newline counted after each: where a reader of the file left off
 * when neither a secret was masked, nor a line relabelled, nor a hole skipped, nor lines dropped. */
int64_t kd_catalog_log_bytes(kd_catalog *cat, int64_t job_id, int stream);

/* Log search (catalog_search.c): on a read-only connection of its own, so a long search never
 * holds the catalog's lock (appends, transitions go on beside it). */
typedef struct {
    const char *pattern;       /* a substring (>= 3 bytes), or with regex a POSIX extended regex */
    int regex;
    int icase;
    int64_t job_id;            /* 0: every job */
    int64_t owner_id;          /* 0: every owner (admins) */
    int state;                 /* 0: any */
    int64_t since_ms;          /* lines written at or after it */
    int64_t before;            /* cursor: hits older than this one (0: the newest) */
    int limit;                 /* hits, 1..1000 */
    int context;               /* lines of context each side, 0..20 */
    int timeout_ms;            /* the search stops past it with an error */
} kd_log_query;
/* The longest run of literal text every match of the POSIX extended regex re must contain
 * (0 and out set; out "" when there is none, e.g. with a top-level '|'). Pure (fuzzed). */
int kd_regex_literal(const char *re, char *out, size_t outsz);
int kd_catalog_log_search(kd_catalog *cat, const kd_log_query *q, Kestrel__V1__LogSearchResult **out);
/* Move up to batch queued lines into the search index, in one transaction: how many, or < 0. */
int kd_catalog_log_index(kd_catalog *cat, int batch);

/* GPU telemetry (catalog_gpu.c). One reading of a device a running job holds. */
typedef struct {
    int64_t job_id;
    int64_t time_ms;
    const char *uuid;
    int util;                  /* percent */
    int64_t mem_used;          /* bytes */
    int keep;                  /* 1: also a point of the series (else only the totals count it) */
} kd_gpu_reading;
int kd_catalog_gpu_record(kd_catalog *cat, const kd_gpu_reading *r, size_t n);
/* A job's series (oldest first, at most max_samples) and totals. */
int kd_catalog_gpu_telemetry(kd_catalog *cat, int64_t job_id, size_t max_samples, Kestrel__V1__GpuTelemetry **out);
/* Its totals, for a job's own view (catalog lock held). */
int kd__load_gpu_usage(kd_catalog *cat, int64_t job_id, Kestrel__V1__GpuUsage ***out, size_t *n);

/* kestreld's own alerts (catalog_alerts.c). delivery: 0 pending, 1 delivered, 2 given up, 3 no webhook. */
int kd_catalog_alert_add(kd_catalog *cat, int64_t job_id, int64_t now, const char *kind, const char *severity,
                         const char *message, int delivery);
/* Newest first; owner_id / job_id 0: any. */
int kd_catalog_alerts(kd_catalog *cat, int64_t owner_id, int64_t job_id, int limit, Kestrel__V1__AlertList **out);
/* Pending alerts whose next try is due, oldest first. */
int kd_catalog_alerts_due(kd_catalog *cat, int64_t now, int limit, Kestrel__V1__AlertList **out);
/* One delivery try: delivered (0 to retry at next_ms, 1 done, 2 given up). */
int kd_catalog_alert_delivery(kd_catalog *cat, int64_t id, int delivered, int64_t next_ms);
/* How many tries an alert's delivery has had. */
int kd__alert_tries(kd_catalog *cat, int64_t id, int *tries);

/* What /metrics reads (catalog_obs.c). */
typedef struct {
    int state, priority;
    char pool[64];
    int64_t n;
} kd_job_count;
/* Jobs by state, pool and priority (free(*out)). */
int kd_catalog_job_counts(kd_catalog *cat, kd_job_count **out, size_t *n);
typedef struct {
    int64_t job_id;
    char name[257];            /* KESTREL__NAME_MAX + 1 */
    double value;
    int64_t step;
} kd_latest_metric;
/* Lines stored and not yet in the search index. */
int64_t kd_catalog_log_index_queue(kd_catalog *cat);
/* Running jobs' metrics at their latest step: at most per_job names a job, limit in all. */
int kd_catalog_running_metrics(kd_catalog *cat, int per_job, size_t limit, kd_latest_metric **out, size_t *n);

/* metrics */
/* Store b's points for job_id, in one transaction: none of them (KESTREL_ETOOLARGE) where the job would
 * then hold more than max_points points or max_series series (0: no bound). */
int kd_catalog_metrics_add(kd_catalog *cat, int64_t job_id, const Kestrel__V1__MetricBatch *b, int64_t max_points,
                           int64_t max_series);
int kd_catalog_metrics_read(kd_catalog *cat, int64_t job_id, const char *name, Kestrel__V1__MetricBatch **out);
/* Each series of a job (or only the one called name), whole when it has at most max_points, else
 * sampled from its view (catalog_metrics.c), with out->series saying which. */
int kd_catalog_metrics_sampled(kd_catalog *cat, int64_t job_id, const char *name, long max_points,
                               Kestrel__V1__MetricBatch **out);
/* The model versions a job pushed (catalog_lineage.c): recorded at commit, listed by name then
 * version, at most 1,000. *out is the caller's to free. */
typedef struct {
    char name[256];
    int64_t version;
} kd_lineage_row;
int kd_catalog_lineage_add(kd_catalog *cat, int64_t job_id, const char *name, int64_t version);
int kd_catalog_lineage_list(kd_catalog *cat, int64_t job_id, kd_lineage_row **out, size_t *n);
/* Migration 6: the series and views of the points an older catalog holds. */
int kd__metric_view_build(kd_catalog *cat);
/* The latest (highest step) value of one metric of a job into *out (a new Metric), or *out left
 * NULL when the job has none by that name. */
int kd_catalog_metric_last(kd_catalog *cat, int64_t job_id, const char *name, Kestrel__V1__Metric **out);

/* internal to catalog*.c */
struct sqlite3_stmt;
struct sqlite3;
struct sqlite3 *kd__db(kd_catalog *cat);
struct sqlite3_stmt *kd__stmt(kd_catalog *cat, const char *sql);
int kd__sql_fail(kd_catalog *cat, const char *what);
void kd__lock(kd_catalog *cat);
void kd__unlock(kd_catalog *cat);
void kd__transition_seen(kd_catalog *cat, const kd_transition_seen *t);
const char *kd__path(const kd_catalog *cat);
/* The SQL functions the catalog's statements use: kd_spec_pool(spec), kd_regexp(re, text). */
int kd__register_functions(struct sqlite3 *db);
int kd__exec(kd_catalog *cat, const char *sql);
int kd__run(kd_catalog *cat, const char *sql, const char *types, ...);
/* kd__run, with the number of rows it changed in *changes. */
int kd__run_changes(kd_catalog *cat, int *changes, const char *sql, const char *types, ...);
/* Run a query (types: 'i' int64, 's' text per argument) into an array of elem-sized rows, each filled
 * by fill (which may fail). *out and *n hold the complete rows so far either way; the caller frees. */
int kd__rows(kd_catalog *cat, const char *sql, size_t elem, int (*fill)(struct sqlite3_stmt *st, void *row),
             void **out, size_t *n, const char *types, ...);

#endif

/* server/engine.h - kestreld's core: applies scheduler decisions, tracks running jobs,
 * records their ends, and wakes long-polling requests. Executors sit behind kd_executor. */
#ifndef KD_ENGINE_H
#define KD_ENGINE_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>
#include "catalog.h"
#include "priority_limits.h"
#include "sched_plan.h"

/* A declared environment (--environment NAME=FILE): its name and the file's text. */
typedef struct {
    char *name;
    char *requirements;
} kd_env_decl;

#define KD_HTTP_THREADS_MAX 256

typedef struct {
    const char *listen;        /* address to bind, "127.0.0.1" */
    int port;                  /* 0: ephemeral */
    const char *data_dir;
    int gpus;                  /* virtual devices of the default node */
    int grace_s;               /* SIGTERM -> SIGKILL, unless the job sets its own */
    int max_jobs;              /* concurrent process slots */
    size_t max_body;           /* request body limit (413 above) */
    const char *port_file;     /* write the bound port here */
    kd_node *nodes;            /* --node declarations (or the default node) */
    size_t nnodes;
    kd_quota *quotas;          /* --quota declarations */
    size_t nquotas;
    int repo_gc_grace_s;       /* unreferenced chunks older than this are collected */
    /* Pools whose jobs go to a Slurm cluster (--slurm-pool POOL[=PARTITION]); the rest run locally. */
    char **slurm_pools;        /* kestrel pool names */
    char **slurm_partitions;   /* the partition of each (default: the pool's name) */
    size_t nslurm_pools;
    int slurm_grace_s;         /* preemption warning: --signal=B:USR1@grace (default 10) */
    const char *slurm_qos[3];  /* QOS of normal, high, urgent jobs (default normal, high, urgent) */
    int slurm_poll_ms;         /* how often Slurm's view of the jobs is read (default 250) */
    const char *tls_cert;      /* PEM certificate (chain) file: serve HTTPS; NULL: HTTP */
    const char *tls_key;       /* its PEM private key file */
    const char *tls_ca;        /* CA bundle jobs verify this server with (their KESTREL_CA_FILE) */
    int64_t max_log_bytes;     /* a job's stored log: head and tail past it (0: default 256 MiB) */
    int max_queued;            /* QUEUED jobs per user (429 past it) */
    int64_t max_metric_points; /* metric points a job may hold (413 past it; 0: no bound) */
    int64_t max_metric_series; /* metric series (names) a job may hold */
    kd_priority_limits priority_limits;   /* --max-priority: the classes users may give jobs */
    long max_job_procs;        /* processes (tasks) a job's account may have at once (0: no limit) */
    int http_threads;          /* the HTTP server's thread pool, 1 to KD_HTTP_THREADS_MAX */
    int max_connections;       /* open connections in all (more are refused) */
    int max_connections_per_ip;
    int idle_timeout_s;        /* a connection silent this long (headers, body, keep-alive) is closed */
    kd_env_decl *envs;         /* --environment declarations */
    size_t nenvs;
    const char *job_env[64];   /* --job-env: more names (or PREFIX*) of kestreld's environment jobs get */
    size_t njob_env;
    const char *env_python;    /* the interpreter venvs are made with (default /usr/bin/python3) */
    const char *env_python_path;   /* a directory every venv gets on its path (the kestrel bindings) */
    int env_cache_max;         /* built environments kept (least recently used removed past it) */
    int env_build_timeout_s;   /* a build step running longer is stopped (the job fails) */
    const char *metrics_listen;   /* ADDR:PORT of an open listener serving only GET /metrics (NULL: none) */
    int gpu_sample_s;          /* real GPUs are read this often for per-job telemetry (default 5) */
    int idle_gpu_s;            /* a job whose GPUs stay under 5% this long from its start gets an event (600) */
    const char *webhook_url;   /* kestreld's alerts are POSTed here (NULL: none) */
    const char *webhook_secret_file;   /* their HMAC key (default DATA/webhook.secret, made when missing) */
    char **log_policies;       /* --log-policy NAME:ACTIONS=REGEX (besides the built-ins) */
    size_t nlog_policies;
    size_t max_manifest;       /* a commit's body limit (413 above) */
    uint64_t max_upload_memory;   /* what request bodies, packs and chunk answers may hold at once
                                     (upload_mem.h; 0: 4 x (5 x the larger body limit + 20 MiB), 1 GiB at least: main.c) */
    int max_grace_s;           /* a job's own grace above it: for those who may give urgent jobs */
    int64_t max_job_disk;      /* a job's files (DATA/jobs/ID) past it: the job fails (job_disk.c; 0: none) */
    int settle_at_commit;      /* --settle-digests at-commit: no version's digests are settled later (repo_settle.h) */
    int64_t settle_after_ms;   /* --settle-after: the quiet the thread waits for (10 times it at most) */
} kd_config;

/* The larger body limit, a commit's or any request's: what a user's quarter of the upload budget must
 * hold (main.c sizes the budget by it, repo_pack.c how deep a run goes). */
static inline uint64_t kd_config_largest_body(const kd_config *c)
{
    return c->max_manifest > c->max_body ? c->max_manifest : c->max_body;
}

/* Why a run is being stopped. KD_TERM_DISK: its files past --max-job-disk, or the largest on a data
 * disk below its floor (job_disk.c): it fails, and its files go before its end is recorded. */
enum { KD_TERM_NONE = 0, KD_TERM_CANCEL = 1, KD_TERM_SHUTDOWN = 2, KD_TERM_PREEMPT = 3, KD_TERM_DISK = 4 };

/* One running job. Fields under the engine lock unless noted. */
typedef struct kd_run {
    int64_t id;
    int64_t owner_id;
    char team[128];
    pid_t pgid;                /* 0 until the process exists */
    int term;                  /* KD_TERM_* */
    int64_t kill_at_ms;        /* SIGKILL deadline once terminating */
    uint64_t low_told;         /* the disk's low epoch its log last said its output is dropped in (job_disk.c) */
    int64_t low_told_ms;       /* and when (monotonic): at most once a minute */
    char term_by[200];         /* who cancelled, or the preemption reason */
    int no_retry;
    int priority;
    int preemptible;
    int grace_s;
    int64_t start_ms;
    int64_t submit_ms;         /* for the queue-wait metrics */
    int64_t checkpoint_ms;
    int restart_count;
    int64_t backfill_for;      /* borrowed the reservation of this job (it may preempt this one) */
    int node;
    int ndev;
    int *devices;
    /* A gang (nranks > 1): devices are rank after rank (ndev / nranks each), rank r on node
     * rank_nodes[r]; each rank is its own process group, rank_pgids[r] (0 until it exists). */
    int nranks;
    int *rank_nodes;
    pid_t *rank_pgids;
    struct kd_run *next;
} kd_run;

/* The node of a run's k-th device. */
static inline int kd_run_dev_node(const kd_run *r, int k)
{
    return r->nranks > 1 ? r->rank_nodes[k / (r->ndev / r->nranks)] : r->node;
}
/* Free a run and what it owns. */
void kd_run_free(kd_run *r);

typedef struct kd_engine kd_engine;

/* What an executor provides. Two kinds sit behind this one interface:
 * - executors of jobs kestreld places itself (local): start and signal; the scheduler's plan picks
 *   node and devices and preempts, the executor runs and reports kd_engine_finished();
 * - executors whose cluster places and preempts (Slurm): hand_over, cancel, explain, open, close.
 *   kestreld records their state transitions in the catalog as the cluster reports them. */
typedef struct {
    const char *name;
    /* Start job (owned by the executor from here) for run; token is the job-scoped token.
     * The executor later calls kd_engine_finished() exactly once. */
    int (*start)(kd_engine *e, kd_run *run, Kestrel__V1__Job *job, const char *token, const char *visible_devices);
    /* Deliver sig to the job's processes (no-op when not started yet). */
    void (*signal)(kd_engine *e, kd_run *run, int sig);

    /* Follow the jobs the cluster already has (after a restart too); start its threads. */
    int (*open)(kd_engine *e);
    /* Stop following (the jobs keep running in the cluster). */
    void (*close)(kd_engine *e);
    /* A QUEUED job of one of its pools (called once per scheduling pass until it is handed over). */
    void (*hand_over)(kd_engine *e, int64_t id);
    /* Cancel one of its jobs; 1 when the job is not one of its own. */
    int (*cancel)(kd_engine *e, int64_t id, const char *by);
    /* Why one of its queued jobs waits (the cluster's reason); 1 when it knows the job. */
    int (*explain)(kd_engine *e, int64_t id, char *reason, size_t n);
    /* Move one of its queued jobs to another class in the cluster; 1 when the job is not its own. */
    int (*set_priority)(kd_engine *e, int64_t id, int priority);
    /* Its queued jobs with the cluster's reasons, by id (malloc'd; position 0: the cluster's queue). */
    kd_wait *(*waiting)(kd_engine *e, size_t *n);
} kd_executor;

/* How a run ended, as the executor saw it. */
typedef enum { KD_END_EXITED, KD_END_SIGNALED, KD_END_NOT_STARTED } kd_end_kind;

struct kd_engine {
    const kd_config *cfg;
    kd_catalog *cat;
    const kd_executor *exec;   /* pools kestreld places */
    const kd_executor *ext;    /* pools an external cluster places (cfg->slurm_pools); NULL: none */
    void *ext_state;
    char url[160];

    pthread_mutex_t mu;
    pthread_cond_t changed;     /* broadcast on any job or log change */
    pthread_cond_t sched_cv;
    pthread_cond_t gc_cv;      /* wakes the collector to stop */
    uint64_t gen;
    int sched_pending;
    int in_pass;                /* a pass is reading the queue now (fresh_pass needs the one after it) */
    int stopping;
    int running;
    kd_run *runs;
    kd_wait *waits;             /* last pass: why each queued job waits (sorted by job id) */
    size_t nwaits;
    uint64_t passes;            /* scheduling passes completed */
    struct kestrel__store *store;   /* the model repository (DATA/repo) */
    struct kd_runs *repo_runs;  /* files' digests computed as their chunks stream in (repo_runs.h) */
    struct kd_settle *repo_settle;   /* files' digests settled after the commit (repo_settle.h; NULL:
                                        --settle-digests at-commit) */
    kestrel_gpu_list *gpus;     /* live memory and utilisation of real GPUs (NULL: none) */
    int64_t gpus_ms;
    pthread_t sched_thread;
    pthread_t gc_thread;       /* the repository collector, off the scheduler thread */
    int gc_running;
    struct kd_envs *envs;      /* the Python environments jobs ask for */
    struct kd_metrics *metrics;   /* counters and histograms for /metrics (metrics.h) */
    struct kd_telemetry *telemetry;   /* the GPU sampler (telemetry.c); NULL without real GPUs */
    struct kd_job_disk *job_disk;     /* the watch of jobs' files (job_disk.c) */
    int disk_low;               /* the data disk below its floor, as last read (under mu; job_disk.c) */
    uint64_t low_epoch;         /* times it went below: a run's log says so once each time (kd_run.low_told) */
    struct kd_alerts *alerts;  /* webhook delivery (alerts.c); NULL without --webhook */
    struct kd_policies *policies;   /* log policies (policy.c) */
    struct kd_indexer *indexer;     /* fills the log search index (log_index.c) */
};

int kd_engine_init(kd_engine *e, const kd_config *cfg, kd_catalog *cat, const kd_executor *exec);
/* Hand the pools in cfg->slurm_pools to ext (before kd_engine_start). */
void kd_engine_set_external(kd_engine *e, const kd_executor *ext);
/* DATA/jobs/ID (sub NULL), or DATA/jobs/ID/sub, in buf of n bytes: a job's own dir (work dir,
 * checkpoints, HOME, /tmp), where every executor and watch finds it. */
void kd_engine_job_dir(const kd_engine *e, int64_t id, const char *sub, char *buf, size_t n);
/* Whether pool belongs to the external executor. */
int kd_engine_pool_external(const kd_engine *e, const char *pool);
/* 1 when no node (of its pool, with its GPU count of its type, memory and compute capability; a
 * gang's ranks all together) can ever hold the job:
 * the plan says so, and nothing is built or copied for it (engine_sched.c). */
int kd_engine_never_placed(const kd_engine *e, const Kestrel__V1__JobSpec *s);
/* Requeue or fail jobs left RUNNING by a previous daemon that died. */
int kd_engine_recover(kd_engine *e);
int kd_engine_start(kd_engine *e);
/* Stop starting jobs and release long polls (before the HTTP server stops). */
void kd_engine_quiesce(kd_engine *e);
/* Stop: SIGTERM every job, wait the grace period, SIGKILL, wait for their ends. */
void kd_engine_stop(kd_engine *e);
void kd_engine_fini(kd_engine *e);

void kd_engine_kick(kd_engine *e);        /* a scheduling pass is due */
void kd_engine_changed(kd_engine *e);     /* wake long polls */
uint64_t kd_engine_generation(kd_engine *e);
/* Wait until the generation moves past seen or deadline (Unix ms) passes. */
void kd_engine_wait(kd_engine *e, uint64_t seen, int64_t deadline_ms);

/* Cancel a job: queued -> CANCELLED now; running -> SIGTERM, then SIGKILL after grace. */
int kd_engine_cancel(kd_engine *e, int64_t id, const char *by);
/* Move a QUEUED job to another class (in the cluster too, for an external pool); 1 when it is not
 * queued. */
int kd_engine_set_priority(kd_engine *e, int64_t id, int priority);
/* A job acknowledged a checkpoint (it loses no work before now if preempted). */
int kd_engine_checkpoint(kd_engine *e, int64_t id);
/* Position and reason of a queued job from the last pass; 0 when unknown. */
int kd_engine_explain(kd_engine *e, int64_t id, int *position, char *reason, size_t n);
/* Ask for a pass and wait (up to timeout_ms) until one that started after this call is done, so
 * that explanations include jobs submitted just before. */
void kd_engine_fresh_pass(kd_engine *e, long timeout_ms);
/* Copy of the last pass's waits in queue order (free() it). */
kd_wait *kd_engine_queue(kd_engine *e, size_t *n);
/* The nodes, their devices (live values of real GPUs) and which job holds each (engine_nodes.c). */
int kd_engine_nodes(kd_engine *e, Kestrel__V1__NodeList **out);
/* A real device a running job holds, as last read. */
typedef struct {
    int64_t job_id, start_ms;
    char uuid[96];
    int util;                  /* percent */
    int64_t mem_used;          /* bytes, -1 unknown */
} kd_held_gpu;
/* Whether any node declares a real (NVML) device. */
int kd_engine_has_real_gpus(const kd_engine *e);
/* Read the real GPUs now and list those running jobs hold (free(*out)). */
int kd_engine_held_gpus(kd_engine *e, kd_held_gpu **out, size_t *n);
/* The per-device gauges and the job-GPU join gauge of /metrics (engine_nodes.c). */
int kd_engine_gpu_metrics(kd_engine *e, kestrel_buf *out);
/* Re-read real GPUs' memory and utilisation when the last reading is older than max_age_ms. */
void kd_engine_refresh_gpus(kd_engine *e, int64_t max_age_ms);
/* Pick the exact real devices of a start through the device selector (engine_nodes.c). */
void kd_engine_refine_devices(kd_engine *e, kd_run *r, const Kestrel__V1__JobSpec *spec);

/* The repository's directory. */
const char *kd_store_root(const kd_engine *e);

/* Scheduling pass (engine_sched.c). */
void kd_engine_schedule(kd_engine *e);
void kd_engine_release_locked(kd_engine *e, kd_run *run);
void kd_engine_launch(kd_engine *e, kd_run *run);
void kd_engine_terminate_locked(kd_engine *e, kd_run *r, int why, const char *by);

/* A run ended (failed: exit code or signal): 1 when it goes back to QUEUED (reason set: its retries,
 * retry-larger), 0 when it ends as it is (reason set when a log policy made a failure final).
 * Forgets the run's log-policy state either way (engine_retry.c). */
int kd_engine_retry(kd_engine *e, kd_run *run, int failed, const char *failure, char *reason, size_t n);
/* Record one of kestreld's own alerts on a job (and send it to the webhook) (alerts.c). */
void kd_engine_alert(kd_engine *e, int64_t job_id, const char *kind, const char *severity, const char *message);

/* Executors report: */
void kd_engine_set_pgid(kd_engine *e, kd_run *run, pid_t pgid);
/* A gang's rank r has its process group (rank 0's is also the run's pgid). */
void kd_engine_set_rank_pgid(kd_engine *e, kd_run *run, int rank, pid_t pgid);
int kd_engine_term_requested(kd_engine *e, kd_run *run);
void kd_engine_log(kd_engine *e, int64_t job_id, const kd_log_line *lines, size_t n);
/* Lines read from a file of the job's stream up to offset off, which is kept with them (a follower
 * that restarts reads on from there: kd_catalog_log_source). */
void kd_engine_log_from(kd_engine *e, int64_t job_id, const kd_log_line *lines, size_t n, int stream, int64_t off);
void kd_engine_finished(kd_engine *e, kd_run *run, kd_end_kind kind, int code, const char *why);

/* Create a random token and store its hash for user (and job, when job_id != 0). */
int kd_token_issue(kd_catalog *cat, int64_t user_id, int64_t job_id, char *out, size_t outlen);
/* A token as t describes it (scope, expiry, name; hint and created_ms filled); *id_out its id. */
int kd_token_issue_for(kd_catalog *cat, kd_token *t, char *out, size_t outlen, int64_t *id_out);
/* SHA-256 hex of a token: 0, or KESTREL_ERROR (OpenSSL failed; hex is then "", to be looked up
 * nowhere). */
int kd_token_hash(const char *token, char hex[65]);

#endif

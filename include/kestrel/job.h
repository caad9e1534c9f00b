/* kestrel/job.h - training jobs: specs, submit, follow, cancel, logs, metrics. */
#ifndef KESTREL_JOB_H
#define KESTREL_JOB_H

#include "common.h"
#include "buffer.h"
#include "client.h"

KESTREL_BEGIN_DECL

/** Job states. PREEMPTED is transient (the job goes back to QUEUED). */
typedef enum kestrel_job_state_t {
    KESTREL_JOB_STATE_UNKNOWN = 0,
    KESTREL_JOB_STATE_QUEUED = 1,
    KESTREL_JOB_STATE_RUNNING = 2,
    KESTREL_JOB_STATE_SUCCEEDED = 3,
    KESTREL_JOB_STATE_FAILED = 4,
    KESTREL_JOB_STATE_CANCELLED = 5,
    KESTREL_JOB_STATE_PREEMPTED = 6
} kestrel_job_state_t;

/** Priority classes; the queue is ordered by class, then submit time. */
typedef enum kestrel_priority_t {
    KESTREL_PRIORITY_NORMAL = 1,
    KESTREL_PRIORITY_HIGH = 2,
    KESTREL_PRIORITY_URGENT = 3
} kestrel_priority_t;

/** Log streams. */
typedef enum kestrel_log_stream_t {
    KESTREL_LOG_STDOUT = 1,
    KESTREL_LOG_STDERR = 2,
    KESTREL_LOG_SYSTEM = 3   /**< lines written by kestreld itself (clone, exec errors) */
} kestrel_log_stream_t;

/** "QUEUED", "RUNNING", ... (static, borrowed); "UNKNOWN" for other values. */
KESTREL_API const char *kestrel_job_state_name(int state);
/** 1 when state is SUCCEEDED, FAILED or CANCELLED, else 0. */
KESTREL_API int kestrel_job_state_is_final(int state);
/** "normal", "high", "urgent" (static, borrowed); NULL for other values. */
KESTREL_API const char *kestrel_priority_name(int priority);
/** Parse "normal" / "high" / "urgent" (any case) into *out. Returns 0 or KESTREL_EINVALID. */
KESTREL_API int kestrel_priority_parse(int *out, const char *name);

/* ---- job specs --------------------------------------------------------- */

/** A job description under construction. Opaque; all setters copy their inputs. */
typedef struct kestrel_job_spec kestrel_job_spec;

/** Create an empty spec (priority normal, 0 GPUs). *out is owned: kestrel_job_spec_free(). */
KESTREL_API int kestrel_job_spec_new(kestrel_job_spec **out);
/** Free a spec. Accepts NULL. */
KESTREL_API void kestrel_job_spec_free(kestrel_job_spec *spec);
/** Set the argument vector (argv[0] is looked up in PATH; no shell). argc >= 1. */
KESTREL_API int kestrel_job_spec_set_argv(kestrel_job_spec *spec, const char *const *argv, size_t argc);
/** Set (or replace) one environment variable of the job. */
KESTREL_API int kestrel_job_spec_set_env(kestrel_job_spec *spec, const char *key, const char *value);
/**
 * Set (or replace) one secret environment variable (an API key, a password): the job sees it like
 * any other, but the API shows its value as "***" to everyone, and kestreld masks it in the job's
 * log lines (values of 4 bytes or more).
 */
KESTREL_API int kestrel_job_spec_set_secret_env(kestrel_job_spec *spec, const char *key, const char *value);
/** Set the job's display name (printable UTF-8, at most 256 bytes). */
KESTREL_API int kestrel_job_spec_set_name(kestrel_job_spec *spec, const char *name);
/** Set (or replace) one label; labels are filters for kestrel_job_list(). */
KESTREL_API int kestrel_job_spec_set_label(kestrel_job_spec *spec, const char *key, const char *value);
/** Set the priority class (a kestrel_priority_t). */
KESTREL_API int kestrel_job_spec_set_priority(kestrel_job_spec *spec, int priority);
/** Set the number of GPUs the job needs on one node (0..1024); of a gang, each rank's. */
KESTREL_API int kestrel_job_spec_set_gpus(kestrel_job_spec *spec, int gpus);
/**
 * Make the job a gang of replicas processes (ranks, 1..64; 1: one process), each with the job's
 * gpus on one node. The ranks are placed all at once or not at all, packed on as few nodes of one
 * pool as hold them; they start together and get KESTREL_RANK, KESTREL_WORLD_SIZE,
 * KESTREL_LOCAL_RANK, KESTREL_COORDINATOR (host:port of rank 0), torchrun's RANK, LOCAL_RANK,
 * WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT, Keras' KERAS_DISTRIBUTION_* and their
 * own CUDA_VISIBLE_DEVICES. When one rank fails the others are stopped and the job fails (or is
 * queued again whole under its retries); preemption stops and requeues every rank. Since KESTREL_1.4.
 */
KESTREL_API int kestrel_job_spec_set_replicas(kestrel_job_spec *spec, int replicas);
/** Run from a git checkout: url cloned at ref (branch, tag or commit; NULL: default branch). */
KESTREL_API int kestrel_job_spec_set_git(kestrel_job_spec *spec, const char *url, const char *ref);
/**
 * Run in a fresh copy of a directory version of the repository ("alice/code/proj@3"; an alias or
 * none means the version it points to at submit, and the job records that exact version). The copy
 * is the job's work dir, the job's own to change. kestrel_code_push() makes such a version from a
 * local directory. Not together with kestrel_job_spec_set_git().
 */
KESTREL_API int kestrel_job_spec_set_code(kestrel_job_spec *spec, const char *ref);
/**
 * Make a repository version ("team/mnist@3"; an alias is pinned at submit) available at path,
 * relative to the work dir, before the job starts: a directory version as a directory, a file
 * version as a file. Read-only, and shared: a second job on the same host links the same bytes
 * instead of copying them. Repeatable (at most 64; paths must not overlap).
 */
KESTREL_API int kestrel_job_spec_add_data(kestrel_job_spec *spec, const char *ref, const char *path);
/**
 * Run in a standard environment the server declares (kestreld --environment NAME=FILE; see
 * kestrel_environments_get()): `python` in argv is that venv's, with `import kestrel` available.
 */
KESTREL_API int kestrel_job_spec_set_environment(kestrel_job_spec *spec, const char *name);
/**
 * Or bring one: the text of a requirements file (at most 64 KiB). kestreld builds a venv of it
 * once per distinct text, while the job is QUEUED (its build log is in the job's log), and every
 * job with the same text reuses it. Not together with kestrel_job_spec_set_environment().
 */
KESTREL_API int kestrel_job_spec_set_requirements(kestrel_job_spec *spec, const char *text);
/** Working subdirectory, relative to the job's work dir (or checkout). No "..". */
KESTREL_API int kestrel_job_spec_set_workdir(kestrel_job_spec *spec, const char *subdir);
/** retry != 0 (default): requeue after a daemon crash; 0: fail with "daemon restarted". */
KESTREL_API int kestrel_job_spec_set_retry(kestrel_job_spec *spec, int retry);
/**
 * Set (or replace) one parameter (a hyperparameter such as lr=0.001). The job finds them all in
 * KESTREL_PARAMS, a JSON object of strings (Python: kestrel.params()); they are listed with the job
 * and filter listings (kestrel_job_list_options.param). Keys: 1..64 bytes of [A-Za-z0-9_.-];
 * values: printable UTF-8, at most 4096 bytes; at most 256 parameters.
 */
KESTREL_API int kestrel_job_spec_set_param(kestrel_job_spec *spec, const char *key, const char *value);

/* Placement. The scheduler filters nodes by these; kestrel_job_explain() says what is missing. */

/** Dependency kinds for kestrel_job_spec_add_dependency(). */
typedef enum kestrel_dependency_t {
    KESTREL_AFTER_OK = 1,    /**< start after the job SUCCEEDED; fail if it fails or is cancelled */
    KESTREL_AFTER_ANY = 2    /**< start after the job ended, however */
} kestrel_dependency_t;

/** Only devices of this type ("a100"; NULL or "": any). */
KESTREL_API int kestrel_job_spec_set_gpu_type(kestrel_job_spec *spec, const char *type);
/** Only devices with at least this much memory (MB; 0: any). */
KESTREL_API int kestrel_job_spec_set_min_gpu_memory(kestrel_job_spec *spec, int64_t megabytes);
/** Only devices of at least this compute capability (0, 0: any). */
KESTREL_API int kestrel_job_spec_set_min_compute_capability(kestrel_job_spec *spec, int major, int minor);
/** Only nodes of this pool (NULL or "": any). */
KESTREL_API int kestrel_job_spec_set_pool(kestrel_job_spec *spec, const char *pool);
/** Start after job_id (kind: a kestrel_dependency_t). Repeatable, up to 64. */
KESTREL_API int kestrel_job_spec_add_dependency(kestrel_job_spec *spec, int64_t job_id, int kind);
/**
 * Run on the node of job_id, or (job_id 0) of the last placed job of group. required != 0:
 * only there; 0: preferred.
 */
KESTREL_API int kestrel_job_spec_set_affinity(kestrel_job_spec *spec, int64_t job_id, const char *group, int required);
/** Make the job a member of group (later jobs may ask for its node). */
KESTREL_API int kestrel_job_spec_set_group(kestrel_job_spec *spec, const char *group);
/** preemptible != 0 (default): a job of a higher class may preempt it; 0: never. */
KESTREL_API int kestrel_job_spec_set_preemptible(kestrel_job_spec *spec, int preemptible);
/** Seconds between SIGTERM and SIGKILL when the job is stopped (0: the server's default). */
KESTREL_API int kestrel_job_spec_set_grace_period(kestrel_job_spec *spec, int seconds);

/* ---- jobs ------------------------------------------------------------------ */

/** A snapshot of a job as the server last reported it. Opaque. */
typedef struct kestrel_job kestrel_job;

/** One state transition of a job. Library-filled; fields may be appended. */
typedef struct kestrel_job_event {
    unsigned int version;
    int64_t time_ms;      /**< Unix time, milliseconds */
    int from_state;       /**< kestrel_job_state_t */
    int to_state;         /**< kestrel_job_state_t */
    const char *reason;   /**< never NULL */
} kestrel_job_event;

/** Submit a job. On success *out (owned) is the QUEUED job: kestrel_job_free(). Never retried.
 * KESTREL_EAUTH (403) for a priority class above what kestreld lets the caller give (--max-priority). */
KESTREL_API int kestrel_job_submit(kestrel_job **out, kestrel_client *client, const kestrel_job_spec *spec);
/** Fetch a job by id. *out is owned. KESTREL_ENOTFOUND when it does not exist or is not yours. */
KESTREL_API int kestrel_job_get(kestrel_job **out, kestrel_client *client, int64_t id);
/**
 * Wait until the job reaches a final state or timeout_ms passes (negative:
 * forever). On success *out (owned) is the final job; KESTREL_ETIMEOUT otherwise.
 */
KESTREL_API int kestrel_job_wait(kestrel_job **out, kestrel_client *client, int64_t id, long timeout_ms);
/**
 * Cancel a job: a queued job ends at once; a running one gets SIGTERM, then
 * SIGKILL after the server's grace period. Cancelling a final job is a no-op (the HTTP API answers
 * it with 409; this call returns 0 with the job as it is).
 * *out (owned, may be NULL to skip) receives the job after the request.
 */
KESTREL_API int kestrel_job_cancel(kestrel_job **out, kestrel_client *client, int64_t id);
/**
 * Queue job id again, as a new job of yours: the same code version, datasets, parameters, argv
 * and environment (a git source at the commit it ran), not its dependencies. KESTREL_ENOTFOUND,
 * naming each one, when an input can no longer be found; nothing is queued then.
 */
KESTREL_API int kestrel_job_rerun(kestrel_job **out, kestrel_client *client, int64_t id);
/**
 * Rerun the job that pushed a model version ("team/m@3", "team/m@production"; its lineage names
 * the job): see kestrel_job_rerun(). KESTREL_ENOTFOUND when the version carries no lineage.
 */
KESTREL_API int kestrel_job_reproduce(kestrel_job **out, kestrel_client *client, const char *ref);
/** Free a job snapshot. Accepts NULL. */
KESTREL_API void kestrel_job_free(kestrel_job *job);

/** Accessors (borrowed strings, never NULL; valid until the job is freed). */
KESTREL_API int64_t kestrel_job_id(const kestrel_job *job);
KESTREL_API int kestrel_job_state(const kestrel_job *job);
/** Exit status of the process (0..255), 128+N when killed by signal N, -1 when it did not exit. */
KESTREL_API int kestrel_job_exit_code(const kestrel_job *job);
KESTREL_API const char *kestrel_job_name(const kestrel_job *job);
KESTREL_API const char *kestrel_job_owner(const kestrel_job *job);
/** Why the job is in its state ("exit code 1", "cancelled by alice", ...). */
KESTREL_API const char *kestrel_job_reason(const kestrel_job *job);
/** Resolved commit SHA of a git-source job, "" otherwise. */
KESTREL_API const char *kestrel_job_git_commit(const kestrel_job *job);
KESTREL_API int kestrel_job_priority(const kestrel_job *job);
KESTREL_API int kestrel_job_gpus(const kestrel_job *job);
/** The ranks of a gang job (kestrel_job_spec_set_replicas); 1 for one process. Since KESTREL_1.4. */
KESTREL_API int kestrel_job_replicas(const kestrel_job *job);
KESTREL_API int kestrel_job_restart_count(const kestrel_job *job);
/** Unix times in milliseconds; 0 when not reached yet. */
KESTREL_API int64_t kestrel_job_submit_time(const kestrel_job *job);
KESTREL_API int64_t kestrel_job_start_time(const kestrel_job *job);
KESTREL_API int64_t kestrel_job_end_time(const kestrel_job *job);
/** Number of state-transition events carried by this snapshot. */
KESTREL_API size_t kestrel_job_event_count(const kestrel_job *job);
/** Event i (borrowed), or NULL when i is out of range. */
KESTREL_API const kestrel_job_event *kestrel_job_event_at(const kestrel_job *job, size_t i);
/** Node the job runs or last ran on, "" when never placed (borrowed). */
KESTREL_API const char *kestrel_job_node(const kestrel_job *job);
/** Unix ms of the last acknowledged checkpoint, 0 when none. */
KESTREL_API int64_t kestrel_job_checkpoint_time(const kestrel_job *job);
/** The exact code version the job runs ("alice/code/proj@3"), "" when none. */
KESTREL_API const char *kestrel_job_code(const kestrel_job *job);
/** The environment the job ran in ("sha256:..." of its spec), "" when none or not started. */
KESTREL_API const char *kestrel_job_environment(const kestrel_job *job);
/** That environment's packages (`pip freeze`, one a line), "" when none. */
KESTREL_API const char *kestrel_job_packages(const kestrel_job *job);
/** Number of datasets of the job (kestrel_job_spec_add_data). */
KESTREL_API size_t kestrel_job_data_count(const kestrel_job *job);
/** Dataset i: its exact version (*ref, "team/mnist@3") and *path, borrowed from job. */
KESTREL_API int kestrel_job_data_at(const kestrel_job *job, size_t i, const char **ref, const char **path);
/** Number of parameters of the job (kestrel_job_spec_set_param). */
KESTREL_API size_t kestrel_job_param_count(const kestrel_job *job);
/** Parameter i: *key and *value borrowed from job. KESTREL_EINVALID when i is out of range. */
KESTREL_API int kestrel_job_param_at(const kestrel_job *job, size_t i, const char **key, const char **value);
/** Fill out with the job as JSON (the API's own JSON mapping). */
KESTREL_API int kestrel_job_to_json(kestrel_buf *out, const kestrel_job *job);

/**
 * The environments of the server, as the API's JSON ({"environments": [{"name", "digest",
 * "state", "packages", "requirements", "error"}, ...]}): the declared ones, then those jobs'
 * requirements made.
 */
KESTREL_API int kestrel_environments_get(kestrel_buf *json_out, kestrel_client *client);

/* ---- listing ----------------------------------------------------------------- */

/** A page of jobs. Opaque. */
typedef struct kestrel_job_page kestrel_job_page;

/** Filters and paging for kestrel_job_list(). Strings are copied. */
typedef struct kestrel_job_list_options {
    unsigned int version;      /**< KESTREL_JOB_LIST_OPTIONS_VERSION */
    int state;                 /**< kestrel_job_state_t; 0: any */
    const char *name;          /**< exact name; NULL: any */
    const char *label;         /**< "key=value"; NULL: any */
    int page_size;             /**< 0: 100; at most 1000 */
    const char *page_token;    /**< from kestrel_job_page_next_token(); NULL: first page */
    /* version 2 */
    const char *param;         /**< "key=value": jobs with this parameter; NULL: any */
} kestrel_job_list_options;

#define KESTREL_JOB_LIST_OPTIONS_VERSION 2
#define KESTREL_JOB_LIST_OPTIONS_INIT { KESTREL_JOB_LIST_OPTIONS_VERSION }

KESTREL_API int kestrel_job_list_options_init(kestrel_job_list_options *opts, unsigned int version);
/** List jobs, newest first. *out is owned: kestrel_job_page_free(). */
KESTREL_API int kestrel_job_list(kestrel_job_page **out, kestrel_client *client, const kestrel_job_list_options *opts);
KESTREL_API size_t kestrel_job_page_count(const kestrel_job_page *page);
/** Job i of the page (borrowed from page), or NULL when out of range. */
KESTREL_API const kestrel_job *kestrel_job_page_at(const kestrel_job_page *page, size_t i);
/** Token for the next page (borrowed), "" on the last page. */
KESTREL_API const char *kestrel_job_page_next_token(const kestrel_job_page *page);
KESTREL_API void kestrel_job_page_free(kestrel_job_page *page);

/* ---- failure: log policies, retries, excluded nodes -------------------------------- */

/**
 * When a line of the job's output matches pattern (a POSIX extended regex), take actions (comma
 * separated), once a run: "label" (the job gets label log-policy/NAME), "alert" (an alert, also
 * to kestreld's --webhook), "no-retry" (the run's failure is final), "exclude-node" (a retry avoids
 * the node it ran on), "retry-larger" (an out-of-memory failure is queued again for a device with
 * more memory, when the pool has one). At most 16 policies; kestreld adds its own and built-ins
 * (cuda-oom, ecc, nan-loss). KESTREL_EINVALID with the reason for a bad name, regex or action.
 */
KESTREL_API int kestrel_job_spec_add_log_policy(kestrel_job_spec *spec, const char *name, const char *pattern,
                                                const char *actions);
/** A failed run (non-zero exit, a signal) is queued again up to n times (0..100; default 0). */
KESTREL_API int kestrel_job_spec_set_max_retries(kestrel_job_spec *spec, int n);
/** Never place the job on node (repeatable, at most 64). */
KESTREL_API int kestrel_job_spec_exclude_node(kestrel_job_spec *spec, const char *node);

/* ---- logs -------------------------------------------------------------------- */

/** One captured log line. Library-filled; valid only during the callback. */
typedef struct kestrel_log_line {
    unsigned int version;
    int64_t offset;     /**< sequence number of the line in the job's log, from 0 */
    int64_t time_ms;    /**< when kestreld read it (Unix ms) */
    int stream;         /**< kestrel_log_stream_t */
    const char *text;   /**< without the trailing newline, NUL-terminated */
    size_t len;
} kestrel_log_line;

/** Called once per line, on the caller's thread. Non-zero stops the call with KESTREL_ECANCELLED (or KESTREL_EUSER as is). */
typedef int KESTREL_CALLBACK(kestrel_log_line_cb)(const kestrel_log_line *line, void *payload);

typedef struct kestrel_logs_options {
    unsigned int version;    /**< KESTREL_LOGS_OPTIONS_VERSION */
    int64_t offset;          /**< first line to return */
    int follow;              /**< non-zero: keep waiting for lines until the job ends */
    long timeout_ms;         /**< follow mode: return KESTREL_ETIMEOUT after this long, also while lines
                                  keep coming (resume from *next_offset_out); 0: never */
} kestrel_logs_options;

#define KESTREL_LOGS_OPTIONS_VERSION 1
#define KESTREL_LOGS_OPTIONS_INIT { KESTREL_LOGS_OPTIONS_VERSION }

KESTREL_API int kestrel_logs_options_init(kestrel_logs_options *opts, unsigned int version);
/**
 * Read a job's log lines from opts->offset, calling cb for each. Without
 * follow, returns after the lines stored so far; with follow, returns once the
 * job is final and every line was delivered. next_offset_out (may be NULL)
 * receives the offset to resume from. A server that sends a line before the
 * offset asked for (the log only goes forward) is KESTREL_EPROTO; one that
 * answers a follow early with nothing new is asked again after 10 ms to 1 s.
 */
KESTREL_API int kestrel_job_logs(int64_t *next_offset_out, kestrel_client *client, int64_t id,
                                 const kestrel_logs_options *opts, kestrel_log_line_cb cb, void *payload);

/* ---- log search ---------------------------------------------------------------- */

/**
 * What kestrel_logs_search() looks for and where. A substring (at least 3 characters: kestreld
 * keeps a trigram index of every line) or, with regex, a POSIX extended regular expression
 * (looked up by its longest literal when it has one of 3 characters, else scanned).
 */
typedef struct kestrel_log_search_options {
    unsigned int version;    /**< KESTREL_LOG_SEARCH_OPTIONS_VERSION */
    int regex;               /**< non-zero: pattern is a POSIX extended regex */
    int ignore_case;         /**< non-zero: case-insensitive */
    int64_t job_id;          /**< 0: every job the caller may see (an admin: all; a user: its own) */
    int state;               /**< kestrel_job_state_t of the jobs searched; 0: any */
    int64_t since_ms;        /**< lines written at or after this Unix time (ms); 0: all */
    int context;             /**< lines of context before and after each hit, 0..20 */
    int limit;               /**< hits at most (newest first); 0: 100 */
} kestrel_log_search_options;

#define KESTREL_LOG_SEARCH_OPTIONS_VERSION 1
#define KESTREL_LOG_SEARCH_OPTIONS_INIT { KESTREL_LOG_SEARCH_OPTIONS_VERSION }

/** One matching line with its job and context. Library-filled; valid only during the callback. */
typedef struct kestrel_log_hit {
    unsigned int version;
    int64_t job_id;
    const char *job_name;
    const kestrel_log_line *line;      /**< the matching line */
    const kestrel_log_line *before;    /**< up to context lines before it, oldest first */
    size_t n_before;
    const kestrel_log_line *after;     /**< up to context lines after it */
    size_t n_after;
} kestrel_log_hit;

/** Called once per hit, newest first. Non-zero stops the search (KESTREL_ECANCELLED, or KESTREL_EUSER as is). */
typedef int KESTREL_CALLBACK(kestrel_log_hit_cb)(const kestrel_log_hit *hit, void *payload);

KESTREL_API int kestrel_log_search_options_init(kestrel_log_search_options *opts, unsigned int version);
/**
 * Search the stored log lines of every job the caller may see (GET /api/v1/logs/search), calling
 * cb for each hit, newest first, up to opts->limit. KESTREL_EINVALID for a pattern under 3
 * characters without regex, or a regex that does not compile (the message says why).
 */
KESTREL_API int kestrel_logs_search(kestrel_client *client, const char *pattern, const kestrel_log_search_options *opts,
                                    kestrel_log_hit_cb cb, void *payload);

/* ---- GPU telemetry -------------------------------------------------------------- */

/** One reading of a real device a job held (kestreld reads them every --gpu-sample-interval). */
typedef struct kestrel_gpu_sample {
    unsigned int version;
    int64_t time_ms;
    const char *uuid;
    int utilization;           /**< percent */
    int64_t memory_used;       /**< bytes */
} kestrel_gpu_sample;

/** A job's use of one real device over its run (every reading counted). */
typedef struct kestrel_gpu_usage {
    unsigned int version;
    const char *uuid;
    int64_t samples;
    double mean_utilization;   /**< percent */
    int max_utilization;       /**< percent */
    int64_t peak_memory;       /**< bytes */
} kestrel_gpu_usage;

typedef struct kestrel_gpu_telemetry kestrel_gpu_telemetry;

/** A job's downsampled series and totals (GET /api/v1/jobs/{id}/gpu). *out: kestrel_gpu_telemetry_free(). */
KESTREL_API int kestrel_job_gpu_telemetry(kestrel_gpu_telemetry **out, kestrel_client *client, int64_t id);
KESTREL_API size_t kestrel_gpu_telemetry_sample_count(const kestrel_gpu_telemetry *t);
/** Sample i, oldest first (borrowed from t), or NULL. */
KESTREL_API const kestrel_gpu_sample *kestrel_gpu_telemetry_sample_at(const kestrel_gpu_telemetry *t, size_t i);
KESTREL_API size_t kestrel_gpu_telemetry_usage_count(const kestrel_gpu_telemetry *t);
KESTREL_API const kestrel_gpu_usage *kestrel_gpu_telemetry_usage_at(const kestrel_gpu_telemetry *t, size_t i);
KESTREL_API void kestrel_gpu_telemetry_free(kestrel_gpu_telemetry *t);
/** The totals on a job from kestrel_job_get() (none in listings). out's strings are borrowed from job. */
KESTREL_API size_t kestrel_job_gpu_usage_count(const kestrel_job *job);
KESTREL_API int kestrel_job_gpu_usage_at(const kestrel_job *job, size_t i, kestrel_gpu_usage *out);

/* ---- metrics ----------------------------------------------------------------- */

/** One metric point. Library-filled; fields may be appended. */
typedef struct kestrel_metric {
    unsigned int version;
    const char *name;       /**< never NULL */
    int64_t step;
    double value;
    int64_t wall_time_ms;   /**< Unix ms */
} kestrel_metric;

/** A batch of metric points: built to report, or filled by kestrel_job_metrics(). Opaque. */
typedef struct kestrel_metric_list kestrel_metric_list;

/** Create an empty batch. *out is owned: kestrel_metric_list_free(). */
KESTREL_API int kestrel_metric_list_new(kestrel_metric_list **out);
/** Append one point (name copied; printable, at most 256 bytes). wall_time_ms 0: now. */
KESTREL_API int kestrel_metric_list_add(kestrel_metric_list *list, const char *name, int64_t step,
                                        double value, int64_t wall_time_ms);
KESTREL_API size_t kestrel_metric_list_count(const kestrel_metric_list *list);
/** 1 when the list kestrel_job_metrics() filled holds the first 100,000 of a job's points and the job
 * holds more (ask for one name, or read them sampled); else 0. Since KESTREL_1.7. */
KESTREL_API int kestrel_metric_list_more(const kestrel_metric_list *list);
/** Point i (borrowed), or NULL when out of range. */
KESTREL_API const kestrel_metric *kestrel_metric_list_at(const kestrel_metric_list *list, size_t i);
KESTREL_API void kestrel_metric_list_free(kestrel_metric_list *list);

/** Report a batch of points for a job in one request (a job's own token may do this). */
KESTREL_API int kestrel_job_report_metrics(kestrel_client *client, int64_t id, const kestrel_metric_list *metrics);
/** Fetch a job's points, ordered by name then step, at most 100,000 (kestrel_metric_list_more() says
 * when there are more); name NULL: all. *out is owned. */
KESTREL_API int kestrel_job_metrics(kestrel_metric_list **out, kestrel_client *client, int64_t id, const char *name);

KESTREL_END_DECL

#endif

/* cffi declarations of include/kestrel.h (API mode: the compiler checks them against the real
 * header; tests/test_decl_sync.py fails when a KESTREL_API function is missing here). */

#define KESTREL_VERSION_NUMBER ...
#define KESTREL_FEATURE_PROTOBUF ...
#define KESTREL_GPU_QUERY_ALL ...
#define KESTREL_GPU_QUERY_CUDA ...
#define KESTREL_CLIENT_OPTIONS_VERSION ...
#define KESTREL_JOB_LIST_OPTIONS_VERSION ...
#define KESTREL_LOGS_OPTIONS_VERSION ...
#define KESTREL_GPU_SELECT_OPTIONS_VERSION ...
#define KESTREL_TOKEN_OPTIONS_VERSION ...

typedef enum kestrel_error_code {
    KESTREL_OK, KESTREL_ERROR, KESTREL_ENOMEM, KESTREL_EINVALID, KESTREL_EMISUSE, KESTREL_ENOTFOUND,
    KESTREL_EEXISTS, KESTREL_EAUTH, KESTREL_ENET, KESTREL_EHTTP, KESTREL_EPROTO, KESTREL_ETIMEOUT,
    KESTREL_ECANCELLED, KESTREL_EUSER, KESTREL_EUNSUPPORTED, KESTREL_EIO, KESTREL_ETOOLARGE, ...
} kestrel_error_code;

typedef struct kestrel_error {
    const char *message;
    int code;
    int http_status;
    int transport_code;
    ...;
} kestrel_error;

typedef struct kestrel_buf { char *ptr; size_t size; ...; } kestrel_buf;

const char *kestrel_version(void);
int kestrel_version_number(void);
unsigned int kestrel_features(void);
int kestrel_init(void);
int kestrel_shutdown(void);
const kestrel_error *kestrel_error_last(void);
void kestrel_error_clear(void);
int kestrel_error_outcome_unknown(void);
const char *kestrel_strerror(int code);
void kestrel_buf_dispose(kestrel_buf *buf);

/* client */
typedef struct kestrel_client kestrel_client;
typedef struct kestrel_client_options {
    unsigned int version;
    const char *token;
    long connect_timeout_ms;
    long timeout_ms;
    int max_retries;
    long retry_backoff_ms;
    ...;
} kestrel_client_options;
int kestrel_client_options_init(kestrel_client_options *opts, unsigned int version);
int kestrel_client_new(kestrel_client **out, const char *url, const kestrel_client_options *opts);
void kestrel_client_free(kestrel_client *client);
const char *kestrel_client_url(const kestrel_client *client);
int kestrel_client_ping(kestrel_buf *version_out, kestrel_client *client);
int kestrel_client_console_url(kestrel_buf *out, kestrel_client *client);
int kestrel_client_get_json(kestrel_buf *out, kestrel_client *client, const char *path);

/* jobs */
typedef enum kestrel_job_state_t {
    KESTREL_JOB_STATE_UNKNOWN, KESTREL_JOB_STATE_QUEUED, KESTREL_JOB_STATE_RUNNING, KESTREL_JOB_STATE_SUCCEEDED,
    KESTREL_JOB_STATE_FAILED, KESTREL_JOB_STATE_CANCELLED, KESTREL_JOB_STATE_PREEMPTED, ...
} kestrel_job_state_t;
typedef enum kestrel_priority_t { KESTREL_PRIORITY_NORMAL, KESTREL_PRIORITY_HIGH, KESTREL_PRIORITY_URGENT, ... } kestrel_priority_t;
typedef enum kestrel_log_stream_t { KESTREL_LOG_STDOUT, KESTREL_LOG_STDERR, KESTREL_LOG_SYSTEM, ... } kestrel_log_stream_t;
typedef enum kestrel_dependency_t { KESTREL_AFTER_OK, KESTREL_AFTER_ANY, ... } kestrel_dependency_t;

const char *kestrel_job_state_name(int state);
int kestrel_job_state_is_final(int state);
const char *kestrel_priority_name(int priority);
int kestrel_priority_parse(int *out, const char *name);

typedef struct kestrel_job_spec kestrel_job_spec;
int kestrel_job_spec_new(kestrel_job_spec **out);
void kestrel_job_spec_free(kestrel_job_spec *spec);
int kestrel_job_spec_set_argv(kestrel_job_spec *spec, const char *const *argv, size_t argc);
int kestrel_job_spec_set_env(kestrel_job_spec *spec, const char *key, const char *value);
int kestrel_job_spec_set_secret_env(kestrel_job_spec *spec, const char *key, const char *value);
int kestrel_job_spec_set_param(kestrel_job_spec *spec, const char *key, const char *value);
int kestrel_job_spec_set_name(kestrel_job_spec *spec, const char *name);
int kestrel_job_spec_set_label(kestrel_job_spec *spec, const char *key, const char *value);
int kestrel_job_spec_set_priority(kestrel_job_spec *spec, int priority);
int kestrel_job_spec_set_gpus(kestrel_job_spec *spec, int gpus);
int kestrel_job_spec_set_replicas(kestrel_job_spec *spec, int replicas);
int kestrel_job_spec_set_git(kestrel_job_spec *spec, const char *url, const char *ref);
int kestrel_job_spec_set_workdir(kestrel_job_spec *spec, const char *subdir);
int kestrel_job_spec_set_retry(kestrel_job_spec *spec, int retry);
int kestrel_job_spec_set_gpu_type(kestrel_job_spec *spec, const char *type);
int kestrel_job_spec_set_min_gpu_memory(kestrel_job_spec *spec, int64_t megabytes);
int kestrel_job_spec_set_min_compute_capability(kestrel_job_spec *spec, int major, int minor);
int kestrel_job_spec_set_pool(kestrel_job_spec *spec, const char *pool);
int kestrel_job_spec_add_dependency(kestrel_job_spec *spec, int64_t job_id, int kind);
int kestrel_job_spec_set_affinity(kestrel_job_spec *spec, int64_t job_id, const char *group, int required);
int kestrel_job_spec_set_group(kestrel_job_spec *spec, const char *group);
int kestrel_job_spec_set_preemptible(kestrel_job_spec *spec, int preemptible);
int kestrel_job_spec_set_grace_period(kestrel_job_spec *spec, int seconds);

typedef struct kestrel_job kestrel_job;
typedef struct kestrel_job_event {
    unsigned int version;
    int64_t time_ms;
    int from_state;
    int to_state;
    const char *reason;
    ...;
} kestrel_job_event;
int kestrel_job_submit(kestrel_job **out, kestrel_client *client, const kestrel_job_spec *spec);
int kestrel_job_get(kestrel_job **out, kestrel_client *client, int64_t id);
int kestrel_job_wait(kestrel_job **out, kestrel_client *client, int64_t id, long timeout_ms);
int kestrel_job_cancel(kestrel_job **out, kestrel_client *client, int64_t id);
void kestrel_job_free(kestrel_job *job);
int64_t kestrel_job_id(const kestrel_job *job);
int kestrel_job_state(const kestrel_job *job);
int kestrel_job_exit_code(const kestrel_job *job);
const char *kestrel_job_name(const kestrel_job *job);
const char *kestrel_job_owner(const kestrel_job *job);
const char *kestrel_job_reason(const kestrel_job *job);
const char *kestrel_job_git_commit(const kestrel_job *job);
int kestrel_job_priority(const kestrel_job *job);
int kestrel_job_gpus(const kestrel_job *job);
int kestrel_job_replicas(const kestrel_job *job);
int kestrel_job_restart_count(const kestrel_job *job);
int64_t kestrel_job_submit_time(const kestrel_job *job);
int64_t kestrel_job_start_time(const kestrel_job *job);
int64_t kestrel_job_end_time(const kestrel_job *job);
size_t kestrel_job_event_count(const kestrel_job *job);
const kestrel_job_event *kestrel_job_event_at(const kestrel_job *job, size_t i);
const char *kestrel_job_node(const kestrel_job *job);
size_t kestrel_job_param_count(const kestrel_job *job);
int kestrel_job_param_at(const kestrel_job *job, size_t i, const char **key, const char **value);
int64_t kestrel_job_checkpoint_time(const kestrel_job *job);
int kestrel_job_to_json(kestrel_buf *out, const kestrel_job *job);

typedef struct kestrel_job_page kestrel_job_page;
typedef struct kestrel_job_list_options {
    unsigned int version;
    int state;
    const char *name;
    const char *label;
    int page_size;
    const char *page_token;
    const char *param;
    ...;
} kestrel_job_list_options;
int kestrel_job_list_options_init(kestrel_job_list_options *opts, unsigned int version);
int kestrel_job_list(kestrel_job_page **out, kestrel_client *client, const kestrel_job_list_options *opts);
size_t kestrel_job_page_count(const kestrel_job_page *page);
const kestrel_job *kestrel_job_page_at(const kestrel_job_page *page, size_t i);
const char *kestrel_job_page_next_token(const kestrel_job_page *page);
void kestrel_job_page_free(kestrel_job_page *page);

typedef struct kestrel_log_line {
    unsigned int version;
    int64_t offset;
    int64_t time_ms;
    int stream;
    const char *text;
    size_t len;
    ...;
} kestrel_log_line;
typedef int (*kestrel_log_line_cb)(const kestrel_log_line *line, void *payload);
typedef struct kestrel_logs_options {
    unsigned int version;
    int64_t offset;
    int follow;
    long timeout_ms;
    ...;
} kestrel_logs_options;
int kestrel_logs_options_init(kestrel_logs_options *opts, unsigned int version);
int kestrel_job_logs(int64_t *next_offset_out, kestrel_client *client, int64_t id, const kestrel_logs_options *opts,
                     kestrel_log_line_cb cb, void *payload);

typedef struct kestrel_log_search_options {
    unsigned int version;
    int regex;
    int ignore_case;
    int64_t job_id;
    int state;
    int64_t since_ms;
    int context;
    int limit;
    ...;
} kestrel_log_search_options;
#define KESTREL_LOG_SEARCH_OPTIONS_VERSION ...
typedef struct kestrel_log_hit {
    unsigned int version;
    int64_t job_id;
    const char *job_name;
    const kestrel_log_line *line;
    const kestrel_log_line *before;
    size_t n_before;
    const kestrel_log_line *after;
    size_t n_after;
    ...;
} kestrel_log_hit;
typedef int (*kestrel_log_hit_cb)(const kestrel_log_hit *hit, void *payload);
int kestrel_log_search_options_init(kestrel_log_search_options *opts, unsigned int version);
int kestrel_logs_search(kestrel_client *client, const char *pattern, const kestrel_log_search_options *opts,
                        kestrel_log_hit_cb cb, void *payload);

typedef struct kestrel_metric {
    unsigned int version;
    const char *name;
    int64_t step;
    double value;
    int64_t wall_time_ms;
    ...;
} kestrel_metric;
typedef struct kestrel_metric_list kestrel_metric_list;
int kestrel_metric_list_new(kestrel_metric_list **out);
int kestrel_metric_list_add(kestrel_metric_list *list, const char *name, int64_t step, double value, int64_t wall_time_ms);
size_t kestrel_metric_list_count(const kestrel_metric_list *list);
int kestrel_metric_list_more(const kestrel_metric_list *list);
const kestrel_metric *kestrel_metric_list_at(const kestrel_metric_list *list, size_t i);
void kestrel_metric_list_free(kestrel_metric_list *list);
int kestrel_job_report_metrics(kestrel_client *client, int64_t id, const kestrel_metric_list *metrics);
int kestrel_job_metrics(kestrel_metric_list **out, kestrel_client *client, int64_t id, const char *name);

/* queue */
int kestrel_job_explain(kestrel_buf *reason_out, int *position_out, kestrel_client *client, int64_t id);
int kestrel_job_set_priority(kestrel_job **out, kestrel_client *client, int64_t id, int priority);
int kestrel_job_ack_preempt(kestrel_client *client, int64_t id);
typedef struct kestrel_queue kestrel_queue;
int kestrel_queue_get(kestrel_queue **out, kestrel_client *client);
size_t kestrel_queue_count(const kestrel_queue *queue);
const kestrel_job *kestrel_queue_job(const kestrel_queue *queue, size_t i);
int kestrel_queue_position(const kestrel_queue *queue, size_t i);
const char *kestrel_queue_reason(const kestrel_queue *queue, size_t i);
void kestrel_queue_free(kestrel_queue *queue);

/* GPUs */
typedef struct kestrel_gpu {
    unsigned int version;
    int index;
    const char *uuid;
    const char *name;
    const char *pci_bus_id;
    int64_t memory_total;
    int64_t memory_free;
    int64_t memory_used;
    int utilization_gpu;
    int utilization_memory;
    int cc_major;
    int cc_minor;
    int multiprocessors;
    int temperature;
    int power_mw;
    int mig_mode;
    int is_mig;
    int parent;
    int visible;
    ...;
} kestrel_gpu;
typedef struct kestrel_gpu_list kestrel_gpu_list;
int kestrel_gpu_list_query(kestrel_gpu_list **out, unsigned int flags);
size_t kestrel_gpu_list_count(const kestrel_gpu_list *list);
const kestrel_gpu *kestrel_gpu_list_get(const kestrel_gpu_list *list, size_t i);
const char *kestrel_gpu_list_diagnostic(const kestrel_gpu_list *list);
int kestrel_gpu_list_topology(const kestrel_gpu_list *list, size_t a, size_t b);
int kestrel_gpu_list_nvlinks(const kestrel_gpu_list *list, size_t a, size_t b);
void kestrel_gpu_list_free(kestrel_gpu_list *list);
typedef struct kestrel_gpu_select_options {
    unsigned int version;
    int count;
    int64_t min_total_memory;
    int64_t min_free_memory;
    int min_cc_major;
    int min_cc_minor;
    int max_utilization;
    const char *name_pattern;
    const char *const *exclude;
    int prefer_nvlink;
    int allow_mig;
    ...;
} kestrel_gpu_select_options;
int kestrel_gpu_select_options_init(kestrel_gpu_select_options *opts, unsigned int version);
typedef struct kestrel_gpu_selection kestrel_gpu_selection;
int kestrel_gpu_select(kestrel_gpu_selection **out, const kestrel_gpu_list *list, const kestrel_gpu_select_options *opts);
size_t kestrel_gpu_selection_count(const kestrel_gpu_selection *sel);
size_t kestrel_gpu_selection_at(const kestrel_gpu_selection *sel, size_t i);
const char *kestrel_gpu_selection_reason(const kestrel_gpu_selection *sel, size_t i);
int kestrel_gpu_selection_visible_devices(kestrel_buf *out, const kestrel_gpu_selection *sel);
int kestrel_gpu_selection_apply(const kestrel_gpu_selection *sel);
int kestrel_gpu_selection_lock(kestrel_gpu_selection *sel, const char *dir);
void kestrel_gpu_selection_free(kestrel_gpu_selection *sel);

/* nodes */
typedef struct kestrel_node_device {
    unsigned int version;
    int index;
    const char *uuid;
    const char *type;
    const char *name;
    int64_t memory_total_mb;
    int64_t memory_free_mb;
    int utilization;
    int cc_major;
    int cc_minor;
    int64_t job_id;
    ...;
} kestrel_node_device;
typedef struct kestrel_node_list kestrel_node_list;
int kestrel_node_list_get(kestrel_node_list **out, kestrel_client *client);
size_t kestrel_node_list_count(const kestrel_node_list *list);
const char *kestrel_node_name(const kestrel_node_list *list, size_t i);
const char *kestrel_node_pool(const kestrel_node_list *list, size_t i);
size_t kestrel_node_device_count(const kestrel_node_list *list, size_t i);
const kestrel_node_device *kestrel_node_device_at(const kestrel_node_list *list, size_t i, size_t k);
void kestrel_node_list_free(kestrel_node_list *list);

/* repository */
typedef enum kestrel_transfer_phase_t { KESTREL_PHASE_PUSH, KESTREL_PHASE_PULL, ... } kestrel_transfer_phase_t;
typedef struct kestrel_progress {
    unsigned int version;
    int phase;
    int64_t bytes_done;
    int64_t bytes_total;
    int64_t bytes_new;
    int64_t chunks_done;
    int64_t chunks_new;
    ...;
} kestrel_progress;
typedef int (*kestrel_progress_cb)(const kestrel_progress *progress, void *payload);
typedef struct kestrel_transfer_options {
    unsigned int version;
    kestrel_progress_cb progress;
    void *progress_payload;
    const char *metadata_json;
    const char *alias;
    ...;
} kestrel_transfer_options;
#define KESTREL_TRANSFER_OPTIONS_VERSION ...
int kestrel_transfer_options_init(kestrel_transfer_options *opts, unsigned int version);
int kestrel_model_push(int64_t *version_out, kestrel_client *client, const char *name, const char *path,
                       const kestrel_transfer_options *opts);
int kestrel_model_pull(kestrel_client *client, const char *ref, const char *dest, const kestrel_transfer_options *opts);
typedef struct kestrel_model_version {
    unsigned int version_struct;
    int64_t version;
    int64_t size;
    const char *sha256;
    int64_t created_ms;
    int64_t chunks;
    const char *aliases;
    const char *metadata_json;
    ...;
} kestrel_model_version;
typedef struct kestrel_model_versions kestrel_model_versions;
int kestrel_model_versions_get(kestrel_model_versions **out, kestrel_client *client, const char *name);
int kestrel_model_version_get(kestrel_model_versions **out, kestrel_client *client, const char *ref);
size_t kestrel_model_versions_count(const kestrel_model_versions *list);
const kestrel_model_version *kestrel_model_versions_at(const kestrel_model_versions *list, size_t i);
void kestrel_model_versions_free(kestrel_model_versions *list);
int kestrel_model_list(kestrel_buf *out, kestrel_client *client);
int kestrel_model_alias_set(kestrel_client *client, const char *name, const char *alias, int64_t version);
int kestrel_model_alias_delete(kestrel_client *client, const char *name, const char *alias);
int kestrel_model_delete(kestrel_client *client, const char *name, int64_t version);
int kestrel_model_set_visibility(kestrel_client *client, const char *name, const char *visibility);
typedef struct kestrel_repo_gc_result {
    unsigned int version;
    int64_t chunks_live;
    int64_t chunks_removed;
    int64_t temps_removed;
    int64_t bytes_freed;
} kestrel_repo_gc_result;
int kestrel_repo_gc(kestrel_client *client, int64_t grace_s, kestrel_repo_gc_result *out);

/* tokens and users */
typedef struct kestrel_token_options {
    unsigned int version;
    const char *user;
    const char *team;
    int64_t expires_s;
    const char *scope;
    const char *name;
    ...;
} kestrel_token_options;
int kestrel_token_options_init(kestrel_token_options *opts, unsigned int version);
int kestrel_token_create(kestrel_buf *token_out, int64_t *id_out, kestrel_client *client,
                         const kestrel_token_options *opts);
typedef struct kestrel_token_info {
    int64_t id;
    const char *user;
    const char *scope;
    const char *name;
    int64_t created_ms;
    int64_t expires_ms;
    int64_t revoked_ms;
    const char *hint;
    ...;
} kestrel_token_info;
typedef struct kestrel_token_list kestrel_token_list;
int kestrel_token_list_get(kestrel_token_list **out, kestrel_client *client, const char *user);
size_t kestrel_token_list_count(const kestrel_token_list *list);
const kestrel_token_info *kestrel_token_list_at(const kestrel_token_list *list, size_t i);
void kestrel_token_list_free(kestrel_token_list *list);
int kestrel_token_revoke(kestrel_client *client, int64_t id);
int kestrel_user_set_team(kestrel_client *client, const char *user, const char *team);
int kestrel_admin_backup(kestrel_client *client, const char *dir, int64_t *files_out, int64_t *bytes_out);
int kestrel_admin_fsck(kestrel_buf *damaged_out, int64_t *checked_out, int64_t *bad_out, kestrel_client *client);
int kestrel_job_spec_set_code(kestrel_job_spec *spec, const char *ref);
int kestrel_job_spec_set_environment(kestrel_job_spec *spec, const char *name);
int kestrel_job_spec_set_requirements(kestrel_job_spec *spec, const char *text);
const char *kestrel_job_environment(const kestrel_job *job);
const char *kestrel_job_packages(const kestrel_job *job);
int kestrel_environments_get(kestrel_buf *json_out, kestrel_client *client);
int kestrel_job_rerun(kestrel_job **out, kestrel_client *client, int64_t id);
int kestrel_job_reproduce(kestrel_job **out, kestrel_client *client, const char *ref);
int kestrel_job_spec_add_data(kestrel_job_spec *spec, const char *ref, const char *path);
size_t kestrel_job_data_count(const kestrel_job *job);
int kestrel_job_data_at(const kestrel_job *job, size_t i, const char **ref, const char **path);
const char *kestrel_job_code(const kestrel_job *job);
typedef struct kestrel_code_options {
    unsigned int version;
    int64_t max_bytes;
    const char *name;
    kestrel_progress_cb progress;
    void *progress_payload;
    ...;
} kestrel_code_options;
#define KESTREL_CODE_OPTIONS_VERSION ...
int kestrel_code_options_init(kestrel_code_options *opts, unsigned int version);
int kestrel_code_push(kestrel_buf *ref_out, kestrel_client *client, const char *dir, const kestrel_code_options *opts);

int kestrel_job_spec_add_log_policy(kestrel_job_spec *spec, const char *name, const char *pattern, const char *actions);
int kestrel_job_spec_set_max_retries(kestrel_job_spec *spec, int n);
int kestrel_job_spec_exclude_node(kestrel_job_spec *spec, const char *node);

typedef struct kestrel_alert {
    unsigned int version;
    int64_t id;
    int64_t time_ms;
    int64_t job_id;
    const char *job_name;
    const char *owner;
    const char *kind;
    const char *severity;
    const char *message;
    int delivery;
    ...;
} kestrel_alert;
typedef struct kestrel_alert_list kestrel_alert_list;
int kestrel_alerts_get(kestrel_alert_list **out, kestrel_client *client, int64_t job_id, int limit);
size_t kestrel_alert_list_count(const kestrel_alert_list *list);
const kestrel_alert *kestrel_alert_list_at(const kestrel_alert_list *list, size_t i);
void kestrel_alert_list_free(kestrel_alert_list *list);

typedef struct kestrel_gpu_sample {
    unsigned int version;
    int64_t time_ms;
    const char *uuid;
    int utilization;
    int64_t memory_used;
    ...;
} kestrel_gpu_sample;
typedef struct kestrel_gpu_usage {
    unsigned int version;
    const char *uuid;
    int64_t samples;
    double mean_utilization;
    int max_utilization;
    int64_t peak_memory;
    ...;
} kestrel_gpu_usage;
typedef struct kestrel_gpu_telemetry kestrel_gpu_telemetry;
int kestrel_job_gpu_telemetry(kestrel_gpu_telemetry **out, kestrel_client *client, int64_t id);
size_t kestrel_gpu_telemetry_sample_count(const kestrel_gpu_telemetry *t);
const kestrel_gpu_sample *kestrel_gpu_telemetry_sample_at(const kestrel_gpu_telemetry *t, size_t i);
size_t kestrel_gpu_telemetry_usage_count(const kestrel_gpu_telemetry *t);
const kestrel_gpu_usage *kestrel_gpu_telemetry_usage_at(const kestrel_gpu_telemetry *t, size_t i);
void kestrel_gpu_telemetry_free(kestrel_gpu_telemetry *t);
size_t kestrel_job_gpu_usage_count(const kestrel_job *job);
int kestrel_job_gpu_usage_at(const kestrel_job *job, size_t i, kestrel_gpu_usage *out);

/* Python trampolines */
extern "Python" int _kestrel_log_tramp(const kestrel_log_line *line, void *payload);
extern "Python" int _kestrel_hit_tramp(const kestrel_log_hit *hit, void *payload);
extern "Python" int _kestrel_progress_tramp(const kestrel_progress *progress, void *payload);

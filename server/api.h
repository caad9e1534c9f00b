/* server/api.h - HTTP API on libmicrohttpd: routing, auth, content negotiation, errors. */
#ifndef KD_API_H
#define KD_API_H

#include <microhttpd.h>
#include "engine.h"

typedef struct kd_api kd_api;
typedef struct kd_pack kd_pack;
typedef struct kd_waiters kd_waiters;
typedef struct kd_console kd_console;

/* One request being served. */
typedef struct kd_req {
    struct MHD_Connection *conn;
    kd_engine *e;
    const char *method;
    const char *path;
    const char *content_type;
    int want_json;              /* reply encoding, from Accept (default JSON) */
    kestrel_buf body;
    size_t body_max;            /* its bound: --max-body, or --max-manifest for a commit */
    int too_large;
    int started;
    kd_principal who;
    kd_console *console;        /* the web console's sessions (console.h) */
    int via_cookie;             /* authenticated by a console session, not a bearer token */
    kd_pack *pack;              /* POST /api/v1/chunks/pack: streamed, never buffered whole */
    int authed;                 /* authenticated at the headers already, before its body was read */
    struct kd_upload_mem *mem;  /* the budget of request memory (upload_mem.h; NULL: a console form's, */
    uint64_t held;              /* outside it): what body's buffer holds of it, */
    uint64_t answer_held;       /* what an answer's buffer holds (repo_fetch.c, a large one), */
    uint64_t decoded_held;      /* what the body decoded may hold (kd_body: kestrel__wire_decode_cost), */
    int64_t held_by;            /* taken for this user */
    int busy;                   /* the budget refused the body's growth: 503 */
    /* long polls (api_wait.c) */
    kd_waiters *waiters;
    int64_t deadline;           /* 0 until the request first decides to wait */
    uint64_t wait_gen;          /* the engine generation it saw */
    int suspended, resumed;
    struct kd_req *wait_next;
    /* a handler run on a thread of its own (api_defer.c): its reply, kept until resumed */
    int deferring, deferred_done;
    struct MHD_Response *deferred;
    unsigned int deferred_status;
    enum MHD_Result deferred_rc;
    /* the HTTP metrics */
    const char *route;          /* kd_route_template(path) */
    int64_t t0_ns;              /* CLOCK_MONOTONIC at the headers */
    unsigned int status;        /* of the reply sent (0: none) */
} kd_req;

int kd_api_start(kd_api **out, kd_engine *e, const kd_config *cfg, int *bound_port);

/* Long polls: suspend r until the engine's generation moves past seen or r->deadline passes;
 * 1 when suspended (return MHD_YES: the handler runs again when resumed), 0 when the caller must
 * answer now (kestreld is stopping). */
int kd_waiters_start(kd_waiters **out, kd_engine *e);
void kd_waiters_stop(kd_waiters *w);
void kd_waiters_free(kd_waiters *w);
int kd_wait_suspend(kd_req *r, uint64_t seen);
void kd_wait_forget(kd_req *r);
/* The deadline of a long poll of wait_ms, fixed at its first pass. */
int64_t kd_wait_deadline(kd_req *r, long long wait_ms);
void kd_api_stop(kd_api *api);

/* Run work(r, arg) on a thread of its own, r's connection suspended meanwhile (MHD_YES), for a
 * handler that takes seconds; its kd_reply_* is kept and queued by kd_defer_reply once resumed.
 * Past KD_DEFER_MAX at once, or once kd_defer_drain began, work runs here and its answer is returned
 * (so at most KD_DEFER_MAX + KD_HTTP_THREADS_MAX handlers run at once). */
#define KD_DEFER_MAX 16
typedef enum MHD_Result (*kd_deferred_fn)(kd_req *r, void *arg);
typedef enum MHD_Result (*kd_route_fn)(kd_req *r);
enum MHD_Result kd_defer(kd_req *r, kd_deferred_fn work, void *arg);
/* The same for a route handler of r alone (a collection, fsck, a backup). */
enum MHD_Result kd_defer_route(kd_req *r, kd_route_fn route);
/* Queue the reply a deferred handler made (called when its connection is resumed). */
enum MHD_Result kd_defer_reply(kd_req *r);
/* Defer nothing more, and wait until no deferred handler runs (before the daemon stops: none may
 * be suspended then). */
void kd_defer_drain(void);

/* Replies (used by the route handlers). */
enum MHD_Result kd_reply_msg(kd_req *r, unsigned int status, const ProtobufCMessage *msg);
/* kd_reply_msg, then free msg (a protobuf-c message from the default allocator). */
enum MHD_Result kd_reply_owned(kd_req *r, unsigned int status, ProtobufCMessage *msg);
/* resp (freed here) as the answer, with that Content-Type (kept for a deferred handler's). */
enum MHD_Result kd_reply_response(kd_req *r, unsigned int status, struct MHD_Response *resp, const char *ctype);
/* b as it is, with that Content-Type. */
enum MHD_Result kd_reply_bytes(kd_req *r, unsigned int status, const kestrel_buf *b, const char *content_type);
enum MHD_Result kd_reply_error(kd_req *r, unsigned int status, const char *code, const char *message);
/* 1 with *reply a 507 while the data disk has less than half its floor free (job_disk.h): what a caller
 * asks to add to the catalog (a job, a priority's event, a model's settings) waits for room, kept for
 * job states and tokens. 0 otherwise. */
int kd_refused_at_floor(kd_req *r, enum MHD_Result *reply);
/* Reply with the status that matches a KESTREL_E* code and the thread's last error message. */
enum MHD_Result kd_reply_failure(kd_req *r, int rc);
/* Decode the request body as a message of type desc (400 on failure, replied already: returns NULL). */
ProtobufCMessage *kd_body(kd_req *r, const ProtobufCMessageDescriptor *desc, enum MHD_Result *reply);
const char *kd_query(kd_req *r, const char *key);

/* GET /metrics (metrics_api.c, with the open listener of --metrics-listen). */
enum MHD_Result kd_route_metrics(kd_req *r);
/* GET /api/v1/alerts (api_alerts.c). */
enum MHD_Result kd_route_alerts(kd_req *r);
/* GET /api/v1/logs/search (api_logs.c). */
enum MHD_Result kd_route_log_search(kd_req *r);

/* Replace the values of a job's secret env by "***" (before any reply that carries the job). */
void kd_redact_job(Kestrel__V1__Job *job);
/* Load a job the caller may see (404 replied otherwise: returns NULL). */
Kestrel__V1__Job *kd_visible_job(kd_req *r, int64_t id, int with_events, enum MHD_Result *reply);

/* GET /api/v1/jobs/{id}/models: the model versions a job pushed (api_repo.c). */
enum MHD_Result kd_route_job_models(kd_req *r, int64_t id);
/* Route handlers (api_jobs.c, api_sched.c). */
enum MHD_Result kd_route_explain(kd_req *r, int64_t id);
enum MHD_Result kd_route_priority(kd_req *r, int64_t id);
/* 0 when the caller may give a job priority class cls (--max-priority); else 1, with a 403 replied
 * in *reply, its advice for a rerun (which keeps the class) or not (api_sched.c). */
int kd_priority_refused(kd_req *r, int cls, int rerun, enum MHD_Result *reply);
/* The same for a job no class may preempt (not_preemptible): those who may give urgent jobs only, as
 * it holds off every class as urgent does (api_sched.c). */
int kd_exempt_refused(kd_req *r, int rerun, enum MHD_Result *reply);
/* 1 with *reply set (403) when a job's own grace is past --max-grace and who may not give urgent
 * jobs: a long grace holds a preemption off as long (a hostile test: a day, as a normal user). */
int kd_grace_refused(kd_req *r, int grace_s, int rerun, enum MHD_Result *reply);
enum MHD_Result kd_route_checkpoint(kd_req *r, int64_t id);
enum MHD_Result kd_route_queue(kd_req *r);
enum MHD_Result kd_route_nodes(kd_req *r);
enum MHD_Result kd_route_repo(kd_req *r);
/* GET /api/v1/models/NAME/versions/REF, the caller's right to read NAME checked (repo_manifest.c). */
enum MHD_Result kd_repo_manifest(kd_req *r, const char *name, const char *ref);
/* GET /api/v1/models/NAME/versions, the caller's right to read NAME checked: made as it is read, a
 * version at a time (repo_versions.c). */
enum MHD_Result kd_repo_versions(kd_req *r, const char *name);
/* Files that answers hold open while they go out, however slowly they are read (repo_fetch.c): at
 * most a quarter of the process's descriptors. Take one: 0, or -1 when they are all taken. */
int kd_answer_file_take(void);
void kd_answer_file_give(void);
/* A commit of name that came before (its commit_key seen: repo_commit_key.c): 1 with *reply made
 * (that version, 503 while another commit is making it, or why the commit is refused), else 0 with
 * in->commit_key in its stored form, and *held set when this commit holds that key until it ends
 * (kd_commit_key_release). */
int kd_commit_again(kd_req *r, const char *name, Kestrel__V1__Manifest *in, int *held, enum MHD_Result *reply);
void kd_commit_key_release(const char *hex);
/* POST /api/v1/chunks/fetch: many chunks in one answer (repo_fetch.c). */
enum MHD_Result kd_repo_fetch(kd_req *r);
/* Queue resp (freed here) as a 200 answer of chunk bytes, bytes of them counted in the metrics. */
enum MHD_Result kd_reply_chunks(kd_req *r, struct MHD_Response *resp, uint64_t bytes);
/* A pack of user's (run, at, whole: its ?run=, ?at= and ?whole=, NULL when absent: see repo_runs.h), its chunk
 * buffers taken from mem; NULL: out of memory, or *busy set when mem cannot hold a chunk now. */
kd_pack *kd_pack_begin(kd_engine *e, struct kd_upload_mem *mem, int64_t user, const char *run, const char *at,
                       const char *whole, int *busy);
/* Take bytes an answer holds until it is read from r's budget (upload_mem.h), given back when r
 * ends: 0, or -1 when the budget refuses them (answer kd_reply_busy). */
int kd_answer_hold(kd_req *r, uint64_t bytes);
/* 503: the budget of upload_mem.h is spent (nothing was done; the client may try again). */
enum MHD_Result kd_reply_busy(kd_req *r);
/* An answer this large (a dataset's manifest) takes its copy from the budget of upload_mem.h. */
#define KD_ANSWER_CHARGED (1u << 20)
/* A console form (a token, at most) is read before its sender is known: a small bound of its own. */
#define KD_CONSOLE_BODY_MAX 8192
/* A pack is at most this (by Content-Length at the headers, by what came for a chunked upload). */
#define KD_MAX_PACK (1ull << 30)
/* Aliases one model keeps at most: a new one past them is 409 (api_repo.c). */
#define KD_ALIASES_MAX 1024
/* 0 when len bytes more leave the repository's disk its floor (a fiftieth of it, at most 1 GiB:
 * repo_pack.c); else the ENOSPC error (507), what named. */
struct kestrel__store;
int kd_repo_keeps_floor(struct kestrel__store *s, const char *what, int64_t len);
/* 0 when name may take alias (it has it, or fewer than KD_ALIASES_MAX); else 1 with *reply (409). */
int kd_repo_alias_refused(kd_req *r, const char *name, const char *alias, enum MHD_Result *reply);
void kd_pack_feed(kd_pack *p, const char *data, size_t len);
enum MHD_Result kd_pack_finish(kd_req *r, kd_pack *p);
void kd_pack_free(kd_pack *p);
enum MHD_Result kd_route_jobs(kd_req *r, const char *rest);
enum MHD_Result kd_route_tokens(kd_req *r, const char *rest);
/* GET /api/v1/whoami: the caller's user name, team and whether an admin (any token). */
enum MHD_Result kd_route_whoami(kd_req *r);
/* GET /api/v1/environments: the declared environments, their state and packages (any token). */
enum MHD_Result kd_route_environments(kd_req *r);
enum MHD_Result kd_route_users(kd_req *r, const char *name);
enum MHD_Result kd_route_backup(kd_req *r);
enum MHD_Result kd_route_fsck(kd_req *r);
enum MHD_Result kd_route_chunk_verify(kd_req *r, const char *hex);

#endif

/* server/api.c - libmicrohttpd plumbing: body limits, auth, negotiation, error replies. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include "api.h"
#include "job_disk.h"
#include "console.h"
#include "metrics.h"
#include "repo_acl.h"
#include "route.h"
#include "upload_mem.h"


struct kd_api {
    struct MHD_Daemon *d;
    struct MHD_Daemon *md;      /* --metrics-listen: GET /metrics only, no token */
    kd_engine *e;
    const kd_config *cfg;
    char *cert, *key;           /* PEM, kept while the daemon runs (MHD does not promise a copy) */
    kd_waiters *waiters;
    kd_console *console;
    kd_upload_mem *mem;         /* what request bodies hold (upload_mem.h) */
};

const char *kd_query(kd_req *r, const char *key)
{
    return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, key);
}

int kd_answer_hold(kd_req *r, uint64_t bytes)
{
    if (kd_upload_mem_take(r->mem, r->held_by, bytes) < 0)
        return -1;
    r->answer_held += bytes;   /* given back with the body's when the request ends (on_done) */
    return 0;
}

/* b as the answer: copied, or, give set, handed to libmicrohttpd (b then empty), which frees it
 * once sent (a copy of a dataset's manifest doubled what its answer held). */
static enum MHD_Result send_bytes(kd_req *r, unsigned int status, kestrel_buf *b, int give, const char *ctype)
{
    struct MHD_Response *resp;
    /* a large answer is held until the client reads it: from the budget (a review: 256 MiB
     * manifests asked for and never read held as much as the asker pleased) */
    if (b->size >= KD_ANSWER_CHARGED && r->answer_held == 0 && kd_answer_hold(r, b->size) < 0)
        return kd_reply_busy(r);
    give = give && b->ptr;
    if (give && b->reserved > b->size + 1) {   /* grown by doubling: up to twice what is sent, held unread */
        char *fit = realloc(b->ptr, b->size + 1);
        if (fit != NULL) {
            b->ptr = fit;
            b->reserved = b->size + 1;
        }
    }
    resp = MHD_create_response_from_buffer(b->size, b->ptr ? b->ptr : (void *)"",
                                           give ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_MUST_COPY);
    if (resp == NULL)
        return MHD_NO;
    if (give)
        *b = (kestrel_buf)KESTREL_BUF_INIT;
    return kd_reply_response(r, status, resp, ctype);
}

enum MHD_Result kd_reply_response(kd_req *r, unsigned int status, struct MHD_Response *resp, const char *ctype)
{
    enum MHD_Result ok;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    /* an answer is one caller's, read with its token (the console's session with its CSRF token): no
     * cache keeps it (a hostile test found none said so) */
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (r->deferring) {   /* on a deferred handler's thread: queued once its connection is resumed */
        if (r->deferred) {   /* the first reply stands, as MHD_queue_response would have it */
            MHD_destroy_response(resp);
            return MHD_NO;
        }
        r->deferred = resp;
        r->deferred_status = status;
        return MHD_YES;
    }
    ok = MHD_queue_response(r->conn, status, resp);
    if (ok == MHD_YES)
        r->status = status;
    MHD_destroy_response(resp);
    return ok;
}

enum MHD_Result kd_reply_bytes(kd_req *r, unsigned int status, const kestrel_buf *b, const char *content_type)
{
    kestrel_buf shallow = *b;   /* copied: b stays the caller's */
    return send_bytes(r, status, &shallow, 0, content_type);
}

enum MHD_Result kd_reply_owned(kd_req *r, unsigned int status, ProtobufCMessage *msg)
{
    enum MHD_Result ok = kd_reply_msg(r, status, msg);
    protobuf_c_message_free_unpacked(msg, NULL);
    return ok;
}

enum MHD_Result kd_reply_msg(kd_req *r, unsigned int status, const ProtobufCMessage *msg)
{
    kestrel_buf b = KESTREL_BUF_INIT;
    enum MHD_Result ok;
    if (kestrel__wire_encode(&b, msg, r->want_json) < 0) {
        kestrel_buf_dispose(&b);
        return kd_reply_error(r, 500, "internal", "cannot encode the reply");
    }
    if (r->want_json)
        kestrel__buf_puts(&b, "\n");
    ok = send_bytes(r, status, &b, 1, r->want_json ? KESTREL__CT_JSON : KESTREL__CT_PROTOBUF);
    kestrel_buf_dispose(&b);
    return ok;
}

enum MHD_Result kd_reply_error(kd_req *r, unsigned int status, const char *code, const char *message)
{
    Kestrel__V1__Error err = KESTREL__V1__ERROR__INIT;
    kestrel_buf b = KESTREL_BUF_INIT;
    enum MHD_Result ok;
    err.code = (char *)code;
    err.message = (char *)message;
    err.http_status = (int32_t)status;
    if (kestrel__wire_encode(&b, &err.base, r->want_json) < 0)
        return MHD_NO;
    if (r->want_json)
        kestrel__buf_puts(&b, "\n");
    ok = send_bytes(r, status, &b, 1, r->want_json ? KESTREL__CT_JSON : KESTREL__CT_PROTOBUF);
    kestrel_buf_dispose(&b);
    return ok;
}

int kd_refused_at_floor(kd_req *r, enum MHD_Result *reply)
{
    if (!kd_job_disk_low(r->e))
        return 0;
    *reply = kd_reply_error(r, 507, "insufficient_storage", "the data disk has less than half its floor free, which "
                            "kestreld keeps for job states and tokens: nothing more is added to the catalog until "
                            "room is made");
    return 1;
}

enum MHD_Result kd_reply_failure(kd_req *r, int rc)
{
    const char *msg = kestrel_error_last()->message;
    switch (rc) {
    case KESTREL_EINVALID: return kd_reply_error(r, 400, "invalid_argument", msg);
    case KESTREL_ENOTFOUND: return kd_reply_error(r, 404, "not_found", msg);
    case KESTREL_EEXISTS: return kd_reply_error(r, 409, "conflict", msg);
    case KESTREL_EAUTH: return kd_reply_error(r, 403, "permission_denied", msg);
    case KESTREL_ETOOLARGE: return kd_reply_error(r, 413, "too_large", msg);
    case KESTREL_EIO:   /* its own files failed: libkestrel says KESTREL_EIO, as for a file:// store */
        fprintf(stderr, "kestreld: %s %s: %s\n", r->method, r->path, msg);
        return kd_reply_error(r, 500, "io_error", msg);
    default:
        fprintf(stderr, "kestreld: %s %s: %s\n", r->method, r->path, msg);
        return kd_reply_error(r, 500, "internal", msg);
    }
}

/* kd_body's charge: the body's memory decoded, from the budget (its price is given back when the
 * request ends, on_done). Refused: *reply says why, 413 where the body and its price alone would pass
 * a user's quarter, 503 where it is not free now. */
typedef struct {
    kd_req *r;
    enum MHD_Result *reply;
    int refused;
} body_charge;

static int charge_body(void *ctx, uint64_t cost)
{
    body_charge *c = ctx;
    kd_req *r = c->r;
    uint64_t mine, held, total;
    char msg[300];
    if (kd_upload_mem_take(r->mem, r->held_by, cost) == 0) {
        r->decoded_held += r->mem ? cost : 0;
        return 0;
    }
    kd_upload_mem_state(r->mem, r->held_by, &mine, &held, &total);
    c->refused = 1;
    if (cost + r->held <= total / 4) {
        *c->reply = kd_reply_busy(r);
        return -1;
    }
    snprintf(msg, sizeof(msg), "this body and what it decodes to would take %llu MiB of memory, more than a user's "
             "share of kestreld's request memory (%llu MiB, a quarter of --max-upload-memory) can hold: send less "
             "at once", (unsigned long long)((cost + r->held) >> 20), (unsigned long long)(total >> 22));
    *c->reply = kd_reply_error(r, 413, "too_large", msg);
    return -1;
}

/* The body's memory decoded is taken from the budget before it is decoded: two bytes on the wire
 * (an empty element of a list) take about 100 while they decode, and a 64 MiB commit of them took
 * 2.9 GB (a hostile test). It is priced in the walk that checks the body (lib/wire_scan.c). */
ProtobufCMessage *kd_body(kd_req *r, const ProtobufCMessageDescriptor *desc, enum MHD_Result *reply)
{
    ProtobufCMessage *m = NULL;
    body_charge c = { r, reply, 0 };
    int rc = kestrel__wire_decode_charged(&m, desc, r->content_type, r->body.ptr ? r->body.ptr : "", r->body.size,
                                          charge_body, &c);
    if (c.refused)   /* answered */
        return NULL;
    if (rc < 0)
        *reply = kd_reply_error(r, 400, "invalid_argument", kestrel_error_last()->message);
    return m;
}

/* Bearer token (or, with no Authorization header, a console session cookie) -> principal. Replies
 * 401 itself and returns -1 when missing or bad; a cookie-borne request that changes anything
 * (not GET or HEAD) without the session's CSRF token gets 403. */
static int authenticate(kd_req *r, enum MHD_Result *reply)
{
    const char *h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    char hash[65];
    int csrf_ok = 0;
    /* a cookie when there is no bearer token (a proxy's Basic credentials are not ours) */
    if ((h == NULL || strncmp(h, "Bearer ", 7)) && kd_console_session(r->console, r, hash, &csrf_ok) == 0) {
        r->via_cookie = 1;
        if (!csrf_ok && strcmp(r->method, "GET") && strcmp(r->method, "HEAD")) {
            *reply = kd_reply_error(r, 403, "csrf_failed", "a console request that changes anything must carry "
                                    "the session's " KD_CSRF_HEADER " header");
            return -1;
        }
    } else if (h == NULL || strncmp(h, "Bearer ", 7) || !h[7]) {
        *reply = kd_reply_error(r, 401, "unauthenticated", "missing 'Authorization: Bearer <token>' header");
        return -1;
    } else if (kd_token_hash(h + 7, hash) < 0) {
        *reply = kd_reply_failure(r, KESTREL_ERROR);
        return -1;
    }
    if (kd_catalog_token_find(r->e->cat, hash, kestrel__now_ms(), &r->who) < 0) {
        if (r->via_cookie)   /* its token was revoked or expired: the session ends with it */
            kd_console_forget(r->console, r);
        *reply = kd_reply_error(r, 401, "unauthenticated", kestrel_error_last()->message);
        return -1;
    }
    return 0;
}

/* What a token's scope does not allow of a route (one rule for every path, streamed packs too), or
 * NULL. */
static const char *scope_refusal(const kd_principal *who, const kd_route *rt)
{
    if (who->scope == KD_SCOPE_READ && !rt->read_ok)
        return "this token is read-scoped: it can only read (GET)";
    if (who->scope == KD_SCOPE_METRICS && rt->area != KD_AREA_METRICS)
        return "this token is metrics-scoped: it can only GET /metrics";
    return NULL;
}

static enum MHD_Result dispatch(kd_req *r)
{
    enum MHD_Result reply = MHD_NO;
    const char *why;
    kd_route rt;
    kd_route_parse(r->method, r->path, &rt);
    if (rt.area == KD_AREA_HEALTH) {
        Kestrel__V1__Health h = KESTREL__V1__HEALTH__INIT;
        h.status = "ok";
        h.version = KESTREL_VERSION_STRING;
        return kd_reply_msg(r, 200, &h.base);
    }
    if (rt.area == KD_AREA_NONE)
        return kd_reply_error(r, 404, "not_found", "no such endpoint");
    if (r->busy)
        return kd_reply_busy(r);
    if (r->too_large) {
        char msg[96];
        snprintf(msg, sizeof(msg), "request body over the limit of %zu bytes", r->body_max);
        return kd_reply_error(r, 413, "too_large", msg);
    }
    if (rt.area == KD_AREA_CONSOLE)
        return kd_console_route(r->console, r);
    if (!r->authed && authenticate(r, &reply) < 0)
        return reply;
    if ((why = scope_refusal(&r->who, &rt)) != NULL)
        return kd_reply_error(r, 403, "permission_denied", why);
    switch (rt.area) {
    case KD_AREA_METRICS:
        if (!r->who.is_admin && r->who.scope != KD_SCOPE_METRICS)
            return kd_reply_error(r, 403, "permission_denied", "/metrics needs an admin token or a metrics-scoped one "
                                  "(an admin makes it: kestrel token create --scope metrics)");
        return kd_route_metrics(r);
    case KD_AREA_LOG_SEARCH: return kd_route_log_search(r);
    case KD_AREA_ALERTS: return kd_route_alerts(r);
    case KD_AREA_JOBS: return kd_route_jobs(r, rt.rest);
    case KD_AREA_TOKENS: return kd_route_tokens(r, rt.rest);
    case KD_AREA_USERS: return kd_route_users(r, rt.rest);
    case KD_AREA_BACKUP: return kd_defer_route(r, kd_route_backup);   /* minutes: off the HTTP thread */
    case KD_AREA_FSCK: return kd_defer_route(r, kd_route_fsck);
    case KD_AREA_CHUNK_VERIFY: return kd_route_chunk_verify(r, rt.chunk);
    case KD_AREA_QUEUE: return kd_route_queue(r);
    case KD_AREA_NODES: return kd_route_nodes(r);
    case KD_AREA_REPO: return kd_route_repo(r);
    case KD_AREA_WHOAMI: return kd_route_whoami(r);
    case KD_AREA_ENVIRONMENTS: return kd_route_environments(r);
    case KD_AREA_PACK: return kd_reply_error(r, 405, "method_not_allowed", "POST a pack to /api/v1/chunks/pack");
    default: return kd_reply_error(r, 404, "not_found", "no such endpoint");
    }
}

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int wants_json(struct MHD_Connection *c)
{
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);
    return !(a && strstr(a, "protobuf"));
}

enum MHD_Result kd_reply_busy(kd_req *r)
{
    uint64_t mine, held, total;
    char msg[400];
    kd_upload_mem_state(r->mem, r->who.user_id, &mine, &held, &total);
    snprintf(msg, sizeof(msg), "kestreld is receiving too much at once: your requests hold %llu of your %llu MiB, "
             "everyone's %llu of %llu MiB (request bodies, packs and chunk answers: --max-upload-memory, a "
             "quarter a user); send it again shortly", (unsigned long long)(mine >> 20),
             (unsigned long long)(total >> 22), (unsigned long long)(held >> 20), (unsigned long long)(total >> 20));
    return kd_reply_error(r, 503, "unavailable", msg);
}

/* A request's state at its headers (freed by on_done). */
static kd_req *new_req(struct kd_api *api, struct MHD_Connection *conn, const char *url, const char *method,
                       void **state)
{
    kd_req *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->conn = conn;
    r->e = api->e;
    r->method = method;
    r->path = url;
    r->route = kd_route_template(url);
    r->t0_ns = mono_ns();
    r->mem = api->mem;
    *state = r;
    return r;
}

/* A commit's manifest (POST /api/v1/models/NAME/versions) lists every file of a directory version
 * (a million at most) and every chunk: it has its own bound, --max-manifest; every other body
 * --max-body. The path is read by the route grammar (route.c), as the handler reads it. */
static size_t body_limit(const kd_config *cfg, const char *method, const char *url)
{
    char name[256];
    kd_model_part part;
    const char *arg;
    if (!strcmp(method, "POST") && !strncmp(url, "/api/v1/models/", 15) && cfg->max_manifest > cfg->max_body &&
        kd_route_model(url + 15, name, sizeof(name), &part, &arg) == 0 && part == KD_MODEL_VERSIONS)
        return cfg->max_manifest;
    return cfg->max_body;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **state)
{
    struct kd_api *api = cls;
    kd_req *r = *state;
    (void)version;
    if (r == NULL) {
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        uint64_t length = cl ? strtoull(cl, NULL, 10) : 0;   /* 0: none (or a body sent chunked) */
        int fit;
        if ((r = new_req(api, conn, url, method, state)) == NULL)
            return MHD_NO;
        r->content_type = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
        r->want_json = wants_json(conn);
        r->body_max = body_limit(api->cfg, method, url);
        r->waiters = api->waiters;
        r->console = api->console;
        if (!strcmp(url, "/api/v1/chunks/pack") && !strcmp(method, "POST")) {
            /* a pack streams through a verifier into the store: authenticate before reading it */
            enum MHD_Result reply = MHD_NO;
            const char *why;
            kd_route rt;
            int busy = 0;
            r->started = 1;
            if (authenticate(r, &reply) < 0)
                return reply;
            kd_route_parse(method, url, &rt);
            if ((why = scope_refusal(&r->who, &rt)) != NULL)
                return kd_reply_error(r, 403, "permission_denied", why);
            if (length > KD_MAX_PACK)
                return kd_reply_error(r, 413, "too_large", "a pack is at most 1 GiB: send more packs");
            if ((r->pack = kd_pack_begin(api->e, api->mem, r->who.user_id,
                                         MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "run"),
                                         MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "at"),
                                         MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "whole"),
                                         &busy)) == NULL)
                return busy ? kd_reply_busy(r) : MHD_NO;
            r->started = 0;
            return MHD_YES;
        }
        {   /* a body is read only for a caller known to be allowed the route (found by a hostile test:
             * six connections with no token held 1.2 GB of manifest bodies, checked once read); a
             * commit's only for one who may write its namespace */
            enum MHD_Result reply = MHD_NO;
            const char *why;
            char name[256], msg[400];
            kd_model_part part;
            const char *arg;
            kd_route rt;
            int st;
            kd_route_parse(method, url, &rt);
            if (rt.area == KD_AREA_HEALTH || rt.area == KD_AREA_NONE) {   /* no body is read there: */
                r->started = 1;                                             /* answered at the headers */
                return dispatch(r);
            }
            if (rt.area == KD_AREA_CONSOLE) {   /* its forms, a token at most, read before anyone is known: */
                r->mem = NULL;                  /* a small bound, outside the budget (else anyone could */
                if (r->body_max > KD_CONSOLE_BODY_MAX)   /* spend its anonymous quarter and lock everyone */
                    r->body_max = KD_CONSOLE_BODY_MAX;   /* out of the login, found by a hostile test) */
            } else {
                r->started = 1;
                if (authenticate(r, &reply) < 0)
                    return reply;
                if ((why = scope_refusal(&r->who, &rt)) != NULL)
                    return kd_reply_error(r, 403, "permission_denied", why);
                if (!strcmp(method, "POST") && rt.area == KD_AREA_REPO && !strncmp(url, "/api/v1/models/", 15) &&
                    kd_route_model(url + 15, name, sizeof(name), &part, &arg) == 0 && part == KD_MODEL_VERSIONS &&
                    (st = kd_repo_check(r, name, KD_REPO_PUSH, msg, sizeof(msg))) != 0)
                    return kd_reply_error(r, (unsigned)st, "permission_denied", msg);
                r->authed = 1;
                r->started = 0;
            }
        }
        if (length > r->body_max) {   /* refuse before reading the body */
            r->too_large = 1;
            r->started = 1;
            return dispatch(r);
        }
        r->held_by = r->who.user_id;
        if (length > 0 && (fit = kd_upload_mem_fit(r->mem, r->held_by, &r->held, &r->body, length, 0, 0)) < 0) {
            if (fit == KESTREL_ENOMEM)
                return MHD_NO;
            r->busy = 1;   /* the whole body's memory at once, or none of it read */
            r->started = 1;
            return dispatch(r);
        }
        return MHD_YES;
    }
    if (*upload_size && r->pack) {
        kd_pack_feed(r->pack, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (r->pack && !r->started) {
        r->started = 1;
        return kd_pack_finish(r, r->pack);
    }
    if (*upload_size) {
        int fit = 0;
        if (!r->too_large && !r->busy &&
            (r->body.size + *upload_size > r->body_max ||
             (fit = kd_upload_mem_fit(r->mem, r->held_by, &r->held, &r->body, r->body.size + *upload_size, 1,
                                      (uint64_t)r->body_max + 1)) < 0)) {
            if (fit == KESTREL_ENOMEM)
                return MHD_NO;
            r->too_large = fit == 0;   /* else a body without a length, past the budget */
            r->busy = fit < 0;
            kestrel_buf_dispose(&r->body);   /* dropped from here on, its memory given back at once */
            kd_upload_mem_give(r->mem, r->held_by, r->held);   /* (a review: a trickle held a quarter) */
            r->held = 0;
        }
        if (!r->too_large && !r->busy && kestrel__buf_put(&r->body, upload, *upload_size) < 0)
            return MHD_NO;
        *upload_size = 0;
        return MHD_YES;
    }
    if (r->started && r->resumed) {   /* a long poll, resumed: run its handler again */
        r->resumed = 0;
        return r->deferred_done ? kd_defer_reply(r) : dispatch(r);   /* a deferred one: its reply */
    }
    if (r->started)
        return MHD_YES;
    r->started = 1;
    return dispatch(r);
}

static void on_done(void *cls, struct MHD_Connection *conn, void **state, enum MHD_RequestTerminationCode why);

/* The --metrics-listen listener: GET /metrics, no token; every other path is 404, bodies are
 * dropped unread. */
static enum MHD_Result on_metrics_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                          const char *version, const char *upload, size_t *upload_size, void **state)
{
    struct kd_api *api = cls;
    kd_req *r = *state;
    (void)version; (void)upload;
    if (r == NULL) {
        if ((r = new_req(api, conn, url, method, state)) == NULL)
            return MHD_NO;
        r->want_json = 1;
        return MHD_YES;
    }
    if (*upload_size) {
        *upload_size = 0;
        return MHD_YES;
    }
    if (r->started)
        return MHD_YES;
    r->started = 1;
    if (strcmp(url, "/metrics"))
        return kd_reply_error(r, 404, "not_found", "this listener (--metrics-listen) serves only GET /metrics");
    return kd_route_metrics(r);
}

static int start_metrics_listener(struct kd_api *api, const char *spec)
{
    struct sockaddr_in sa;
    char addr[64];
    const char *colon = strrchr(spec, ':');
    long long port;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    if (colon == NULL || (size_t)(colon - spec) >= sizeof(addr) || kd_parse_int(colon + 1, 1, 65535, &port) < 0)
        return kestrel__error_set(KESTREL_EINVALID, "--metrics-listen: ADDR:PORT (e.g. 127.0.0.1:9464), not '%s'", spec);
    memcpy(addr, spec, (size_t)(colon - spec));
    addr[colon - spec] = '\0';
    if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
        return kestrel__error_set(KESTREL_EINVALID, "--metrics-listen: '%s' is not an IPv4 address", addr);
    sa.sin_port = htons((uint16_t)port);
    api->md = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG, (uint16_t)port,
                               NULL, NULL, on_metrics_request, api, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                               MHD_OPTION_NOTIFY_COMPLETED, on_done, api, MHD_OPTION_CONNECTION_LIMIT, 64u,
                               MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_END);
    if (api->md == NULL)
        return kestrel__error_set(KESTREL_EIO, "--metrics-listen: cannot listen on %s", spec);
    return 0;
}

static void on_done(void *cls, struct MHD_Connection *conn, void **state, enum MHD_RequestTerminationCode why)
{
    kd_req *r = *state;
    struct kd_api *api = cls;
    (void)conn; (void)why;
    if (r) {
        if (r->status)
            kd_metrics_http(api->e->metrics, r->route, r->method, (int)r->status,
                            (double)(mono_ns() - r->t0_ns) / 1e9);
        kd_wait_forget(r);
        if (r->deferred)   /* a deferred handler's reply its connection closed before it was queued (a */
            MHD_destroy_response(r->deferred);   /* stop; found by ASan) */
        kd_pack_free(r->pack);
        kestrel_buf_dispose(&r->body);
        kd_upload_mem_give(r->mem, r->held_by, r->held + r->answer_held + r->decoded_held);
        free(r);
        *state = NULL;
    }
}

/* A PEM file into memory (at most 1 MiB), NUL-terminated. */
static char *read_pem(const char *path, const char *flag)
{
    FILE *f = fopen(path, "r");
    char *buf = NULL;
    size_t n;
    if (f == NULL) {
        kestrel__error_set(KESTREL_EINVALID, "%s %s: %s", flag, path, strerror(errno));
        return NULL;
    }
    if ((buf = malloc((1u << 20) + 1)) != NULL) {
        n = fread(buf, 1, 1u << 20, f);
        buf[n] = '\0';
        if (n == 0 || n == 1u << 20 || !strstr(buf, "-----BEGIN ")) {
            kestrel__error_set(KESTREL_EINVALID, "%s %s: not a PEM file of at most 1 MiB", flag, path);
            free(buf);
            buf = NULL;
        }
    } else {
        kestrel__error_oom();
    }
    fclose(f);
    return buf;
}

int kd_api_start(kd_api **out, kd_engine *e, const kd_config *cfg, int *bound_port)
{
    struct kd_api *api = calloc(1, sizeof(*api));
    struct sockaddr_in sa;
    const union MHD_DaemonInfo *info;
    /* event-driven: epoll and a fixed pool of threads; long polls are suspended, not threads */
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                         MHD_USE_ERROR_LOG;
    unsigned int threads = (unsigned)(cfg->http_threads > 0 ? cfg->http_threads : 8);
    unsigned int limit = (unsigned)cfg->max_connections, per_ip = (unsigned)cfg->max_connections_per_ip;
    unsigned int idle = (unsigned)cfg->idle_timeout_s;
    char *cert = NULL, *key = NULL;
    if (api == NULL)
        return kestrel__error_oom();
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)cfg->port);
    if (inet_pton(AF_INET, cfg->listen, &sa.sin_addr) != 1) {
        free(api);
        return kestrel__error_set(KESTREL_EINVALID, "--listen: '%s' is not an IPv4 address", cfg->listen);
    }
    api->e = e;
    api->cfg = cfg;
    if ((api->mem = kd_upload_mem_new(cfg->max_upload_memory)) == NULL) {
        free(api);
        return kestrel__error_oom();
    }
    if (kd_waiters_start(&api->waiters, e) < 0) {
        kd_upload_mem_free(api->mem);
        free(api);
        return KESTREL_ERROR;
    }
    if (kd_console_new(&api->console, cfg->tls_cert != NULL) < 0) {
        kd_waiters_stop(api->waiters);
        kd_waiters_free(api->waiters);
        kd_upload_mem_free(api->mem);
        free(api);
        return KESTREL_ERROR;
    }
    if (cfg->tls_cert) {
        if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
            kd_api_stop(api);
            return kestrel__error_set(KESTREL_EUNSUPPORTED, "--tls-cert: this libmicrohttpd has no TLS (GnuTLS)");
        }
        if ((cert = read_pem(cfg->tls_cert, "--tls-cert")) == NULL || (key = read_pem(cfg->tls_key, "--tls-key")) == NULL) {
            free(cert);
            kd_waiters_stop(api->waiters);
            kd_waiters_free(api->waiters);
            kd_console_free(api->console);
            kd_upload_mem_free(api->mem);
            free(api);
            return KESTREL_EINVALID;
        }
        flags |= MHD_USE_TLS;
    }
    /* with TLS the two MEM options come first: MHD reads the options in order */
#define KD_MHD_OPTIONS                                                                                     \
    MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa, MHD_OPTION_NOTIFY_COMPLETED, on_done, api,               \
        MHD_OPTION_THREAD_POOL_SIZE, threads, MHD_OPTION_CONNECTION_LIMIT, limit,                          \
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip, MHD_OPTION_CONNECTION_TIMEOUT, idle,                   \
        MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned int)1, MHD_OPTION_END
    api->d = cert ? MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, on_request, api,
                                     MHD_OPTION_HTTPS_MEM_CERT, cert, MHD_OPTION_HTTPS_MEM_KEY, key, KD_MHD_OPTIONS)
                  : MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, on_request, api, KD_MHD_OPTIONS);
#undef KD_MHD_OPTIONS
    api->cert = cert;
    api->key = key;
    if (api->d == NULL) {
        kd_api_stop(api);
        return kestrel__error_set(KESTREL_EIO, "cannot listen on %s:%d%s", cfg->listen, cfg->port,
                                  cfg->tls_cert ? " (or the TLS certificate and key do not fit)" : "");
    }
    if (cfg->metrics_listen && start_metrics_listener(api, cfg->metrics_listen) < 0) {
        kd_api_stop(api);
        return KESTREL_EINVALID;
    }
    /* An answer's bytes wait in the kernel, not in libmicrohttpd's buffers: a socket autotuned to
     * 4 MiB told libmicrohttpd it could write again only once half of it had gone, so a client reading
     * slowly (200 KB/s with --idle-timeout 2; about 70 KB/s with the default 30 s) left the connection
     * without a write for longer than the idle timeout, and it was closed mid-answer, its body cut (a
     * hostile test). Past 256 KiB not yet sent, a socket is not writable: libmicrohttpd writes, and
     * counts the connection active, as often as the client reads. What is in flight is not limited.
     * Accepted sockets inherit it from the listening one. */
    if ((info = MHD_get_daemon_info(api->d, MHD_DAEMON_INFO_LISTEN_FD)) != NULL) {
        int lowat = 256 * 1024;
        (void)setsockopt(info->listen_fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, sizeof(lowat));
    }
    info = MHD_get_daemon_info(api->d, MHD_DAEMON_INFO_BIND_PORT);
    *bound_port = info ? info->port : cfg->port;
    *out = api;
    return 0;
}

void kd_api_stop(kd_api *api)
{
    if (api == NULL)
        return;
    kd_waiters_stop(api->waiters);   /* a suspended connection must be resumed before the stop */
    kd_defer_drain();
    if (api->md)
        MHD_stop_daemon(api->md);
    if (api->d)
        MHD_stop_daemon(api->d);
    kd_waiters_free(api->waiters);
    kd_console_free(api->console);
    kd_upload_mem_free(api->mem);
    if (api->key)
        explicit_bzero(api->key, strlen(api->key));
    free(api->key);
    free(api->cert);
    free(api);
}

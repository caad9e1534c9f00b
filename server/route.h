/* server/route.h - the URL grammar of the HTTP API, as pure functions (no I/O, no MHD).
 *
 * Every path and query value a client sends is parsed here, once, so the rules are in one place
 * and its fuzzer (tests/fuzz/route_fuzzer.c) drives exactly what the server runs. Numbers are
 * strict: decimal digits only (no sign, space or '+', which strtoll would take), no leading zero,
 * within the stated range. Paths are matched segment by segment; anything else is "no route". */
#ifndef KD_ROUTE_H
#define KD_ROUTE_H

#include <stddef.h>

typedef enum kd_area {
    KD_AREA_NONE = 0,       /* 404 */
    KD_AREA_HEALTH,         /* /healthz (no token) */
    KD_AREA_JOBS,           /* /api/v1/jobs[/...]: rest is "" or "/..." */
    KD_AREA_TOKENS,         /* /api/v1/tokens[/...] */
    KD_AREA_USERS,          /* /api/v1/users/NAME: rest is NAME */
    KD_AREA_BACKUP,         /* /api/v1/admin/backup */
    KD_AREA_FSCK,           /* /api/v1/admin/fsck */
    KD_AREA_CHUNK_VERIFY,   /* POST /api/v1/chunks/SHA/verify: chunk is SHA */
    KD_AREA_QUEUE,          /* /api/v1/queue */
    KD_AREA_NODES,          /* /api/v1/nodes */
    KD_AREA_PACK,           /* /api/v1/chunks/pack (streamed: on_request handles POST itself) */
    KD_AREA_WHOAMI,         /* /api/v1/whoami: the caller's user */
    KD_AREA_ENVIRONMENTS,   /* /api/v1/environments */
    KD_AREA_REPO,           /* /api/v1/chunks/..., /api/v1/models..., /api/v1/repo/gc */
    KD_AREA_METRICS,        /* GET /metrics: Prometheus exposition (admin or metrics-scoped token) */
    KD_AREA_LOG_SEARCH,     /* GET /api/v1/logs/search */
    KD_AREA_ALERTS,         /* GET /api/v1/alerts */
    KD_AREA_CONSOLE,        /* /, /ui and /ui/...: the web console (console.c does its own sessions) */
    KD_AREA_API_OTHER       /* under /api/v1/ but no such endpoint (404 after authentication) */
} kd_area;

typedef struct kd_route {
    kd_area area;
    const char *rest;       /* points into the path */
    char chunk[65];         /* KD_AREA_CHUNK_VERIFY */
    int read_ok;            /* a read-scoped token may make this request (GETs, and the POSTs a
                               pull makes: /chunks/missing, /chunks/fetch and /chunks/SHA/verify; for the
                               console GET, HEAD and POST, though not consulted: console.c checks) */
} kd_route;

/* Which part of the API a request names. Never fails: unknown paths get KD_AREA_NONE/_API_OTHER. */
void kd_route_parse(const char *method, const char *path, kd_route *out);

/* The route template of a path for the HTTP metrics' route label: one of a fixed set of strings
 * ("/api/v1/jobs/{id}/logs"), "other" for anything else. Never NULL; static storage. */
const char *kd_route_template(const char *path);

/* A strict decimal integer in [lo, hi] (lo >= 0 takes no sign; lo < 0 takes a leading '-').
 * 0 and *out set, or -1. */
int kd_parse_int(const char *s, long long lo, long long hi, long long *out);

/* "/ID" or "/ID/SUB..." under /jobs or /tokens: ID in 1..INT64_MAX, *sub the rest ("" or "/...").
 * 0, or -1 when the first segment is not an ID. */
int kd_route_id(const char *rest, long long *id, const char **sub);

typedef enum kd_model_part {
    KD_MODEL_VERSIONS = 1,  /* NAME/versions:          arg "" */
    KD_MODEL_VERSION,       /* NAME/versions/REF:      arg REF (non-empty) */
    KD_MODEL_ALIAS,         /* NAME/aliases/ALIAS:     arg ALIAS (non-empty) */
    KD_MODEL_SETTINGS       /* NAME/settings:          arg "" */
} kd_model_part;

/* The part of a path after "/api/v1/models/". NAME may hold '/'; the first "/versions" or
 * "/aliases/" ends it. 0 with name (NUL-terminated, < namesz) and *part and *arg set; -1 for no such
 * endpoint; -2 when the name is not a valid model name (400). */
int kd_route_model(const char *rest, char *name, size_t namesz, kd_model_part *part, const char **arg);

/* A "key=value" label filter: key non-empty and < keysz. 0 with key copied and *value set, or -1. */
int kd_parse_label(const char *s, char *key, size_t keysz, const char **value);

/* A job state by name, any case ("running"): its KESTREL_JOB_STATE_* value, or 0 if unknown. */
int kd_parse_state(const char *s);

#endif

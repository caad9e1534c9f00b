/* server/route.c - the URL grammar of the HTTP API (see route.h). */
#include <string.h>
#include <strings.h>
#include "kestrel.h"
#include "route.h"
#include "store.h"

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* Strict decimal digits at s, up to the first non-digit; *end after them. -1 on none, a leading
 * zero (other than "0" itself) or overflow past INT64_MAX. */
static int digits(const char *s, unsigned long long *v, const char **end)
{
    unsigned long long x = 0;
    const char *p = s;
    if (!is_digit(*p) || (p[0] == '0' && is_digit(p[1])))
        return -1;
    for (; is_digit(*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (x > (9223372036854775807ull - d) / 10)
            return -1;
        x = x * 10 + d;
    }
    *v = x;
    *end = p;
    return 0;
}

int kd_parse_int(const char *s, long long lo, long long hi, long long *out)
{
    unsigned long long v;
    const char *end;
    int neg = 0;
    long long x;
    if (s == NULL)
        return -1;
    if (*s == '-' && lo < 0) {
        neg = 1;
        s++;
    }
    if (digits(s, &v, &end) < 0 || *end || (neg && v == 0))
        return -1;
    x = neg ? -(long long)v : (long long)v;
    if (x < lo || x > hi)
        return -1;
    *out = x;
    return 0;
}

int kd_route_id(const char *rest, long long *id, const char **sub)
{
    unsigned long long v;
    const char *end;
    if (rest[0] != '/' || digits(rest + 1, &v, &end) < 0 || v == 0 || (*end && *end != '/'))
        return -1;
    *id = (long long)v;
    *sub = end;
    return 0;
}

static int prefix(const char *s, const char *p, const char **rest)
{
    size_t n = strlen(p);
    if (strncmp(s, p, n))
        return 0;
    *rest = s + n;
    return 1;
}

/* path is exactly base, or base followed by "/..." */
static int under(const char *path, const char *base, const char **rest)
{
    const char *r;
    if (!prefix(path, base, &r) || (*r && *r != '/'))
        return 0;
    *rest = r;
    return 1;
}

void kd_route_parse(const char *method, const char *path, kd_route *out)
{
    const char *rest = "", *api;
    int get_ = !strcmp(method, "GET"), post = !strcmp(method, "POST"), head = !strcmp(method, "HEAD");
    memset(out, 0, sizeof(*out));
    out->rest = "";
    if (!strcmp(path, "/healthz")) {
        out->area = KD_AREA_HEALTH;
        out->read_ok = 1;
        return;
    }
    if (!strcmp(path, "/metrics")) {
        out->area = KD_AREA_METRICS;
        out->read_ok = get_;
        return;
    }
    if (!strcmp(path, "/") || !strcmp(path, "/ui") || !strncmp(path, "/ui/", 4)) {
        /* its pages and its forms (sign in and out, a login code); console.c checks who may itself */
        out->area = KD_AREA_CONSOLE;
        out->read_ok = get_ || head || post;
        return;
    }
    if (!prefix(path, "/api/v1/", &api))
        return;
    out->area = KD_AREA_API_OTHER;
    out->read_ok = get_;
    if (under(path, "/api/v1/jobs", &rest))
        out->area = KD_AREA_JOBS;
    else if (under(path, "/api/v1/tokens", &rest))
        out->area = KD_AREA_TOKENS;
    else if (prefix(path, "/api/v1/users/", &rest))
        out->area = KD_AREA_USERS;
    else if (!strcmp(path, "/api/v1/admin/backup"))
        out->area = KD_AREA_BACKUP;
    else if (!strcmp(path, "/api/v1/admin/fsck"))
        out->area = KD_AREA_FSCK;
    else if (!strcmp(path, "/api/v1/queue"))
        out->area = KD_AREA_QUEUE;
    else if (!strcmp(path, "/api/v1/nodes"))
        out->area = KD_AREA_NODES;
    else if (!strcmp(path, "/api/v1/whoami"))
        out->area = KD_AREA_WHOAMI;
    else if (!strcmp(path, "/api/v1/environments"))
        out->area = KD_AREA_ENVIRONMENTS;
    else if (!strcmp(path, "/api/v1/logs/search"))
        out->area = KD_AREA_LOG_SEARCH;
    else if (!strcmp(path, "/api/v1/alerts"))
        out->area = KD_AREA_ALERTS;
    else if (!strcmp(path, "/api/v1/chunks/pack"))
        out->area = KD_AREA_PACK;
    else if (prefix(path, "/api/v1/chunks/", &rest) && strlen(rest) == 64 + 7 && !strcmp(rest + 64, "/verify") &&
             post) {
        memcpy(out->chunk, rest, 64);
        out->chunk[64] = '\0';
        if (kestrel__is_sha256_hex(out->chunk)) {
            out->area = KD_AREA_CHUNK_VERIFY;
            out->read_ok = 1;
        }
        rest = "";
    } else if (prefix(path, "/api/v1/chunks/", &rest) || under(path, "/api/v1/models", &rest) ||
               !strcmp(path, "/api/v1/repo/gc")) {
        out->area = KD_AREA_REPO;
        rest = path;
        if (post && (!strcmp(path, "/api/v1/chunks/missing") || !strcmp(path, "/api/v1/chunks/fetch")))
            out->read_ok = 1;   /* a question, and a download: a read-scoped token may */
    }
    out->rest = rest;
}

int kd_route_model(const char *rest, char *name, size_t namesz, kd_model_part *part, const char **arg)
{
    const char *v = strstr(rest, "/versions"), *a = strstr(rest, "/aliases/"), *cut;
    size_t n = strlen(rest);
    /* "/versions" must be a whole segment: in NAME/versionsx/versions, the second */
    while (v && v[9] != '\0' && v[9] != '/')
        v = strstr(v + 9, "/versions");
    cut = v && (!a || v < a) ? v : a;
    if (cut == NULL && n > 9 && !strcmp(rest + n - 9, "/settings"))
        cut = rest + n - 9;
    if (cut == NULL || cut == rest || (size_t)(cut - rest) >= namesz)
        return -1;
    memcpy(name, rest, (size_t)(cut - rest));
    name[cut - rest] = '\0';
    if (cut == v) {
        *part = v[9] ? KD_MODEL_VERSION : KD_MODEL_VERSIONS;
        *arg = v[9] ? v + 10 : v + 9;
        if (*part == KD_MODEL_VERSION && **arg == '\0')
            return -1;
    } else if (cut == a) {
        *part = KD_MODEL_ALIAS;
        *arg = a + 9;
        if (**arg == '\0')
            return -1;
    } else {
        *part = KD_MODEL_SETTINGS;
        *arg = rest + n;
    }
    return kestrel__repo_name_valid(name) ? 0 : -2;
}

int kd_parse_label(const char *s, char *key, size_t keysz, const char **value)
{
    const char *eq = strchr(s, '=');
    if (eq == NULL || eq == s || (size_t)(eq - s) >= keysz)
        return -1;
    memcpy(key, s, (size_t)(eq - s));
    key[eq - s] = '\0';
    *value = eq + 1;
    return 0;
}

int kd_parse_state(const char *s)
{
    for (int st = 1; st <= KESTREL_JOB_STATE_PREEMPTED; st++)
        if (!strcasecmp(s, kestrel_job_state_name(st)))
            return st;
    return 0;
}

const char *kd_route_template(const char *path)
{
    static const char *const fixed[] = { "/healthz", "/metrics", "/api/v1/jobs", "/api/v1/tokens", "/api/v1/queue",
                                         "/api/v1/nodes", "/api/v1/whoami", "/api/v1/environments",
                                         "/api/v1/logs/search", "/api/v1/alerts", "/api/v1/admin/backup", "/api/v1/admin/fsck",
                                         "/api/v1/chunks/pack", "/api/v1/chunks/missing", "/api/v1/chunks/fetch", "/api/v1/models",
                                         "/api/v1/repo/gc", NULL };
    static const char *const job_subs[] = { "/cancel", "/logs", "/metrics", "/explain", "/priority", "/rerun",
                                            "/checkpoint", "/gpu", "/models", NULL };
    static const char *const job_tpl[] = { "/api/v1/jobs/{id}/cancel", "/api/v1/jobs/{id}/logs",
                                           "/api/v1/jobs/{id}/metrics", "/api/v1/jobs/{id}/explain",
                                           "/api/v1/jobs/{id}/priority", "/api/v1/jobs/{id}/rerun",
                                           "/api/v1/jobs/{id}/checkpoint", "/api/v1/jobs/{id}/gpu",
                                           "/api/v1/jobs/{id}/models" };
    static const char *const model_tpl[] = { "", "/api/v1/models/{name}/versions", "/api/v1/models/{name}/versions/{ref}",
                                             "/api/v1/models/{name}/aliases/{alias}", "/api/v1/models/{name}/settings" };
    const char *rest, *sub, *arg;
    long long id;
    char name[512];
    kd_model_part part;
    for (size_t i = 0; fixed[i]; i++)
        if (!strcmp(path, fixed[i]))
            return fixed[i];
    if (!strcmp(path, "/") || !strcmp(path, "/ui") || !strncmp(path, "/ui/", 4))
        return "/ui";
    if (prefix(path, "/api/v1/jobs", &rest) && kd_route_id(rest, &id, &sub) == 0) {
        if (!*sub)
            return "/api/v1/jobs/{id}";
        for (size_t i = 0; job_subs[i]; i++)
            if (!strcmp(sub, job_subs[i]))
                return job_tpl[i];
        return "other";
    }
    if (prefix(path, "/api/v1/tokens", &rest) && kd_route_id(rest, &id, &sub) == 0 && !*sub)
        return "/api/v1/tokens/{id}";
    if (prefix(path, "/api/v1/users/", &rest) && *rest && !strchr(rest, '/'))
        return "/api/v1/users/{name}";
    if (prefix(path, "/api/v1/chunks/", &rest) && strlen(rest) >= 64) {
        memcpy(name, rest, 64);
        name[64] = '\0';
        if (kestrel__is_sha256_hex(name))
            return !rest[64] ? "/api/v1/chunks/{sha}" : !strcmp(rest + 64, "/verify") ? "/api/v1/chunks/{sha}/verify"
                                                                                        : "other";
    }
    if (prefix(path, "/api/v1/models/", &rest) && kd_route_model(rest, name, sizeof(name), &part, &arg) == 0)
        return model_tpl[part];
    return "other";
}

/* server/console.c - the web console: embedded pages, token login to a session cookie, CSRF
 * (see console.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include "console.h"
#include "store.h"

#define KD_LOGIN_TOKEN_MAX 512

/* One session: only hashes are kept, of the cookie and of the token it was made from. */
typedef struct {
    char sid_hash[65];
    char token_hash[65];
    char csrf[65];
    int64_t user_id;
    int64_t expires_ms;
    uint64_t born;      /* creation order (each lives KD_SESSION_TTL_MS: the first born ends first) */
} kd_session;

/* A one-time login code (kestrel ui): good for KD_LOGIN_CODE_TTL_MS, once. */
typedef struct {
    char code_hash[65];
    char token_hash[65];
    int64_t user_id;
    int64_t expires_ms;
} kd_login_code;

struct kd_console {
    pthread_mutex_t mu;
    kd_session *s;
    size_t n;
    uint64_t births;    /* sessions created so far */
    kd_login_code codes[KD_LOGIN_CODES_MAX];
    size_t ncodes;
    int secure;
};

/* No inline script or style anywhere: the pages load their code and styles from /ui/. */
static const char csp[] = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                          "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

int kd_console_new(kd_console **out, int secure)
{
    kd_console *c = calloc(1, sizeof(*c));
    if (c == NULL || (c->s = calloc(KD_SESSIONS_MAX, sizeof(*c->s))) == NULL) {
        free(c);
        return kestrel__error_oom();
    }
    pthread_mutex_init(&c->mu, NULL);
    c->secure = secure;
    *out = c;
    return 0;
}

void kd_console_free(kd_console *c)
{
    if (c == NULL)
        return;
    OPENSSL_cleanse(c->s, KD_SESSIONS_MAX * sizeof(*c->s));
    OPENSSL_cleanse(c->codes, sizeof(c->codes));
    free(c->s);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static int random_hex(char hex[65])
{
    unsigned char raw[32];
    static const char digits[] = "0123456789abcdef";
    if (RAND_bytes(raw, sizeof(raw)) != 1)
        return kestrel__error_set(KESTREL_EIO, "no randomness for a session");
    for (size_t i = 0; i < sizeof(raw); i++) {
        hex[2 * i] = digits[raw[i] >> 4];
        hex[2 * i + 1] = digits[raw[i] & 15];
    }
    hex[64] = '\0';
    OPENSSL_cleanse(raw, sizeof(raw));
    return 0;
}

/* The index of the live session whose cookie hashes to sid_hash, or -1 (caller holds mu). */
static long find_locked(kd_console *c, const char *sid_hash, int64_t now)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->s[i].expires_ms > now && CRYPTO_memcmp(c->s[i].sid_hash, sid_hash, 64) == 0)
            return (long)i;
    return -1;
}

static void drop_locked(kd_console *c, size_t i)
{
    c->s[i] = c->s[--c->n];
    OPENSSL_cleanse(&c->s[c->n], sizeof(c->s[c->n]));
}

static int cookie_hash(kd_req *r, char sid_hash[65])
{
    const char *v = MHD_lookup_connection_value(r->conn, MHD_COOKIE_KIND, KD_SESSION_COOKIE);
    if (v == NULL || strlen(v) != 64 || !kestrel__is_sha256_hex(v))
        return -1;
    kestrel__sha256_hex(v, 64, sid_hash);
    return 0;
}

int kd_console_session(kd_console *c, kd_req *r, char token_hash[65], int *csrf_ok)
{
    char sid_hash[65];
    long i;
    if (c == NULL || cookie_hash(r, sid_hash) < 0)
        return -1;
    pthread_mutex_lock(&c->mu);
    if ((i = find_locked(c, sid_hash, kestrel__now_ms())) >= 0) {
        memcpy(token_hash, c->s[i].token_hash, 65);
        if (csrf_ok) {
            const char *h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, KD_CSRF_HEADER);
            *csrf_ok = h && strlen(h) == 64 && CRYPTO_memcmp(h, c->s[i].csrf, 64) == 0;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return i >= 0 ? 0 : -1;
}

/* The session of user_id nearest its end (any user's when user_id is -1), or -1: the one created
 * first, since all live as long (creation order, not the clock: logins in one millisecond tie on
 * expires_ms, and the table's order changes as sessions drop). */
static long oldest_locked(kd_console *c, int64_t user_id, size_t *count)
{
    long oldest = -1;
    *count = 0;
    for (size_t i = 0; i < c->n; i++)
        if (user_id < 0 || c->s[i].user_id == user_id) {
            (*count)++;
            if (oldest < 0 || c->s[i].born < c->s[oldest].born)
                oldest = (long)i;
        }
    return oldest;
}

void kd_console_forget(kd_console *c, kd_req *r)
{
    char sid_hash[65];
    long i;
    if (c == NULL || cookie_hash(r, sid_hash) < 0)
        return;
    pthread_mutex_lock(&c->mu);
    if ((i = find_locked(c, sid_hash, kestrel__now_ms())) >= 0)
        drop_locked(c, (size_t)i);
    pthread_mutex_unlock(&c->mu);
}

/* A new session for a token's hash, of user_id: the cookie's value in sid (65 bytes). A user holds
 * at most KD_SESSIONS_PER_USER, all tokens together (the user's oldest makes room), so no user can
 * push anyone else's out; a full table (256 users' worth) drops the session nearest its end. It was
 * per token: a user's 260 tokens logged every other user out (a hostile test). */
static int session_create(kd_console *c, const char *token_hash, int64_t user_id, char sid[65])
{
    int64_t now = kestrel__now_ms();
    kd_session s;
    size_t count;
    long victim;
    memset(&s, 0, sizeof(s));
    if (random_hex(sid) < 0 || random_hex(s.csrf) < 0)
        return KESTREL_EIO;
    kestrel__sha256_hex(sid, 64, s.sid_hash);
    memcpy(s.token_hash, token_hash, 65);
    s.user_id = user_id;
    s.expires_ms = now + KD_SESSION_TTL_MS;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->n;)
        if (c->s[i].expires_ms <= now)
            drop_locked(c, i);
        else
            i++;
    if ((victim = oldest_locked(c, user_id, &count)) >= 0 && count >= KD_SESSIONS_PER_USER)
        drop_locked(c, (size_t)victim);
    else if (c->n == KD_SESSIONS_MAX && (victim = oldest_locked(c, -1, &count)) >= 0)
        drop_locked(c, (size_t)victim);
    s.born = ++c->births;
    c->s[c->n++] = s;
    pthread_mutex_unlock(&c->mu);
    OPENSSL_cleanse(&s, sizeof(s));
    return 0;
}

static void security_headers(struct MHD_Response *resp)
{
    MHD_add_response_header(resp, "Content-Security-Policy", csp);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "X-Frame-Options", "DENY");
    MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
}

static enum MHD_Result queue(kd_req *r, unsigned int status, struct MHD_Response *resp)
{
    enum MHD_Result ok;
    if (resp == NULL)
        return MHD_NO;
    security_headers(resp);
    ok = MHD_queue_response(r->conn, status, resp);
    if (ok == MHD_YES)
        r->status = status;
    MHD_destroy_response(resp);
    return ok;
}

/* 303 to location, setting (value != NULL) or clearing (value == NULL, clear set) the cookie. */
static enum MHD_Result redirect(kd_console *c, kd_req *r, const char *location, const char *sid, int clear)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    char cookie[256];
    if (resp == NULL)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION, location);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (sid || clear) {
        snprintf(cookie, sizeof(cookie), "%s=%s; Path=/; Max-Age=%lld; HttpOnly; SameSite=Strict%s", KD_SESSION_COOKIE,
                 sid ? sid : "", sid ? KD_SESSION_TTL_MS / 1000 : 0LL, c->secure ? "; Secure" : "");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_SET_COOKIE, cookie);
    }
    return queue(r, 303, resp);
}

static const kd_asset *asset(const char *path)
{
    for (size_t i = 0; i < kd_assets_count; i++)
        if (!strcmp(kd_assets[i].path, path))
            return &kd_assets[i];
    return NULL;
}

static enum MHD_Result serve(kd_req *r, const kd_asset *a)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer((size_t)(a->end - a->data), (void *)a->data, MHD_RESPMEM_PERSISTENT);
    if (resp == NULL)
        return MHD_NO;
    char ctype[64];
    snprintf(ctype, sizeof(ctype), "%s%s", a->content_type, strncmp(a->content_type, "text/", 5) ? "" : "; charset=utf-8");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    /* the pages change with kestreld: revalidate rather than keep an old copy */
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    return queue(r, 200, resp);
}

/* A login only from the user's own action. The browser's Sec-Fetch-Site says where the request
 * came from: "none" (typed, pasted, opened by a program) or "same-origin" (the login form); another
 * site's page cannot log the browser in as someone else. Without that header (curl, older
 * browsers) an Origin, when sent, must be this server. */
static int login_allowed(kd_req *r)
{
    const char *site = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Sec-Fetch-Site");
    const char *origin = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Origin");
    const char *host = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    const char *o;
    if (site)
        return !strcmp(site, "none") || !strcmp(site, "same-origin");
    if (origin == NULL)
        return 1;
    return (o = strstr(origin, "://")) != NULL && host && !strcmp(o + 3, host);
}

/* A token's hash -> a session, unless it is one that cannot log in. The redirect says which. */
static enum MHD_Result login_hash(kd_console *c, kd_req *r, const char *hash)
{
    kd_principal who;
    char sid[65];
    if (!login_allowed(r))
        return redirect(c, r, "/?error=site", NULL, 0);
    if (kd_catalog_token_find(r->e->cat, hash, kestrel__now_ms(), &who) < 0)
        return redirect(c, r, "/?error=token", NULL, 0);
    if (who.job_id || who.scope == KD_SCOPE_METRICS)
        return redirect(c, r, "/?error=scope", NULL, 0);
    if (session_create(c, hash, who.user_id, sid) < 0)
        return kd_reply_error(r, 500, "internal", kestrel_error_last()->message);
    {
        enum MHD_Result ok = redirect(c, r, "/", sid, 0);
        OPENSSL_cleanse(sid, sizeof(sid));
        return ok;
    }
}

static enum MHD_Result login(kd_console *c, kd_req *r, const char *token)
{
    char hash[65];
    if (token == NULL || !*token || strlen(token) > KD_LOGIN_TOKEN_MAX)
        return redirect(c, r, "/?error=token", NULL, 0);
    if (kd_token_hash(token, hash) < 0)
        return redirect(c, r, "/?error=token", NULL, 0);
    return login_hash(c, r, hash);
}

/* GET /?code=C: a code from POST /ui/login-code, spent on first use. */
static enum MHD_Result login_code(kd_console *c, kd_req *r, const char *code)
{
    char code_hash[65], token_hash[65];
    int64_t now = kestrel__now_ms();
    int found = 0;
    if (code == NULL || strlen(code) != 64 || !kestrel__is_sha256_hex(code))
        return redirect(c, r, "/?error=code", NULL, 0);
    if (!login_allowed(r))   /* refused before it is spent: another site's try left the user's link dead */
        return redirect(c, r, "/?error=site", NULL, 0);
    kestrel__sha256_hex(code, 64, code_hash);
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->ncodes; i++)
        if (CRYPTO_memcmp(c->codes[i].code_hash, code_hash, 64) == 0) {
            found = c->codes[i].expires_ms > now;
            memcpy(token_hash, c->codes[i].token_hash, sizeof(token_hash));
            c->codes[i] = c->codes[--c->ncodes];
            OPENSSL_cleanse(&c->codes[c->ncodes], sizeof(c->codes[0]));
            break;
        }
    pthread_mutex_unlock(&c->mu);
    if (!found)
        return redirect(c, r, "/?error=code", NULL, 0);
    {
        enum MHD_Result ok = login_hash(c, r, token_hash);
        OPENSSL_cleanse(token_hash, sizeof(token_hash));
        return ok;
    }
}

/* POST /ui/login-code with a user's bearer token: a code for GET /?code= (kestrel ui). */
static enum MHD_Result make_login_code(kd_console *c, kd_req *r)
{
    Kestrel__V1__ConsoleLoginCode out = KESTREL__V1__CONSOLE_LOGIN_CODE__INIT;
    const char *h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    char hash[65], code[65], path[80];
    kd_principal who;
    kd_login_code lc;
    int64_t now = kestrel__now_ms();
    enum MHD_Result ok;
    if (h == NULL || strncmp(h, "Bearer ", 7) || !h[7])
        return kd_reply_error(r, 401, "unauthenticated", "missing 'Authorization: Bearer <token>' header");
    if (kd_token_hash(h + 7, hash) < 0)
        return kd_reply_failure(r, KESTREL_ERROR);
    if (kd_catalog_token_find(r->e->cat, hash, now, &who) < 0)
        return kd_reply_error(r, 401, "unauthenticated", kestrel_error_last()->message);
    if (who.job_id || who.scope == KD_SCOPE_METRICS)
        return kd_reply_error(r, 403, "permission_denied", "job and metrics tokens cannot log in to the console");
    if (random_hex(code) < 0)
        return kd_reply_error(r, 500, "internal", kestrel_error_last()->message);
    memset(&lc, 0, sizeof(lc));
    kestrel__sha256_hex(code, 64, lc.code_hash);
    memcpy(lc.token_hash, hash, sizeof(hash));
    lc.user_id = who.user_id;
    lc.expires_ms = now + KD_LOGIN_CODE_TTL_MS;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->ncodes;)   /* spent by time */
        if (c->codes[i].expires_ms <= now)
            c->codes[i] = c->codes[--c->ncodes];
        else
            i++;
    {   /* past KD_LOGIN_CODES_PER_USER the user's oldest goes, else when full anyone's oldest: it was
         * anyone's at once, and 256 codes of one user spent every other user's link (a hostile test) */
        size_t mine = 0, oldest = 0, my_oldest = 0;
        for (size_t i = 0; i < c->ncodes; i++) {
            if (c->codes[i].expires_ms < c->codes[oldest].expires_ms)
                oldest = i;
            if (c->codes[i].user_id == who.user_id &&
                (mine++ == 0 || c->codes[i].expires_ms < c->codes[my_oldest].expires_ms))
                my_oldest = i;
        }
        if (mine >= KD_LOGIN_CODES_PER_USER || c->ncodes == KD_LOGIN_CODES_MAX) {
            size_t v = mine >= KD_LOGIN_CODES_PER_USER ? my_oldest : oldest;
            c->codes[v] = c->codes[--c->ncodes];
        }
    }
    c->codes[c->ncodes++] = lc;
    pthread_mutex_unlock(&c->mu);
    OPENSSL_cleanse(&lc, sizeof(lc));
    snprintf(path, sizeof(path), "/?code=%s", code);
    out.code = code;
    out.expires_ms = now + KD_LOGIN_CODE_TTL_MS;
    out.path = path;
    ok = kd_reply_msg(r, 201, &out.base);
    OPENSSL_cleanse(code, sizeof(code));
    OPENSSL_cleanse(path, sizeof(path));
    return ok;
}

/* The token field of an application/x-www-form-urlencoded login body, unescaped, or NULL. */
static const char *form_token(kd_req *r, char *out, size_t outsz)
{
    const char *p = r->body.ptr, *end = p ? p + r->body.size : NULL;
    while (p && p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        size_t len = (size_t)((amp ? amp : end) - p);
        if (len > 6 && !memcmp(p, "token=", 6) && len - 6 < outsz) {
            memcpy(out, p + 6, len - 6);
            out[len - 6] = '\0';
            MHD_http_unescape(out);
            return out;
        }
        p = amp ? amp + 1 : end;
    }
    return NULL;
}

static const char *scope_name(int scope)
{
    return scope == KD_SCOPE_READ ? "read" : scope == KD_SCOPE_ADMIN ? "admin" : "write";
}

static enum MHD_Result session_info(kd_console *c, kd_req *r)
{
    Kestrel__V1__ConsoleSession s = KESTREL__V1__CONSOLE_SESSION__INIT;
    char sid_hash[65], csrf[65], token_hash[65];
    kd_principal who;
    int64_t expires = 0;
    long i = -1;
    int found = 0;
    if (cookie_hash(r, sid_hash) == 0) {
        pthread_mutex_lock(&c->mu);
        if ((i = find_locked(c, sid_hash, kestrel__now_ms())) >= 0) {
            memcpy(token_hash, c->s[i].token_hash, sizeof(token_hash));
            memcpy(csrf, c->s[i].csrf, sizeof(csrf));
            expires = c->s[i].expires_ms;
        }
        pthread_mutex_unlock(&c->mu);
    }
    /* the token is looked up outside the lock: every cookie request would wait on SQLite else */
    if (i >= 0 && !(found = kd_catalog_token_find(r->e->cat, token_hash, kestrel__now_ms(), &who) == 0))
        kd_console_forget(c, r);   /* its token was revoked or expired: the session goes with it */
    OPENSSL_cleanse(token_hash, sizeof(token_hash));
    if (!found) {
        OPENSSL_cleanse(csrf, sizeof(csrf));
        return kd_reply_error(r, 401, "unauthenticated", "not logged in: open the console with ?token=TOKEN "
                              "(kestrel ui prints that address) or log in with a token");
    }
    s.user = who.user;
    s.team = who.team;
    s.admin = who.is_admin;
    s.scope = (char *)scope_name(who.scope);
    s.csrf_token = csrf;
    s.expires_ms = who.expires_ms && who.expires_ms < expires ? who.expires_ms : expires;
    s.version = KESTREL_VERSION_STRING;
    {
        enum MHD_Result ok = kd_reply_msg(r, 200, &s.base);
        OPENSSL_cleanse(csrf, sizeof(csrf));
        return ok;
    }
}

static enum MHD_Result logout(kd_console *c, kd_req *r)
{
    char sid_hash[65];
    long i = -1;
    int csrf_ok = 0;
    char th[65];
    if (kd_console_session(c, r, th, &csrf_ok) < 0)
        return kd_reply_error(r, 401, "unauthenticated", "not logged in");
    if (!csrf_ok)
        return kd_reply_error(r, 403, "csrf_failed", "missing or wrong " KD_CSRF_HEADER " header");
    if (cookie_hash(r, sid_hash) == 0) {
        pthread_mutex_lock(&c->mu);
        if ((i = find_locked(c, sid_hash, kestrel__now_ms())) >= 0)
            drop_locked(c, (size_t)i);
        pthread_mutex_unlock(&c->mu);
    }
    return redirect(c, r, "/", NULL, 1);
}

enum MHD_Result kd_console_route(kd_console *c, kd_req *r)
{
    const kd_asset *a;
    int get_ = !strcmp(r->method, "GET") || !strcmp(r->method, "HEAD");
    if (!strcmp(r->path, "/") || !strcmp(r->path, "/ui") || !strcmp(r->path, "/ui/")) {
        if (!get_)
            return kd_reply_error(r, 405, "method_not_allowed", "GET");
        if (kd_query(r, "token"))
            return login(c, r, kd_query(r, "token"));
        if (kd_query(r, "code"))
            return login_code(c, r, kd_query(r, "code"));
        return serve(r, asset("/ui/index.html"));
    }
    if (!strcmp(r->path, "/ui/login")) {
        char tok[KD_LOGIN_TOKEN_MAX + 2];
        enum MHD_Result ok;
        if (strcmp(r->method, "POST"))
            return kd_reply_error(r, 405, "method_not_allowed", "POST a form with the field token");
        ok = login(c, r, form_token(r, tok, sizeof(tok)));
        OPENSSL_cleanse(tok, sizeof(tok));
        return ok;
    }
    if (!strcmp(r->path, "/ui/login-code"))
        return strcmp(r->method, "POST") ? kd_reply_error(r, 405, "method_not_allowed", "POST with your bearer token")
                                         : make_login_code(c, r);
    if (!strcmp(r->path, "/ui/logout"))
        return strcmp(r->method, "POST") ? kd_reply_error(r, 405, "method_not_allowed", "POST") : logout(c, r);
    if (!strcmp(r->path, "/ui/session"))
        return get_ ? session_info(c, r) : kd_reply_error(r, 405, "method_not_allowed", "GET");
    if (get_ && (a = asset(r->path)) != NULL && strcmp(r->path, "/ui/index.html"))
        return serve(r, a);
    return kd_reply_error(r, 404, "not_found", "no such page");
}

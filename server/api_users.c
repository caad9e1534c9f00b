/* server/api_users.c - /api/v1/tokens (create, list, revoke) and /api/v1/users/NAME (teams).
 *
 * Who may:
 *   POST   /tokens        any user for itself (read or write scope); an admin for anyone, any scope
 *                         an admin user may hold (admin only for admins), creating the user if missing
 *   GET    /tokens        a user: its own; an admin: everyone's (?user=NAME: one user's)
 *   DELETE /tokens/ID     a user: its own (others' are 404); an admin: any
 *   GET    /users/NAME    the user itself, or an admin
 *   PUT    /users/NAME    an admin: the only way a user's team changes
 * Job tokens may do none of these (403). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "api.h"
#include "route.h"
#include "store.h"

#define MAX_EXPIRES_S (10LL * 365 * 86400)
#define MAX_LIVE_TOKENS 1000   /* per user: a listing stays small, a loop cannot fill the catalog */

static const char *const scope_names[] = { "", "read", "write", "admin", "metrics" };

static int scope_parse(const char *s)
{
    if (!s || !*s)
        return KD_SCOPE_WRITE;
    for (int i = KD_SCOPE_READ; i <= KD_SCOPE_METRICS; i++)
        if (!strcmp(s, scope_names[i]))
            return i;
    return 0;
}

static const char *scope_name(int s)
{
    return s >= KD_SCOPE_READ && s <= KD_SCOPE_METRICS ? scope_names[s] : "";
}

/* A model name's first segment names a user, a team or jobs/: the three must never coincide.
 * NULL when name may be a new user's (user=1) or a team's (user=0), else why not. */
static const char *namespace_clash(kd_req *r, const char *name, int user)
{
    static __thread char why[200];   /* per request thread */
    kd_user u;
    if (!strcmp(name, "jobs"))
        return "'jobs' is the namespace of jobs' models";
    if (user && kd_catalog_team_exists(r->e->cat, name) > 0) {
        snprintf(why, sizeof(why), "'%s' is a team: a user of that name would share its models' namespace", name);
        return why;
    }
    if (!user && kd_catalog_user_get(r->e->cat, name, &u) == 0) {
        snprintf(why, sizeof(why), "'%s' is a user: a team of that name would share its models' namespace", name);
        return why;
    }
    return NULL;
}

/* A new user's or team's name is their models' namespace too (USER/..., TEAM/...): "Dave" was taken,
 * and Dave could push nowhere, told he may write "Dave/...", itself no valid name (a hostile test).
 * Names kestreld knows already stay as they are. NULL when fine, else the complaint. */
static const char *new_namespace_refused(kd_req *r, const char *name, int is_user)
{
    kd_user u;
    if (is_user ? kd_catalog_user_get(r->e->cat, name, &u) == 0 : kd_catalog_team_exists(r->e->cat, name) > 0)
        return NULL;
    kestrel_error_clear();
    if (kestrel__repo_name_valid(name))
        return NULL;
    return is_user ? "field 'user': a new user's name is also their models' namespace (USER/...): lowercase "
                     "letters, digits, '.', '_' and '-', starting with a letter or digit"
                   : "field 'team': a new team's name is also its models' namespace (TEAM/...): lowercase "
                     "letters, digits, '.', '_' and '-', starting with a letter or digit";
}

static enum MHD_Result create(kd_req *r)
{
    enum MHD_Result reply = MHD_NO;
    Kestrel__V1__TokenRequest *req;
    Kestrel__V1__TokenResponse resp = KESTREL__V1__TOKEN_RESPONSE__INIT;
    char token[80], msg[400];
    const char *user, *clash, *why;
    kd_user u;
    kd_token t;
    int64_t id = 0;
    int created = 0, rc;
    if ((req = (Kestrel__V1__TokenRequest *)kd_body(r, &kestrel__v1__token_request__descriptor, &reply)) == NULL)
        return reply;
    memset(&t, 0, sizeof(t));
    t.scope = scope_parse(req->scope);
    user = req->user[0] ? req->user : r->who.user;
    if (!kd_name_ok(user)) {
        reply = kd_reply_error(r, 400, "invalid_argument", "field 'user': 1..64 printable bytes without spaces or '/'");
    } else if (req->team[0] && !kd_name_ok(req->team)) {
        reply = kd_reply_error(r, 400, "invalid_argument", "field 'team': 1..64 printable bytes without spaces or '/'");
    } else if ((why = new_namespace_refused(r, user, 1)) != NULL ||
               (req->team[0] && (why = new_namespace_refused(r, req->team, 0)) != NULL)) {
        reply = kd_reply_error(r, 400, "invalid_argument", why);
    } else if (!t.scope) {
        reply = kd_reply_error(r, 400, "invalid_argument", "field 'scope': read, write, admin or metrics");
    } else if (req->expires_s < 0 || req->expires_s > MAX_EXPIRES_S) {
        reply = kd_reply_error(r, 400, "invalid_argument", "field 'expires_s': 0 (never) up to ten years");
    } else if (!kestrel__text_is_clean(req->name, 100)) {
        reply = kd_reply_error(r, 400, "invalid_argument", "field 'name': at most 100 printable bytes");
    } else if (!r->who.is_admin && strcmp(user, r->who.user)) {
        reply = kd_reply_error(r, 403, "permission_denied", "only an admin can create tokens for other users");
    } else if (!r->who.is_admin && (req->team[0] || t.scope == KD_SCOPE_ADMIN || t.scope == KD_SCOPE_METRICS)) {
        reply = kd_reply_error(r, 403, "permission_denied", "only an admin can create admin or metrics tokens or set a team");
    } else if (kd_catalog_user_get(r->e->cat, user, &u) < 0 && (clash = namespace_clash(r, user, 1)) != NULL) {
        reply = kd_reply_error(r, 409, "conflict", clash);
    } else if (req->team[0] && (clash = namespace_clash(r, req->team, 0)) != NULL) {
        reply = kd_reply_error(r, 409, "conflict", clash);
    } else if ((rc = kd_catalog_user_ensure(r->e->cat, user, 0, req->team, &t.user_id, &created)) < 0 ||
               (rc = kd_catalog_user_get(r->e->cat, user, &u)) < 0) {
        reply = kd_reply_failure(r, rc);
    } else if (!created && req->team[0] && strcmp(u.team, req->team)) {
        snprintf(msg, sizeof(msg), "user %s is in team '%s': change it explicitly with PUT /api/v1/users/%s "
                 "(kestrel user set %s --team %s)", u.name, u.team, u.name, u.name, req->team);
        reply = kd_reply_error(r, 409, "conflict", msg);
    } else if (t.scope == KD_SCOPE_ADMIN && !u.is_admin) {
        snprintf(msg, sizeof(msg), "user %s is not an admin: its tokens are read or write", u.name);
        reply = kd_reply_error(r, 400, "invalid_argument", msg);
    } else if (kd_catalog_count_live_tokens(r->e->cat, u.id, kestrel__now_ms()) >= MAX_LIVE_TOKENS) {
        snprintf(msg, sizeof(msg), "user %s has %d live tokens, the most kestreld keeps: revoke some first "
                 "(kestrel token list, kestrel token revoke ID)", u.name, MAX_LIVE_TOKENS);
        reply = kd_reply_error(r, 429, "resource_exhausted", msg);
    } else {
        t.created_ms = kestrel__now_ms();
        t.expires_ms = req->expires_s ? t.created_ms + req->expires_s * 1000 : 0;
        if (u.id == r->who.user_id) {
            /* a token made with a token outlives it neither by time nor by revocation */
            t.parent_id = r->who.token_id;
            if (r->who.expires_ms && (!t.expires_ms || t.expires_ms > r->who.expires_ms))
                t.expires_ms = r->who.expires_ms;
        }
        snprintf(t.name, sizeof(t.name), "%s", req->name);
        if ((rc = kd_token_issue_for(r->e->cat, &t, token, sizeof(token), &id)) < 0) {
            reply = kd_reply_failure(r, rc);
        } else {
            resp.user = u.name;
            resp.token = token;
            resp.id = id;
            resp.scope = (char *)scope_name(t.scope);
            resp.expires_ms = t.expires_ms;
            resp.team = u.team;
            reply = kd_reply_msg(r, 201, &resp.base);
        }
    }
    protobuf_c_message_free_unpacked(&req->base, NULL);
    return reply;
}

static void info_of(const kd_token *t, Kestrel__V1__TokenInfo *i)
{
    kestrel__v1__token_info__init(i);
    i->id = t->id;
    i->user = (char *)t->user;
    i->scope = (char *)scope_name(t->scope);
    i->name = (char *)t->name;
    i->created_ms = t->created_ms;
    i->expires_ms = t->expires_ms;
    i->revoked_ms = t->revoked_ms;
    i->hint = (char *)t->hint;
}

/* The tokens of user_id (0: all), or only token `only` when it is not 0. */
static enum MHD_Result reply_tokens(kd_req *r, int64_t user_id, int64_t only)
{
    Kestrel__V1__TokenList list = KESTREL__V1__TOKEN_LIST__INIT;
    Kestrel__V1__TokenInfo *infos;
    enum MHD_Result reply;
    kd_token *rows = NULL;
    size_t n = 0;
    int rc = kd_catalog_token_list(r->e->cat, user_id, &rows, &n);
    if (rc < 0) {
        free(rows);
        return kd_reply_failure(r, rc);
    }
    infos = calloc(n + 1, sizeof(*infos));
    list.tokens = calloc(n + 1, sizeof(*list.tokens));
    if (infos == NULL || list.tokens == NULL) {
        free(infos);
        free(list.tokens);
        free(rows);
        return kd_reply_failure(r, kestrel__error_oom());
    }
    for (size_t i = 0; i < n; i++)
        if (!only || rows[i].id == only) {
            info_of(&rows[i], &infos[list.n_tokens]);
            list.tokens[list.n_tokens] = &infos[list.n_tokens];
            list.n_tokens++;
        }
    reply = kd_reply_msg(r, 200, &list.base);
    free(infos);
    free(list.tokens);
    free(rows);
    return reply;
}

enum MHD_Result kd_route_tokens(kd_req *r, const char *rest)
{
    int64_t mine = r->who.is_admin ? 0 : r->who.user_id;
    if (r->who.job_id)
        return kd_reply_error(r, 403, "permission_denied", "a job token cannot see or change tokens");
    if (*rest == '\0') {
        if (!strcmp(r->method, "POST"))
            return create(r);
        if (!strcmp(r->method, "GET")) {
            const char *user = kd_query(r, "user");
            kd_user u;
            int rc;
            if (user && *user && r->who.is_admin) {
                if ((rc = kd_catalog_user_get(r->e->cat, user, &u)) < 0)
                    return kd_reply_failure(r, rc);
                mine = u.id;
            } else if (user && *user && strcmp(user, r->who.user)) {   /* said, not answered with one's own */
                return kd_reply_error(r, 403, "permission_denied", "query 'user': only an admin lists another "
                                      "user's tokens (yours: leave it out)");
            }
            return reply_tokens(r, mine, 0);
        }
        return kd_reply_error(r, 405, "method_not_allowed", "use GET or POST on /api/v1/tokens");
    }
    if (!strcmp(r->method, "DELETE")) {
        const char *sub;
        long long id;
        int rc;
        if (kd_route_id(rest, &id, &sub) < 0 || *sub)
            return kd_reply_error(r, 404, "not_found", "no such token");
        if ((rc = kd_catalog_token_revoke(r->e->cat, id, mine, kestrel__now_ms())) < 0)
            return kd_reply_failure(r, rc);
        return reply_tokens(r, mine, id);
    }
    return kd_reply_error(r, 405, "method_not_allowed", "use DELETE on /api/v1/tokens/ID");
}

enum MHD_Result kd_route_whoami(kd_req *r)
{
    Kestrel__V1__User out = KESTREL__V1__USER__INIT;
    if (strcmp(r->method, "GET"))
        return kd_reply_error(r, 405, "method_not_allowed", "use GET on /api/v1/whoami");
    out.name = r->who.user;
    out.team = r->who.team;
    out.is_admin = r->who.is_admin;
    return kd_reply_msg(r, 200, &out.base);
}

enum MHD_Result kd_route_users(kd_req *r, const char *name)
{
    Kestrel__V1__User out = KESTREL__V1__USER__INIT;
    enum MHD_Result reply = MHD_NO;
    kd_user u;
    int rc;
    if (r->who.job_id)
        return kd_reply_error(r, 403, "permission_denied", "a job token cannot see or change users");
    if (!kd_name_ok(name))
        return kd_reply_error(r, 404, "not_found", "no such user");
    if (!r->who.is_admin && strcmp(name, r->who.user))
        return kd_reply_error(r, !strcmp(r->method, "GET") ? 404 : 403, !strcmp(r->method, "GET") ? "not_found"
                              : "permission_denied", !strcmp(r->method, "GET") ? "no such user"
                              : "only an admin can change users");
    if ((rc = kd_catalog_user_get(r->e->cat, name, &u)) < 0)
        return kd_reply_failure(r, rc);
    if (!strcmp(r->method, "PUT")) {
        Kestrel__V1__User *in;
        if (!r->who.is_admin)
            return kd_reply_error(r, 403, "permission_denied", "only an admin can change a user's team");
        if ((in = (Kestrel__V1__User *)kd_body(r, &kestrel__v1__user__descriptor, &reply)) == NULL)
            return reply;
        if (in->team[0] && !kd_name_ok(in->team)) {
            protobuf_c_message_free_unpacked(&in->base, NULL);
            return kd_reply_error(r, 400, "invalid_argument", "field 'team': 1..64 printable bytes without spaces or '/'");
        }
        if (in->team[0] && new_namespace_refused(r, in->team, 0)) {
            enum MHD_Result bad = kd_reply_error(r, 400, "invalid_argument", new_namespace_refused(r, in->team, 0));
            protobuf_c_message_free_unpacked(&in->base, NULL);
            return bad;
        }
        if (in->team[0] && namespace_clash(r, in->team, 0)) {
            enum MHD_Result clash = kd_reply_error(r, 409, "conflict", namespace_clash(r, in->team, 0));
            protobuf_c_message_free_unpacked(&in->base, NULL);
            return clash;
        }
        rc = kd_catalog_user_set_team(r->e->cat, name, in->team);
        snprintf(u.team, sizeof(u.team), "%s", in->team);
        protobuf_c_message_free_unpacked(&in->base, NULL);
        if (rc < 0)
            return kd_reply_failure(r, rc);
    } else if (strcmp(r->method, "GET")) {
        return kd_reply_error(r, 405, "method_not_allowed", "use GET or PUT on /api/v1/users/NAME");
    }
    out.name = u.name;
    out.team = u.team;
    out.is_admin = u.is_admin;
    return kd_reply_msg(r, 200, &out.base);
}

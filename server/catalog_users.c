/* server/catalog_users.c - users, tokens (hashes only) and who may read a model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>
#include "catalog.h"
#include "internal.h"

int kd_catalog_user_ensure(kd_catalog *cat, const char *name, int is_admin, const char *team, int64_t *id_out,
                           int *created)
{
    static const char *const ins = "INSERT OR IGNORE INTO users(name, is_admin, team) VALUES(?, ?, COALESCE(?, ''))";
    static const char *const sel = "SELECT id FROM users WHERE name = ?";
    sqlite3_stmt *st;
    int rc = 0;
    kd__lock(cat);
    if ((st = kd__stmt(cat, ins)) == NULL) { rc = KESTREL_EIO; goto out; }
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, is_admin);
    if (team)
        sqlite3_bind_text(st, 3, team, -1, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_DONE) { rc = kd__sql_fail(cat, "insert user"); goto out; }
    if (created)
        *created = sqlite3_changes(kd__db(cat)) > 0;
    if ((st = kd__stmt(cat, sel)) == NULL) { rc = KESTREL_EIO; goto out; }
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_ROW) { rc = kd__sql_fail(cat, "select user"); goto out; }
    *id_out = sqlite3_column_int64(st, 0);
out:
    kd__unlock(cat);
    return rc;
}

static int fill_user(sqlite3_stmt *st, void *row)
{
    kd_user *u = row;
    u->id = sqlite3_column_int64(st, 0);
    snprintf(u->name, sizeof(u->name), "%s", (const char *)sqlite3_column_text(st, 1));
    snprintf(u->team, sizeof(u->team), "%s", (const char *)sqlite3_column_text(st, 2));
    u->is_admin = sqlite3_column_int(st, 3);
    return 0;
}

int kd_catalog_user_get(kd_catalog *cat, const char *name, kd_user *out)
{
    kd_user *rows = NULL;
    size_t n = 0;
    int rc = kd__rows(cat, "SELECT id, name, team, is_admin FROM users WHERE name = ?", sizeof(kd_user), fill_user,
                      (void **)&rows, &n, "s", name);
    if (rc == 0 && n == 0)
        rc = kestrel__error_set(KESTREL_ENOTFOUND, "no user '%s'", name);
    if (rc == 0)
        *out = rows[0];
    free(rows);
    return rc;
}

int kd_catalog_user_set_team(kd_catalog *cat, const char *name, const char *team)
{
    return kd__run(cat, "UPDATE users SET team = ? WHERE name = ?", "tt", team, name);
}

int kd_catalog_team_exists(kd_catalog *cat, const char *team)
{
    kd_user *rows = NULL;
    size_t n = 0;
    int rc = kd__rows(cat, "SELECT id, name, team, is_admin FROM users WHERE team = ? LIMIT 1", sizeof(kd_user),
                      fill_user, (void **)&rows, &n, "s", team);
    free(rows);
    return rc < 0 ? rc : n > 0;
}

#define DEAD_KEPT 100   /* a user's revoked or expired tokens kept listed (the newest) */

int kd_catalog_token_insert(kd_catalog *cat, const char *hash, const kd_token *t, int64_t *id_out)
{
    static const char *const sql = "INSERT INTO tokens(hash, user_id, job_id, scope, created_ms, expires_ms, name, hint,"
                                   " parent_id) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)";
    sqlite3_stmt *st;
    int rc = 0;
    kd__lock(cat);
    if ((st = kd__stmt(cat, sql)) == NULL) {
        rc = KESTREL_EIO;
    } else {
        sqlite3_bind_text(st, 1, hash, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, t->user_id);
        sqlite3_bind_int64(st, 3, t->job_id);
        sqlite3_bind_int(st, 4, t->scope);
        sqlite3_bind_int64(st, 5, t->created_ms);
        sqlite3_bind_int64(st, 6, t->expires_ms);
        sqlite3_bind_text(st, 7, t->name, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 8, t->hint, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 9, t->parent_id);
        if (sqlite3_step(st) != SQLITE_DONE)
            rc = kd__sql_fail(cat, "insert token");
        else if (id_out)
            *id_out = sqlite3_last_insert_rowid(kd__db(cat));
    }
    kd__unlock(cat);
    /* of the user's dead tokens (revoked, expired), the newest DEAD_KEPT stay listed: a loop making
     * tokens of a second made 35,000 rows in 10 minutes, every one kept for good and listed to the
     * admin (a hostile test). A dead token's children are dead too (revoked with it, expiring by it). */
    if (rc == 0 && t->job_id == 0 &&   /* best effort: the token is made (a review: a full disk failed the
                                        * prune, and a live token was answered 500) */
        kd__run(cat, "DELETE FROM tokens WHERE id IN (SELECT id FROM tokens WHERE user_id = ?1 AND job_id = 0"
                     " AND (revoked_ms != 0 OR (expires_ms != 0 AND expires_ms <= ?2)) ORDER BY id DESC"
                     " LIMIT -1 OFFSET ?3)", "iii", t->user_id, t->created_ms, (int64_t)DEAD_KEPT) < 0)
        kestrel_error_clear();
    return rc;
}

int kd_name_ok(const char *s)
{
    return s[0] && kestrel__text_is_clean(s, 64) && !strchr(s, ' ') && !strchr(s, '/') && strncmp(s, "env-builder", 11);
}

int kd_catalog_token_find(kd_catalog *cat, const char *hash, int64_t now_ms, kd_principal *p)
{
    static const char *const sql =
        "SELECT u.id, u.name, u.is_admin, t.job_id, u.team, t.scope, t.expires_ms, t.revoked_ms, t.id"
        " FROM tokens t JOIN users u ON u.id = t.user_id WHERE t.hash = ?";
    sqlite3_stmt *st;
    int rc;
    kd__lock(cat);
    if ((st = kd__stmt(cat, sql)) == NULL) {
        rc = KESTREL_EIO;
    } else {
        sqlite3_bind_text(st, 1, hash, -1, SQLITE_STATIC);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            int64_t expires = sqlite3_column_int64(st, 6), revoked = sqlite3_column_int64(st, 7);
            memset(p, 0, sizeof(*p));
            p->user_id = sqlite3_column_int64(st, 0);
            snprintf(p->user, sizeof(p->user), "%s", (const char *)sqlite3_column_text(st, 1));
            p->job_id = sqlite3_column_int64(st, 3);
            p->scope = sqlite3_column_int(st, 5);
            p->owner_admin = sqlite3_column_int(st, 2);
            p->is_admin = p->owner_admin && p->job_id == 0 && p->scope == KD_SCOPE_ADMIN;
            snprintf(p->team, sizeof(p->team), "%s", (const char *)sqlite3_column_text(st, 4));
            p->token_id = sqlite3_column_int64(st, 8);
            p->expires_ms = expires;
            if (revoked)
                rc = kestrel__error_set(KESTREL_ENOTFOUND, "token %lld was revoked", (long long)p->token_id);
            else if (expires && now_ms >= expires)
                rc = kestrel__error_set(KESTREL_ENOTFOUND, "token %lld has expired", (long long)p->token_id);
            else
                rc = 0;
        } else if (rc == SQLITE_DONE) {
            rc = kestrel__error_set(KESTREL_ENOTFOUND, "invalid or revoked token");
        } else {
            rc = kd__sql_fail(cat, "find token");
        }
    }
    kd__unlock(cat);
    return rc;
}

int kd_catalog_token_drop_job(kd_catalog *cat, int64_t job_id)
{
    return kd__run(cat, "DELETE FROM tokens WHERE job_id = ?", "i", job_id);
}

static int fill_token(sqlite3_stmt *st, void *row)
{
    kd_token *t = row;
    memset(t, 0, sizeof(*t));
    t->id = sqlite3_column_int64(st, 0);
    t->user_id = sqlite3_column_int64(st, 1);
    snprintf(t->user, sizeof(t->user), "%s", (const char *)sqlite3_column_text(st, 2));
    t->scope = sqlite3_column_int(st, 3);
    t->created_ms = sqlite3_column_int64(st, 4);
    t->expires_ms = sqlite3_column_int64(st, 5);
    t->revoked_ms = sqlite3_column_int64(st, 6);
    snprintf(t->name, sizeof(t->name), "%s", (const char *)sqlite3_column_text(st, 7));
    snprintf(t->hint, sizeof(t->hint), "%s", (const char *)sqlite3_column_text(st, 8));
    return 0;
}

static int fill_count(sqlite3_stmt *st, void *row)
{
    *(int64_t *)row = sqlite3_column_int64(st, 0);
    return 0;
}

int64_t kd_catalog_count_live_tokens(kd_catalog *cat, int64_t user_id, int64_t now_ms)
{
    int64_t *rows = NULL, n = 0;
    size_t nrows = 0;
    if (kd__rows(cat, "SELECT COUNT(*) FROM tokens WHERE user_id = ? AND job_id = 0 AND revoked_ms = 0"
                      " AND (expires_ms = 0 OR expires_ms > ?)", sizeof(int64_t), fill_count, (void **)&rows, &nrows,
                 "ii", user_id, now_ms) == 0 && nrows)
        n = rows[0];
    free(rows);
    return n;
}

int kd_catalog_token_list(kd_catalog *cat, int64_t user_id, kd_token **out, size_t *n)
{
    return kd__rows(cat,
                    "SELECT t.id, t.user_id, u.name, t.scope, t.created_ms, t.expires_ms, t.revoked_ms, t.name, t.hint"
                    " FROM tokens t JOIN users u ON u.id = t.user_id"
                    " WHERE t.job_id = 0 AND (? = 0 OR t.user_id = ?) ORDER BY t.id",
                    sizeof(kd_token), fill_token, (void **)out, n, "ii", user_id, user_id);
}

int kd_catalog_token_revoke(kd_catalog *cat, int64_t id, int64_t user_id, int64_t now_ms)
{
    int changed = 0;
    int rc = kd__run_changes(cat, &changed,
                             "WITH RECURSIVE made(id) AS (SELECT id FROM tokens WHERE id = ? AND job_id = 0"
                             " AND revoked_ms = 0 AND (? = 0 OR user_id = ?)"
                             " UNION SELECT t.id FROM tokens t JOIN made ON t.parent_id = made.id)"
                             " UPDATE tokens SET revoked_ms = ? WHERE id IN made AND revoked_ms = 0",
                             "iiii", id, user_id, user_id, now_ms);
    if (rc == 0 && changed == 0)
        rc = kestrel__error_set(KESTREL_ENOTFOUND, "no token %lld of yours that is not revoked already",
                                (long long)id);
    return rc;
}

static int fill_int(sqlite3_stmt *st, void *row)
{
    *(int *)row = sqlite3_column_int(st, 0);
    return 0;
}

int kd_catalog_model_visibility(kd_catalog *cat, const char *name, int *vis_out)
{
    int *rows = NULL;
    size_t n = 0;
    int rc = kd__rows(cat, "SELECT visibility FROM model_acl WHERE name = ?", sizeof(int), fill_int, (void **)&rows,
                      &n, "s", name);
    *vis_out = rc == 0 && n ? rows[0] : KD_VIS_ALL;
    free(rows);
    return rc;
}

int kd_catalog_model_set_visibility(kd_catalog *cat, const char *name, int vis)
{
    return kd__run(cat, "INSERT INTO model_acl(name, visibility) VALUES(?, ?)"
                        " ON CONFLICT(name) DO UPDATE SET visibility = excluded.visibility", "ti", name, (int64_t)vis);
}

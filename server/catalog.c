/* server/catalog.c - opening the catalog, schema, statement cache, users and tokens. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>
#include "catalog.h"

#define STMT_CACHE 64

struct kd_catalog {
    sqlite3 *db;
    pthread_mutex_t mu;
    struct { const char *sql; sqlite3_stmt *st; } cache[STMT_CACHE];
};

static const char *const schema =
    "PRAGMA journal_mode=WAL;"
    "PRAGMA synchronous=NORMAL;"
    "PRAGMA foreign_keys=ON;"
    "CREATE TABLE IF NOT EXISTS users(id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL,"
    "  is_admin INTEGER NOT NULL DEFAULT 0, team TEXT NOT NULL DEFAULT '');"
    "CREATE TABLE IF NOT EXISTS tokens(id INTEGER PRIMARY KEY, hash TEXT UNIQUE NOT NULL,"
    "  user_id INTEGER NOT NULL REFERENCES users(id), job_id INTEGER NOT NULL DEFAULT 0);"
    "CREATE TABLE IF NOT EXISTS jobs(id INTEGER PRIMARY KEY, owner_id INTEGER NOT NULL REFERENCES users(id),"
    "  name TEXT NOT NULL, spec BLOB NOT NULL, priority INTEGER NOT NULL, gpus INTEGER NOT NULL,"
    "  no_retry INTEGER NOT NULL, state INTEGER NOT NULL, exit_code INTEGER NOT NULL DEFAULT -1,"
    "  reason TEXT NOT NULL DEFAULT '', submit_ms INTEGER NOT NULL, start_ms INTEGER NOT NULL DEFAULT 0,"
    "  end_ms INTEGER NOT NULL DEFAULT 0, git_commit TEXT NOT NULL DEFAULT '', devices TEXT NOT NULL DEFAULT '',"
    "  restart_count INTEGER NOT NULL DEFAULT 0, pid INTEGER NOT NULL DEFAULT 0,"
    "  pid_start INTEGER NOT NULL DEFAULT 0, node TEXT NOT NULL DEFAULT '', grp TEXT NOT NULL DEFAULT '',"
    "  team TEXT NOT NULL DEFAULT '', checkpoint_ms INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX IF NOT EXISTS jobs_group ON jobs(grp, start_ms);"
    "CREATE INDEX IF NOT EXISTS jobs_queue ON jobs(state, priority DESC, submit_ms, id);"
    "CREATE INDEX IF NOT EXISTS jobs_owner ON jobs(owner_id, id);"
    "CREATE TABLE IF NOT EXISTS job_labels(job_id INTEGER NOT NULL REFERENCES jobs(id), key TEXT NOT NULL,"
    "  value TEXT NOT NULL, PRIMARY KEY(job_id, key));"
    "CREATE INDEX IF NOT EXISTS job_labels_kv ON job_labels(key, value);"
    "CREATE TABLE IF NOT EXISTS job_events(id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL REFERENCES jobs(id),"
    "  time_ms INTEGER NOT NULL, from_state INTEGER NOT NULL, to_state INTEGER NOT NULL, reason TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS job_events_job ON job_events(job_id, id);"
    "CREATE TABLE IF NOT EXISTS logs(job_id INTEGER NOT NULL, seq INTEGER NOT NULL, time_ms INTEGER NOT NULL,"
    "  stream INTEGER NOT NULL, text TEXT NOT NULL, PRIMARY KEY(job_id, seq)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS metrics(job_id INTEGER NOT NULL, name TEXT NOT NULL, step INTEGER NOT NULL,"
    "  value REAL NOT NULL, wall_ms INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS metrics_job ON metrics(job_id, name, step);";

sqlite3 *kd__db(kd_catalog *cat) { return cat->db; }
void kd__lock(kd_catalog *cat) { pthread_mutex_lock(&cat->mu); }
void kd__unlock(kd_catalog *cat) { pthread_mutex_unlock(&cat->mu); }

int kd__sql_fail(kd_catalog *cat, const char *what)
{
    return kestrel__error_set(KESTREL_EIO, "catalog: %s: %s", what, sqlite3_errmsg(cat->db));
}

/* A cached prepared statement for a static SQL string (keyed by its address). Caller holds the lock. */
sqlite3_stmt *kd__stmt(kd_catalog *cat, const char *sql)
{
    int i;
    for (i = 0; i < STMT_CACHE && cat->cache[i].sql; i++) {
        if (cat->cache[i].sql == sql) {
            sqlite3_reset(cat->cache[i].st);
            sqlite3_clear_bindings(cat->cache[i].st);
            return cat->cache[i].st;
        }
    }
    if (i == STMT_CACHE)
        return NULL;
    if (sqlite3_prepare_v3(cat->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &cat->cache[i].st, NULL) != SQLITE_OK) {
        kd__sql_fail(cat, "prepare");
        return NULL;
    }
    cat->cache[i].sql = sql;
    return cat->cache[i].st;
}

int kd__exec(kd_catalog *cat, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(cat->db, sql, NULL, NULL, &err) != SQLITE_OK) {
        int rc = kestrel__error_set(KESTREL_EIO, "catalog: %s", err ? err : "exec failed");
        sqlite3_free(err);
        return rc;
    }
    return 0;
}

/* Run one write statement under the lock. types names each argument: 'i' int64_t, 't' text. */
/* The cached statement for sql with its arguments bound (caller holds the lock); NULL on failure. */
static sqlite3_stmt *prepare(kd_catalog *cat, const char *sql, const char *types, va_list ap)
{
    sqlite3_stmt *st = kd__stmt(cat, sql);
    for (int i = 0; st && types[i]; i++) {
        if (types[i] == 'i')
            sqlite3_bind_int64(st, i + 1, va_arg(ap, int64_t));
        else
            sqlite3_bind_text(st, i + 1, va_arg(ap, const char *), -1, SQLITE_STATIC);
    }
    return st;
}

int kd__run(kd_catalog *cat, const char *sql, const char *types, ...)
{
    sqlite3_stmt *st;
    va_list ap;
    int rc = 0;
    kd__lock(cat);
    va_start(ap, types);
    st = prepare(cat, sql, types, ap);
    va_end(ap);
    if (st == NULL) {
        rc = KESTREL_EIO;
    } else {
        if (sqlite3_step(st) != SQLITE_DONE)
            rc = kd__sql_fail(cat, "write");
    }
    kd__unlock(cat);
    return rc;
}

int kd__rows(kd_catalog *cat, const char *sql, size_t elem, int (*fill)(sqlite3_stmt *st, void *row), void **out,
             size_t *n, const char *types, ...)
{
    sqlite3_stmt *st;
    size_t cap = 0;
    char *rows = NULL;
    va_list ap;
    int rc = 0;
    *n = 0;
    kd__lock(cat);
    va_start(ap, types);
    st = prepare(cat, sql, types, ap);
    va_end(ap);
    if (st == NULL) {
        rc = KESTREL_EIO;
    } else {
        while (rc == 0 && sqlite3_step(st) == SQLITE_ROW)
            if ((rc = kestrel__array_grow(&rows, &cap, *n + 1, elem)) == 0 && (rc = fill(st, rows + *n * elem)) == 0)
                (*n)++;
        sqlite3_reset(st);
    }
    kd__unlock(cat);
    *out = rows;
    return rc;
}

int kd_catalog_open(kd_catalog **out, const char *path)
{
    kd_catalog *cat = calloc(1, sizeof(*cat));
    if (cat == NULL)
        return kestrel__error_oom();
    pthread_mutex_init(&cat->mu, NULL);
    if (sqlite3_open_v2(path, &cat->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL)
        != SQLITE_OK) {
        int rc = kestrel__error_set(KESTREL_EIO, "cannot open catalog %s: %s", path,
                                    cat->db ? sqlite3_errmsg(cat->db) : "out of memory");
        sqlite3_close(cat->db);
        free(cat);
        return rc;
    }
    sqlite3_busy_timeout(cat->db, 5000);
    if (kd__exec(cat, schema) < 0) {
        kd_catalog_close(cat);
        return KESTREL_EIO;
    }
    /* ext_id (the job's id in an external cluster, e.g. Slurm) came after the first schema */
    if (sqlite3_exec(cat->db, "SELECT ext_id FROM jobs LIMIT 0", NULL, NULL, NULL) != SQLITE_OK &&
        kd__exec(cat, "ALTER TABLE jobs ADD COLUMN ext_id TEXT NOT NULL DEFAULT ''") < 0) {
        kd_catalog_close(cat);
        return KESTREL_EIO;
    }
    *out = cat;
    return 0;
}

void kd_catalog_close(kd_catalog *cat)
{
    if (cat == NULL)
        return;
    for (int i = 0; i < STMT_CACHE && cat->cache[i].sql; i++)
        sqlite3_finalize(cat->cache[i].st);
    sqlite3_close(cat->db);
    pthread_mutex_destroy(&cat->mu);
    free(cat);
}

int kd_catalog_user_ensure(kd_catalog *cat, const char *name, int is_admin, const char *team, int64_t *id_out,
                           int *created)
{
    static const char *const ins = "INSERT OR IGNORE INTO users(name, is_admin, team) VALUES(?, ?, COALESCE(?, ''))";
    static const char *const upd = "UPDATE users SET team = ? WHERE name = ?";
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
        *created = sqlite3_changes(cat->db) > 0;
    if (team && team[0]) {
        if ((st = kd__stmt(cat, upd)) == NULL) { rc = KESTREL_EIO; goto out; }
        sqlite3_bind_text(st, 1, team, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
        if (sqlite3_step(st) != SQLITE_DONE) { rc = kd__sql_fail(cat, "update user"); goto out; }
    }
    if ((st = kd__stmt(cat, sel)) == NULL) { rc = KESTREL_EIO; goto out; }
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_ROW) { rc = kd__sql_fail(cat, "select user"); goto out; }
    *id_out = sqlite3_column_int64(st, 0);
out:
    kd__unlock(cat);
    return rc;
}

int kd_catalog_token_add(kd_catalog *cat, const char *hash, int64_t user_id, int64_t job_id)
{
    return kd__run(cat, "INSERT INTO tokens(hash, user_id, job_id) VALUES(?, ?, ?)", "tii", hash, user_id, job_id);
}

int kd_catalog_token_find(kd_catalog *cat, const char *hash, kd_principal *p)
{
    static const char *const sql =
        "SELECT u.id, u.name, u.is_admin, t.job_id, u.team FROM tokens t JOIN users u ON u.id = t.user_id"
        " WHERE t.hash = ?";
    sqlite3_stmt *st;
    int rc;
    kd__lock(cat);
    if ((st = kd__stmt(cat, sql)) == NULL) {
        rc = KESTREL_EIO;
    } else {
        sqlite3_bind_text(st, 1, hash, -1, SQLITE_STATIC);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            memset(p, 0, sizeof(*p));
            p->user_id = sqlite3_column_int64(st, 0);
            snprintf(p->user, sizeof(p->user), "%s", (const char *)sqlite3_column_text(st, 1));
            p->job_id = sqlite3_column_int64(st, 3);
            p->is_admin = sqlite3_column_int(st, 2) && p->job_id == 0;
            snprintf(p->team, sizeof(p->team), "%s", (const char *)sqlite3_column_text(st, 4));
            rc = 0;
        } else if (rc == SQLITE_DONE) {
            rc = kestrel__error_set(KESTREL_ENOTFOUND, "unknown token");
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

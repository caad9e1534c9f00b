/* server/catalog.c - opening the catalog, schema and its migrations, statement cache. */
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sqlite3.h>
#include "catalog.h"

#define STMT_CACHE 256   /* distinct cached statements (about 75 today): room to grow, never evicted */
#define USED_WORDS (STMT_CACHE / 64)

/* The WAL is truncated once it holds this many pages (64 MiB of 4 KiB pages): see kd__unlock. */
#define WAL_TRUNCATE_PAGES 16384
#define WAL_PASSIVE_PAGES 1000
#define WAL_RETRY_MS 1000       /* a truncation a reader kept from finishing is tried again after this */
#define BUSY_MS 5000            /* the main connection's busy timeout */

struct kd_catalog {
    sqlite3 *db;
    pthread_mutex_t mu;
    struct { const char *sql; sqlite3_stmt *st; } cache[STMT_CACHE];
    uint64_t used[USED_WORDS];  /* cached statements handed out under the current lock (bit i: cache[i]) */
    int any_used;
    int wal_pages;              /* frames in the WAL after the last commit */
    int64_t wal_retry_ms;       /* no truncation is tried before (kd__unlock) */
    int full;                   /* the last write failed for lack of space */
    char reserve[4200];         /* DB-reserve: space set aside for job states on a full disk */
    void (*on_transition)(void *ctx, const kd_transition_seen *t);
    void *on_transition_ctx;
    char path[4200];            /* for the read-only connections of searches */
};

const char *kd__path(const kd_catalog *cat) { return cat->path; }

void kd_catalog_on_transition(kd_catalog *cat, void (*fn)(void *ctx, const kd_transition_seen *t), void *ctx)
{
    cat->on_transition = fn;
    cat->on_transition_ctx = ctx;
}

void kd__transition_seen(kd_catalog *cat, const kd_transition_seen *t)
{
    if (cat->on_transition)
        cat->on_transition(cat->on_transition_ctx, t);
}

#define RESERVE_BYTES (8 << 20)

/* Keep RESERVE_BYTES of the catalog's disk aside (made when missing and there is room). */
static void reserve_make(kd_catalog *cat, const char *path)
{
    int fd;
    snprintf(cat->reserve, sizeof(cat->reserve), "%s-reserve", path);
    if ((fd = open(cat->reserve, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0)
        return;   /* there already, or no room: nothing to do */
    if (posix_fallocate(fd, 0, RESERVE_BYTES) != 0) {
        close(fd);
        unlink(cat->reserve);
        return;
    }
    close(fd);
}

int kd_catalog_release_reserve(kd_catalog *cat)
{
    int released;
    kd__lock(cat);
    released = cat->full && cat->reserve[0] && unlink(cat->reserve) == 0;
    cat->full = 0;
    kd__unlock(cat);
    if (released)
        fprintf(stderr, "kestreld: the catalog's disk is full: released its %d MiB reserve so that job states are "
                        "still recorded; free space and restart kestreld to set it aside again\n", RESERVE_BYTES >> 20);
    return released;
}

static const char *const schema =
    "PRAGMA journal_mode=WAL;"
    "PRAGMA synchronous=NORMAL;"
    "PRAGMA foreign_keys=ON;"
    "PRAGMA journal_size_limit=67108864;"   /* a checkpointed WAL shrinks back to at most 64 MiB */
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

/* Every statement handed out is reset before the lock is released: a stepped SELECT left as it
 * was holds a read transaction, and no checkpoint can then move the WAL past it (the WAL grew to
 * 2 GB under load that way). A WAL past WAL_TRUNCATE_PAGES is checkpointed and truncated here,
 * never waiting on a reader: a log search's snapshot (its own connection, up to 20 s) held the
 * truncation in the busy handler for 5 s at every unlock, under the catalog's lock, and every
 * other user's request waited 20 s (a hostile test). What a reader still needs is tried again a
 * second later, the frames before it checkpointed meanwhile. */
void kd__unlock(kd_catalog *cat)
{
    for (int w = 0; cat->any_used && w < USED_WORDS; w++)
        for (; cat->used[w]; cat->used[w] &= cat->used[w] - 1)
            sqlite3_reset(cat->cache[w * 64 + __builtin_ctzll(cat->used[w])].st);
    cat->any_used = 0;
    if (cat->wal_pages >= WAL_TRUNCATE_PAGES && kestrel__mono_ms() >= cat->wal_retry_ms) {
        int log = 0, done = 0, rc;
        sqlite3_busy_timeout(cat->db, 0);
        rc = sqlite3_wal_checkpoint_v2(cat->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, &log, &done);
        sqlite3_busy_timeout(cat->db, BUSY_MS);
        if (rc == SQLITE_OK)
            cat->wal_pages = 0;
        else
            cat->wal_retry_ms = kestrel__mono_ms() + WAL_RETRY_MS;
    }
    pthread_mutex_unlock(&cat->mu);
}

/* After each commit: what the default auto-checkpoint does (a passive checkpoint past 1000 pages),
 * and the WAL's size for kd__unlock. */
static int wal_hook(void *arg, sqlite3 *db, const char *name, int pages)
{
    kd_catalog *cat = arg;
    cat->wal_pages = pages;
    if (pages >= WAL_PASSIVE_PAGES)
        sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    return SQLITE_OK;
}

int kd__sql_fail(kd_catalog *cat, const char *what)
{
    int code = sqlite3_errcode(cat->db);
    if (code == SQLITE_FULL || code == SQLITE_IOERR)
        cat->full = 1;
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
            cat->used[i / 64] |= 1ull << (i % 64);
            cat->any_used = 1;
            return cat->cache[i].st;
        }
    }
    if (i == STMT_CACHE) {
        kestrel__error_set(KESTREL_EIO, "catalog: more than %d distinct statements", STMT_CACHE);
        return NULL;
    }
    if (sqlite3_prepare_v3(cat->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &cat->cache[i].st, NULL) != SQLITE_OK) {
        kd__sql_fail(cat, "prepare");
        return NULL;
    }
    cat->cache[i].sql = sql;
    cat->used[i / 64] |= 1ull << (i % 64);
    cat->any_used = 1;
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

static int vrun(kd_catalog *cat, int *changes, const char *sql, const char *types, va_list ap)
{
    sqlite3_stmt *st;
    int rc = 0;
    kd__lock(cat);
    st = prepare(cat, sql, types, ap);
    if (st == NULL)
        rc = KESTREL_EIO;
    else if (sqlite3_step(st) != SQLITE_DONE)
        rc = kd__sql_fail(cat, "write");
    else if (changes)
        *changes = sqlite3_changes(cat->db);
    kd__unlock(cat);
    return rc;
}

int kd__run(kd_catalog *cat, const char *sql, const char *types, ...)
{
    va_list ap;
    int rc;
    va_start(ap, types);
    rc = vrun(cat, NULL, sql, types, ap);
    va_end(ap);
    return rc;
}

int kd__run_changes(kd_catalog *cat, int *changes, const char *sql, const char *types, ...)
{
    va_list ap;
    int rc;
    va_start(ap, types);
    rc = vrun(cat, changes, sql, types, ap);
    va_end(ap);
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

/* Migrations, keyed by PRAGMA user_version: each step takes a catalog of the version before it to
 * its own, in one transaction. A catalog of a newer kestreld than this one is refused. */
static const char *const migrations[] = {
    /* 1: ext_id, the job's id in an external cluster (Slurm); a catalog of the first wave may have it */
    NULL,
    /* 2: tokens that expire, are revoked and have a scope; who may read a model */
    "ALTER TABLE tokens ADD COLUMN scope INTEGER NOT NULL DEFAULT 2;"
    "ALTER TABLE tokens ADD COLUMN created_ms INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE tokens ADD COLUMN expires_ms INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE tokens ADD COLUMN revoked_ms INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE tokens ADD COLUMN name TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE tokens ADD COLUMN hint TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE tokens ADD COLUMN parent_id INTEGER NOT NULL DEFAULT 0;"
    "UPDATE tokens SET scope = 3 WHERE job_id = 0 AND user_id IN (SELECT id FROM users WHERE is_admin = 1);"
    "CREATE INDEX IF NOT EXISTS tokens_user ON tokens(user_id, id);"
    "CREATE INDEX IF NOT EXISTS jobs_owner_state ON jobs(owner_id, state);"   /* --max-queued at submit */
    "CREATE TABLE IF NOT EXISTS model_acl(name TEXT PRIMARY KEY, visibility INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS log_stats(job_id INTEGER PRIMARY KEY, bytes INTEGER NOT NULL DEFAULT 0,"
    "  head_seq INTEGER NOT NULL DEFAULT -1, dropped INTEGER NOT NULL DEFAULT 0);"
    "INSERT OR IGNORE INTO log_stats(job_id, bytes) SELECT job_id, SUM(length(text) + 1) FROM logs GROUP BY job_id;",
    /* 3: a job's parameters (--param), for listings filtered by them */
    "CREATE TABLE IF NOT EXISTS job_params(job_id INTEGER NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,"
    "  PRIMARY KEY(job_id, key)) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS job_params_kv ON job_params(key, value);",
    /* 4: the environment a job ran in and its packages */
    "ALTER TABLE jobs ADD COLUMN env_digest TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE jobs ADD COLUMN env_packages TEXT NOT NULL DEFAULT '';",
    /* 5: the pool as a column (jobs by pool on /metrics); every log line in a trigram full-text
     * index for substring search (contentless, detail=none: the text stays in logs only, a search
     * checks its candidates there). A line's rowid there is job_id << 36 | seq. Lines are indexed
     * in batches off the write path (an FTS5 insert costs ~15 us a line, the append ~3): the add
     * trigger queues a line in log_pending, kestreld's indexer moves the queue into log_fts, and
     * the delete trigger takes a line out of whichever holds it. */
    "ALTER TABLE jobs ADD COLUMN pool TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE jobs ADD COLUMN retries INTEGER NOT NULL DEFAULT 0;"
    "UPDATE jobs SET pool = kd_spec_pool(spec);"
    "CREATE INDEX IF NOT EXISTS jobs_state_pool ON jobs(state, pool, priority);"
    "CREATE VIRTUAL TABLE IF NOT EXISTS log_fts USING fts5(text, content='', tokenize='trigram', detail=none);"
    "CREATE TABLE IF NOT EXISTS log_pending(k INTEGER PRIMARY KEY);"
    "INSERT OR IGNORE INTO log_pending(k) SELECT job_id * 68719476736 + seq FROM logs;"
    "CREATE TRIGGER IF NOT EXISTS logs_fts_add AFTER INSERT ON logs BEGIN"
    "  INSERT OR IGNORE INTO log_pending(k) VALUES(new.job_id * 68719476736 + new.seq); END;"
    "CREATE TRIGGER IF NOT EXISTS logs_fts_del AFTER DELETE ON logs BEGIN"
    "  INSERT INTO log_fts(log_fts, rowid, text) SELECT 'delete', old.job_id * 68719476736 + old.seq, old.text"
    "    WHERE NOT EXISTS(SELECT 1 FROM log_pending WHERE k = old.job_id * 68719476736 + old.seq);"
    "  DELETE FROM log_pending WHERE k = old.job_id * 68719476736 + old.seq;"
    " END;"
    /* ... and each job's use of real GPUs: a downsampled series and exact totals */
    "CREATE TABLE IF NOT EXISTS gpu_samples(job_id INTEGER NOT NULL, time_ms INTEGER NOT NULL, uuid TEXT NOT NULL,"
    "  util INTEGER NOT NULL, mem_used INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS gpu_samples_job ON gpu_samples(job_id, time_ms);"
    "CREATE TABLE IF NOT EXISTS gpu_usage(job_id INTEGER NOT NULL, uuid TEXT NOT NULL, samples INTEGER NOT NULL,"
    "  util_sum INTEGER NOT NULL, util_max INTEGER NOT NULL, mem_peak INTEGER NOT NULL,"
    "  PRIMARY KEY(job_id, uuid)) WITHOUT ROWID;"
    /* ... and kestreld's own alerts (log policies, NaN loss, idle GPUs), with their webhook delivery */
    "CREATE TABLE IF NOT EXISTS alerts(id INTEGER PRIMARY KEY, time_ms INTEGER NOT NULL, job_id INTEGER NOT NULL,"
    "  owner_id INTEGER NOT NULL, kind TEXT NOT NULL, severity TEXT NOT NULL, message TEXT NOT NULL,"
    "  delivered INTEGER NOT NULL DEFAULT 0, attempts INTEGER NOT NULL DEFAULT 0, next_ms INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX IF NOT EXISTS alerts_owner ON alerts(owner_id, id);"
    "CREATE INDEX IF NOT EXISTS alerts_pending ON alerts(delivered, next_ms);",
    /* 6: each metric series' size and a view of at most 2,000 of its points, for charts (the view's
     * rows are filled by kd__metric_view_build, in the same transaction) */
    "CREATE TABLE IF NOT EXISTS metric_series(job_id INTEGER NOT NULL, name TEXT NOT NULL, n INTEGER NOT NULL,"
    "  n_view INTEGER NOT NULL, stride INTEGER NOT NULL, PRIMARY KEY(job_id, name)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS metric_view(job_id INTEGER NOT NULL, name TEXT NOT NULL, k INTEGER NOT NULL,"
    "  step INTEGER NOT NULL, value, wall_ms INTEGER NOT NULL, PRIMARY KEY(job_id, name, k)) WITHOUT ROWID;"
    /* ... and which versions each job pushed, from now on (the job page's list) */
    "CREATE TABLE IF NOT EXISTS model_lineage(job_id INTEGER NOT NULL, name TEXT NOT NULL, version INTEGER NOT NULL,"
    "  PRIMARY KEY(job_id, name, version)) WITHOUT ROWID;",
    /* 7: how far a followed output file (a Slurm job's slurm.out, slurm.err) was read, kept with the
     * lines read from it (-1: not known, the lines' byte count is used, as before) */
    "ALTER TABLE log_stats ADD COLUMN src_out INTEGER NOT NULL DEFAULT -1;"
    "ALTER TABLE log_stats ADD COLUMN src_err INTEGER NOT NULL DEFAULT -1;"
    /* ... and each job's log budget counted as catalog_logs.c counts it now (a line's bytes and 48):
     * counted in bytes alone, a log an older kestreld had already cut stayed short of its true cost for
     * good, its count falling as old lines went at their new cost (a review) */
    "UPDATE log_stats SET bytes = (SELECT COALESCE(SUM(length(CAST(text AS BLOB)) + 48"
    "  + 6 * (length(CAST(text AS BLOB)) - length(text))), 0) FROM logs WHERE logs.job_id = log_stats.job_id);"
    /* ... and each user's queued jobs in queue order, for the scheduler's window (kd_catalog_queue) */
    "CREATE INDEX IF NOT EXISTS jobs_queue_owner ON jobs(state, ext_id, owner_id, priority DESC, submit_ms, id);",
};

/* The catalog's PRAGMA user_version into *version: 0, or < 0 when it is newer than this kestreld
 * knows. Read at the open, before the schema, the journal mode and the reserve are written: a newer
 * catalog's tables are left as they were (a hostile test: its dropped tables came back, or the schema
 * failed on a column it lacks; SQLite may still make its -wal and -shm files to read it). */
static int catalog_version(kd_catalog *cat, const char *path, int *version)
{
    sqlite3_stmt *st;
    int target = (int)KESTREL__ARRAY_SIZE(migrations);
    *version = 0;
    if (sqlite3_prepare_v2(cat->db, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK)
        return kd__sql_fail(cat, "user_version");
    if (sqlite3_step(st) == SQLITE_ROW)
        *version = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    if (*version > target)
        return kestrel__error_set(KESTREL_EIO, "catalog %s is version %d, newer than this kestreld knows (%d): "
                                  "run the newer kestreld", path, *version, target);
    return 0;
}

static int migrate(kd_catalog *cat, const char *path)
{
    int version, target = (int)KESTREL__ARRAY_SIZE(migrations);
    if (catalog_version(cat, path, &version) < 0)
        return KESTREL_EIO;
    for (int v = version + 1; v <= target; v++) {
        char bump[64];
        snprintf(bump, sizeof(bump), "PRAGMA user_version = %d;", v);
        if (kd__exec(cat, "BEGIN IMMEDIATE") < 0)
            return KESTREL_EIO;
        if (v == 1) {
            if (sqlite3_exec(cat->db, "SELECT ext_id FROM jobs LIMIT 0", NULL, NULL, NULL) != SQLITE_OK &&
                kd__exec(cat, "ALTER TABLE jobs ADD COLUMN ext_id TEXT NOT NULL DEFAULT ''") < 0)
                goto fail;
        } else if (kd__exec(cat, migrations[v - 1]) < 0 || (v == 6 && kd__metric_view_build(cat) < 0)) {
            goto fail;
        }
        if (kd__exec(cat, bump) < 0 || kd__exec(cat, "COMMIT") < 0)
            goto fail;
        continue;
    fail:
        sqlite3_exec(cat->db, "ROLLBACK", NULL, NULL, NULL);
        return kestrel__error_set(KESTREL_EIO, "catalog %s: migration to version %d failed: %s", path, v,
                                  kestrel_error_last()->message);
    }
    return 0;
}

int kd_catalog_open(kd_catalog **out, const char *path)
{
    kd_catalog *cat = calloc(1, sizeof(*cat));
    if (cat == NULL)
        return kestrel__error_oom();
    pthread_mutex_init(&cat->mu, NULL);
    snprintf(cat->path, sizeof(cat->path), "%s", path);
    if (sqlite3_open_v2(path, &cat->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL)
        != SQLITE_OK) {
        int rc = kestrel__error_set(KESTREL_EIO, "cannot open catalog %s: %s", path,
                                    cat->db ? sqlite3_errmsg(cat->db) : "out of memory");
        sqlite3_close(cat->db);
        free(cat);
        return rc;
    }
    sqlite3_busy_timeout(cat->db, BUSY_MS);
    if (kd__register_functions(cat->db) < 0) {
        int rc = kestrel__error_set(KESTREL_EIO, "catalog %s: %s", path, sqlite3_errmsg(cat->db));
        sqlite3_close(cat->db);
        free(cat);
        return rc;
    }
    {
        int version;
        if (catalog_version(cat, path, &version) < 0) {
            sqlite3_close(cat->db);
            free(cat);
            return KESTREL_EIO;
        }
    }
    reserve_make(cat, path);
    sqlite3_wal_hook(cat->db, wal_hook, cat);
    if (kd__exec(cat, schema) < 0) {
        kd_catalog_close(cat);
        return KESTREL_EIO;
    }
    if (migrate(cat, path) < 0) {
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

int kd_catalog_backup(kd_catalog *cat, const char *path)
{
    sqlite3 *dst = NULL;
    sqlite3_backup *b;
    int rc = 0;
    if (sqlite3_open_v2(path, &dst, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK) {
        rc = kestrel__error_set(KESTREL_EIO, "cannot create %s: %s", path, dst ? sqlite3_errmsg(dst) : "no memory");
        sqlite3_close(dst);
        return rc;
    }
    kd__lock(cat);   /* one step under the lock: a consistent image, writers wait (a catalog is MBs) */
    if ((b = sqlite3_backup_init(dst, "main", cat->db, "main")) == NULL) {
        rc = kestrel__error_set(KESTREL_EIO, "catalog backup: %s", sqlite3_errmsg(dst));
    } else {
        int step = sqlite3_backup_step(b, -1);
        sqlite3_backup_finish(b);
        if (step != SQLITE_DONE)
            rc = kestrel__error_set(KESTREL_EIO, "catalog backup: %s", sqlite3_errstr(step));
    }
    kd__unlock(cat);
    if (rc == 0 && sqlite3_exec(dst, "PRAGMA journal_mode=WAL; PRAGMA wal_checkpoint(TRUNCATE);", NULL, NULL, NULL)
                       != SQLITE_OK)
        rc = kestrel__error_set(KESTREL_EIO, "catalog backup: %s", sqlite3_errmsg(dst));
    sqlite3_close(dst);
    return rc;
}

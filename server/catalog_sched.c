/* server/catalog_sched.c - what the scheduler reads from the catalog, and queue edits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>
#include "catalog.h"
#include "sched_plan.h"

void kd_queued_free(kd_queued *q, size_t n)
{
    for (size_t i = 0; q && i < n; i++)
        if (q[i].spec)
            protobuf_c_message_free_unpacked(&q[i].spec->base, NULL);
    free(q);
}

static int queued_row(sqlite3_stmt *st, void *row)
{
    kd_queued *q = row;
    q->id = sqlite3_column_int64(st, 0);
    q->priority = sqlite3_column_int(st, 1);
    q->submit_ms = sqlite3_column_int64(st, 2);
    q->owner_id = sqlite3_column_int64(st, 3);
    snprintf(q->owner, sizeof(q->owner), "%s", (const char *)sqlite3_column_text(st, 4));
    snprintf(q->team, sizeof(q->team), "%s", (const char *)sqlite3_column_text(st, 5));
    q->restart_count = sqlite3_column_int(st, 7);
    q->spec = kestrel__v1__job_spec__unpack(NULL, (size_t)sqlite3_column_bytes(st, 6), sqlite3_column_blob(st, 6));
    if (q->spec == NULL)
        return kestrel__error_set(KESTREL_EIO, "catalog: job %lld has an unreadable spec", (long long)q->id);
    return 0;
}

/* The window holds each user's first 64 jobs (in queue order), taken round-robin (every user's
 * first, then every user's second, ...), then the queue's first jobs up to limit; handed over in
 * queue order. Only the queue's first jobs it was: one user's 1,000 jobs that could never start (an
 * unknown pool) kept every other user's jobs of their class out of every pass (a hostile test), and
 * with 64 a user (not round-robin) 16 users could still (a review). Each user's jobs come from the
 * index jobs_queue_owner: 4 ms for 50,000 queued of 3 users, 45 ms for 200,000 of 200. */
int kd_catalog_queue(kd_catalog *cat, size_t limit, kd_queued **out, size_t *n)
{
    static const char *const sql =
        "WITH fair AS (SELECT k.id, k.owner_id, k.priority, k.submit_ms FROM users u JOIN jobs k ON k.id IN (SELECT id"
        "   FROM jobs WHERE state = 1 AND ext_id = '' AND owner_id = u.id ORDER BY priority DESC, submit_ms, id LIMIT 64)),"
        " ranked AS (SELECT id, ROW_NUMBER() OVER (PARTITION BY owner_id ORDER BY priority DESC, submit_ms, id) AS rn"
        "   FROM fair),"
        " top AS (SELECT id FROM jobs WHERE state = 1 AND ext_id = '' ORDER BY priority DESC, submit_ms, id LIMIT ?1),"
        " w AS (SELECT id, 0 AS tier, rn FROM ranked UNION ALL SELECT id, 1, 0 FROM top WHERE id NOT IN (SELECT id FROM fair))"
        "SELECT j.id, j.priority, j.submit_ms, j.owner_id, u.name, j.team, j.spec, j.restart_count FROM"
        " (SELECT w.id FROM w JOIN jobs x ON x.id = w.id ORDER BY w.tier, w.rn, x.priority DESC, x.submit_ms, x.id"
        "  LIMIT ?1) v"
        " JOIN jobs j ON j.id = v.id JOIN users u ON u.id = j.owner_id ORDER BY j.priority DESC, j.submit_ms, j.id";
    void *rows = NULL;
    int rc = kd__rows(cat, sql, sizeof(**out), queued_row, &rows, n, "i", (int64_t)limit);
    *out = rows;
    if (rc < 0) {
        kd_queued_free(*out, *n);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

int kd_catalog_refs(kd_catalog *cat, const int64_t *ids, size_t n, kd_catref *out, size_t *found)
{
    static const char *const sql = "SELECT state, node FROM jobs WHERE id = ?";
    int rc = 0;
    *found = 0;
    kd__lock(cat);
    for (size_t i = 0; i < n; i++) {
        sqlite3_stmt *st = kd__stmt(cat, sql);
        if (st == NULL) {
            rc = KESTREL_EIO;
            break;
        }
        sqlite3_bind_int64(st, 1, ids[i]);
        if (sqlite3_step(st) == SQLITE_ROW) {
            kd_catref *r = &out[(*found)++];
            r->id = ids[i];
            r->state = sqlite3_column_int(st, 0);
            snprintf(r->node, sizeof(r->node), "%s", (const char *)sqlite3_column_text(st, 1));
        }
    }
    kd__unlock(cat);
    return rc;
}

int kd_catalog_group_node(kd_catalog *cat, int64_t owner, const char *group, char *node, size_t len)
{
    static const char *const sql =
        "SELECT node FROM jobs WHERE grp = ? AND owner_id = ? AND node != '' ORDER BY start_ms DESC, id DESC LIMIT 1";
    sqlite3_stmt *st;
    int rc;
    kd__lock(cat);
    if ((st = kd__stmt(cat, sql)) == NULL) {
        rc = KESTREL_EIO;
    } else {
        sqlite3_bind_text(st, 1, group, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, owner);
        if (sqlite3_step(st) == SQLITE_ROW) {
            snprintf(node, len, "%s", (const char *)sqlite3_column_text(st, 0));
            rc = 0;
        } else {
            rc = KESTREL_ENOTFOUND;
        }
    }
    kd__unlock(cat);
    return rc;
}

int kd_catalog_job_note(kd_catalog *cat, int64_t id, int64_t now_ms, const char *reason)
{
    return kd__run(cat, "INSERT INTO job_events(job_id, time_ms, from_state, to_state, reason)"
                        " SELECT id, ?, state, state, ? FROM jobs WHERE id = ?",
                   "iti", now_ms, reason, id);
}

int kd_catalog_job_checkpoint(kd_catalog *cat, int64_t id, int64_t now_ms, int note)
{
    int changed = 0;
    int rc = kd__run_changes(cat, &changed, "UPDATE jobs SET checkpoint_ms = ? WHERE id = ? AND state = 2", "ii",
                             now_ms, id);
    if (rc == 0 && changed == 0)
        return kestrel__error_set(KESTREL_EEXISTS, "job %lld is not running: it has no checkpoint to acknowledge",
                                  (long long)id);
    /* one event for acknowledgements in a row: a loop of them added a row each, 3,000 a second, and
     * filled the data disk (a hostile test) */
    if (rc == 0 && note)
        rc = kd__run(cat, "INSERT INTO job_events(job_id, time_ms, from_state, to_state, reason)"
                          " SELECT id, ?1, state, state, 'checkpoint acknowledged' FROM jobs WHERE id = ?2"
                          " AND NOT EXISTS (SELECT 1 FROM job_events WHERE id = (SELECT MAX(id) FROM job_events"
                          " WHERE job_id = ?2) AND reason = 'checkpoint acknowledged')", "ii", now_ms, id);
    return rc;
}

int kd_catalog_job_set_priority(kd_catalog *cat, int64_t id, int priority, int64_t now_ms)
{
    static const char *const sel = "SELECT state, spec FROM jobs WHERE id = ?";
    static const char *const upd = "UPDATE jobs SET priority = ?, spec = ? WHERE id = ?";
    static const char *const ev =
        "INSERT INTO job_events(job_id, time_ms, from_state, to_state, reason) VALUES(?, ?, 1, 1, ?)";
    Kestrel__V1__JobSpec *spec = NULL;
    kestrel_buf blob = KESTREL_BUF_INIT;
    sqlite3_stmt *st;
    char reason[64];
    int rc;
    kd__lock(cat);
    if ((rc = kd__exec(cat, "BEGIN IMMEDIATE")) < 0)
        goto out;
    if ((st = kd__stmt(cat, sel)) == NULL)
        goto fail;
    sqlite3_bind_int64(st, 1, id);
    if (sqlite3_step(st) != SQLITE_ROW) {
        rc = kestrel__error_set(KESTREL_ENOTFOUND, "job %lld not found", (long long)id);
        goto rollback;
    }
    if (sqlite3_column_int(st, 0) != 1) {
        rc = 1;
        goto rollback;
    }
    spec = kestrel__v1__job_spec__unpack(NULL, (size_t)sqlite3_column_bytes(st, 1), sqlite3_column_blob(st, 1));
    if (spec == NULL)
        goto fail;
    if ((int)spec->priority == priority ||
        (spec->priority == KESTREL__V1__PRIORITY__PRIORITY_UNSPECIFIED && priority == KESTREL_PRIORITY_NORMAL)) {
        /* so already: no event */
        rc = 0;
        goto rollback;
    }
    spec->priority = (Kestrel__V1__Priority)priority;
    if ((rc = kestrel__wire_pack(&blob, &spec->base)) < 0)
        goto rollback;
    if ((st = kd__stmt(cat, upd)) == NULL)
        goto fail;
    sqlite3_bind_int(st, 1, priority);
    sqlite3_bind_blob(st, 2, blob.ptr, (int)blob.size, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, id);
    if (sqlite3_step(st) != SQLITE_DONE)
        goto fail;
    if ((st = kd__stmt(cat, ev)) == NULL)
        goto fail;
    snprintf(reason, sizeof(reason), "priority changed to %s", kd_priority_name(priority));
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_int64(st, 2, now_ms);
    sqlite3_bind_text(st, 3, reason, -1, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_DONE)
        goto fail;
    if ((rc = kd__exec(cat, "COMMIT")) == 0)
        goto out;
fail:
    rc = kd__sql_fail(cat, "set priority");
rollback:
    sqlite3_exec(kd__db(cat), "ROLLBACK", NULL, NULL, NULL);
out:
    kd__unlock(cat);
    if (spec)
        protobuf_c_message_free_unpacked(&spec->base, NULL);
    kestrel_buf_dispose(&blob);
    return rc;
}

int kd_catalog_job_set_ext(kd_catalog *cat, int64_t id, const char *ext_id)
{
    static const char *const sql = "UPDATE jobs SET ext_id = ? WHERE id = ? AND state = 1 AND ext_id = ''";
    sqlite3_stmt *st;
    int rc;
    kd__lock(cat);
    if ((st = kd__stmt(cat, sql)) == NULL) {
        kd__unlock(cat);
        return KESTREL_EIO;
    }
    sqlite3_bind_text(st, 1, ext_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, id);
    rc = sqlite3_step(st) == SQLITE_DONE ? (sqlite3_changes(kd__db(cat)) ? 0 : 1) : kd__sql_fail(cat, "set ext id");
    sqlite3_reset(st);
    kd__unlock(cat);
    return rc;
}

static int ext_row(sqlite3_stmt *st, void *row)
{
    kd_ext_row *r = row;
    r->id = sqlite3_column_int64(st, 0);
    snprintf(r->ext_id, sizeof(r->ext_id), "%s", (const char *)sqlite3_column_text(st, 1));
    r->state = sqlite3_column_int(st, 2);
    r->priority = sqlite3_column_int(st, 3);
    r->restart_count = sqlite3_column_int(st, 4);
    return 0;
}

int kd_catalog_ext_jobs(kd_catalog *cat, kd_ext_row **out, size_t *n)
{
    static const char *const sql =
        "SELECT id, ext_id, state, priority, restart_count FROM jobs WHERE ext_id != '' AND state IN (1, 2, 6)"
        " ORDER BY id";
    void *rows = NULL;
    int rc = kd__rows(cat, sql, sizeof(**out), ext_row, &rows, n, "");
    *out = rows;
    if (rc < 0) {
        free(rows);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

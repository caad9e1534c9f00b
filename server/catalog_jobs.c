/* server/catalog_jobs.c - jobs, labels and state-transition events in the catalog. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>
#include "catalog.h"

#define FINAL_STATES "(3,4,5)"

static int load_locked(kd_catalog *cat, int64_t id, int with_events, Kestrel__V1__Job **out, int64_t *owner_out);

/* Rows (id, key, value) of a job's labels or params (catalog lock held, in a transaction). */
static int put_pairs(kd_catalog *cat, const char *sql, int64_t id, Kestrel__V1__KeyValue *const *kv, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        sqlite3_stmt *st = kd__stmt(cat, sql);
        if (st == NULL)
            return -1;
        sqlite3_bind_int64(st, 1, id);
        sqlite3_bind_text(st, 2, kv[i]->key, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, kv[i]->value, -1, SQLITE_STATIC);
        if (sqlite3_step(st) != SQLITE_DONE)
            return -1;
    }
    return 0;
}

int kd_catalog_job_insert(kd_catalog *cat, int64_t owner_id, const Kestrel__V1__JobSpec *spec, int64_t now,
                          int64_t *id_out, Kestrel__V1__Job **job_out)
{
    static const char *const ins =
        "INSERT INTO jobs(owner_id, name, spec, priority, gpus, no_retry, state, submit_ms, reason, grp, team, pool)"
        " VALUES(?1, ?2, ?3, ?4, ?5, ?6, 1, ?7, 'submitted', ?8, (SELECT team FROM users WHERE id = ?1), ?9)";
    static const char *const lab = "INSERT OR REPLACE INTO job_labels(job_id, key, value) VALUES(?, ?, ?)";
    static const char *const par = "INSERT OR REPLACE INTO job_params(job_id, key, value) VALUES(?, ?, ?)";
    static const char *const ev =
        "INSERT INTO job_events(job_id, time_ms, from_state, to_state, reason) VALUES(?, ?, 0, 1, 'submitted')";
    kestrel_buf blob = KESTREL_BUF_INIT;
    sqlite3_stmt *st;
    int64_t id;
    int rc;

    if ((rc = kestrel__wire_pack(&blob, &spec->base)) < 0)
        return rc;
    kd__lock(cat);
    if ((rc = kd__exec(cat, "BEGIN IMMEDIATE")) < 0)
        goto out;
    if ((st = kd__stmt(cat, ins)) == NULL)
        goto fail;
    sqlite3_bind_int64(st, 1, owner_id);
    sqlite3_bind_text(st, 2, spec->name, -1, SQLITE_STATIC);
    sqlite3_bind_blob(st, 3, blob.ptr ? blob.ptr : "", (int)blob.size, SQLITE_STATIC);
    sqlite3_bind_int(st, 4, spec->priority ? (int)spec->priority : 1);
    sqlite3_bind_int(st, 5, spec->gpus);
    sqlite3_bind_int(st, 6, spec->no_retry);
    sqlite3_bind_int64(st, 7, now);
    sqlite3_bind_text(st, 8, spec->group, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 9, spec->pool, -1, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_DONE)
        goto fail;
    id = sqlite3_last_insert_rowid(kd__db(cat));
    if (put_pairs(cat, lab, id, spec->labels, spec->n_labels) < 0 ||
        put_pairs(cat, par, id, spec->params, spec->n_params) < 0)
        goto fail;
    if ((st = kd__stmt(cat, ev)) == NULL)
        goto fail;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_int64(st, 2, now);
    if (sqlite3_step(st) != SQLITE_DONE)
        goto fail;
    if ((rc = kd__exec(cat, "COMMIT")) < 0)
        goto fail_rolled;
    *id_out = id;
    if (job_out)   /* as committed: no scheduler pass can run before the lock is released */
        rc = load_locked(cat, id, 1, job_out, NULL);
    goto out;
fail:
    rc = kd__sql_fail(cat, "insert job");
fail_rolled:
    sqlite3_exec(kd__db(cat), "ROLLBACK", NULL, NULL, NULL);
out:
    kd__unlock(cat);
    kestrel_buf_dispose(&blob);
    return rc;
}

#define JOB_COLUMNS \
    "j.id, u.name, j.spec, j.state, j.exit_code, j.reason, j.submit_ms, j.start_ms, j.end_ms," \
    " j.git_commit, j.devices, j.restart_count, j.owner_id, j.node, j.checkpoint_ms, j.team,"           \
    " j.env_digest, j.env_packages"                                                                    \
    " FROM jobs j JOIN users u ON u.id = j.owner_id"

static char *col_dup(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    return kestrel__strdup(t ? (const char *)t : "");
}

/* Build a Job message from a row of JOB_COLUMNS (all members malloc'd: free_unpacked frees it). */
static Kestrel__V1__Job *row_to_job(sqlite3_stmt *st)
{
    Kestrel__V1__Job *j = malloc(sizeof(*j));
    const char *dev;
    if (j == NULL)
        return NULL;
    kestrel__v1__job__init(j);
    j->id = sqlite3_column_int64(st, 0);
    j->owner = col_dup(st, 1);
    j->spec = kestrel__v1__job_spec__unpack(NULL, (size_t)sqlite3_column_bytes(st, 2), sqlite3_column_blob(st, 2));
    j->state = (Kestrel__V1__JobState)sqlite3_column_int(st, 3);
    j->exit_code = sqlite3_column_int(st, 4);
    j->reason = col_dup(st, 5);
    j->submit_time_ms = sqlite3_column_int64(st, 6);
    j->start_time_ms = sqlite3_column_int64(st, 7);
    j->end_time_ms = sqlite3_column_int64(st, 8);
    j->git_commit = col_dup(st, 9);
    j->restart_count = sqlite3_column_int(st, 11);
    j->node = col_dup(st, 13);
    j->checkpoint_time_ms = sqlite3_column_int64(st, 14);
    j->team = col_dup(st, 15);
    j->environment = col_dup(st, 16);
    j->packages = col_dup(st, 17);
    dev = (const char *)sqlite3_column_text(st, 10);
    if (dev && *dev) {
        size_t n = 1;
        for (const char *p = dev; *p; p++)
            n += *p == ',';
        if ((j->devices = calloc(n, sizeof(char *))) != NULL) {
            const char *p = dev;
            for (size_t k = 0; k < n; k++) {
                const char *e = strchr(p, ',');
                size_t len = e ? (size_t)(e - p) : strlen(p);
                if ((j->devices[k] = malloc(len + 1)) == NULL)
                    break;
                memcpy(j->devices[k], p, len);
                j->devices[k][len] = '\0';
                j->n_devices = k + 1;
                p = e ? e + 1 : p + len;
            }
        }
    }
    if (!j->owner || !j->reason || !j->git_commit || !j->spec || !j->node || !j->team || !j->environment ||
        !j->packages || (dev && *dev && !j->n_devices)) {
        protobuf_c_message_free_unpacked(&j->base, NULL);
        return NULL;
    }
    return j;
}

static int load_events(kd_catalog *cat, Kestrel__V1__Job *j)
{
    static const char *const sql =
        "SELECT time_ms, from_state, to_state, reason FROM job_events WHERE job_id = ? ORDER BY id";
    sqlite3_stmt *st = kd__stmt(cat, sql);
    size_t cap = 0;
    if (st == NULL)
        return KESTREL_EIO;
    sqlite3_bind_int64(st, 1, j->id);
    while (sqlite3_step(st) == SQLITE_ROW) {
        Kestrel__V1__JobEvent *e;
        if (j->n_events == cap) {
            size_t ncap = cap ? cap * 2 : 8;
            Kestrel__V1__JobEvent **p = realloc(j->events, ncap * sizeof(*p));
            if (p == NULL)
                return kestrel__error_oom();
            j->events = p;
            cap = ncap;
        }
        if ((e = malloc(sizeof(*e))) == NULL)
            return kestrel__error_oom();
        kestrel__v1__job_event__init(e);
        e->time_ms = sqlite3_column_int64(st, 0);
        e->from_state = (Kestrel__V1__JobState)sqlite3_column_int(st, 1);
        e->to_state = (Kestrel__V1__JobState)sqlite3_column_int(st, 2);
        j->events[j->n_events++] = e;
        if ((e->reason = col_dup(st, 3)) == NULL)
            return kestrel__error_oom();
    }
    return 0;
}

/* Load a job with the lock held. */
static int load_locked(kd_catalog *cat, int64_t id, int with_events, Kestrel__V1__Job **out, int64_t *owner_out)
{
    static const char *const sql = "SELECT " JOB_COLUMNS " WHERE j.id = ?";
    sqlite3_stmt *st;
    int rc = 0;
    *out = NULL;
    if ((st = kd__stmt(cat, sql)) == NULL)
        return KESTREL_EIO;
    sqlite3_bind_int64(st, 1, id);
    if (sqlite3_step(st) != SQLITE_ROW)
        return kestrel__error_set(KESTREL_ENOTFOUND, "job %lld not found", (long long)id);
    if (owner_out)
        *owner_out = sqlite3_column_int64(st, 12);
    if ((*out = row_to_job(st)) == NULL)
        return kestrel__error_oom();
    if (with_events && ((rc = load_events(cat, *out)) < 0 ||
                        (rc = kd__load_gpu_usage(cat, id, &(*out)->gpu_usage, &(*out)->n_gpu_usage)) < 0)) {
        protobuf_c_message_free_unpacked(&(*out)->base, NULL);
        *out = NULL;
    }
    return rc;
}

int kd_catalog_job_load(kd_catalog *cat, int64_t id, int with_events, Kestrel__V1__Job **out, int64_t *owner_out)
{
    int rc;
    kd__lock(cat);
    rc = load_locked(cat, id, with_events, out, owner_out);
    kd__unlock(cat);
    return rc;
}

int kd_catalog_job_state(kd_catalog *cat, int64_t id, int *state_out)
{
    static const char *const sql = "SELECT state FROM jobs WHERE id = ?";
    sqlite3_stmt *st;
    int rc = 0;
    kd__lock(cat);
    if ((st = kd__stmt(cat, sql)) == NULL) {
        rc = KESTREL_EIO;
    } else {
        sqlite3_bind_int64(st, 1, id);
        if (sqlite3_step(st) == SQLITE_ROW)
            *state_out = sqlite3_column_int(st, 0);
        else
            rc = kestrel__error_set(KESTREL_ENOTFOUND, "job %lld not found", (long long)id);
    }
    kd__unlock(cat);
    return rc;
}

int kd_catalog_job_list(kd_catalog *cat, const kd_job_filter *f, Kestrel__V1__JobList **out)
{
    static const char *const sql =
        "SELECT " JOB_COLUMNS " WHERE (?1 = 0 OR j.owner_id = ?1) AND (?2 = 0 OR j.state = ?2)"
        " AND (?3 IS NULL OR j.name = ?3) AND (?6 = 0 OR j.id < ?6)"
        " AND (?4 IS NULL OR EXISTS(SELECT 1 FROM job_labels l WHERE l.job_id = j.id AND l.key = ?4 AND l.value = ?5))"
        " AND (?8 IS NULL OR EXISTS(SELECT 1 FROM job_params p WHERE p.job_id = j.id AND p.key = ?8 AND p.value = ?9))"
        " ORDER BY j.id DESC LIMIT ?7";
    Kestrel__V1__JobList *list = malloc(sizeof(*list));
    sqlite3_stmt *st;
    int rc = 0, limit = f->limit;
    size_t bytes = 0;
    if (list == NULL)
        return kestrel__error_oom();
    kestrel__v1__job_list__init(list);
    if ((list->jobs = calloc((size_t)limit + 1, sizeof(*list->jobs))) == NULL) {
        free(list);
        return kestrel__error_oom();
    }
    kd__lock(cat);
    if ((st = kd__stmt(cat, sql)) == NULL) {
        rc = KESTREL_EIO;
        goto out;
    }
    sqlite3_bind_int64(st, 1, f->owner_id);
    sqlite3_bind_int(st, 2, f->state);
    if (f->name)
        sqlite3_bind_text(st, 3, f->name, -1, SQLITE_STATIC);
    if (f->label_key) {
        sqlite3_bind_text(st, 4, f->label_key, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 5, f->label_value, -1, SQLITE_STATIC);
    }
    if (f->param_key) {
        sqlite3_bind_text(st, 8, f->param_key, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 9, f->param_value, -1, SQLITE_STATIC);
    }
    sqlite3_bind_int64(st, 6, f->before_id);
    sqlite3_bind_int(st, 7, limit + 1);   /* one more tells whether there is a next page */
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        /* a page ends at its size or at KD_LIST_MAX_BYTES of specs, whichever comes first */
        if (list->n_jobs == (size_t)limit || bytes > KD_LIST_MAX_BYTES) {
            char tok[32];
            snprintf(tok, sizeof(tok), "%lld", (long long)list->jobs[list->n_jobs - 1]->id);
            list->next_page_token = kestrel__strdup(tok);
            break;
        }
        bytes += (size_t)sqlite3_column_bytes(st, 2);   /* the packed spec */
        if ((list->jobs[list->n_jobs] = row_to_job(st)) == NULL) {
            rc = kestrel__error_oom();
            goto out;
        }
        list->n_jobs++;
    }
    rc = (rc == SQLITE_ROW || rc == SQLITE_DONE) ? 0 : kd__sql_fail(cat, "list jobs");
out:
    kd__unlock(cat);
    if (rc < 0) {
        protobuf_c_message_free_unpacked(&list->base, NULL);
        return rc;
    }
    if (list->next_page_token == NULL)
        list->next_page_token = (char *)protobuf_c_empty_string;
    *out = list;
    return 0;
}

static int job_row(sqlite3_stmt *st, void *row)
{
    kd_job_row *r = row;
    r->id = sqlite3_column_int64(st, 0);
    r->priority = sqlite3_column_int(st, 1);
    r->gpus = sqlite3_column_int(st, 2);
    r->submit_ms = sqlite3_column_int64(st, 3);
    r->no_retry = sqlite3_column_int(st, 4);
    r->restart_count = sqlite3_column_int(st, 5);
    r->pid = sqlite3_column_int64(st, 6);
    r->pid_start = sqlite3_column_int64(st, 7);
    r->start_ms = sqlite3_column_int64(st, 8);
    return 0;
}

int kd_catalog_jobs_in_state(kd_catalog *cat, int state, size_t limit, kd_job_row **out, size_t *n)
{
    static const char *const sql =
        "SELECT id, priority, gpus, submit_ms, no_retry, restart_count, pid, pid_start, start_ms FROM jobs"
        " WHERE state = ? AND ext_id = '' ORDER BY priority DESC, submit_ms, id LIMIT ?";
    void *rows = NULL;
    int rc = kd__rows(cat, sql, sizeof(**out), job_row, &rows, n, "ii", (int64_t)state, (int64_t)limit);
    *out = rows;
    if (rc < 0) {
        free(rows);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

static int transition_once(kd_catalog *cat, int64_t id, int from, int to, const kd_transition *t)
{
    static const char *const sel =
        "SELECT state, priority, restart_count, submit_ms,"
        " (SELECT MAX(time_ms) FROM job_events WHERE job_id = ?1 AND to_state = 1) FROM jobs WHERE id = ?1";
    static const char *const upd =
        "UPDATE jobs SET state = ?2, reason = ?3,"
        " start_ms = CASE WHEN ?2 = 2 THEN ?4 ELSE start_ms END,"
        " end_ms = CASE WHEN ?2 IN " FINAL_STATES " THEN ?4 WHEN ?2 = 1 THEN 0 ELSE end_ms END,"
        " exit_code = CASE WHEN ?5 THEN ?6 WHEN ?2 IN (1, 2) THEN -1 ELSE exit_code END,"
        " devices = CASE WHEN ?2 = 2 THEN ?7 WHEN ?2 = 1 THEN '' ELSE devices END,"
        " node = CASE WHEN ?2 = 2 THEN ?9 ELSE node END,"
        " restart_count = restart_count + ?8,"
        " pid = CASE WHEN ?2 = 2 THEN pid ELSE 0 END"
        " WHERE id = ?1";
    static const char *const ev =
        "INSERT INTO job_events(job_id, time_ms, from_state, to_state, reason) VALUES(?, ?, ?, ?, ?)";
    sqlite3_stmt *st;
    int rc = 0, cur;
    kd_transition_seen seen = { id, 0, to, 0, 0, t->now_ms, 0, 0, t->reason };

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
    cur = seen.from = sqlite3_column_int(st, 0);
    seen.priority = sqlite3_column_int(st, 1);
    seen.restart_count = sqlite3_column_int(st, 2);
    seen.submit_ms = sqlite3_column_int64(st, 3);
    seen.queued_ms = sqlite3_column_type(st, 4) == SQLITE_NULL ? seen.submit_ms : sqlite3_column_int64(st, 4);
    if (from >= 0 ? cur != from : (cur == 3 || cur == 4 || cur == 5)) {
        rc = 1;
        goto rollback;
    }
    if ((st = kd__stmt(cat, upd)) == NULL)
        goto fail;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_int(st, 2, to);
    sqlite3_bind_text(st, 3, t->reason ? t->reason : "", -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, t->now_ms);
    sqlite3_bind_int(st, 5, t->set_exit);
    sqlite3_bind_int(st, 6, t->exit_code);
    sqlite3_bind_text(st, 7, t->devices ? t->devices : "", -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 8, t->bump_restart ? 1 : 0);
    sqlite3_bind_text(st, 9, t->node ? t->node : "", -1, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_DONE)
        goto fail;
    if ((st = kd__stmt(cat, ev)) == NULL)
        goto fail;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_int64(st, 2, t->now_ms);
    sqlite3_bind_int(st, 3, cur);
    sqlite3_bind_int(st, 4, to);
    sqlite3_bind_text(st, 5, t->reason ? t->reason : "", -1, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_DONE)
        goto fail;
    rc = kd__exec(cat, "COMMIT");
    if (rc == 0)
        goto out;
fail:
    rc = kd__sql_fail(cat, "transition");
rollback:
    sqlite3_exec(kd__db(cat), "ROLLBACK", NULL, NULL, NULL);
out:
    kd__unlock(cat);
    if (rc == 0)
        kd__transition_seen(cat, &seen);
    return rc;
}

/* A job's state must be recorded even on a full disk (its log lines may be lost, never its end):
 * then the catalog's reserve is given back and the transition tried again. */
int kd_catalog_job_transition(kd_catalog *cat, int64_t id, int from, int to, const kd_transition *t)
{
    int rc = transition_once(cat, id, from, to, t);
    if (rc < 0 && kd_catalog_release_reserve(cat))
        rc = transition_once(cat, id, from, to, t);
    return rc;
}

int kd_catalog_job_set_process(kd_catalog *cat, int64_t id, int64_t pid, int64_t pid_start)
{
    return kd__run(cat, "UPDATE jobs SET pid = ?, pid_start = ? WHERE id = ?", "iii", pid, pid_start, id);
}

int kd_catalog_job_set_env(kd_catalog *cat, int64_t id, const char *digest, const char *packages)
{
    return kd__run(cat, "UPDATE jobs SET env_digest = ?, env_packages = ? WHERE id = ?", "tti", digest, packages, id);
}


int kd_catalog_job_set_commit(kd_catalog *cat, int64_t id, const char *sha)
{
    return kd__run(cat, "UPDATE jobs SET git_commit = ? WHERE id = ?", "ti", sha, id);
}

static int fill_count(sqlite3_stmt *st, void *row)
{
    *(int64_t *)row = sqlite3_column_int64(st, 0);
    return 0;
}

int kd_catalog_env_in_use(kd_catalog *cat, const char *digest)
{
    int64_t *rows = NULL, n = 0;
    size_t nrows = 0;
    if (kd__rows(cat, "SELECT COUNT(*) FROM jobs WHERE state = ? AND env_digest = ?", sizeof(int64_t), fill_count,
                 (void **)&rows, &nrows, "is", (int64_t)KESTREL_JOB_STATE_RUNNING, digest) == 0 && nrows)
        n = rows[0];
    free(rows);
    return n > 0;
}

int64_t kd_catalog_count_queued(kd_catalog *cat, int64_t owner_id)
{
    int64_t *rows = NULL, n = 0;
    size_t nrows = 0;
    if (kd__rows(cat, "SELECT COUNT(*) FROM jobs WHERE state = ? AND owner_id = ?", sizeof(int64_t), fill_count,
                 (void **)&rows, &nrows, "ii", (int64_t)KESTREL_JOB_STATE_QUEUED, owner_id) == 0 && nrows)
        n = rows[0];
    free(rows);
    return n;
}

int kd_catalog_job_spec_replace(kd_catalog *cat, int64_t id, const Kestrel__V1__JobSpec *spec)
{
    static const char *const upd = "UPDATE jobs SET spec = ?, pool = ? WHERE id = ?";
    static const char *const clear = "DELETE FROM job_labels WHERE job_id = ?";
    static const char *const lab = "INSERT OR REPLACE INTO job_labels(job_id, key, value) VALUES(?, ?, ?)";
    kestrel_buf blob = KESTREL_BUF_INIT;
    sqlite3_stmt *st;
    int rc;
    if ((rc = kestrel__wire_pack(&blob, &spec->base)) < 0)
        return rc;
    kd__lock(cat);
    if ((rc = kd__exec(cat, "BEGIN IMMEDIATE")) < 0)
        goto out;
    if ((st = kd__stmt(cat, upd)) == NULL)
        goto fail;
    sqlite3_bind_blob(st, 1, blob.ptr ? blob.ptr : "", (int)blob.size, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, spec->pool, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, id);
    if (sqlite3_step(st) != SQLITE_DONE || (st = kd__stmt(cat, clear)) == NULL)
        goto fail;
    sqlite3_bind_int64(st, 1, id);
    if (sqlite3_step(st) != SQLITE_DONE)
        goto fail;
    if (put_pairs(cat, lab, id, spec->labels, spec->n_labels) < 0)
        goto fail;
    if ((rc = kd__exec(cat, "COMMIT")) == 0)
        goto out;
fail:
    rc = kd__sql_fail(cat, "replace job spec");
    sqlite3_exec(kd__db(cat), "ROLLBACK", NULL, NULL, NULL);
out:
    kd__unlock(cat);
    kestrel_buf_dispose(&blob);
    return rc;
}

int kd_catalog_job_label_set(kd_catalog *cat, int64_t id, const char *key, const char *value)
{
    Kestrel__V1__Job *job = NULL;
    Kestrel__V1__KeyValue *kv, **grown;
    int rc = kd_catalog_job_load(cat, id, 0, &job, NULL);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < job->spec->n_labels; i++)
        if (!strcmp(job->spec->labels[i]->key, key) && !strcmp(job->spec->labels[i]->value, value))
            goto done;   /* already so */
    if ((kv = malloc(sizeof(*kv))) == NULL ||
        (grown = realloc(job->spec->labels, (job->spec->n_labels + 1) * sizeof(*grown))) == NULL) {
        free(kv);
        rc = kestrel__error_oom();
        goto done;
    }
    kestrel__v1__key_value__init(kv);
    job->spec->labels = grown;
    grown[job->spec->n_labels++] = kv;
    if ((kv->key = kestrel__strdup(key)) == NULL || (kv->value = kestrel__strdup(value)) == NULL) {
        rc = kestrel__error_oom();
        goto done;
    }
    rc = kd_catalog_job_spec_replace(cat, id, job->spec);
done:
    protobuf_c_message_free_unpacked(&job->base, NULL);
    return rc;
}

int kd_catalog_job_retries(kd_catalog *cat, int64_t id, int bump)
{
    int64_t *rows = NULL;
    size_t n = 0;
    int retries = 0;
    if (bump)
        kd__run(cat, "UPDATE jobs SET retries = retries + 1 WHERE id = ?", "i", id);
    if (kd__rows(cat, "SELECT retries FROM jobs WHERE id = ?", sizeof(int64_t), fill_count, (void **)&rows, &n, "i",
                 id) == 0 && n)
        retries = (int)rows[0];
    free(rows);
    return retries;
}

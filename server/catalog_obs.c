/* server/catalog_obs.c - what /metrics reads from the catalog, and the catalog's SQL functions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>
#include "catalog.h"
#include "bounded_regex.h"

/* kd_spec_pool(spec): the pool of a stored JobSpec ("" when it names none or does not decode). */
static void spec_pool(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    Kestrel__V1__JobSpec *spec;
    (void)argc;
    spec = kestrel__v1__job_spec__unpack(NULL, (size_t)sqlite3_value_bytes(argv[0]), sqlite3_value_blob(argv[0]));
    sqlite3_result_text(ctx, spec && spec->pool ? spec->pool : "", -1, SQLITE_TRANSIENT);
    if (spec)
        kestrel__v1__job_spec__free_unpacked(spec, NULL);
}

static void regex_free(void *p)
{
    kd_regex_free(p);
}

/* kd_regexp(re, text, icase): 1 when the POSIX extended regex re matches somewhere in text, in
 * bounded time (bounded_regex.h). The compiled regex is kept for the statement (re is a bound parameter, the
 * same for every row). */
static void regexp_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    kd_regex *re = sqlite3_get_auxdata(ctx, 0);
    const char *text = (const char *)sqlite3_value_text(argv[1]);
    (void)argc;
    if (re == NULL) {
        const char *pat = (const char *)sqlite3_value_text(argv[0]);
        char why[160];
        if (pat == NULL || (re = kd_regex_new(pat, sqlite3_value_int(argv[2]), why, sizeof(why))) == NULL) {
            sqlite3_result_error(ctx, "invalid regular expression", -1);
            return;
        }
        sqlite3_set_auxdata(ctx, 0, re, regex_free);
        if ((re = sqlite3_get_auxdata(ctx, 0)) == NULL) {   /* SQLite may free it at once */
            sqlite3_result_error_nomem(ctx);
            return;
        }
    }
    sqlite3_result_int(ctx, text && kd_regex_match(re, text, (size_t)sqlite3_value_bytes(argv[1])));
}

/* kd_icontains(text, sub): 1 when sub is in text, ASCII letters in any case. */
static void icontains_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    const char *text = (const char *)sqlite3_value_text(argv[0]), *sub = (const char *)sqlite3_value_text(argv[1]);
    (void)argc;
    sqlite3_result_int(ctx, text && sub && strcasestr(text, sub) != NULL);
}

int kd__register_functions(sqlite3 *db)
{
    if (sqlite3_create_function(db, "kd_icontains", 2, SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL, icontains_fn, NULL,
                                NULL) != SQLITE_OK)
        return -1;
    if (sqlite3_create_function(db, "kd_spec_pool", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL, spec_pool, NULL,
                                NULL) != SQLITE_OK ||
        sqlite3_create_function(db, "kd_regexp", 3, SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL, regexp_fn, NULL,
                                NULL) != SQLITE_OK)
        return -1;
    return 0;
}

static int fill_n(sqlite3_stmt *st, void *row)
{
    *(int64_t *)row = sqlite3_column_int64(st, 0);
    return 0;
}

static int fill_job_count(sqlite3_stmt *st, void *row)
{
    kd_job_count *c = row;
    const unsigned char *pool = sqlite3_column_text(st, 1);
    c->state = sqlite3_column_int(st, 0);
    snprintf(c->pool, sizeof(c->pool), "%s", pool ? (const char *)pool : "");
    c->priority = sqlite3_column_int(st, 2);
    c->n = sqlite3_column_int64(st, 3);
    return 0;
}

int kd_catalog_job_counts(kd_catalog *cat, kd_job_count **out, size_t *n)
{
    return kd__rows(cat, "SELECT state, pool, priority, COUNT(*) FROM jobs GROUP BY state, pool, priority LIMIT 10000",
                    sizeof(kd_job_count), fill_job_count, (void **)out, n, "");
}

static int fill_latest(sqlite3_stmt *st, void *row)
{
    kd_latest_metric *m = row;
    const unsigned char *name = sqlite3_column_text(st, 1);
    m->job_id = sqlite3_column_int64(st, 0);
    snprintf(m->name, sizeof(m->name), "%s", name ? (const char *)name : "");
    m->value = sqlite3_column_type(st, 2) == SQLITE_TEXT ? NAN : sqlite3_column_double(st, 2);   /* NaN kept as text */
    m->step = sqlite3_column_int64(st, 3);
    return 0;
}

int kd_catalog_running_metrics(kd_catalog *cat, int per_job, size_t limit, kd_latest_metric **out, size_t *n)
{
    /* the value last reported at each name's highest step, one index seek a series (metric_series
     * lists them): a GROUP BY over every point took 1.3 s of the catalog's lock with 5 million
     * points, every API call waiting behind each scrape, and gave the first value of a repeated
     * step, not the last (a hostile test) */
    return kd__rows(cat,
                    "SELECT x.job_id, x.name, m.value, m.step FROM (SELECT job_id, name FROM (SELECT s.job_id, s.name,"
                    "   ROW_NUMBER() OVER (PARTITION BY s.job_id ORDER BY s.name) AS k FROM metric_series s"
                    "   WHERE s.job_id IN (SELECT id FROM jobs WHERE state = 2)) WHERE k <= ?1 ORDER BY job_id, name LIMIT ?2) x"
                    " JOIN metrics m ON m.rowid = (SELECT rowid FROM metrics WHERE job_id = x.job_id AND name = x.name"
                    "   ORDER BY step DESC, rowid DESC LIMIT 1) ORDER BY x.job_id, x.name",
                    sizeof(kd_latest_metric), fill_latest, (void **)out, n, "ii", (int64_t)per_job, (int64_t)limit);
}

int64_t kd_catalog_log_index_queue(kd_catalog *cat)
{
    int64_t *rows = NULL, n = 0;
    size_t nrows = 0;
    if (kd__rows(cat, "SELECT COUNT(*) FROM log_pending", sizeof(int64_t), fill_n, (void **)&rows, &nrows, "") == 0 &&
        nrows)
        n = rows[0];
    free(rows);
    return n;
}

/* server/catalog_metrics.c - the metric points jobs report, and a view of each series for charts.
 *
 * Every point is kept in metrics. Beside it, each (job, name) series keeps a view of at most
 * KD_VIEW_MAX points: the points whose arrival index k is a multiple of the series' stride. When
 * the view passes its bound the stride doubles and every other view point goes, so a series of
 * 100,000 points is drawn from 1,000-2,000 of them, read in a millisecond, instead of all of them
 * (a scan of 100,000 rows costs ~20 ms before any encoding). Its newest point is always added. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>
#include "catalog.h"

#define KD_VIEW_MAX 2000
#define KD_REPLY_POINTS 100000u

static void bind_value(sqlite3_stmt *st, int col, double v)
{
    if (isnan(v))   /* SQLite stores a NaN double as NULL: keep it as text */
        sqlite3_bind_text(st, col, "NaN", 3, SQLITE_STATIC);
    else
        sqlite3_bind_double(st, col, v);
}

/* The view's share of one new point (inside the caller's transaction). */
static int view_add(kd_catalog *cat, int64_t job_id, const Kestrel__V1__Metric *m)
{
    static const char *const upsert =
        "INSERT INTO metric_series(job_id, name, n, n_view, stride) VALUES(?1, ?2, 1, 0, 1)"
        " ON CONFLICT(job_id, name) DO UPDATE SET n = n + 1 RETURNING n - 1, stride, n_view";
    static const char *const ins =
        "INSERT OR REPLACE INTO metric_view(job_id, name, k, step, value, wall_ms) VALUES(?, ?, ?, ?, ?, ?)";
    static const char *const thin = "DELETE FROM metric_view WHERE job_id = ? AND name = ? AND k % ? != 0";
    static const char *const set = "UPDATE metric_series SET n_view = ?, stride = ? WHERE job_id = ? AND name = ?";
    sqlite3_stmt *st;
    int64_t k, stride, n_view;
    if ((st = kd__stmt(cat, upsert)) == NULL)
        return -1;
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_text(st, 2, m->name, -1, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_ROW) {
        sqlite3_reset(st);
        return -1;
    }
    k = sqlite3_column_int64(st, 0);
    stride = sqlite3_column_int64(st, 1);
    n_view = sqlite3_column_int64(st, 2);
    sqlite3_reset(st);
    if (stride < 1 || k % stride)
        return 0;
    if ((st = kd__stmt(cat, ins)) == NULL)
        return -1;
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_text(st, 2, m->name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, k);
    sqlite3_bind_int64(st, 4, m->step);
    bind_value(st, 5, m->value);
    sqlite3_bind_int64(st, 6, m->wall_time_ms);
    if (sqlite3_step(st) != SQLITE_DONE)
        return -1;
    n_view++;
    if (n_view > KD_VIEW_MAX) {
        if ((st = kd__stmt(cat, thin)) == NULL)
            return -1;
        sqlite3_bind_int64(st, 1, job_id);
        sqlite3_bind_text(st, 2, m->name, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, stride * 2);
        if (sqlite3_step(st) != SQLITE_DONE)
            return -1;
        n_view -= sqlite3_changes(kd__db(cat));
        stride *= 2;
    }
    if ((st = kd__stmt(cat, set)) == NULL)
        return -1;
    sqlite3_bind_int64(st, 1, n_view);
    sqlite3_bind_int64(st, 2, stride);
    sqlite3_bind_int64(st, 3, job_id);
    sqlite3_bind_text(st, 4, m->name, -1, SQLITE_STATIC);
    return sqlite3_step(st) == SQLITE_DONE ? 0 : -1;
}

int kd__metric_view_build(kd_catalog *cat)
{
    static const char *const fill =
        "INSERT INTO metric_series(job_id, name, n, n_view, stride)"
        "  SELECT job_id, name, COUNT(*), 0, 1 FROM metrics GROUP BY job_id, name;";
    static const char *const grow = "UPDATE metric_series SET stride = stride * 2 WHERE n > stride * 2000";
    static const char *const view =
        "INSERT INTO metric_view(job_id, name, k, step, value, wall_ms)"
        "  SELECT m.job_id, m.name, m.k, m.step, m.value, m.wall_ms FROM"
        "   (SELECT job_id, name, step, value, wall_ms,"
        "      row_number() OVER (PARTITION BY job_id, name ORDER BY step, rowid) - 1 AS k FROM metrics) m"
        "   JOIN metric_series s ON s.job_id = m.job_id AND s.name = m.name WHERE m.k % s.stride = 0;"
        "UPDATE metric_series SET n_view = (SELECT COUNT(*) FROM metric_view v"
        "  WHERE v.job_id = metric_series.job_id AND v.name = metric_series.name);";
    if (kd__exec(cat, fill) < 0)
        return -1;
    do {
        if (kd__exec(cat, grow) < 0)
            return -1;
    } while (sqlite3_changes(kd__db(cat)) > 0);
    return kd__exec(cat, view);
}

int kd_catalog_metrics_add(kd_catalog *cat, int64_t job_id, const Kestrel__V1__MetricBatch *b, int64_t max_points,
                           int64_t max_series)
{
    static const char *const ins = "INSERT INTO metrics(job_id, name, step, value, wall_ms) VALUES(?, ?, ?, ?, ?)";
    static const char *const held = "SELECT COUNT(*), COALESCE(SUM(n), 0) FROM metric_series WHERE job_id = ?";
    sqlite3_stmt *st;
    int rc;
    kd__lock(cat);
    if ((rc = kd__exec(cat, "BEGIN IMMEDIATE")) < 0)
        goto out;
    for (size_t i = 0; i < b->n_metrics; i++) {
        if ((st = kd__stmt(cat, ins)) == NULL)
            goto fail;
        sqlite3_bind_int64(st, 1, job_id);
        sqlite3_bind_text(st, 2, b->metrics[i]->name, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, b->metrics[i]->step);
        bind_value(st, 4, b->metrics[i]->value);
        sqlite3_bind_int64(st, 5, b->metrics[i]->wall_time_ms);
        if (sqlite3_step(st) != SQLITE_DONE || view_add(cat, job_id, b->metrics[i]) < 0)
            goto fail;
    }
    /* what the job holds with them (metric_series counts each series: a row a series, bounded below) */
    if (max_points || max_series) {
        int64_t series, points;
        if ((st = kd__stmt(cat, held)) == NULL)
            goto fail;
        sqlite3_bind_int64(st, 1, job_id);
        if (sqlite3_step(st) != SQLITE_ROW) {
            sqlite3_reset(st);
            goto fail;
        }
        series = sqlite3_column_int64(st, 0);
        points = sqlite3_column_int64(st, 1);
        sqlite3_reset(st);
        if ((max_series && series > max_series) || (max_points && points > max_points)) {
            sqlite3_exec(kd__db(cat), "ROLLBACK", NULL, NULL, NULL);
            rc = kestrel__error_set(KESTREL_ETOOLARGE, "job %lld would hold %lld metric points in %lld series with "
                                    "these %zu, past its bound (%lld points, %lld series: kestreld --max-metric-points, "
                                    "--max-metric-series); none of them stored", (long long)job_id, (long long)points,
                                    (long long)series, b->n_metrics, (long long)max_points, (long long)max_series);
            goto out;
        }
    }
    if ((rc = kd__exec(cat, "COMMIT")) == 0)
        goto out;
fail:
    rc = kd__sql_fail(cat, "add metrics");
    sqlite3_exec(kd__db(cat), "ROLLBACK", NULL, NULL, NULL);
out:
    kd__unlock(cat);
    return rc;
}

/* Append one row (step, value, wall_ms at columns c, c+1, c+2) of series name to b. */
static int push_point(Kestrel__V1__MetricBatch *b, size_t *cap, const char *name, sqlite3_stmt *st, int c)
{
    Kestrel__V1__Metric *m;
    if (b->n_metrics == *cap) {
        size_t ncap = *cap ? *cap * 2 : 256;
        Kestrel__V1__Metric **p = realloc(b->metrics, ncap * sizeof(*p));
        if (p == NULL)
            return kestrel__error_oom();
        b->metrics = p;
        *cap = ncap;
    }
    if ((m = malloc(sizeof(*m))) == NULL)
        return kestrel__error_oom();
    kestrel__v1__metric__init(m);
    b->metrics[b->n_metrics++] = m;
    m->step = sqlite3_column_int64(st, c);
    m->value = sqlite3_column_type(st, c + 1) == SQLITE_TEXT ? NAN : sqlite3_column_double(st, c + 1);
    m->wall_time_ms = sqlite3_column_int64(st, c + 2);
    if ((m->name = kestrel__strdup(name)) == NULL) {
        m->name = (char *)protobuf_c_empty_string;
        return kestrel__error_oom();
    }
    return 0;
}

/* A cached statement with ?1 the job and ?2 a metric name or NULL (caller holds the lock). */
static sqlite3_stmt *bound(kd_catalog *cat, const char *sql, int64_t job_id, const char *name)
{
    sqlite3_stmt *st = kd__stmt(cat, sql);
    if (st) {
        sqlite3_bind_int64(st, 1, job_id);
        if (name)
            sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
    }
    return st;
}

int kd_catalog_metrics_read(kd_catalog *cat, int64_t job_id, const char *name, Kestrel__V1__MetricBatch **out)
{
    static const char *const sql =
        "SELECT name, step, value, wall_ms FROM metrics WHERE job_id = ?1 AND (?2 IS NULL OR name = ?2)"
        " ORDER BY name, step, rowid LIMIT 100001";   /* one past the reply's bound: there are more */
    Kestrel__V1__MetricBatch *b = malloc(sizeof(*b));
    sqlite3_stmt *st;
    size_t cap = 0;
    int rc = 0;
    if (b == NULL)
        return kestrel__error_oom();
    kestrel__v1__metric_batch__init(b);
    kd__lock(cat);
    if ((st = bound(cat, sql, job_id, name)) == NULL) {
        rc = KESTREL_EIO;
        goto out;
    }
    while (rc == 0 && sqlite3_step(st) == SQLITE_ROW) {
        if (b->n_metrics == 100000) {   /* said, where the reply was cut in silence (a hostile test) */
            b->more_points = 1;
            break;
        }
        rc = push_point(b, &cap, (const char *)sqlite3_column_text(st, 0), st, 1);
    }
    sqlite3_reset(st);
out:
    kd__unlock(cat);
    if (rc < 0) {
        protobuf_c_message_free_unpacked(&b->base, NULL);
        return rc;
    }
    *out = b;
    return 0;
}

int kd_catalog_metric_last(kd_catalog *cat, int64_t job_id, const char *name, Kestrel__V1__Metric **out)
{
    static const char *const sql =
        "SELECT step, value, wall_ms FROM metrics WHERE job_id = ? AND name = ? ORDER BY step DESC, rowid DESC LIMIT 1";
    sqlite3_stmt *st;
    int rc = 0;
    *out = NULL;
    kd__lock(cat);
    if ((st = kd__stmt(cat, sql)) == NULL) {
        rc = KESTREL_EIO;
        goto out;
    }
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) {
        Kestrel__V1__Metric *m = malloc(sizeof(*m));
        char *nm = kestrel__strdup(name);
        if (m == NULL || nm == NULL) {
            free(m);
            free(nm);
            sqlite3_reset(st);
            rc = kestrel__error_oom();
            goto out;
        }
        kestrel__v1__metric__init(m);
        m->name = nm;
        m->step = sqlite3_column_int64(st, 0);
        m->value = sqlite3_column_type(st, 1) == SQLITE_TEXT ? NAN : sqlite3_column_double(st, 1);
        m->wall_time_ms = sqlite3_column_int64(st, 2);
        *out = m;
    }
    sqlite3_reset(st);
out:
    kd__unlock(cat);
    return rc;
}

/* Every point of one series (it is small), or its view thinned to about max points plus its
 * newest point (caller holds the lock). */
static int read_series(kd_catalog *cat, Kestrel__V1__MetricBatch *b, size_t *cap, int64_t job_id, const char *name,
                       int64_t n, int64_t n_view, long max)
{
    static const char *const all = "SELECT step, value, wall_ms FROM metrics WHERE job_id = ? AND name = ?"
                                   " ORDER BY step, rowid";
    static const char *const view = "SELECT step, value, wall_ms FROM metric_view WHERE job_id = ? AND name = ?"
                                    " ORDER BY step, k";
    static const char *const newest = "SELECT step, value, wall_ms FROM metrics WHERE job_id = ? AND name = ?"
                                      " ORDER BY step DESC, rowid DESC LIMIT 1";
    int64_t every = n <= max ? 1 : (n_view + max - 1) / max, i = 0, last_step = INT64_MIN;
    double last_value = 0;
    sqlite3_stmt *st = kd__stmt(cat, n <= max ? all : view);
    int rc = 0;
    if (st == NULL)
        return KESTREL_EIO;
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
    while (rc == 0 && sqlite3_step(st) == SQLITE_ROW)
        if (i++ % every == 0) {
            rc = push_point(b, cap, name, st, 0);
            last_step = sqlite3_column_int64(st, 0);
            last_value = sqlite3_column_double(st, 1);
        }
    sqlite3_reset(st);
    if (rc < 0 || n <= max)
        return rc;
    if ((st = kd__stmt(cat, newest)) == NULL)
        return KESTREL_EIO;
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
    /* the newest point, unless it is the last one sampled (a re-reported step with a new value is
     * added: the chart shows the value now) */
    if (sqlite3_step(st) == SQLITE_ROW &&
        (sqlite3_column_int64(st, 0) != last_step || sqlite3_column_double(st, 1) != last_value))
        rc = push_point(b, cap, name, st, 0);
    sqlite3_reset(st);
    return rc;
}

int kd_catalog_metrics_sampled(kd_catalog *cat, int64_t job_id, const char *name, long max_points,
                               Kestrel__V1__MetricBatch **out)
{
    static const char *const list = "SELECT name, n, n_view FROM metric_series WHERE job_id = ?1"
                                    " AND (?2 IS NULL OR name = ?2) ORDER BY name LIMIT 1001";
    Kestrel__V1__MetricBatch *b = malloc(sizeof(*b));
    Kestrel__V1__MetricSeries **series = NULL;
    size_t cap = 0, ns = 0;
    sqlite3_stmt *st;
    int rc = 0;
    if (b == NULL)
        return kestrel__error_oom();
    kestrel__v1__metric_batch__init(b);
    kd__lock(cat);
    if ((st = bound(cat, list, job_id, name)) == NULL) {
        rc = KESTREL_EIO;
        goto out;
    }
    /* the series first (one statement at a time on the cached ones), then each one's points */
    while (rc == 0 && sqlite3_step(st) == SQLITE_ROW) {
        Kestrel__V1__MetricSeries *s, **p;
        if (ns == 1000) {
            b->more_series = 1;
            break;
        }
        s = malloc(sizeof(*s));
        p = realloc(series, (ns + 1) * sizeof(*p));
        if (p)
            series = p;
        if (s == NULL || p == NULL) {
            free(s);
            rc = kestrel__error_oom();
            break;
        }
        kestrel__v1__metric_series__init(s);
        series[ns++] = s;
        s->points = sqlite3_column_int64(st, 1);
        s->shown = sqlite3_column_int64(st, 2);   /* n_view, until read */
        if ((s->name = kestrel__strdup((const char *)sqlite3_column_text(st, 0))) == NULL) {
            s->name = (char *)protobuf_c_empty_string;
            rc = kestrel__error_oom();
        }
    }
    sqlite3_reset(st);
    b->series = series;
    b->n_series = ns;
    /* at most KD_REPLY_POINTS in all: with many series, each gets its share */
    if (ns && (size_t)max_points * ns > KD_REPLY_POINTS)
        max_points = (long)(KD_REPLY_POINTS / ns) > 16 ? (long)(KD_REPLY_POINTS / ns) : 16;
    for (size_t i = 0; rc == 0 && i < ns; i++) {
        size_t before = b->n_metrics;
        rc = read_series(cat, b, &cap, job_id, series[i]->name, series[i]->points, series[i]->shown, max_points);
        series[i]->shown = (int64_t)(b->n_metrics - before);
    }
out:
    kd__unlock(cat);
    if (rc < 0) {
        protobuf_c_message_free_unpacked(&b->base, NULL);
        return rc;
    }
    *out = b;
    return 0;
}

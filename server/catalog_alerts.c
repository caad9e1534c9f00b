/* server/catalog_alerts.c - kestreld's own alerts and their webhook delivery state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>
#include "catalog.h"

#define ALERT_COLUMNS \
    "a.id, a.time_ms, a.job_id, j.name, u.name, a.kind, a.severity, a.message, a.delivered, a.attempts" \
    " FROM alerts a JOIN jobs j ON j.id = a.job_id JOIN users u ON u.id = a.owner_id"

int kd_catalog_alert_add(kd_catalog *cat, int64_t job_id, int64_t now, const char *kind, const char *severity,
                         const char *message, int delivery)
{
    return kd__run(cat, "INSERT INTO alerts(time_ms, job_id, owner_id, kind, severity, message, delivered)"
                        " SELECT ?, id, owner_id, ?, ?, ?, ? FROM jobs WHERE id = ?",
                   "itttii", now, kind, severity, message, (int64_t)delivery, job_id);
}

static char *dup_col(sqlite3_stmt *st, int c)
{
    const unsigned char *t = sqlite3_column_text(st, c);
    return kestrel__strdup(t ? (const char *)t : "");
}

static int fill_alert(sqlite3_stmt *st, void *row)
{
    Kestrel__V1__Alert *a = malloc(sizeof(*a));
    if (a == NULL)
        return kestrel__error_oom();
    kestrel__v1__alert__init(a);
    *(Kestrel__V1__Alert **)row = a;
    a->id = sqlite3_column_int64(st, 0);
    a->time_ms = sqlite3_column_int64(st, 1);
    a->job_id = sqlite3_column_int64(st, 2);
    a->delivery = sqlite3_column_int(st, 8);
    if ((a->job_name = dup_col(st, 3)) == NULL || (a->owner = dup_col(st, 4)) == NULL ||
        (a->kind = dup_col(st, 5)) == NULL || (a->severity = dup_col(st, 6)) == NULL ||
        (a->message = dup_col(st, 7)) == NULL) {
        protobuf_c_message_free_unpacked(&a->base, NULL);   /* NULL strings are skipped */
        return kestrel__error_oom();
    }
    return 0;
}

static int alerts_query(kd_catalog *cat, const char *sql, Kestrel__V1__AlertList **out, const char *types, int64_t a,
                        int64_t b, int64_t c)
{
    Kestrel__V1__AlertList *l = calloc(1, sizeof(*l));
    Kestrel__V1__Alert **rows = NULL;
    size_t n = 0;
    int rc;
    if (l == NULL)
        return kestrel__error_oom();
    kestrel__v1__alert_list__init(l);
    rc = kd__rows(cat, sql, sizeof(*rows), fill_alert, (void **)&rows, &n, types, a, b, c);
    l->alerts = rows;
    l->n_alerts = n;
    if (rc < 0) {
        protobuf_c_message_free_unpacked(&l->base, NULL);
        return rc;
    }
    *out = l;
    return 0;
}

int kd_catalog_alerts(kd_catalog *cat, int64_t owner_id, int64_t job_id, int limit, Kestrel__V1__AlertList **out)
{
    return alerts_query(cat, "SELECT " ALERT_COLUMNS " WHERE (?1 = 0 OR a.owner_id = ?1) AND (?2 = 0 OR a.job_id = ?2)"
                             " ORDER BY a.id DESC LIMIT ?3", out, "iii", owner_id, job_id, (int64_t)limit);
}

/* The longest due first (then the oldest): by id, the first batch's failures, due again a second
 * later, took every batch while a slow receiver let a batch take minutes, and a later alert of
 * another user waited for good (a hostile test: 32 failing alerts of one user, another's never
 * sent in 3 minutes). Its index: alerts_pending (delivered, next_ms). */
int kd_catalog_alerts_due(kd_catalog *cat, int64_t now, int limit, Kestrel__V1__AlertList **out)
{
    return alerts_query(cat, "SELECT " ALERT_COLUMNS " WHERE a.delivered = 0 AND a.next_ms <= ?1 ORDER BY a.next_ms, a.id "
                        "LIMIT ?2",
                        out, "ii", now, (int64_t)limit, 0);
}

int kd_catalog_alert_delivery(kd_catalog *cat, int64_t id, int delivered, int64_t next_ms)
{
    return kd__run(cat, "UPDATE alerts SET delivered = ?, attempts = attempts + 1, next_ms = ? WHERE id = ?", "iii",
                   (int64_t)delivered, next_ms, id);
}

static int fill_int(sqlite3_stmt *st, void *row)
{
    *(int *)row = sqlite3_column_int(st, 0);
    return 0;
}

int kd__alert_tries(kd_catalog *cat, int64_t id, int *tries)
{
    int *rows = NULL;
    size_t n = 0;
    int rc = kd__rows(cat, "SELECT attempts FROM alerts WHERE id = ?", sizeof(int), fill_int, (void **)&rows, &n, "i", id);
    *tries = rc == 0 && n ? rows[0] : 0;
    free(rows);
    return rc;
}

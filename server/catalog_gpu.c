/* server/catalog_gpu.c - each job's use of real GPUs: a downsampled series and exact totals. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>
#include "catalog.h"

int kd_catalog_gpu_record(kd_catalog *cat, const kd_gpu_reading *r, size_t n)
{
    static const char *const add =
        "INSERT INTO gpu_usage(job_id, uuid, samples, util_sum, util_max, mem_peak) VALUES(?1, ?2, 1, ?3, ?3, ?4)"
        " ON CONFLICT(job_id, uuid) DO UPDATE SET samples = samples + 1, util_sum = util_sum + ?3,"
        " util_max = max(util_max, ?3), mem_peak = max(mem_peak, ?4)";
    static const char *const keep =
        "INSERT INTO gpu_samples(job_id, time_ms, uuid, util, mem_used) VALUES(?, ?, ?, ?, ?)";
    sqlite3_stmt *st;
    int rc;
    if (n == 0)
        return 0;
    kd__lock(cat);
    if ((rc = kd__exec(cat, "BEGIN IMMEDIATE")) < 0)
        goto out;
    for (size_t i = 0; i < n; i++) {
        if ((st = kd__stmt(cat, add)) == NULL)
            goto fail;
        sqlite3_bind_int64(st, 1, r[i].job_id);
        sqlite3_bind_text(st, 2, r[i].uuid, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 3, r[i].util);
        sqlite3_bind_int64(st, 4, r[i].mem_used);
        if (sqlite3_step(st) != SQLITE_DONE)
            goto fail;
        if (!r[i].keep)
            continue;
        if ((st = kd__stmt(cat, keep)) == NULL)
            goto fail;
        sqlite3_bind_int64(st, 1, r[i].job_id);
        sqlite3_bind_int64(st, 2, r[i].time_ms);
        sqlite3_bind_text(st, 3, r[i].uuid, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 4, r[i].util);
        sqlite3_bind_int64(st, 5, r[i].mem_used);
        if (sqlite3_step(st) != SQLITE_DONE)
            goto fail;
    }
    if ((rc = kd__exec(cat, "COMMIT")) == 0)
        goto out;
fail:
    rc = kd__sql_fail(cat, "record GPU samples");
    sqlite3_exec(kd__db(cat), "ROLLBACK", NULL, NULL, NULL);
out:
    kd__unlock(cat);
    return rc;
}

int kd__load_gpu_usage(kd_catalog *cat, int64_t job_id, Kestrel__V1__GpuUsage ***out, size_t *n)
{
    static const char *const sql =
        "SELECT uuid, samples, util_sum, util_max, mem_peak FROM gpu_usage WHERE job_id = ? ORDER BY uuid LIMIT 64";
    sqlite3_stmt *st = kd__stmt(cat, sql);
    *n = 0;
    if (st == NULL)
        return KESTREL_EIO;
    if ((*out = calloc(64, sizeof(**out))) == NULL)
        return kestrel__error_oom();
    sqlite3_bind_int64(st, 1, job_id);
    while (sqlite3_step(st) == SQLITE_ROW) {
        Kestrel__V1__GpuUsage *u = malloc(sizeof(*u));
        const unsigned char *uuid = sqlite3_column_text(st, 0);
        if (u == NULL)
            return kestrel__error_oom();
        kestrel__v1__gpu_usage__init(u);
        (*out)[(*n)++] = u;
        if ((u->uuid = kestrel__strdup(uuid ? (const char *)uuid : "")) == NULL) {
            u->uuid = (char *)protobuf_c_empty_string;
            return kestrel__error_oom();
        }
        u->samples = sqlite3_column_int64(st, 1);
        u->mean_utilization = u->samples ? (double)sqlite3_column_int64(st, 2) / (double)u->samples : 0;
        u->max_utilization = sqlite3_column_int(st, 3);
        u->peak_memory_bytes = sqlite3_column_int64(st, 4);
    }
    return 0;
}

int kd_catalog_gpu_telemetry(kd_catalog *cat, int64_t job_id, size_t max_samples, Kestrel__V1__GpuTelemetry **out)
{
    static const char *const sql =
        "SELECT time_ms, uuid, util, mem_used FROM gpu_samples WHERE job_id = ? ORDER BY time_ms, uuid LIMIT ?";
    Kestrel__V1__GpuTelemetry *t = calloc(1, sizeof(*t));
    sqlite3_stmt *st;
    size_t cap = 0;   /* the series is short (downsampled): grown as read, not sized for the bound */
    int rc = 0;
    if (t == NULL)
        return kestrel__error_oom();
    kestrel__v1__gpu_telemetry__init(t);
    kd__lock(cat);
    if ((st = kd__stmt(cat, sql)) == NULL) {
        rc = KESTREL_EIO;
        goto out;
    }
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_int64(st, 2, (int64_t)max_samples);
    while (sqlite3_step(st) == SQLITE_ROW) {
        Kestrel__V1__GpuSample *s = NULL;
        const unsigned char *uuid = sqlite3_column_text(st, 1);
        if (kestrel__array_grow(&t->samples, &cap, t->n_samples + 1, sizeof(*t->samples)) < 0 ||
            (s = malloc(sizeof(*s))) == NULL) {
            rc = kestrel__error_oom();
            goto out;
        }
        kestrel__v1__gpu_sample__init(s);
        t->samples[t->n_samples++] = s;
        s->time_ms = sqlite3_column_int64(st, 0);
        s->utilization = sqlite3_column_int(st, 2);
        s->memory_used_bytes = sqlite3_column_int64(st, 3);
        if ((s->uuid = kestrel__strdup(uuid ? (const char *)uuid : "")) == NULL) {
            s->uuid = (char *)protobuf_c_empty_string;
            rc = kestrel__error_oom();
            goto out;
        }
    }
    sqlite3_reset(st);
    rc = kd__load_gpu_usage(cat, job_id, &t->usage, &t->n_usage);
out:
    kd__unlock(cat);
    if (rc < 0)
        protobuf_c_message_free_unpacked(&t->base, NULL);
    else
        *out = t;
    return rc;
}

/* server/catalog_lineage.c - which model versions each job pushed (GET /jobs/{id}/models), kept at
 * push time so the job page never reads the repository's manifests to find them. Versions pushed
 * before catalog version 6 are not in it (their lineage is in their manifests' metadata only). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>
#include "catalog.h"

int kd_catalog_lineage_add(kd_catalog *cat, int64_t job_id, const char *name, int64_t version)
{
    return kd__run(cat, "INSERT OR IGNORE INTO model_lineage(job_id, name, version) VALUES(?, ?, ?)", "isi", job_id,
                   name, version);
}


static int fill(sqlite3_stmt *st, void *row)
{
    kd_lineage_row *r = row;
    const unsigned char *n = sqlite3_column_text(st, 0);
    snprintf(r->name, sizeof(r->name), "%s", n ? (const char *)n : "");
    r->version = sqlite3_column_int64(st, 1);
    return 0;
}

int kd_catalog_lineage_list(kd_catalog *cat, int64_t job_id, kd_lineage_row **out, size_t *n)
{
    return kd__rows(cat, "SELECT name, version FROM model_lineage WHERE job_id = ? ORDER BY name, version LIMIT 1000",
                    sizeof(kd_lineage_row), fill, (void **)out, n, "i", job_id);
}

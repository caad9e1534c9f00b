/* server/api_alerts.c - GET /api/v1/alerts: kestreld's own alerts (log policies, NaN loss, idle
 * GPUs), newest first.
 *
 * Who may use it: any token. An admin sees every job's alerts; a user those of the user's own jobs;
 * a job's token those of its job. Query: job=ID, limit=1..1000 (100). */
#include <string.h>
#include "api.h"
#include "route.h"

enum MHD_Result kd_route_alerts(kd_req *r)
{
    Kestrel__V1__AlertList *l = NULL;
    const char *job = kd_query(r, "job"), *limit = kd_query(r, "limit");
    long long id = 0, n = 100;
    int rc;
    if (strcmp(r->method, "GET"))
        return kd_reply_error(r, 405, "method_not_allowed", "GET /api/v1/alerts");
    if (job && kd_parse_int(job, 1, INT64_MAX, &id) < 0)
        return kd_reply_error(r, 400, "invalid_argument", "query 'job': a job id");
    if (limit && kd_parse_int(limit, 1, 1000, &n) < 0)
        return kd_reply_error(r, 400, "invalid_argument", "query 'limit': 1..1000 alerts");
    if (r->who.job_id) {
        if (id && id != r->who.job_id)
            return kd_reply_error(r, 404, "not_found", "no such job");
        id = r->who.job_id;
    }
    rc = kd_catalog_alerts(r->e->cat, r->who.is_admin || r->who.job_id ? 0 : r->who.user_id, id, (int)n, &l);
    if (rc < 0)
        return kd_reply_failure(r, rc);
    return kd_reply_owned(r, 200, &l->base);
}

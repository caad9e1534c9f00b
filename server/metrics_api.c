/* server/metrics_api.c - GET /metrics.
 *
 * Who may use it: on the API port an admin token or a metrics-scoped token (api.c checks);
 * on --metrics-listen ADDR:PORT anyone who can reach that address, and only this one route (the
 * listener answers 404 to every other path). */
#include <stdlib.h>
#include <string.h>
#include "api.h"
#include "metrics.h"

#define CT_EXPOSITION "text/plain; version=0.0.4; charset=utf-8"

enum MHD_Result kd_route_metrics(kd_req *r)
{
    kestrel_buf b = KESTREL_BUF_INIT;
    enum MHD_Result ok;
    if (strcmp(r->method, "GET") && strcmp(r->method, "HEAD"))
        return kd_reply_error(r, 405, "method_not_allowed", "GET /metrics");
    if (kd_metrics_scrape(r->e, &b) < 0) {
        kestrel_buf_dispose(&b);
        return kd_reply_failure(r, KESTREL_ERROR);
    }
    ok = kd_reply_bytes(r, 200, &b, CT_EXPOSITION);
    kestrel_buf_dispose(&b);
    return ok;
}

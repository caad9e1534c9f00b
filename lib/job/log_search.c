/* lib/job/log_search.c - searching every visible job's log lines (GET /api/v1/logs/search). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "client.h"
#include "http.h"
#include "options.h"

#define PAGE_MAX 1000

static void fill_line(kestrel_log_line *dst, const Kestrel__V1__LogLine *l)
{
    dst->version = 1;
    dst->offset = l->offset;
    dst->time_ms = l->time_ms;
    dst->stream = (int)l->stream;
    dst->text = l->text;
    dst->len = strlen(l->text);
}

/* One hit to the callback: 0 to go on, or the call's result. */
static int deliver(const Kestrel__V1__LogHit *h, kestrel_log_hit_cb cb, void *payload)
{
    kestrel_log_line line, *ctx;
    kestrel_log_hit hit;
    int r;
    if ((ctx = calloc(h->n_before + h->n_after + 1, sizeof(*ctx))) == NULL)
        return kestrel__error_oom();
    line.version = 1;
    line.offset = h->offset;
    line.time_ms = h->time_ms;
    line.stream = (int)h->stream;
    line.text = h->text;
    line.len = strlen(h->text);
    for (size_t i = 0; i < h->n_before; i++)
        fill_line(&ctx[i], h->before[i]);
    for (size_t i = 0; i < h->n_after; i++)
        fill_line(&ctx[h->n_before + i], h->after[i]);
    hit.version = 1;
    hit.job_id = h->job_id;
    hit.job_name = h->job_name;
    hit.line = &line;
    hit.before = ctx;
    hit.n_before = h->n_before;
    hit.after = ctx + h->n_before;
    hit.n_after = h->n_after;
    r = cb ? cb(&hit, payload) : 0;
    free(ctx);
    if (r == KESTREL_EUSER)
        return KESTREL_EUSER;
    return r ? kestrel__error_set(KESTREL_ECANCELLED, "search callback stopped the transfer") : 0;
}

int kestrel_logs_search(kestrel_client *c, const char *pattern, const kestrel_log_search_options *in,
                        kestrel_log_hit_cb cb, void *payload)
{
    kestrel_log_search_options o;
    char cursor[32] = "";
    int rc, left;
    KESTREL__CHECK(c, KESTREL__MAGIC_CLIENT, "client");
    if ((rc = kestrel__search_opts_load(&o, in)) < 0)
        return rc;
    if (pattern == NULL || !pattern[0])
        return kestrel__error_set(KESTREL_EINVALID, "a search needs a pattern");
    if (o.limit < 0 || o.context < 0 || o.context > 20 || o.job_id < 0 || o.since_ms < 0)
        return kestrel__error_set(KESTREL_EINVALID, "limit must be >= 0, context 0..20, job_id and since_ms >= 0");
    if (o.state < 0 || o.state > KESTREL_JOB_STATE_PREEMPTED)
        return kestrel__error_set(KESTREL_EINVALID, "state %d is not a job state", o.state);
    left = o.limit ? o.limit : 100;
    do {
        kestrel_buf path = KESTREL_BUF_INIT;
        char num[32];
        ProtobufCMessage *m = NULL;
        const Kestrel__V1__LogSearchResult *res;
        kestrel__request req = { "GET", NULL, NULL, &kestrel__v1__log_search_result__descriptor, 1, 0 };
        rc = kestrel__buf_puts(&path, "/api/v1/logs/search");
        if (rc == 0)
            rc = kestrel__query_add(&path, "q", pattern);
        if (rc == 0 && o.regex)
            rc = kestrel__query_add(&path, "regex", "1");
        if (rc == 0 && o.ignore_case)
            rc = kestrel__query_add(&path, "icase", "1");
        if (rc == 0 && o.job_id && (snprintf(num, sizeof(num), "%" PRId64, o.job_id), 1))
            rc = kestrel__query_add(&path, "job", num);
        if (rc == 0 && o.state)
            rc = kestrel__query_add(&path, "state", kestrel_job_state_name(o.state));
        if (rc == 0 && o.since_ms && (snprintf(num, sizeof(num), "%" PRId64, o.since_ms), 1))
            rc = kestrel__query_add(&path, "since", num);
        if (rc == 0 && o.context && (snprintf(num, sizeof(num), "%d", o.context), 1))
            rc = kestrel__query_add(&path, "context", num);
        if (rc == 0 && (snprintf(num, sizeof(num), "%d", left > PAGE_MAX ? PAGE_MAX : left), 1))
            rc = kestrel__query_add(&path, "limit", num);
        if (rc == 0 && cursor[0])
            rc = kestrel__query_add(&path, "before", cursor);
        if (rc == 0) {
            req.path = path.ptr;
            rc = kestrel__http_call(&m, c, &req);
        }
        kestrel_buf_dispose(&path);
        if (rc < 0)
            return rc;
        res = (const Kestrel__V1__LogSearchResult *)m;
        for (size_t i = 0; i < res->n_hits && rc == 0 && left > 0; i++, left--)
            rc = deliver(res->hits[i], cb, payload);
        snprintf(cursor, sizeof(cursor), "%s", res->more && res->next_before ? res->next_before : "");
        protobuf_c_message_free_unpacked(m, NULL);
    } while (rc == 0 && left > 0 && cursor[0]);
    return rc;
}

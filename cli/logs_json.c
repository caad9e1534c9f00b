/* cli/logs_json.c - kestrel logs -o json: the API's own replies, as curl shows them. A job's log is
 * the API's LogLine objects, one a line, taken from the LogChunk pages of GET /api/v1/jobs/ID/logs
 * (--follow waits on the server for more, to the job's end; --stream, --since and --tail pick lines
 * as they do for text); --grep prints the API's LogSearchResult pages of GET /api/v1/logs/search,
 * one a line, following next_before up to --limit hits. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "cli.h"

static int64_t int_field(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItem(o, key);   /* int64 is a string in the API's JSON */
    return cJSON_IsString(v) ? strtoll(v->valuestring, NULL, 10) : cJSON_IsNumber(v) ? (int64_t)v->valuedouble : 0;
}

static cJSON *get(cli_ctx *ctx, const char *path, const char *what)
{
    kestrel_buf b = KESTREL_BUF_INIT;
    cJSON *root = NULL;
    int rc = kestrel_client_get_json(&b, ctx->client, path);
    if (rc < 0) {
        cli_fail(what, rc);
        return NULL;
    }
    if ((root = cJSON_ParseWithLength(b.ptr, b.size)) == NULL)
        fprintf(stderr, "kestrel: %s: the server's reply is not JSON\n", what);
    kestrel_buf_dispose(&b);
    return root;
}

/* Print the ring of the last lines, oldest first, and empty it. */
static void flush_ring(char **ring, size_t n, size_t cap, size_t at)
{
    for (size_t k = 0; k < n; k++) {
        size_t i = (at + cap - n + k) % cap;
        puts(ring[i]);
        free(ring[i]);
        ring[i] = NULL;
    }
}

int cli_logs_json(cli_ctx *ctx, int64_t id, int64_t offset, int follow, const char *stream, int64_t since_ms,
                  long tail, const char *rank)
{
    char **ring = NULL;
    size_t ring_n = 0, at = 0, cap = (size_t)(tail > 0 ? tail : 0);
    int rc = 0;
    if (cap && (ring = calloc(cap, sizeof(*ring))) == NULL)
        return cli_fail("logs", KESTREL_ENOMEM);
    for (;;) {
        char path[160];
        cJSON *root, *line;
        int n, eof;
        /* --tail catches up without waiting (its last lines come first), then follows */
        snprintf(path, sizeof(path), "/api/v1/jobs/%" PRId64 "/logs?offset=%" PRId64 "%s", id, offset,
                 follow && ring == NULL ? "&wait_ms=10000" : "");
        if ((root = get(ctx, path, "logs")) == NULL) {
            rc = 1;
            break;
        }
        n = cJSON_GetArraySize(cJSON_GetObjectItem(root, "lines"));
        cJSON_ArrayForEach(line, cJSON_GetObjectItem(root, "lines")) {
            const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(line, "stream"));
            const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(line, "text"));
            char *text;
            if ((stream && (s == NULL || strcmp(s, stream))) || (since_ms && int_field(line, "time_ms") < since_ms) ||
                (rank[0] && (t == NULL || strncmp(t, rank, strlen(rank)))))
                continue;
            if ((text = cJSON_PrintUnformatted(line)) == NULL)
                continue;
            if (ring == NULL) {
                puts(text);
                free(text);
                continue;
            }
            free(ring[at]);
            ring[at] = text;
            at = (at + 1) % cap;
            ring_n += ring_n < cap;
        }
        eof = cJSON_IsTrue(cJSON_GetObjectItem(root, "eof"));
        if (n)
            offset = int_field(root, "next_offset");
        cJSON_Delete(root);
        if (ring && (eof || n == 0)) {   /* caught up: the last lines, then (--follow) what comes */
            flush_ring(ring, ring_n, cap, at);
            free(ring);
            ring = NULL;
        }
        fflush(stdout);
        if (eof || (!follow && n == 0))
            break;
    }
    if (ring) {
        for (size_t k = 0; k < cap; k++)
            free(ring[k]);
        free(ring);
    }
    return rc;
}

int cli_log_search_json(cli_ctx *ctx, const char *pattern, const kestrel_log_search_options *o, const char *state)
{
    char job[24] = "", since[24] = "", before[64] = "";
    int want = o->limit ? o->limit : 100, hits = 0;
    if (o->job_id)
        snprintf(job, sizeof(job), "%" PRId64, o->job_id);
    if (o->since_ms)
        snprintf(since, sizeof(since), "%" PRId64, o->since_ms);
    while (hits < want) {   /* a page a line: the API gives at most 1000 hits a request */
        char path[4 * 1024 + 512], limit[16], context[16] = "", *text;   /* q: 1024 bytes, 3x when encoded */
        const char *const query[] = { "q", pattern, "regex", o->regex ? "1" : NULL, "icase",
                                      o->ignore_case ? "1" : NULL, "job", job, "state", state, "since", since,
                                      "before", before, "limit", limit, "context", context, NULL };
        const char *next;
        cJSON *root;
        int n, more;
        snprintf(limit, sizeof(limit), "%d", want - hits < 1000 ? want - hits : 1000);
        if (o->context)
            snprintf(context, sizeof(context), "%d", o->context);
        if (cli_api_path(path, sizeof(path), "/api/v1/logs/search", query) < 0) {
            fprintf(stderr, "kestrel: logs --grep: the pattern is too long\n");
            return 2;
        }
        if ((root = get(ctx, path, "logs --grep")) == NULL)
            return 2;
        n = cJSON_GetArraySize(cJSON_GetObjectItem(root, "hits"));
        more = cJSON_IsTrue(cJSON_GetObjectItem(root, "more"));
        next = cJSON_GetStringValue(cJSON_GetObjectItem(root, "next_before"));
        snprintf(before, sizeof(before), "%s", next ? next : "");
        if ((text = cJSON_PrintUnformatted(root)) != NULL)
            puts(text);
        free(text);
        cJSON_Delete(root);
        hits += n;
        if (!more || !n || !before[0])
            break;
    }
    return hits ? 0 : 1;   /* like grep: 1 when nothing matched */
}

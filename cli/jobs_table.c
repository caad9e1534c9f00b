/* cli/jobs_table.c - `kestrel jobs` as a table: one line a job with who, what, where, how long and,
 * for a waiting job, why it waits (the scheduler's reason, not "submitted"). -o wide adds the
 * command, labels and params. On a terminal the table fits its width; piped, nothing is cut. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cjson/cJSON.h>
#include "cli.h"

/* "3m 05s", "2h 10m", "4d 3h" */
void cli_fmt_duration(char *out, size_t n, int64_t ms)
{
    long long s = ms > 0 ? ms / 1000 : 0;
    if (s < 60)
        snprintf(out, n, "%llds", s);
    else if (s < 3600)
        snprintf(out, n, "%lldm %02llds", s / 60, s % 60);
    else if (s < 86400)
        snprintf(out, n, "%lldh %02lldm", s / 3600, s % 3600 / 60);
    else
        snprintf(out, n, "%lldd %lldh", s / 86400, s % 86400 / 3600);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* "running 3m 05s", "took 1h 02m", "waiting 12s", "ended after 4s" (never started) */
static void age(char *out, size_t n, const kestrel_job *j, int64_t now)
{
    char d[32];
    int64_t submit = kestrel_job_submit_time(j), start = kestrel_job_start_time(j), end = kestrel_job_end_time(j);
    if (submit <= 0) {   /* no time known (never from kestreld) */
        snprintf(out, n, "-");
    } else if (kestrel_job_state(j) == KESTREL_JOB_STATE_QUEUED) {
        cli_fmt_duration(d, sizeof(d), now - submit);
        snprintf(out, n, "waiting %s", d);
    } else if (start <= 0) {
        cli_fmt_duration(d, sizeof(d), (end > 0 ? end : now) - submit);
        snprintf(out, n, "ended after %s", d);
    } else {
        cli_fmt_duration(d, sizeof(d), (end > 0 ? end : now) - start);
        snprintf(out, n, "%s %s", end > 0 ? "took" : "running", d);
    }
}

/* A job's argv joined, and its labels and params as k=v,k=v (from its JSON: the CLI uses the public
 * API only, which gives the spec as JSON). */
static void wide_fields(const kestrel_job *j, char *cmd, size_t cn, char *labels, size_t ln, char *params, size_t pn)
{
    kestrel_buf b = KESTREL_BUF_INIT;
    cJSON *root, *spec, *e;
    cmd[0] = labels[0] = params[0] = '\0';
    if (kestrel_job_to_json(&b, j) < 0 || (root = cJSON_Parse(b.ptr)) == NULL) {
        kestrel_buf_dispose(&b);
        return;
    }
    spec = cJSON_GetObjectItem(root, "spec");
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(spec, "argv"))
        if (cJSON_IsString(e))
            snprintf(cmd + strlen(cmd), cn - strlen(cmd), "%s%s", cmd[0] ? " " : "", e->valuestring);
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(spec, "labels")) {
        cJSON *k = cJSON_GetObjectItem(e, "key"), *v = cJSON_GetObjectItem(e, "value");
        if (cJSON_IsString(k) && cJSON_IsString(v))
            snprintf(labels + strlen(labels), ln - strlen(labels), "%s%s=%s", labels[0] ? "," : "", k->valuestring,
                     v->valuestring);
    }
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(spec, "params")) {
        cJSON *k = cJSON_GetObjectItem(e, "key"), *v = cJSON_GetObjectItem(e, "value");
        if (cJSON_IsString(k) && cJSON_IsString(v))
            snprintf(params + strlen(params), pn - strlen(params), "%s%s=%s", params[0] ? "," : "", k->valuestring,
                     v->valuestring);
    }
    cJSON_Delete(root);
    kestrel_buf_dispose(&b);
}

static const char *lower(char *buf, size_t n, const char *s)
{
    size_t i = 0;
    for (; s[i] && i + 1 < n; i++)
        buf[i] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] - 'A' + 'a' : s[i]);
    buf[i] = '\0';
    return buf;
}

void cli_print_jobs_table(cli_ctx *ctx, kestrel_job_page *page, int wide)
{
    kestrel_queue *q = NULL;
    size_t n = kestrel_job_page_count(page);
    int64_t now = now_ms();
    int width = cli_term_columns(), any_queued = 0;
    int wname = 18, wuser = 10, wnode = 10;
    if (width) {   /* a narrow terminal: the name, then user and node give up columns, down to 8, 6, 6 */
        int over = 6 + 10 + 7 + 4 + 18 + 9 + 12 + wname + wuser + wnode - width;   /* 12: a reason's start */
        int *const col[] = { &wname, &wuser, &wnode };
        static const int least[] = { 8, 6, 6 };
        for (size_t k = 0; k < 3 && over > 0; k++) {
            int give = *col[k] - least[k] < over ? *col[k] - least[k] : over;
            *col[k] -= give;
            over -= give;
        }
    }
    for (size_t i = 0; i < n; i++)
        any_queued |= kestrel_job_state(kestrel_job_page_at(page, i)) == KESTREL_JOB_STATE_QUEUED;
    if (any_queued && kestrel_queue_get(&q, ctx->client) < 0)
        q = NULL;   /* the reasons are a nicety: the listing stands without them */
    {
        char line[256];
        size_t at = 0;
        static const char *const head[] = { "ID", "NAME", "USER", "STATE", "CLASS", "GPUS", "NODE", "AGE" };
        const int w[] = { 6, wname, wuser, 10, 7, 4, wnode, 18 };
        for (size_t k = 0; k < 8; k++)
            cli_cell(line, sizeof(line), &at, head[k], w[k], 0);
        snprintf(line + at, sizeof(line) - at, "%s%s", wide ? "COMMAND | LABELS | PARAMS | " : "", "REASON");
        cli_put_line(line);
    }
    for (size_t i = 0; i < n; i++) {
        const kestrel_job *j = kestrel_job_page_at(page, i);
        const char *reason = kestrel_job_reason(j);
        char line[8192], st[16], cls[16], a[48], id[24], gpus[16], cmd[2048], labels[1024], params[1024];
        size_t at = 0;
        int cut = width != 0;
        if (kestrel_job_state(j) == KESTREL_JOB_STATE_QUEUED && q)
            for (size_t k = 0; k < kestrel_queue_count(q); k++)
                if (kestrel_job_id(kestrel_queue_job(q, k)) == kestrel_job_id(j)) {
                    reason = kestrel_queue_reason(q, k);
                    break;
                }
        age(a, sizeof(a), j, now);
        snprintf(id, sizeof(id), "%" PRId64, kestrel_job_id(j));
        if (kestrel_job_replicas(j) > 1)   /* a gang: ranks x GPUs each */
            snprintf(gpus, sizeof(gpus), "%dx%d", kestrel_job_replicas(j), kestrel_job_gpus(j));
        else
            snprintf(gpus, sizeof(gpus), "%d", kestrel_job_gpus(j));
        cli_cell(line, sizeof(line), &at, id, 6, 0);
        cli_cell(line, sizeof(line), &at, kestrel_job_name(j)[0] ? kestrel_job_name(j) : "-", wname, cut);
        cli_cell(line, sizeof(line), &at, kestrel_job_owner(j), wuser, cut);
        cli_cell(line, sizeof(line), &at, lower(st, sizeof(st), kestrel_job_state_name(kestrel_job_state(j))), 10, 0);
        cli_cell(line, sizeof(line), &at, lower(cls, sizeof(cls), kestrel_priority_name(kestrel_job_priority(j))), 7, 0);
        cli_cell(line, sizeof(line), &at, gpus, 4, 0);
        cli_cell(line, sizeof(line), &at, kestrel_job_node(j)[0] ? kestrel_job_node(j) : "-", wnode, cut);
        cli_cell(line, sizeof(line), &at, a, 18, 0);
        if (wide) {
            wide_fields(j, cmd, sizeof(cmd), labels, sizeof(labels), params, sizeof(params));
            at += (size_t)snprintf(line + at, sizeof(line) - at, "%s | %s | %s | ", cmd, labels[0] ? labels : "-",
                                   params[0] ? params : "-");
        }
        if (at < sizeof(line))
            snprintf(line + at, sizeof(line) - at, "%s", reason);
        cli_put_line(line);   /* a terminal: one line a job, cut at a whole character */
    }
    kestrel_queue_free(q);
}

/* cli/observe_cmds.c - kestrel alerts, and kestrel metrics --gpu. */
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli.h"

const char cli_help_alerts[] =
    "Usage: kestrel alerts [--job ID] [--limit N]\n"
    "\n"
    "kestreld's own alerts, newest first: log policies that matched (kestreld --log-policy, a job's\n"
    "--log-policy, the built-in cuda-oom, ecc and nan-loss), NaN losses reported as metrics, GPUs held\n"
    "idle. An admin sees every job's; you see your jobs'. DELIVERY says whether kestreld's --webhook\n"
    "took it (pending, delivered, given-up, none).\n";

static void when(char *buf, size_t n, int64_t ms)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    strftime(buf, n, "%Y-%m-%d %H:%M:%S", localtime_r(&t, &tm));
}

const struct option cli_opts_alerts[] = { { "job", required_argument, NULL, 'j' }, { "limit", required_argument, NULL, 'n' },
                                      { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 } };

int cmd_alerts(cli_ctx *ctx, int argc, char **argv)
{
    const struct option *opts = cli_opts_alerts;
    static const char *const delivery[] = { "pending", "delivered", "given-up", "none" };
    kestrel_alert_list *l;
    int64_t job = 0;
    int c, rc, limit = 0;
    char *end;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'j': if (cli_job_id(optarg, &job) < 0) return 2; break;
        case 'n':
            limit = (int)strtol(optarg, &end, 10);
            if (*end || limit < 1 || limit > 1000) {
                fprintf(stderr, "kestrel: --limit takes 1..1000\n");
                return 2;
            }
            break;
        case 'h': fputs(cli_help_alerts, stdout); return 0;
        default: return cli_usage_error("alerts");
        }
    }
    if (optind != argc)
        return cli_usage_error("alerts");
    if (cli_connect(ctx) < 0)
        return 1;
    if (ctx->json) {   /* the API's AlertList, as curl shows it */
        char path[256], jb[24] = "", lb[16] = "";
        const char *const query[] = { "job", jb, "limit", lb, NULL };
        int st;
        if (job)
            snprintf(jb, sizeof(jb), "%" PRId64, job);
        if (limit)
            snprintf(lb, sizeof(lb), "%d", limit);
        st = cli_api_path(path, sizeof(path), "/api/v1/alerts", query) < 0 ? 2 : cli_print_api_json(ctx, path);
        if (st != 1)
            return st ? 1 : 0;
    }
    if ((rc = kestrel_alerts_get(&l, ctx->client, job, limit)) < 0)
        return cli_fail("alerts", rc);
    cli_row("%-6s %-19s %-7s %-16s %-10s %-9s %s", "ID", "TIME", "JOB", "KIND", "SEVERITY", "DELIVERY", "MESSAGE");
    for (size_t i = 0; i < kestrel_alert_list_count(l); i++) {
        const kestrel_alert *a = kestrel_alert_list_at(l, i);
        const char *d = a->delivery >= 0 && a->delivery <= 3 ? delivery[a->delivery] : "?";
        char t[32];
        when(t, sizeof(t), a->time_ms);
        cli_row("%-6" PRId64 " %-19s %-7" PRId64 " %-16s %-10s %-9s %s", a->id, t, a->job_id, a->kind, a->severity, d,
                a->message);
    }
    kestrel_alert_list_free(l);
    return 0;
}

int cli_print_gpu_telemetry(cli_ctx *ctx, int64_t id)
{
    kestrel_gpu_telemetry *t;
    int rc = kestrel_job_gpu_telemetry(&t, ctx->client, id);
    if (rc < 0)
        return cli_fail("metrics --gpu", rc);
    if (ctx->json) {
        printf("{\"usage\":[");
        for (size_t i = 0; i < kestrel_gpu_telemetry_usage_count(t); i++) {
            const kestrel_gpu_usage *u = kestrel_gpu_telemetry_usage_at(t, i);
            printf("%s{\"uuid\":\"%s\",\"samples\":%" PRId64 ",\"mean_utilization\":%.3f,\"max_utilization\":%d,"
                   "\"peak_memory_bytes\":%" PRId64 "}", i ? "," : "", u->uuid, u->samples, u->mean_utilization,
                   u->max_utilization, u->peak_memory);
        }
        printf("],\"samples\":[");
        for (size_t i = 0; i < kestrel_gpu_telemetry_sample_count(t); i++) {
            const kestrel_gpu_sample *s = kestrel_gpu_telemetry_sample_at(t, i);
            printf("%s\n{\"time_ms\":%" PRId64 ",\"uuid\":\"%s\",\"utilization\":%d,\"memory_used_bytes\":%" PRId64 "}",
                   i ? "," : "", s->time_ms, s->uuid, s->utilization, s->memory_used);
        }
        printf("]}\n");
    } else {
        if (kestrel_gpu_telemetry_usage_count(t) == 0)
            printf("job %" PRId64 ": no GPU samples (no real GPU held, or not sampled yet)\n", id);
        for (size_t i = 0; i < kestrel_gpu_telemetry_usage_count(t); i++) {
            const kestrel_gpu_usage *u = kestrel_gpu_telemetry_usage_at(t, i);
            printf("%s: mean %.1f%%, max %d%%, peak memory %.2f GiB over %" PRId64 " samples\n", u->uuid,
                   u->mean_utilization, u->max_utilization, (double)u->peak_memory / (1 << 30), u->samples);
        }
        if (kestrel_gpu_telemetry_sample_count(t))
            cli_row("%-19s %-44s %5s %12s", "TIME", "GPU", "UTIL", "MEMORY");
        for (size_t i = 0; i < kestrel_gpu_telemetry_sample_count(t); i++) {
            const kestrel_gpu_sample *s = kestrel_gpu_telemetry_sample_at(t, i);
            char w[32];
            when(w, sizeof(w), s->time_ms);
            cli_row("%-19s %-44s %4d%% %9.2f GiB", w, s->uuid, s->utilization, (double)s->memory_used / (1 << 30));
        }
    }
    kestrel_gpu_telemetry_free(t);
    return 0;
}

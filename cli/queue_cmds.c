/* cli/queue_cmds.c - explain, queue, job update, ack. */
#include <getopt.h>
#include <math.h>
#include <inttypes.h>
#include <string.h>
#include "cli.h"

int cmd_explain(cli_ctx *ctx, int argc, char **argv)
{
    kestrel_buf reason = KESTREL_BUF_INIT;
    kestrel_job *job;
    int64_t id;
    int pos = 0, rc;
    if (argc != 2 || cli_job_id(argv[1], &id) < 0) {
        return cli_usage_error("explain");
    }
    if (cli_connect(ctx) < 0)
        return 1;
    if (ctx->json) {   /* the API's Explanation */
        char path[64];
        snprintf(path, sizeof(path), "/api/v1/jobs/%" PRId64 "/explain", id);
        if ((rc = cli_print_api_json(ctx, path)) != 1)
            return rc ? 1 : 0;
    }
    if ((rc = kestrel_job_explain(&reason, &pos, ctx->client, id)) < 0)
        return cli_fail("explain", rc);
    if ((rc = kestrel_job_get(&job, ctx->client, id)) < 0) {
        kestrel_buf_dispose(&reason);
        return cli_fail("explain", rc);
    }
    if (ctx->json) {
        printf("{\"job_id\":\"%" PRId64 "\",\"state\":\"%s\",\"position\":%d,\"reason\":", id,
               kestrel_job_state_name(kestrel_job_state(job)), pos);
        cli_json_string(stdout, reason.ptr ? reason.ptr : "");
        printf("}\n");
    } else if (pos > 0) {
        printf("job %" PRId64 " is QUEUED at position %d: %s\n", id, pos, reason.ptr);
    } else {
        printf("job %" PRId64 " is %s: %s\n", id, kestrel_job_state_name(kestrel_job_state(job)), reason.ptr);
    }
    kestrel_job_free(job);
    kestrel_buf_dispose(&reason);
    return 0;
}

int cmd_queue(cli_ctx *ctx, int argc, char **argv)
{
    kestrel_queue *q;
    int rc;
    (void)argv;
    if (argc != 1) {
        return cli_usage_error("queue");
    }
    if (cli_connect(ctx) < 0)
        return 1;
    if (ctx->json && (rc = cli_print_api_json(ctx, "/api/v1/queue")) != 1)   /* the API's Queue */
        return rc ? 1 : 0;
    if ((rc = kestrel_queue_get(&q, ctx->client)) < 0)
        return cli_fail("queue", rc);
    if (ctx->json) {
        printf("[");
        for (size_t i = 0; i < kestrel_queue_count(q); i++) {
            printf("%s\n{\"position\":%d,\"job_id\":\"%" PRId64 "\",\"priority\":\"%s\",\"gpus\":%d,\"reason\":",
                   i ? "," : "", kestrel_queue_position(q, i), kestrel_job_id(kestrel_queue_job(q, i)),
                   kestrel_priority_name(kestrel_job_priority(kestrel_queue_job(q, i))),
                   kestrel_job_gpus(kestrel_queue_job(q, i)));
            cli_json_string(stdout, kestrel_queue_reason(q, i));
            printf("}");
        }
        printf("\n]\n");
    } else {
        cli_row("%-4s %-8s %-8s %-4s %-20s %s", "POS", "ID", "PRIORITY", "GPUS", "NAME", "WAITING FOR");
        for (size_t i = 0; i < kestrel_queue_count(q); i++) {
            const kestrel_job *j = kestrel_queue_job(q, i);
            cli_row("%-4d %-8" PRId64 " %-8s %-4d %-20.20s %s", kestrel_queue_position(q, i), kestrel_job_id(j),
                   kestrel_priority_name(kestrel_job_priority(j)), kestrel_job_gpus(j),
                   kestrel_job_name(j)[0] ? kestrel_job_name(j) : "-", kestrel_queue_reason(q, i));
        }
    }
    kestrel_queue_free(q);
    return 0;
}

const struct option cli_opts_job[] = { { "priority", required_argument, NULL, 'p' }, { NULL, 0, NULL, 0 } };

int cmd_job(cli_ctx *ctx, int argc, char **argv)
{
    const struct option *opts = cli_opts_job;
    kestrel_job *job;
    int64_t id;
    int c, prio = 0, rc;
    if (argc < 2 || strcmp(argv[1], "update")) {
        return cli_usage_error("job");
    }
    argc--;
    argv++;   /* argv[0] is now "update", which getopt skips like a program name */
    optind = 0;   /* 0: GNU getopt re-initialises its permutation state */
    while ((c = getopt_long(argc, argv, "p:", opts, NULL)) != -1) {
        if (c != 'p' || kestrel_priority_parse(&prio, optarg) < 0) {
            fprintf(stderr, "kestrel: --priority takes normal, high or urgent\n");
            return 2;
        }
    }
    if (!prio || optind != argc - 1 || cli_job_id(argv[optind], &id) < 0) {
        return cli_usage_error("job");
    }
    if (cli_connect(ctx) < 0)
        return 1;
    if ((rc = kestrel_job_set_priority(&job, ctx->client, id, prio)) < 0)
        return cli_fail("job update", rc);
    printf("job %" PRId64 " is now %s\n", id, kestrel_priority_name(kestrel_job_priority(job)));
    kestrel_job_free(job);
    return 0;
}

int cmd_ack(cli_ctx *ctx, int argc, char **argv)
{
    int64_t id;
    int rc;
    if (argc != 2 || cli_job_id(argv[1], &id) < 0) {
        return cli_usage_error("ack");
    }
    if (cli_connect(ctx) < 0)
        return 1;
    if ((rc = kestrel_job_ack_preempt(ctx->client, id)) < 0)
        return cli_fail("ack", rc);
    return 0;
}

const struct option cli_opts_metrics[] = { { "name", required_argument, NULL, 'n' }, { "gpu", no_argument, NULL, 'G' },
                                           { "plot", no_argument, NULL, 'P' }, { "flat", no_argument, NULL, 'F' },
                                      { NULL, 0, NULL, 0 } };

int cmd_metrics(cli_ctx *ctx, int argc, char **argv)
{
    const struct option *opts = cli_opts_metrics;
    kestrel_metric_list *m;
    const char *name = NULL;
    int64_t id;
    int c, rc, gpu = 0, plot = 0, flat = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, "n:", opts, NULL)) != -1) {
        if (c == 'G')
            gpu = 1;
        else if (c == 'P')
            plot = 1;
        else if (c == 'F')
            flat = 1;
        else if (c == 'n')
            name = optarg;
        else
            return 2;
    }
    if (optind != argc - 1 || cli_job_id(argv[optind], &id) < 0 || (gpu && (name || plot || flat)) || (plot && flat))
        return cli_usage_error("metrics");
    if (cli_connect(ctx) < 0)
        return 1;
    if (gpu)
        return cli_print_gpu_telemetry(ctx, id);
    if (ctx->json) {   /* the API's MetricBatch */
        char base[64], path[1024];
        const char *const query[] = { "name", name, NULL };
        int st;
        snprintf(base, sizeof(base), "/api/v1/jobs/%" PRId64 "/metrics", id);
        st = cli_api_path(path, sizeof(path), base, query) < 0 ? 2 : cli_print_api_json(ctx, path);
        if (st != 1)
            return st ? 1 : 0;
    }
    if ((rc = kestrel_job_metrics(&m, ctx->client, id, name)) < 0)
        return cli_fail("metrics", rc);
    if (kestrel_metric_list_more(m) && name == NULL)   /* the rest was cut in silence (a hostile test) */
        fprintf(stderr, "kestrel: job %" PRId64 " holds more points than the 100,000 shown (the first by name, then "
                "step): name one metric (kestrel metrics --name NAME %" PRId64 ")\n", id, id);
    else if (kestrel_metric_list_more(m))
        fprintf(stderr, "kestrel: %s holds more points than the 100,000 shown (its first steps)\n", name);
    if (ctx->json) {
        printf("[");
        for (size_t i = 0; i < kestrel_metric_list_count(m); i++) {
            const kestrel_metric *p = kestrel_metric_list_at(m, i);
            printf("%s\n{\"name\":", i ? "," : "");
            cli_json_string(stdout, p->name);
            printf(",\"step\":%" PRId64 ",\"value\":", p->step);
            if (isnan(p->value) || isinf(p->value))   /* JSON has no NaN: proto3 JSON's string form */
                printf("\"%s\"", isnan(p->value) ? "NaN" : p->value > 0 ? "Infinity" : "-Infinity");
            else
                printf("%.17g", p->value);
            printf(",\"wall_time_ms\":%" PRId64 "}", p->wall_time_ms);
        }
        printf("\n]\n");
    } else if (plot) {
        cli_metrics_plot(m);
    } else if (flat) {
        cli_row("%-28s %8s %14s", "NAME", "STEP", "VALUE");
        for (size_t i = 0; i < kestrel_metric_list_count(m); i++) {
            const kestrel_metric *p = kestrel_metric_list_at(m, i);
            cli_row("%-28s %8" PRId64 " %14.6g", p->name, p->step, p->value);
        }
    } else {
        cli_metrics_pivot(m);
    }
    kestrel_metric_list_free(m);
    return 0;
}

/* cli/commands.c - the job commands. */
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cjson/cJSON.h>
#include "cli.h"

static void fmt_time(char *out, size_t n, int64_t ms)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (ms <= 0) {
        snprintf(out, n, "-");
        return;
    }
    localtime_r(&t, &tm);
    strftime(out, n, "%Y-%m-%d %H:%M:%S", &tm);
}

int cli_print_job_json(const kestrel_job *job)
{
    kestrel_buf b = KESTREL_BUF_INIT;
    int rc = kestrel_job_to_json(&b, job);
    if (rc < 0)
        return cli_fail("json", rc);
    rc = cli_put_json(b.ptr, b.size);   /* escaped as any JSON this prints (a review) */
    kestrel_buf_dispose(&b);
    return rc < 0 ? cli_fail("json", KESTREL_EPROTO) : 0;
}

/* head, then text with each line after its first indented by indent columns: a reason of several
 * lines (pip's words) stays under its label, and a newline in it makes no line of its own ("fake:
 * value" from a hostile server's reason: a hostile test). */
static void print_indented(const char *head, const char *text, size_t indent)
{
    fputs(head, stdout);
    for (const char *p = text; *p; p++) {
        putchar(*p);
        if (*p == '\n' && p[1])
            printf("%*s", (int)indent, "");
    }
    putchar('\n');
}

static void print_job(const kestrel_job *job)
{
    char a[32], b[32], c[32];
    fmt_time(a, sizeof(a), kestrel_job_submit_time(job));
    fmt_time(b, sizeof(b), kestrel_job_start_time(job));
    fmt_time(c, sizeof(c), kestrel_job_end_time(job));
    printf("job %" PRId64 "  %s\n", kestrel_job_id(job), kestrel_job_state_name(kestrel_job_state(job)));
    printf("  name:      %s\n", kestrel_job_name(job)[0] ? kestrel_job_name(job) : "-");
    printf("  owner:     %s\n", kestrel_job_owner(job));
    printf("  priority:  %s   gpus: %d   restarts: %d\n", kestrel_priority_name(kestrel_job_priority(job)),
           kestrel_job_gpus(job), kestrel_job_restart_count(job));
    if (kestrel_job_replicas(job) > 1)
        printf("  gang:      %d ranks, %d GPU%s each (kestrel logs --rank R)\n", kestrel_job_replicas(job),
               kestrel_job_gpus(job), kestrel_job_gpus(job) == 1 ? "" : "s");
    if (kestrel_job_node(job)[0])
        printf("  node:      %s\n", kestrel_job_node(job));
    print_indented("  reason:    ", kestrel_job_reason(job), 13);
    if (kestrel_job_exit_code(job) >= 0)
        printf("  exit code: %d\n", kestrel_job_exit_code(job));
    if (kestrel_job_git_commit(job)[0])
        printf("  commit:    %s\n", kestrel_job_git_commit(job));
    if (kestrel_job_code(job)[0])
        printf("  code:      %s\n", kestrel_job_code(job));
    if (kestrel_job_environment(job)[0]) {
        size_t pk = 0;
        for (const char *p = kestrel_job_packages(job); *p; p++)
            pk += *p == '\n';
        printf("  env:       %s (%zu packages; -o json lists them)\n", kestrel_job_environment(job), pk);
    }
    for (size_t i = 0; i < kestrel_job_data_count(job); i++) {
        const char *ref, *path;
        if (kestrel_job_data_at(job, i, &ref, &path) == 0)
            printf("  %s %s at %s\n", i ? "          " : "data:     ", ref, path);
    }
    for (size_t i = 0; i < kestrel_job_param_count(job); i++) {
        const char *k, *v;
        if (kestrel_job_param_at(job, i, &k, &v) == 0)
            printf("  %s %s=%s\n", i ? "          " : "params:   ", k, v);
    }
    for (size_t i = 0; i < kestrel_job_gpu_usage_count(job); i++) {
        kestrel_gpu_usage u;
        if (kestrel_job_gpu_usage_at(job, i, &u) == 0)
            printf("  %s %s: mean %.0f%%, max %d%%, peak memory %.1f GiB (%lld samples)\n",
                   i ? "          " : "gpu use: ", u.uuid, u.mean_utilization, u.max_utilization,
                   (double)u.peak_memory / (1 << 30), (long long)u.samples);
    }
    printf("  submitted: %s   started: %s   ended: %s\n", a, b, c);
    if (kestrel_job_event_count(job)) {
        printf("  events:\n");
        for (size_t i = 0; i < kestrel_job_event_count(job); i++) {
            const kestrel_job_event *e = kestrel_job_event_at(job, i);
            fmt_time(a, sizeof(a), e->time_ms);
            char head[96];
            snprintf(head, sizeof(head), "    %s  %-9s -> %-9s  ", a, i ? kestrel_job_state_name(e->from_state) : "",
                     kestrel_job_state_name(e->to_state));
            print_indented(head, e->reason, strlen(head));
        }
    }
}

const struct option cli_opts_jobs[] = {
    { "state", required_argument, NULL, 's' }, { "name", required_argument, NULL, 'n' },
    { "label", required_argument, NULL, 'l' }, { "limit", required_argument, NULL, 'L' },
    { "param", required_argument, NULL, 'P' }, { NULL, 0, NULL, 0 }
};

int cmd_jobs(cli_ctx *ctx, int argc, char **argv)
{
    char *end;
    const struct option *opts = cli_opts_jobs;
    kestrel_job_list_options o = KESTREL_JOB_LIST_OPTIONS_INIT;
    kestrel_job_page *page;
    long limit = 50;
    int c, rc;

    while ((c = getopt_long(argc, argv, "s:n:l:L:P:", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            for (int s = 1; s <= KESTREL_JOB_STATE_PREEMPTED && !o.state; s++)
                if (!strcasecmp(optarg, kestrel_job_state_name(s)))
                    o.state = s;
            if (!o.state) {
                fprintf(stderr, "kestrel: unknown state '%s'\n", optarg);
                return 2;
            }
            break;
        case 'n': o.name = optarg; break;
        case 'l': o.label = optarg; break;
        case 'P':
            if (o.param) {
                fprintf(stderr, "kestrel: jobs takes one --param filter\n");
                return 2;
            }
            o.param = optarg;
            break;
        case 'L':
            limit = strtol(optarg, &end, 10);
            if (*end || end == optarg || limit < 1 || limit > 1000) {
                fprintf(stderr, "kestrel: --limit takes 1..1000\n");
                return 2;
            }
            break;
        default: return 2;
        }
    }
    o.page_size = (int)limit;
    if (cli_connect(ctx) < 0)
        return 1;
    if (ctx->json) {   /* the API's JobList, as curl shows it */
        char path[2048], size[16], state[16] = "";
        const char *const query[] = { "state", state, "name", o.name, "label", o.label, "param", o.param,
                                      "page_size", size, NULL };
        int st;
        snprintf(size, sizeof(size), "%d", o.page_size);
        if (o.state)
            snprintf(state, sizeof(state), "%s", kestrel_job_state_name(o.state));
        st = cli_api_path(path, sizeof(path), "/api/v1/jobs", query) < 0 ? 2 : cli_print_api_json(ctx, path);
        if (st != 1)
            return st ? 1 : 0;
    }
    if ((rc = kestrel_job_list(&page, ctx->client, &o)) < 0)
        return cli_fail("jobs", rc);
    if (ctx->json) {
        printf("[");
        for (size_t i = 0; i < kestrel_job_page_count(page); i++) {
            kestrel_buf b = KESTREL_BUF_INIT;
            kestrel_job_to_json(&b, kestrel_job_page_at(page, i));
            printf("%s%s", i ? ",\n" : "\n", b.ptr ? b.ptr : "null");
            kestrel_buf_dispose(&b);
        }
        printf("\n]\n");
    } else {
        cli_print_jobs_table(ctx, page, ctx->wide);
    }
    kestrel_job_page_free(page);
    return 0;
}

int cmd_status(cli_ctx *ctx, int argc, char **argv)
{
    kestrel_job *job;
    int64_t id;
    int rc;
    if (argc != 2 || cli_job_id(argv[1], &id) < 0) {
        return cli_usage_error("status");
    }
    if (cli_connect(ctx) < 0)
        return 1;
    if ((rc = kestrel_job_get(&job, ctx->client, id)) < 0)
        return cli_fail("status", rc);
    if (ctx->json)
        cli_print_job_json(job);
    else
        print_job(job);
    kestrel_job_free(job);
    return 0;
}

int cli_wait_exit(cli_ctx *ctx, int64_t id, long timeout_ms)
{
    kestrel_job *job;
    int rc = kestrel_job_wait(&job, ctx->client, id, timeout_ms);
    if (rc == KESTREL_ETIMEOUT) {
        cli_fail("wait", rc);
        return 124;
    }
    if (rc < 0)
        return cli_fail("wait", rc);
    if (ctx->json)
        cli_print_job_json(job);
    else
        printf("job %" PRId64 " %s: %s\n", id, kestrel_job_state_name(kestrel_job_state(job)), kestrel_job_reason(job));
    rc = kestrel_job_state(job) == KESTREL_JOB_STATE_SUCCEEDED ? 0 : 1;
    kestrel_job_free(job);
    return rc;
}

const struct option cli_opts_wait[] = { { "timeout", required_argument, NULL, 't' }, { NULL, 0, NULL, 0 } };

int cmd_wait(cli_ctx *ctx, int argc, char **argv)
{
    const struct option *opts = cli_opts_wait;
    double secs = -1;
    int64_t id;
    int c;
    while ((c = getopt_long(argc, argv, "t:", opts, NULL)) != -1) {
        char *end;
        if (c != 't')
            return cli_usage_error("wait");
        secs = strtod(optarg, &end);
        if (end == optarg || *end || !(secs >= 0 && secs <= 1e7)) {
            fprintf(stderr, "kestrel: wait: --timeout takes seconds (0.5, 30, 3600), not '%s'\n", optarg);
            return 2;
        }
    }
    if (optind != argc - 1 || cli_job_id(argv[optind], &id) < 0) {
        return cli_usage_error("wait");
    }
    if (cli_connect(ctx) < 0)
        return 1;
    return cli_wait_exit(ctx, id, secs < 0 ? -1 : (long)(secs * 1000));
}

int cmd_cancel(cli_ctx *ctx, int argc, char **argv)
{
    kestrel_job *job;
    int64_t id;
    int rc;
    if (argc != 2 || cli_job_id(argv[1], &id) < 0)
        return cli_usage_error("cancel");
    if (cli_connect(ctx) < 0)
        return 1;
    if ((rc = kestrel_job_get(&job, ctx->client, id)) < 0)
        return cli_fail("cancel", rc);
    if (kestrel_job_state_is_final(kestrel_job_state(job))) {   /* nothing to cancel: say so, exit 1 */
        fprintf(stderr, "kestrel: cancel: job %" PRId64 " already ended %s: nothing to cancel\n", id,
                kestrel_job_state_name(kestrel_job_state(job)));
        kestrel_job_free(job);
        return 1;
    }
    kestrel_job_free(job);
    if ((rc = kestrel_job_cancel(&job, ctx->client, id)) < 0)
        return cli_fail("cancel", rc);
    if (ctx->json)
        cli_print_job_json(job);
    else
        printf("job %" PRId64 " %s\n", id, kestrel_job_state(job) == KESTREL_JOB_STATE_CANCELLED ? "cancelled" : "cancelling");
    kestrel_job_free(job);
    return 0;
}

int cmd_envs(cli_ctx *ctx, int argc, char **argv)
{
    kestrel_buf b = KESTREL_BUF_INIT;
    cJSON *root, *envs, *e;
    int rc, packages = argc == 2 && !strcmp(argv[1], "--packages");
    if (argc > 2 || (argc == 2 && !packages)) {
        fprintf(stderr, "Usage: kestrel envs [--packages]\n"
                        "The server's environments: the declared ones, then those jobs' requirements made: name,\n"
                        "state, digest and package count (--packages: each package; -o json: all as JSON).\n");
        return 2;
    }
    if (cli_connect(ctx) < 0)
        return 1;
    if ((rc = kestrel_environments_get(&b, ctx->client)) < 0)
        return cli_fail("envs", rc);
    if (ctx->json || (root = cJSON_Parse(b.ptr)) == NULL) {
        printf("%s\n", b.ptr);
        kestrel_buf_dispose(&b);
        return 0;
    }
    envs = cJSON_GetObjectItemCaseSensitive(root, "environments");
    cli_row("%-24s %-10s %-20s %s", "NAME", "STATE", "DIGEST", "PACKAGES");
    cJSON_ArrayForEach(e, envs) {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "name"));
        const char *state = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "state"));
        const char *digest = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "digest"));
        const char *pk = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "packages"));
        const char *err = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "error"));
        size_t n = 0;
        for (const char *p = pk ? pk : ""; *p; p++)
            n += *p == '\n' || (!p[1] && *p != '\n');
        cli_row("%-24s %-10s %-20.20s %zu%s%s", name && name[0] ? name : "(a job's)", state ? state : "",
               digest ? digest : "", n, err && err[0] ? "  error: " : "", err && err[0] ? err : "");
        if (packages && pk && pk[0])
            for (const char *p = pk, *nl; *p; p = nl + (*nl != '\0')) {
                nl = strchr(p, '\n');
                if (nl == NULL)
                    nl = p + strlen(p);
                printf("    %.*s\n", (int)(nl - p), p);
            }
    }
    cJSON_Delete(root);
    kestrel_buf_dispose(&b);
    return 0;
}

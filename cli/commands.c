/* cli/commands.c - the job commands. */
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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

static int print_json(const kestrel_job *job)
{
    kestrel_buf b = KESTREL_BUF_INIT;
    int rc = kestrel_job_to_json(&b, job);
    if (rc < 0)
        return cli_fail("json", rc);
    printf("%s\n", b.ptr);
    kestrel_buf_dispose(&b);
    return 0;
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
    if (kestrel_job_node(job)[0])
        printf("  node:      %s\n", kestrel_job_node(job));
    printf("  reason:    %s\n", kestrel_job_reason(job));
    if (kestrel_job_exit_code(job) >= 0)
        printf("  exit code: %d\n", kestrel_job_exit_code(job));
    if (kestrel_job_git_commit(job)[0])
        printf("  commit:    %s\n", kestrel_job_git_commit(job));
    printf("  submitted: %s   started: %s   ended: %s\n", a, b, c);
    if (kestrel_job_event_count(job)) {
        printf("  events:\n");
        for (size_t i = 0; i < kestrel_job_event_count(job); i++) {
            const kestrel_job_event *e = kestrel_job_event_at(job, i);
            fmt_time(a, sizeof(a), e->time_ms);
            printf("    %s  %-9s -> %-9s  %s\n", a, i ? kestrel_job_state_name(e->from_state) : "",
                   kestrel_job_state_name(e->to_state), e->reason);
        }
    }
}

static int split_kv(const char *arg, const char *flag, char **key, const char **value)
{
    const char *eq = strchr(arg, '=');
    if (eq == NULL || eq == arg) {
        fprintf(stderr, "kestrel: %s takes KEY=VALUE, got '%s'\n", flag, arg);
        return -1;
    }
    *key = strndup(arg, (size_t)(eq - arg));
    *value = eq + 1;
    return *key ? 0 : -1;
}

static void submit_usage(FILE *f)
{
    fprintf(f,
        "Usage: kestrel submit [OPTIONS] -- PROGRAM [ARGS...]\n"
        "\n"
        "Queue a job. PROGRAM is looked up in PATH and run without a shell.\n"
        "  --gpus N               GPUs needed on one node (default 0)\n"
        "  --priority CLASS       normal, high or urgent (default normal)\n"
        "  --name NAME            display name\n"
        "  --label KEY=VALUE      label for filtering (repeatable)\n"
        "  --env KEY=VALUE        environment variable for the job (repeatable)\n"
        "  --secret-env KEY[=VALUE]  like --env, but the API shows the value as *** and the job's\n"
        "                         log masks it (API keys, passwords; repeatable). Without =VALUE the\n"
        "                         value is this shell's $KEY, so it never shows in ps\n"
        "  --git URL [--ref REF]  run in a checkout of URL at REF (branch, tag or commit)\n"
        "  --workdir DIR          run in DIR, relative to the work dir or checkout\n"
        "  --no-retry             after a daemon crash, fail instead of requeueing\n"
        "  --follow               print the job's logs until it ends, exit like 'wait'\n"
        "Placement:\n"
        "  --gpu-type TYPE        only devices of this type (e.g. a100)\n"
        "  --min-gpu-memory SIZE  only devices with this much memory (40G, 8192M)\n"
        "  --min-cc X.Y           only devices of this compute capability or newer\n"
        "  --pool POOL            only nodes of this pool\n"
        "  --after-ok ID          start after job ID succeeded (repeatable; fails if it fails)\n"
        "  --after-any ID         start after job ID ended, however (repeatable)\n"
        "  --affinity job:ID|group:G [--affinity-required]\n"
        "                         run on the node of job ID, or of group G's last job (preferred unless required)\n"
        "  --group G              make this job part of group G\n"
        "  --not-preemptible      never preempt this job for a higher class\n"
        "  --grace SECS           SIGTERM -> SIGKILL delay when stopped or preempted\n");
}

static int wait_exit(cli_ctx *ctx, int64_t id, long timeout_ms);

int cmd_submit(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {
        { "gpus", required_argument, NULL, 'g' }, { "priority", required_argument, NULL, 'p' },
        { "name", required_argument, NULL, 'n' }, { "label", required_argument, NULL, 'l' },
        { "env", required_argument, NULL, 'e' }, { "git", required_argument, NULL, 'G' },
        { "ref", required_argument, NULL, 'r' }, { "workdir", required_argument, NULL, 'w' },
        { "no-retry", no_argument, NULL, 'N' }, { "follow", no_argument, NULL, 'f' },
        { "gpu-type", required_argument, NULL, 1 }, { "min-gpu-memory", required_argument, NULL, 2 },
        { "min-cc", required_argument, NULL, 3 }, { "pool", required_argument, NULL, 4 },
        { "after-ok", required_argument, NULL, 5 }, { "after-any", required_argument, NULL, 6 },
        { "affinity", required_argument, NULL, 7 }, { "affinity-required", no_argument, NULL, 8 },
        { "group", required_argument, NULL, 9 }, { "not-preemptible", no_argument, NULL, 10 },
        { "grace", required_argument, NULL, 11 }, { "secret-env", required_argument, NULL, 12 },
        { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 }
    };
    kestrel_job_spec *spec;
    kestrel_job *job = NULL;
    const char *git = NULL, *ref = NULL, *affinity = NULL;
    int c, rc = 0, follow = 0, affinity_required = 0;

    if ((rc = kestrel_job_spec_new(&spec)) < 0)
        return cli_fail("submit", rc);
    while (rc == 0 && (c = getopt_long(argc, argv, "+g:p:n:l:e:G:r:w:Nfh", opts, NULL)) != -1) {
        char *key = NULL, *end;
        const char *val;
        int n;
        switch (c) {
        case 'g':
            n = (int)strtol(optarg, &end, 10);
            if (*end || !*optarg) {
                fprintf(stderr, "kestrel: --gpus takes a number\n");
                rc = 2;
            } else if (kestrel_job_spec_set_gpus(spec, n) < 0) {
                rc = cli_fail("--gpus", -1) + 1;
            }
            break;
        case 'p':
            if (kestrel_priority_parse(&n, optarg) < 0 || kestrel_job_spec_set_priority(spec, n) < 0)
                rc = cli_fail("--priority", -1) + 1;
            break;
        case 'n':
            if (kestrel_job_spec_set_name(spec, optarg) < 0)
                rc = cli_fail("--name", -1) + 1;
            break;
        case 'l':
        case 'e':
        case 12: {
            const char *flag = c == 'l' ? "--label" : c == 'e' ? "--env" : "--secret-env";
            if (c == 12 && !strchr(optarg, '=')) {   /* --secret-env KEY: the value from this environment */
                val = getenv(optarg);
                if (val == NULL) {
                    fprintf(stderr, "kestrel: --secret-env %s: %s is not set in this environment\n", optarg, optarg);
                    rc = 2;
                } else if (kestrel_job_spec_set_secret_env(spec, optarg, val) < 0) {
                    rc = cli_fail(flag, -1) + 1;
                }
                break;
            }
            if (split_kv(optarg, flag, &key, &val) < 0)
                rc = 2;
            else if ((c == 'l' ? kestrel_job_spec_set_label(spec, key, val)
                      : c == 'e' ? kestrel_job_spec_set_env(spec, key, val)
                                 : kestrel_job_spec_set_secret_env(spec, key, val)) < 0)
                rc = cli_fail(flag, -1) + 1;
            free(key);
            break;
        }
        case 'G': git = optarg; break;
        case 'r': ref = optarg; break;
        case 'w':
            if (kestrel_job_spec_set_workdir(spec, optarg) < 0)
                rc = cli_fail("--workdir", -1) + 1;
            break;
        case 'N': kestrel_job_spec_set_retry(spec, 0); break;
        case 'f': follow = 1; break;
        case 1:
            if (kestrel_job_spec_set_gpu_type(spec, optarg) < 0)
                rc = cli_fail("--gpu-type", -1) + 1;
            break;
        case 2: {
            double x = strtod(optarg, &end);
            double mult = (*end == 'G' || *end == 'g') ? 1024 : (*end == 'T' || *end == 't') ? 1048576 : 1;
            if (end == optarg || x < 0 || (*end && end[1]) || (*end && mult == 1 && *end != 'M' && *end != 'm')) {
                fprintf(stderr, "kestrel: --min-gpu-memory takes a size such as 40G or 8192M\n");
                rc = 2;
            } else if (kestrel_job_spec_set_min_gpu_memory(spec, (int64_t)(x * mult)) < 0) {
                rc = cli_fail("--min-gpu-memory", -1) + 1;
            }
            break;
        }
        case 3: {
            int maj, min, used = 0;
            if (sscanf(optarg, "%d.%d%n", &maj, &min, &used) != 2 || optarg[used] ||
                kestrel_job_spec_set_min_compute_capability(spec, maj, min) < 0) {
                fprintf(stderr, "kestrel: --min-cc takes MAJOR.MINOR such as 8.0\n");
                rc = 2;
            }
            break;
        }
        case 4:
            if (kestrel_job_spec_set_pool(spec, optarg) < 0)
                rc = cli_fail("--pool", -1) + 1;
            break;
        case 5:
        case 6: {
            int64_t dep;
            if (cli_job_id(optarg, &dep) < 0)
                rc = 2;
            else if (kestrel_job_spec_add_dependency(spec, dep, c == 5 ? KESTREL_AFTER_OK : KESTREL_AFTER_ANY) < 0)
                rc = cli_fail(c == 5 ? "--after-ok" : "--after-any", -1) + 1;
            break;
        }
        case 7: affinity = optarg; break;
        case 8: affinity_required = 1; break;
        case 9:
            if (kestrel_job_spec_set_group(spec, optarg) < 0)
                rc = cli_fail("--group", -1) + 1;
            break;
        case 10: kestrel_job_spec_set_preemptible(spec, 0); break;
        case 11:
            n = (int)strtol(optarg, &end, 10);
            if (*end || !*optarg || kestrel_job_spec_set_grace_period(spec, n) < 0) {
                fprintf(stderr, "kestrel: --grace takes seconds (0..86400)\n");
                rc = 2;
            }
            break;
        case 'h': submit_usage(stdout); kestrel_job_spec_free(spec); return 0;
        default: rc = 2;
        }
    }
    if (rc == 0 && affinity) {
        int64_t aid = 0;
        if (!strncmp(affinity, "job:", 4) && cli_job_id(affinity + 4, &aid) == 0)
            rc = kestrel_job_spec_set_affinity(spec, aid, NULL, affinity_required) < 0 ? cli_fail("--affinity", -1) + 1 : 0;
        else if (!strncmp(affinity, "group:", 6))
            rc = kestrel_job_spec_set_affinity(spec, 0, affinity + 6, affinity_required) < 0 ? cli_fail("--affinity", -1) + 1 : 0;
        else {
            fprintf(stderr, "kestrel: --affinity takes job:ID or group:NAME\n");
            rc = 2;
        }
    } else if (rc == 0 && affinity_required) {
        fprintf(stderr, "kestrel: --affinity-required needs --affinity\n");
        rc = 2;
    }
    if (rc == 0 && ref && !git) {
        fprintf(stderr, "kestrel: --ref needs --git\n");
        rc = 2;
    }
    if (rc == 0 && git && kestrel_job_spec_set_git(spec, git, ref) < 0)
        rc = cli_fail("--git", -1) + 1;
    if (rc == 0 && optind >= argc) {
        fprintf(stderr, "kestrel: submit needs a program: kestrel submit [OPTIONS] -- PROGRAM [ARGS...]\n");
        rc = 2;
    }
    if (rc == 0 && kestrel_job_spec_set_argv(spec, (const char *const *)argv + optind, (size_t)(argc - optind)) < 0)
        rc = cli_fail("argv", -1);
    if (rc == 2)
        submit_usage(stderr);
    if (rc == 0 && cli_connect(ctx) < 0)
        rc = 1;
    if (rc == 0 && (rc = kestrel_job_submit(&job, ctx->client, spec)) < 0)
        rc = cli_fail("submit", rc);
    kestrel_job_spec_free(spec);
    if (rc != 0)
        return rc;
    if (ctx->json)
        print_json(job);
    else
        fprintf(follow ? stderr : stdout, "submitted job %" PRId64 " (%s)\n", kestrel_job_id(job),
                kestrel_job_state_name(kestrel_job_state(job)));
    if (follow) {
        int64_t id = kestrel_job_id(job);
        char *args[] = { "logs", "-f", NULL, NULL };
        char idbuf[32];
        snprintf(idbuf, sizeof(idbuf), "%" PRId64, id);
        args[2] = idbuf;
        kestrel_job_free(job);
        optind = 0;
        if ((rc = cmd_logs(ctx, 3, args)) != 0)
            return rc;
        return wait_exit(ctx, id, -1);
    }
    kestrel_job_free(job);
    return 0;
}

int cmd_jobs(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {
        { "state", required_argument, NULL, 's' }, { "name", required_argument, NULL, 'n' },
        { "label", required_argument, NULL, 'l' }, { "limit", required_argument, NULL, 'L' },
        { NULL, 0, NULL, 0 }
    };
    kestrel_job_list_options o = KESTREL_JOB_LIST_OPTIONS_INIT;
    kestrel_job_page *page;
    long limit = 50;
    int c, rc;

    while ((c = getopt_long(argc, argv, "s:n:l:L:", opts, NULL)) != -1) {
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
        case 'L':
            limit = strtol(optarg, NULL, 10);
            if (limit < 1 || limit > 1000) {
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
        printf("%-8s %-10s %-8s %-4s %-24s %s\n", "ID", "STATE", "PRIORITY", "GPUS", "NAME", "REASON");
        for (size_t i = 0; i < kestrel_job_page_count(page); i++) {
            const kestrel_job *j = kestrel_job_page_at(page, i);
            printf("%-8" PRId64 " %-10s %-8s %-4d %-24.24s %s\n", kestrel_job_id(j),
                   kestrel_job_state_name(kestrel_job_state(j)), kestrel_priority_name(kestrel_job_priority(j)),
                   kestrel_job_gpus(j), kestrel_job_name(j)[0] ? kestrel_job_name(j) : "-", kestrel_job_reason(j));
        }
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
        fprintf(stderr, "Usage: kestrel status ID\n");
        return 2;
    }
    if (cli_connect(ctx) < 0)
        return 1;
    if ((rc = kestrel_job_get(&job, ctx->client, id)) < 0)
        return cli_fail("status", rc);
    if (ctx->json)
        print_json(job);
    else
        print_job(job);
    kestrel_job_free(job);
    return 0;
}

static int on_line(const kestrel_log_line *l, void *payload)
{
    const cli_ctx *ctx = payload;
    if (ctx->json) {
        static const char *const names[] = { "", "stdout", "stderr", "system" };
        printf("{\"offset\":%" PRId64 ",\"time_ms\":%" PRId64 ",\"stream\":\"%s\",\"text\":", l->offset, l->time_ms,
               l->stream >= 1 && l->stream <= 3 ? names[l->stream] : "");
        cli_json_string(stdout, l->text);
        printf("}\n");
    } else if (l->stream == KESTREL_LOG_STDERR) {
        fprintf(stderr, "%s\n", l->text);
    } else if (l->stream == KESTREL_LOG_SYSTEM) {
        printf("[kestrel] %s\n", l->text);
    } else {
        printf("%s\n", l->text);
    }
    fflush(stdout);
    return 0;
}

int cmd_logs(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {
        { "follow", no_argument, NULL, 'f' }, { "offset", required_argument, NULL, 'O' }, { NULL, 0, NULL, 0 }
    };
    kestrel_logs_options o = KESTREL_LOGS_OPTIONS_INIT;
    int64_t id;
    int c, rc;
    while ((c = getopt_long(argc, argv, "fO:", opts, NULL)) != -1) {
        if (c == 'f')
            o.follow = 1;
        else if (c == 'O')
            o.offset = strtoll(optarg, NULL, 10);
        else
            return 2;
    }
    if (optind != argc - 1 || cli_job_id(argv[optind], &id) < 0) {
        fprintf(stderr, "Usage: kestrel logs [-f] [--offset N] ID\n");
        return 2;
    }
    if (cli_connect(ctx) < 0)
        return 1;
    if ((rc = kestrel_job_logs(NULL, ctx->client, id, &o, on_line, ctx)) < 0)
        return cli_fail("logs", rc);
    return 0;
}

static int wait_exit(cli_ctx *ctx, int64_t id, long timeout_ms)
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
        print_json(job);
    else
        printf("job %" PRId64 " %s: %s\n", id, kestrel_job_state_name(kestrel_job_state(job)), kestrel_job_reason(job));
    rc = kestrel_job_state(job) == KESTREL_JOB_STATE_SUCCEEDED ? 0 : 1;
    kestrel_job_free(job);
    return rc;
}

int cmd_wait(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = { { "timeout", required_argument, NULL, 't' }, { NULL, 0, NULL, 0 } };
    double secs = -1;
    int64_t id;
    int c;
    while ((c = getopt_long(argc, argv, "t:", opts, NULL)) != -1) {
        if (c != 't')
            return 2;
        secs = strtod(optarg, NULL);
    }
    if (optind != argc - 1 || cli_job_id(argv[optind], &id) < 0) {
        fprintf(stderr, "Usage: kestrel wait [--timeout SECS] ID\n");
        return 2;
    }
    if (cli_connect(ctx) < 0)
        return 1;
    return wait_exit(ctx, id, secs < 0 ? -1 : (long)(secs * 1000));
}

int cmd_cancel(cli_ctx *ctx, int argc, char **argv)
{
    kestrel_job *job;
    int64_t id;
    int rc;
    if (argc != 2 || cli_job_id(argv[1], &id) < 0) {
        fprintf(stderr, "Usage: kestrel cancel ID\n");
        return 2;
    }
    if (cli_connect(ctx) < 0)
        return 1;
    if ((rc = kestrel_job_cancel(&job, ctx->client, id)) < 0)
        return cli_fail("cancel", rc);
    if (ctx->json)
        print_json(job);
    else
        printf("job %" PRId64 " %s\n", id, kestrel_job_state(job) == KESTREL_JOB_STATE_CANCELLED ? "cancelled" : "cancelling");
    kestrel_job_free(job);
    return 0;
}

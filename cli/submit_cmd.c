/* cli/submit_cmd.c - kestrel submit: a job spec from the command line. */
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

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

const char cli_help_submit[] =
        "Usage: kestrel submit [OPTIONS] -- PROGRAM [ARGS...]\n"
        "\n"
        "Queue a job. PROGRAM is looked up in PATH and run without a shell.\n"
        "  --gpus N               GPUs needed on one node (default 0); of a gang, each rank's\n"
        "  --replicas N           a gang of N processes (ranks), placed all at once on as few nodes\n"
        "                         as hold them, each with --gpus devices and KESTREL_RANK, WORLD_SIZE,\n"
        "                         MASTER_ADDR/PORT (torchrun's) and KERAS_DISTRIBUTION_* set; one\n"
        "                         failing stops the others, preemption takes all (kestrel logs --rank)\n"
        "  --priority CLASS       normal, high or urgent (default normal)\n"
        "  --name NAME            display name\n"
        "  --label KEY=VALUE      label for filtering (repeatable)\n"
        "  --param KEY=VALUE      a parameter (hyperparameter) of the run, recorded with the job and\n"
        "                         given to it as KESTREL_PARAMS, a JSON object; `kestrel jobs\n"
        "                         --param KEY=VALUE` finds it (repeatable)\n"
        "  --env KEY=VALUE        environment variable for the job (repeatable)\n"
        "  --secret-env KEY[=VALUE]  like --env, but the API shows the value as *** and the job's\n"
        "                         log masks it (API keys, passwords; repeatable). Without =VALUE the\n"
        "                         value is this shell's $KEY, so it never shows in ps\n"
        "  --code DIR             upload DIR (the files git would keep: .gitignore and .kestrelignore\n"
        "                         are honoured) as the next version of USER/code/DIRNAME and run the\n"
        "                         job in a fresh copy of it; only changed chunks travel again\n"
        "  --max-code-size SIZE   refuse a --code upload bigger than this: 64K, 200M, 1G (a plain\n"
        "                         number is MiB; default 1G)\n"
        "  --data NAME[@REF][:PATH]  a repository version (a dataset) made available read-only at\n"
        "                         PATH in the work dir (default data/LAST-NAME-SEGMENT), linked from\n"
        "                         one copy per host; the exact version is recorded (repeatable)\n"
        "  --environment NAME     run in a standard environment of the server (kestrel envs): `python`\n"
        "                         in the argv is its venv's, and `import kestrel` works there\n"
        "  --requirements FILE    or bring one: the server builds a venv of FILE (pip install -r) once,\n"
        "                         while the job is QUEUED, and every job with the same FILE reuses it\n"
        "  --git URL [--ref REF]  run in a checkout of URL at REF (branch, tag or commit)\n"
        "  --workdir DIR          run in DIR, relative to the work dir or checkout\n"
        "  --no-retry             after a daemon crash, fail instead of requeueing\n"
        "When it fails:\n"
        "  --retries N            queue a failed run (exit code, signal) again, up to N times (0..100)\n"
        "  --log-policy NAME:ACTION[,ACTION...]=REGEX  when an output line matches REGEX (POSIX\n"
        "                         extended), once a run: label, alert, no-retry, exclude-node (the\n"
        "                         retry avoids the node), retry-larger (out of memory: retry on a device\n"
        "                         with more memory); besides the server's (cuda-oom, ecc, nan-loss)\n"
        "  --exclude-node NODE    never run on NODE (repeatable)\n"
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
        "  --grace SECS           SIGTERM -> SIGKILL delay when stopped or preempted (past the\n"
        "                         server's --max-grace, 600 s, for those who may give urgent)\n";

/* --data NAME[@REF][:PATH]: PATH defaults to data/ and the name's last segment */
static int add_data(kestrel_job_spec *spec, const char *arg)
{
    char ref[512], path[512];
    const char *colon = strchr(arg, ':'), *last;
    int rc;
    snprintf(ref, sizeof(ref), "%.*s", (int)(colon ? colon - arg : (long)strlen(arg)), arg);
    if (colon && colon[1]) {
        snprintf(path, sizeof(path), "%s", colon + 1);
    } else {
        last = strrchr(ref, '/');
        snprintf(path, sizeof(path), "data/%.*s", (int)strcspn(last ? last + 1 : ref, "@"), last ? last + 1 : ref);
    }
    rc = kestrel_job_spec_add_data(spec, ref, path);
    return rc;
}

/* --requirements FILE: its text goes with the job */
static int set_requirements(kestrel_job_spec *spec, const char *path)
{
    FILE *f = fopen(path, "r");
    char buf[64 * 1024 + 2];
    size_t n;
    if (f == NULL) {
        fprintf(stderr, "kestrel: --requirements: cannot read %s\n", path);
        return 2;
    }
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    if (n > 64 * 1024 || strlen(buf) != n) {
        fprintf(stderr, "kestrel: --requirements: %s is not a requirements file of text up to 64 KiB\n", path);
        return 2;
    }
    return kestrel_job_spec_set_requirements(spec, buf) < 0 ? cli_fail("--requirements", -1) + 1 : 0;
}

static int code_progress(const kestrel_progress *p, void *payload)
{
    *(kestrel_progress *)payload = *p;
    return 0;
}

/* --code DIR: snapshot it, say what went, and point the spec at the version. */
static int push_code(cli_ctx *ctx, kestrel_job_spec *spec, const char *dir, kestrel_code_options *o)
{
    kestrel_buf ref = KESTREL_BUF_INIT;
    kestrel_progress last = { 0 };
    int rc;
    o->progress = code_progress;
    o->progress_payload = &last;
    if ((rc = kestrel_code_push(&ref, ctx->client, dir, o)) < 0)
        return cli_fail("--code", rc);
    if (kestrel_job_spec_set_code(spec, ref.ptr) < 0)
        rc = cli_fail("--code", -1);
    else
        fprintf(stderr, "code: %s is %s (%" PRId64 " bytes, %" PRId64 " of them new)\n", dir, ref.ptr,
                last.bytes_total > 0 ? last.bytes_total : last.bytes_done, last.bytes_new);
    kestrel_buf_dispose(&ref);
    return rc < 0 ? 1 : 0;
}

/* --FLAG N through the spec setter: a number (clamped to int's range, so a huge one is refused by the
 * setter, never wrapped), else a usage error. 0, or the exit code. */
static int count_flag(kestrel_job_spec *spec, int (*set)(kestrel_job_spec *, int), const char *flag, const char *v)
{
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || !*v) {
        fprintf(stderr, "kestrel: %s takes a number\n", flag);
        return 2;
    }
    return set(spec, n > INT_MAX ? INT_MAX : n < INT_MIN ? INT_MIN : (int)n) < 0 ? cli_fail(flag, -1) + 1 : 0;
}

const struct option cli_opts_submit[] = {
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
    { "param", required_argument, NULL, 13 }, { "code", required_argument, NULL, 14 },
    { "max-code-size", required_argument, NULL, 15 }, { "data", required_argument, NULL, 16 },
    { "environment", required_argument, NULL, 17 }, { "requirements", required_argument, NULL, 18 },
    { "log-policy", required_argument, NULL, 19 }, { "retries", required_argument, NULL, 20 },
    { "exclude-node", required_argument, NULL, 21 }, { "replicas", required_argument, NULL, 22 },
    { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 }
};

int cmd_submit(cli_ctx *ctx, int argc, char **argv)
{
    const struct option *opts = cli_opts_submit;
    kestrel_job_spec *spec;
    kestrel_job *job = NULL;
    const char *git = NULL, *ref = NULL, *affinity = NULL, *code = NULL;
    kestrel_code_options copts = KESTREL_CODE_OPTIONS_INIT;
    int c, rc = 0, follow = 0, affinity_required = 0;

    if ((rc = kestrel_job_spec_new(&spec)) < 0)
        return cli_fail("submit", rc);
    while (rc == 0 && (c = getopt_long(argc, argv, "+g:p:n:l:e:G:r:w:Nfh", opts, NULL)) != -1) {
        char *key = NULL, *end;
        const char *val;
        int n;
        switch (c) {
        case 'g': rc = count_flag(spec, kestrel_job_spec_set_gpus, "--gpus", optarg); break;
        case 22: rc = count_flag(spec, kestrel_job_spec_set_replicas, "--replicas", optarg); break;
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
        case 12:
        case 13: {
            const char *flag = c == 'l' ? "--label" : c == 'e' ? "--env" : c == 13 ? "--param" : "--secret-env";
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
                      : c == 13  ? kestrel_job_spec_set_param(spec, key, val)
                                 : kestrel_job_spec_set_secret_env(spec, key, val)) < 0)
                rc = cli_fail(flag, -1) + 1;
            free(key);
            break;
        }
        case 'G': git = optarg; break;
        case 14: code = optarg; break;
        case 16:
            if (add_data(spec, optarg) < 0)
                rc = cli_fail("--data", -1) + 1;
            break;
        case 17:
            if (kestrel_job_spec_set_environment(spec, optarg) < 0)
                rc = cli_fail("--environment", -1) + 1;
            break;
        case 18:
            rc = set_requirements(spec, optarg);
            break;
        case 19: {   /* NAME:ACTIONS=REGEX */
            char name[80], acts[200];
            const char *colon = strchr(optarg, ':'), *eq = colon ? strchr(colon, '=') : NULL;
            if (!colon || !eq || colon == optarg || (size_t)(colon - optarg) >= sizeof(name) ||
                (size_t)(eq - colon - 1) >= sizeof(acts)) {
                fprintf(stderr, "kestrel: --log-policy NAME:ACTION[,ACTION...]=REGEX, not '%s'\n", optarg);
                rc = 2;
                break;
            }
            snprintf(name, sizeof(name), "%.*s", (int)(colon - optarg), optarg);
            snprintf(acts, sizeof(acts), "%.*s", (int)(eq - colon - 1), colon + 1);
            if (kestrel_job_spec_add_log_policy(spec, name, eq + 1, acts) < 0)
                rc = cli_fail("--log-policy", -1) + 1;
            break;
        }
        case 20: {
            char *rend;
            long retries = strtol(optarg, &rend, 10);
            if (*rend || rend == optarg || retries < 0 || retries > 100 || optarg[0] < '0' || optarg[0] > '9') {
                fprintf(stderr, "kestrel: --retries takes a number from 0 to 100\n");   /* it said "error" past int */
                rc = 2;
            } else if (kestrel_job_spec_set_max_retries(spec, (int)retries) < 0) {
                rc = cli_fail("--retries", -1) + 1;
            }
            break;
        }
        case 21:
            if (kestrel_job_spec_exclude_node(spec, optarg) < 0)
                rc = cli_fail("--exclude-node", -1) + 1;
            break;
        case 15:
            if (cli_parse_size(optarg, &copts.max_bytes) < 0 || copts.max_bytes == 0) {
                fprintf(stderr, "kestrel: --max-code-size takes a size such as 1G or 200M\n");
                rc = 2;
            }
            break;
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
            /* finite and below 2^40 MB before the cast: nan, inf and 9.3e18M were a cast out of range,
             * undefined (they said "must not be negative"), and 8e18M queued a job no GPU holds */
            if (end == optarg || !(x >= 0 && x * mult < 1099511627776.0) || (*end && end[1]) ||
                (*end && mult == 1 && *end != 'M' && *end != 'm') ||
                strspn(optarg, "0123456789.") != (size_t)(end - optarg) || optarg[0] == '.') {   /* no 0x, e, space */
                fprintf(stderr, "kestrel: --min-gpu-memory takes a size such as 40G or 8192M\n");
                rc = 2;
            } else if (kestrel_job_spec_set_min_gpu_memory(spec, (int64_t)(x * mult + 0.5)) < 0) {
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
        case 'h': fputs(cli_help_submit, stdout); kestrel_job_spec_free(spec); return 0;
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
        cli_usage_error("submit");
    if (rc == 0 && code && git) {
        fprintf(stderr, "kestrel: --code and --git both give the job's code: choose one\n");
        rc = 2;
    }
    if (rc == 0 && cli_connect(ctx) < 0)
        rc = 1;
    if (rc == 0 && code)
        rc = push_code(ctx, spec, code, &copts);
    if (rc == 0 && (rc = kestrel_job_submit(&job, ctx->client, spec)) < 0)
        rc = cli_fail("submit", rc);
    kestrel_job_spec_free(spec);
    if (rc != 0)
        return rc;
    if (ctx->json)
        cli_print_job_json(job);
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
        return cli_wait_exit(ctx, id, -1);
    }
    kestrel_job_free(job);
    return 0;
}

/* kestrel rerun ID / kestrel reproduce NAME@REF: the job again, with what it ran with. */
int cmd_rerun(cli_ctx *ctx, int argc, char **argv)
{
    int reproduce = !strcmp(argv[0], "reproduce");
    kestrel_job *job = NULL;
    int64_t id = 0;
    int rc;
    if (argc != 2 || (!reproduce && cli_job_id(argv[1], &id) < 0) || !strcmp(argv[1], "--help")) {
        fprintf(stderr, reproduce ? "Usage: kestrel reproduce NAME[@VERSION|@ALIAS]\n"
                                    "Run the job that pushed this model version again: same code version, datasets,\n"
                                    "parameters, argv and environment (a git source at the commit it ran).\n"
                                  : "Usage: kestrel rerun ID\n"
                                    "Queue job ID again: same code version, datasets, parameters, argv and environment.\n");
        return 2;
    }
    if (cli_connect(ctx) < 0)
        return 1;
    rc = reproduce ? kestrel_job_reproduce(&job, ctx->client, argv[1]) : kestrel_job_rerun(&job, ctx->client, id);
    if (rc < 0)
        return cli_fail(argv[0], rc);
    if (ctx->json) {
        cli_print_job_json(job);
    } else {
        printf("submitted job %" PRId64 " (%s)", kestrel_job_id(job), kestrel_job_state_name(kestrel_job_state(job)));
        if (kestrel_job_code(job)[0])
            printf(" code %s", kestrel_job_code(job));
        for (size_t i = 0; i < kestrel_job_data_count(job); i++) {
            const char *ref, *path;
            if (kestrel_job_data_at(job, i, &ref, &path) == 0)
                printf("%s %s", i ? "," : " data", ref);
        }
        printf("\n");
    }
    kestrel_job_free(job);
    return 0;
}

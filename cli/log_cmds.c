/* cli/log_cmds.c - kestrel logs: one job's output, or a search of every job's (--grep). */
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include "cli.h"

const char cli_help_logs[] =
    "Usage: kestrel logs [-f] [--tail N] [--since DUR] [--timestamps] [--stream all|stdout|stderr] [--rank R] ID\n"
    "       kestrel logs --grep TEXT [--regex] [-i] [--job ID] [--state S] [--since DUR] [-C N] [--limit N]\n"
    "\n"
    "Print a job's output, or find lines across every job you may see (an admin: all jobs; a user:\n"
    "its own), newest first. A job's output:\n"
    "  -f, --follow   follow it until the job ends\n"
    "  --tail N       only its last N lines (then follow, with -f)\n"
    "  --since DUR    only lines of the last DUR (3600, 90m, 12h, 7d)\n"
    "  --timestamps   each line with its time (UTC, ISO 8601)\n"
    "  --stream S     all (default), stdout or stderr. Piped, every line goes to stdout (so\n"
    "                 kestrel logs ID | grep OOM finds a traceback); on a terminal the job's stderr\n"
    "                 lines go to stderr\n"
    "  --offset N     from line N on\n"
    "  --rank R       a gang's rank R only (kestreld puts \"[rank R] \" before each rank's lines)\n"
    "  --raw          the job's bytes as they are: its control characters (colours, \\r) reach the\n"
    "                 terminal, which obeys them; by default they are shown as ^[, ^M, <U+202E>\n"
    "Finding lines:\n"
    "  --grep TEXT    the text to find (at least 3 characters; kestreld indexes every line's trigrams)\n"
    "  --regex        TEXT is a POSIX extended regex (lines holding its longest literal are tested;\n"
    "                 one with no literal of 3 characters scans the lines, slower)\n"
    "  -i, --ignore-case\n"
    "  --job ID       only that job's lines (or give ID as the argument)\n"
    "  --state S      only jobs now in state S (failed, running, ...)\n"
    "  --since DUR    only lines of the last DUR (3600, 90m, 12h, 7d)\n"
    "  -C, --context N  N lines before and after each hit (at most 20)\n"
    "  --limit N      at most N hits (default 100)\n"
    "-o json: a job's lines as the API's LogLine objects, one a line (those of the LogChunk pages of\n"
    "GET /api/v1/jobs/ID/logs; --stream, --since and --tail pick among them); --grep: the API's\n"
    "LogSearchResult pages of GET /api/v1/logs/search, one a line (up to --limit hits).\n"
    "Exit status: 0 when something matched, 1 when nothing did (as grep), 2 on bad usage or an error.\n";

static const char *const stream_names[] = { "", "stdout", "stderr", "system" };

static const char *stream_name(int s) { return s >= 1 && s <= 3 ? stream_names[s] : ""; }

/* How a job's lines are shown (kestrel logs ID). */
typedef struct {
    const cli_ctx *ctx;
    int stream;                 /* 0 all, else only KESTREL_LOG_STDOUT or _STDERR */
    int timestamps;
    int split;                  /* the job's stderr lines to our stderr (a terminal) */
    int64_t since_ms;           /* 0: every line */
    long tail;                  /* > 0: keep the last tail lines, print them at the end */
    char rank[24];              /* --rank R: only lines starting "[rank R] ", shown without it */
    int raw;                    /* --raw: its control characters as they are (else escaped) */
    kestrel_log_line *ring;     /* tail: copies (text owned) */
    size_t ring_n, ring_at;
} show_state;

static void show(const show_state *s, const kestrel_log_line *l)
{
    FILE *f = s->split && l->stream == KESTREL_LOG_STDERR ? stderr : stdout;
    if (s->timestamps) {
        char when[40];
        time_t t = (time_t)(l->time_ms / 1000);
        struct tm tm;
        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", gmtime_r(&t, &tm));
        fprintf(f, "%s.%03dZ ", when, (int)(l->time_ms % 1000));
    }
    fputs(l->stream == KESTREL_LOG_SYSTEM ? "[kestrel] " : "", f);
    if (s->raw)
        fputs(l->text, f);
    else
        cli_fputs_safe(f, l->text);   /* stderr too: it is no filter's */
    fputc('\n', f);
    fflush(f);
}

static int on_line(const kestrel_log_line *l, void *payload)
{
    show_state *s = payload;
    kestrel_log_line own;
    if ((s->stream && l->stream != s->stream) || (s->since_ms && l->time_ms < s->since_ms))
        return 0;
    if (s->rank[0]) {   /* a gang's rank: its lines, without the prefix kestreld put before them */
        size_t plen = strlen(s->rank);
        if (l->len < plen || strncmp(l->text, s->rank, plen))
            return 0;
        own = *l;
        own.text += plen;
        own.len -= plen;
        l = &own;
    }
    if (s->tail > 0) {   /* the last tail lines: a ring of copies */
        kestrel_log_line *slot = &s->ring[s->ring_at];
        char *text = strdup(l->text);
        if (text == NULL)
            return -1;
        if (s->ring_n == (size_t)s->tail)
            free((char *)slot->text);
        else
            s->ring_n++;
        *slot = *l;
        slot->text = text;
        s->ring_at = (s->ring_at + 1) % (size_t)s->tail;
        return 0;
    }
    show(s, l);
    return 0;
}

/* Print the ring (oldest first) and free it. */
static void flush_tail(show_state *s)
{
    size_t first = s->ring_n == (size_t)s->tail ? s->ring_at : 0;
    for (size_t i = 0; i < s->ring_n; i++) {
        kestrel_log_line *l = &s->ring[(first + i) % (size_t)s->tail];
        show(s, l);
        free((char *)l->text);
    }
    free(s->ring);
    s->ring = NULL;
    s->ring_n = 0;
    s->tail = 0;
}

typedef struct {
    const cli_ctx *ctx;
    int context;
    long hits;
} search_state;

/* grep's form: "job 3 train:42:2026-12-01 10:00:01 stderr: text", context lines with '-' for ':' */
static void print_hit_line(const kestrel_log_hit *h, const kestrel_log_line *l, char sep)
{
    char when[32];
    time_t t = (time_t)(l->time_ms / 1000);
    struct tm tm;
    strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", localtime_r(&t, &tm));
    printf("job %" PRId64 " %s%c%" PRId64 "%c%s %s%c %s\n", h->job_id, h->job_name, sep, l->offset, sep, when,
           stream_name(l->stream), sep, l->text);
}

static int on_hit(const kestrel_log_hit *h, void *payload)
{
    search_state *s = payload;
    if (s->context && s->hits)
        printf("--\n");
    for (size_t i = 0; i < h->n_before; i++)
        print_hit_line(h, &h->before[i], '-');
    print_hit_line(h, h->line, ':');
    for (size_t i = 0; i < h->n_after; i++)
        print_hit_line(h, &h->after[i], '-');
    s->hits++;
    return 0;
}

static int state_by_name(const char *s)
{
    for (int st = KESTREL_JOB_STATE_QUEUED; st <= KESTREL_JOB_STATE_PREEMPTED; st++)
        if (!strcasecmp(s, kestrel_job_state_name(st)))
            return st;
    return 0;
}

const struct option cli_opts_logs[] = {
    { "follow", no_argument, NULL, 'f' }, { "offset", required_argument, NULL, 'O' },
    { "grep", required_argument, NULL, 'g' }, { "regex", no_argument, NULL, 'E' },
    { "ignore-case", no_argument, NULL, 'i' }, { "job", required_argument, NULL, 'j' },
    { "state", required_argument, NULL, 's' }, { "since", required_argument, NULL, 'S' },
    { "context", required_argument, NULL, 'C' }, { "limit", required_argument, NULL, 'n' },
    { "tail", required_argument, NULL, 'T' }, { "timestamps", no_argument, NULL, 'M' },
    { "stream", required_argument, NULL, 'R' }, { "rank", required_argument, NULL, 'K' },
    { "raw", no_argument, NULL, 'W' }, { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 }
};

int cmd_logs(cli_ctx *ctx, int argc, char **argv)
{
    const struct option *opts = cli_opts_logs;
    kestrel_logs_options o = KESTREL_LOGS_OPTIONS_INIT;
    kestrel_log_search_options so = KESTREL_LOG_SEARCH_OPTIONS_INIT;
    search_state st = { ctx, 0, 0 };
    show_state sh;
    const char *grep = NULL, *state_arg = NULL;
    int64_t id = 0, secs;
    int c, rc;
    char *end;
    memset(&sh, 0, sizeof(sh));
    sh.ctx = ctx;
    sh.split = isatty(STDOUT_FILENO);
    while ((c = getopt_long(argc, argv, "fO:iC:h", opts, NULL)) != -1) {
        switch (c) {
        case 'T':
            sh.tail = strtol(optarg, &end, 10);
            if (*end || sh.tail < 1 || sh.tail > 1000000) {
                fprintf(stderr, "kestrel: --tail takes 1..1000000 lines\n");
                return 2;
            }
            break;
        case 'M': sh.timestamps = 1; break;
        case 'W':
            sh.raw = 1;
            cli_raw_stdout();
            break;
        case 'K': {
            long rank = strtol(optarg, &end, 10);
            if (*end || !*optarg || rank < 0 || rank > 63) {
                fprintf(stderr, "kestrel: --rank takes a rank of the gang, 0..63\n");
                return 2;
            }
            snprintf(sh.rank, sizeof(sh.rank), "[rank %ld] ", rank);
            break;
        }
        case 'R':
            if (!strcmp(optarg, "all"))
                sh.stream = 0;
            else if (!strcmp(optarg, "stdout"))
                sh.stream = KESTREL_LOG_STDOUT;
            else if (!strcmp(optarg, "stderr"))
                sh.stream = KESTREL_LOG_STDERR;
            else {
                fprintf(stderr, "kestrel: --stream takes all, stdout or stderr\n");
                return 2;
            }
            break;
        case 'f': o.follow = 1; break;
        case 'O':
            o.offset = strtoll(optarg, &end, 10);
            if (end == optarg || *end || o.offset < 0) {
                fprintf(stderr, "kestrel: logs: --offset takes a line number (0, 1, ...), not '%s'\n", optarg);
                return 2;
            }
            break;
        case 'g': grep = optarg; break;
        case 'E': so.regex = 1; break;
        case 'i': so.ignore_case = 1; break;
        case 'j': if (cli_job_id(optarg, &so.job_id) < 0) return 2; break;
        case 's':
            state_arg = optarg;
            if (!(so.state = state_by_name(optarg))) {
                fprintf(stderr, "kestrel: --state takes queued, running, succeeded, failed, cancelled or preempted\n");
                return 2;
            }
            break;
        case 'S':
            if ((secs = cli_parse_duration(optarg)) <= 0) {
                fprintf(stderr, "kestrel: --since takes a duration such as 3600, 90m, 12h or 7d, not '%s'\n", optarg);
                return 2;
            }
            so.since_ms = (int64_t)time(NULL) * 1000 - secs * 1000;
            break;
        case 'C':
            so.context = (int)strtol(optarg, &end, 10);
            if (*end || so.context < 0 || so.context > 20) {
                fprintf(stderr, "kestrel: -C takes 0..20 lines\n");
                return 2;
            }
            st.context = so.context;
            break;
        case 'n':
            so.limit = (int)strtol(optarg, &end, 10);
            if (*end || so.limit < 1 || so.limit > 1000000) {
                fprintf(stderr, "kestrel: --limit takes 1..1000000 hits\n");
                return 2;
            }
            break;
        case 'h': fputs(cli_help_logs, stdout); return 0;
        default: return cli_usage_error("logs");
        }
    }
    if (grep == NULL && (so.regex || so.ignore_case || so.job_id || so.state || so.context || so.limit)) {
        fprintf(stderr, "kestrel: --regex, -i, --job, --state, -C and --limit go with --grep TEXT\n");
        return 2;
    }
    if (grep && (sh.tail || sh.timestamps || sh.stream || sh.rank[0])) {
        fprintf(stderr, "kestrel: --tail, --timestamps, --stream and --rank go with a job's output, not --grep\n");
        return 2;
    }
    sh.since_ms = so.since_ms;
    if (optind < argc && optind != argc - 1) {
        fprintf(stderr, "kestrel: logs takes one job id\n");
        return cli_usage_error("logs");
    }
    if (optind < argc && cli_job_id(argv[optind], &id) < 0)
        return 2;
    if (grep) {
        if (id && so.job_id && id != so.job_id) {
            fprintf(stderr, "kestrel: two different jobs (%" PRId64 " and --job %" PRId64 ")\n", id, so.job_id);
            return 2;
        }
        if (id)
            so.job_id = id;
        if (cli_connect(ctx) < 0)
            return 2;   /* 1 means "nothing matched" here */
        if (ctx->json)
            return cli_log_search_json(ctx, grep, &so, state_arg);
        if ((rc = kestrel_logs_search(ctx->client, grep, &so, on_hit, &st)) < 0) {
            cli_fail("logs --grep", rc);
            return 2;
        }
        return st.hits ? 0 : 1;
    }
    if (id == 0)
        return cli_usage_error("logs");
    if (cli_connect(ctx) < 0)
        return 1;
    if (ctx->json)
        return cli_logs_json(ctx, id, o.offset, o.follow,
                             sh.stream ? (sh.stream == KESTREL_LOG_STDOUT ? "STDOUT" : "STDERR") : NULL, sh.since_ms,
                             sh.tail, sh.rank);
    if (sh.tail > 0) {   /* the last N lines of what is stored, then (-f) what comes */
        int follow = o.follow;
        int64_t next = 0;
        if ((sh.ring = calloc((size_t)sh.tail, sizeof(*sh.ring))) == NULL)
            return cli_fail("logs", KESTREL_ENOMEM);
        o.follow = 0;
        rc = kestrel_job_logs(&next, ctx->client, id, &o, on_line, &sh);
        flush_tail(&sh);
        if (rc < 0)
            return cli_fail("logs", rc);
        if (!follow)
            return 0;
        o.follow = 1;
        o.offset = next;
    }
    if ((rc = kestrel_job_logs(NULL, ctx->client, id, &o, on_line, &sh)) < 0)
        return cli_fail("logs", rc);
    return 0;
}

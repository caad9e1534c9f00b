/* cli/main.c - global flags, configuration, and command dispatch. */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

static void usage(FILE *f)
{
    fprintf(f,
        "Usage: kestrel [--url URL] [--token TOKEN] [-o text|json] COMMAND [ARGS]\n"
        "\n"
        "Submit and follow training jobs on a kestreld service.\n"
        "\n"
        "Commands:\n"
        "  submit [OPTIONS] -- PROGRAM [ARGS...]   queue a job (see 'kestrel submit --help')\n"
        "  jobs [--state S] [--name N] [--label K=V] [--param K=V] [--limit N]\n"
        "                                          list your jobs, newest first\n"
        "  status ID                               show a job and its state history\n"
        "  rerun ID                                queue a job again with what it ran with\n"
        "  envs                                    the server's standard environments and their packages\n"
        "  reproduce NAME[@REF]                    rerun the job that pushed this model version\n"
        "  logs [-f] [--offset N] ID               print a job's output; -f follows until it ends\n"
        "  logs --grep TEXT [--regex] [-i] [--job ID] [--state S] [--since 2h] [-C N] [--limit N]\n"
        "                                          find lines in every job you may see, newest first\n"
        "  wait [--timeout SECS] ID                wait for a job to end; exit 0 only if it SUCCEEDED\n"
        "  cancel ID                               cancel a queued or running job\n"
        "  explain ID                              queue position and why a job waits\n"
        "  queue                                   your queued jobs in scheduling order, with reasons\n"
        "  job update ID --priority CLASS          move a queued job to another class\n"
        "  ack ID                                  acknowledge a checkpoint (from inside the job)\n"
        "  metrics [--name NAME] ID                the metrics a job reported\n"
        "  metrics --gpu ID                        its GPUs' utilisation and memory over the run\n"
        "  alerts [--job ID]                       kestreld's alerts: log policies, NaN loss, idle GPUs\n"
        "  ui [--open]                             the web console's address, logged in (your token in it)\n"
        "  push NAME PATH [--alias A] [--meta K=V] push a file or directory as the next version\n"
        "  pull REF [-o PATH]                      pull name, name@N or name@alias (file or directory), verified\n"
        "  models [NAME]                           model names, or a model's versions\n"
        "  alias NAME VERSION ALIAS                point an alias at a version\n"
        "  rm NAME@VERSION                         delete a version\n"
        "  nodes                                   the server's nodes, devices and allocations\n"
        "  devices [--select N --min-memory 40G ...]  this host's GPUs; with criteria, a selection and\n"
        "                                          the reason each other device was not chosen\n"
        "  model set NAME --visibility all|team|private   who may read a model (its writers decide)\n"
        "  token create|list|revoke                tokens: scoped, expiring, revocable (see 'kestrel token --help')\n"
        "  user set NAME --team TEAM               move a user to another team (admins)\n"
        "  login URL [--token TOKEN]               check and store URL and token in the config file (0600)\n"
        "  admin backup DIR                        online copy of the catalog and repository (admins)\n"
        "  version                                 print client and server versions\n"
        "\n"
        "Repositories: a file:///path URL opens one in-process (no daemon needed).\n"
        "Connection (first found wins): --url/--token, then KESTREL_URL/KESTREL_TOKEN,\n"
        "then ~/.config/kestrel/config with lines 'url = http://host:port' and 'token = ...'.\n"
        "https:// servers are verified against the system CAs, or the PEM bundle in KESTREL_CA_FILE.\n"
        "-o json prints the API's JSON on every read command.\n"
        "Exit status: 0 success, 1 failure, 2 usage error.\n");
}

/* "40G", "512M", "64K", "1T" (a plain number is MiB) into bytes; -1 on junk. */
int cli_parse_size(const char *v, int64_t *out)
{
    char *end;
    double x = strtod(v, &end);
    int64_t mult = 1;
    if (end == v || !(x >= 0 && x <= 1e15))   /* also NaN and inf */
        return -1;
    switch (*end) {
    case 'T': case 't': mult = 1LL << 40; end++; break;
    case 'G': case 'g': mult = 1LL << 30; end++; break;
    case 'M': case 'm': mult = 1LL << 20; end++; break;
    case 'K': case 'k': mult = 1LL << 10; end++; break;
    case '\0': mult = 1LL << 20; break;   /* plain numbers are MiB */
    default: return -1;
    }
    if (*end == 'i' || *end == 'B')
        end += *end == 'i' ? (end[1] == 'B' ? 2 : 1) : 1;
    if (*end || x * (double)mult > 9e18)
        return -1;
    *out = (int64_t)(x * (double)mult);
    return 0;
}

int cli_fail(const char *what, int rc)
{
    const kestrel_error *e = kestrel_error_last();
    fprintf(stderr, "kestrel: %s: %s\n", what, e->message[0] ? e->message : kestrel_strerror(rc));
    return 1;
}

/* "30d", "12h", "90m", "3600" -> seconds; -1 on junk. */
int64_t cli_parse_duration(const char *v)
{
    char *end;
    long long x;
    errno = 0;
    x = strtoll(v, &end, 10);
    if (errno || end == v || x < 0)
        return -1;
    switch (*end) {
    case '\0': case 's': break;
    case 'm': x *= 60; break;
    case 'h': x *= 3600; break;
    case 'd': x *= 86400; break;
    case 'w': x *= 7 * 86400; break;
    default: return -1;
    }
    return end[0] && end[1] ? -1 : x;
}

int cli_job_id(const char *s, int64_t *out)
{
    char *end;
    long long v;
    errno = 0;
    v = strtoll(s ? s : "", &end, 10);
    if (!s || !*s || *end || errno || v <= 0) {
        fprintf(stderr, "kestrel: '%s' is not a job id\n", s ? s : "");
        return -1;
    }
    *out = v;
    return 0;
}

void cli_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* Read "key = value" from ~/.config/kestrel/config (or $XDG_CONFIG_HOME). */
static char *config_value(const char *key)
{
    char path[1024], line[2048];
    const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
    char *found = NULL;
    FILE *f;
    if (xdg && *xdg)
        snprintf(path, sizeof(path), "%s/kestrel/config", xdg);
    else if (home)
        snprintf(path, sizeof(path), "%s/.config/kestrel/config", home);
    else
        return NULL;
    if ((f = fopen(path, "r")) == NULL)
        return NULL;
    while (!found && fgets(line, sizeof(line), f)) {
        char *k = line, *v, *e;
        while (*k == ' ' || *k == '\t')
            k++;
        if (*k == '#' || (v = strchr(k, '=')) == NULL)
            continue;
        for (e = v; e > k && (e[-1] == ' ' || e[-1] == '\t'); e--)
            ;
        if ((size_t)(e - k) != strlen(key) || strncmp(k, key, strlen(key)))
            continue;
        for (v++; *v == ' ' || *v == '\t'; v++)
            ;
        v[strcspn(v, "\r\n")] = '\0';
        for (e = v + strlen(v); e > v && (e[-1] == ' ' || e[-1] == '\t'); e--)
            *--e = '\0';
        found = strdup(v);
    }
    fclose(f);
    return found;
}

int cli_resolve(const cli_ctx *ctx, char **url, char **token)
{
    const char *u = ctx->url ? ctx->url : getenv("KESTREL_URL");
    const char *t = ctx->token ? ctx->token : getenv("KESTREL_TOKEN");
    *url = u && *u ? strdup(u) : config_value("url");
    *token = t && *t ? strdup(t) : config_value("token");
    if (*url == NULL) {
        fprintf(stderr, "kestrel: no server: use --url, KESTREL_URL or ~/.config/kestrel/config\n");
        free(*token);
        *token = NULL;
        return -1;
    }
    return 0;
}

int cli_connect(cli_ctx *ctx)
{
    kestrel_client_options o = KESTREL_CLIENT_OPTIONS_INIT;
    char *url, *token;
    int rc;
    if (ctx->client)
        return 0;
    if (cli_resolve(ctx, &url, &token) < 0)
        return -1;
    o.token = token;
    rc = kestrel_client_new(&ctx->client, url, &o);
    free(url);
    free(token);
    if (rc < 0) {
        cli_fail("connect", rc);
        return -1;
    }
    return 0;
}

static int cmd_version(cli_ctx *ctx)
{
    kestrel_buf v = KESTREL_BUF_INIT;
    int rc;
    printf("kestrel %s (libkestrel %s)\n", KESTREL_VERSION_STRING, kestrel_version());
    if (cli_connect(ctx) < 0)
        return 1;
    if ((rc = kestrel_client_ping(&v, ctx->client)) < 0)
        return cli_fail("server", rc);
    printf("server %s at %s\n", v.ptr, kestrel_client_url(ctx->client));
    kestrel_buf_dispose(&v);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "url", required_argument, NULL, 'u' }, { "token", required_argument, NULL, 't' },
        { "output", required_argument, NULL, 'o' }, { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 }
    };
    cli_ctx ctx = { NULL, NULL, 0, NULL };
    const char *cmd;
    int c, rc;

    while ((c = getopt_long(argc, argv, "+u:t:o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'u': ctx.url = optarg; break;
        case 't': ctx.token = optarg; break;
        case 'o':
            if (strcmp(optarg, "json") && strcmp(optarg, "text")) {
                fprintf(stderr, "kestrel: -o takes 'text' or 'json'\n");
                return 2;
            }
            ctx.json = !strcmp(optarg, "json");
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }
    cmd = argv[optind];
    argc -= optind;
    argv += optind;
    optind = 0;   /* 0: GNU getopt re-initialises its permutation state */
    if (kestrel_init() < 0)
        return cli_fail("init", -1);
    if (!strcmp(cmd, "submit")) rc = cmd_submit(&ctx, argc, argv);
    else if (!strcmp(cmd, "jobs")) rc = cmd_jobs(&ctx, argc, argv);
    else if (!strcmp(cmd, "status")) rc = cmd_status(&ctx, argc, argv);
    else if (!strcmp(cmd, "logs")) rc = cmd_logs(&ctx, argc, argv);
    else if (!strcmp(cmd, "wait")) rc = cmd_wait(&ctx, argc, argv);
    else if (!strcmp(cmd, "cancel")) rc = cmd_cancel(&ctx, argc, argv);
    else if (!strcmp(cmd, "rerun") || !strcmp(cmd, "reproduce")) rc = cmd_rerun(&ctx, argc, argv);
    else if (!strcmp(cmd, "envs")) rc = cmd_envs(&ctx, argc, argv);
    else if (!strcmp(cmd, "version")) rc = cmd_version(&ctx);
    else if (!strcmp(cmd, "explain")) rc = cmd_explain(&ctx, argc, argv);
    else if (!strcmp(cmd, "queue")) rc = cmd_queue(&ctx, argc, argv);
    else if (!strcmp(cmd, "job")) rc = cmd_job(&ctx, argc, argv);
    else if (!strcmp(cmd, "ack")) rc = cmd_ack(&ctx, argc, argv);
    else if (!strcmp(cmd, "metrics")) rc = cmd_metrics(&ctx, argc, argv);
    else if (!strcmp(cmd, "push")) rc = cmd_push(&ctx, argc, argv);
    else if (!strcmp(cmd, "pull")) rc = cmd_pull(&ctx, argc, argv);
    else if (!strcmp(cmd, "models")) rc = cmd_models(&ctx, argc, argv);
    else if (!strcmp(cmd, "alias")) rc = cmd_alias(&ctx, argc, argv);
    else if (!strcmp(cmd, "rm")) rc = cmd_rm(&ctx, argc, argv);
    else if (!strcmp(cmd, "devices")) rc = cmd_devices(&ctx, argc, argv);
    else if (!strcmp(cmd, "nodes")) rc = cmd_nodes(&ctx, argc, argv);
    else if (!strcmp(cmd, "token")) rc = cmd_token(&ctx, argc, argv);
    else if (!strcmp(cmd, "user")) rc = cmd_user(&ctx, argc, argv);
    else if (!strcmp(cmd, "login")) rc = cmd_login(&ctx, argc, argv);
    else if (!strcmp(cmd, "model")) rc = cmd_model(&ctx, argc, argv);
    else if (!strcmp(cmd, "admin")) rc = cmd_admin(&ctx, argc, argv);
    else if (!strcmp(cmd, "alerts")) rc = cmd_alerts(&ctx, argc, argv);
    else if (!strcmp(cmd, "ui")) rc = cmd_ui(&ctx, argc, argv);
    else if (!strcmp(cmd, "help")) { usage(stdout); rc = 0; }
    else {
        fprintf(stderr, "kestrel: unknown command '%s' (see kestrel --help)\n", cmd);
        rc = 2;
    }
    kestrel_client_free(ctx.client);
    kestrel_shutdown();
    return rc;
}

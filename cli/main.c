/* cli/main.c - global flags, configuration, and command dispatch. */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

static void usage(FILE *f)
{
    fprintf(f,
        "Usage: kestrel [--url URL] [--token TOKEN] [-o table|wide|json|yaml] COMMAND [ARGS]\n"
        "       kestrel help [COMMAND]     kestrel COMMAND --help     kestrel --version\n"
        "\n"
        "Submit and follow training jobs on a kestreld service; push and pull models and datasets.\n"
        "\n");
    cli_print_commands(f);
    fprintf(f,
        "\n"
        "Repositories: a file:///path URL opens one in-process (no daemon needed).\n"
        "Connection (first found wins): --url/--token, then KESTREL_URL/KESTREL_TOKEN,\n"
        "then ~/.config/kestrel/config with lines 'url = http://host:port' and 'token = ...'.\n"
        "https:// servers are verified against the system CAs, or the PEM bundle in KESTREL_CA_FILE.\n"
        "-o table|wide|json|yaml goes anywhere on the line (before --): json is the API's JSON, yaml the same as YAML.\n"
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
    if (ctx->json) {   /* the server's Health, and this client's versions beside it */
        if (cli_connect(ctx) < 0)
            return 1;
        if ((rc = kestrel_client_get_json(&v, ctx->client, "/healthz")) < 0)
            return cli_fail("server", rc);
        printf("{\"client\":\"%s\",\"libkestrel\":\"%s\",\"server\":%.*s}\n", KESTREL_VERSION_STRING, kestrel_version(),
               (int)(v.size && v.ptr[v.size - 1] == '\n' ? v.size - 1 : v.size), v.ptr);
        kestrel_buf_dispose(&v);
        return 0;
    }
    printf("kestrel %s (libkestrel %s)\n", KESTREL_VERSION_STRING, kestrel_version());
    if (cli_connect(ctx) < 0)
        return 1;
    if ((rc = kestrel_client_ping(&v, ctx->client)) < 0)
        return cli_fail("server", rc);
    printf("server %s at %s\n", v.ptr, kestrel_client_url(ctx->client));
    kestrel_buf_dispose(&v);
    return 0;
}

/* kestrel help [CMD], kestrel completion bash|zsh, kestrel help --man */
static int cmd_help(int argc, char **argv)
{
    const cli_command *c;
    if (argc < 2) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--man")) {
        cli_man_page(stdout);
        return 0;
    }
    if ((c = cli_command_find(argv[1])) == NULL) {
        const char *s = cli_suggest_command(argv[1]);
        fprintf(stderr, "kestrel: no command '%s'%s%s%s (kestrel help lists them)\n", argv[1], s ? "; did you mean '" : "",
                s ? s : "", s ? "'?" : "");
        return 2;
    }
    fputs(c->help, stdout);
    return 0;
}

static int cmd_completion(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "bash"))
        cli_completion_bash(stdout);
    else if (argc == 2 && !strcmp(argv[1], "zsh"))
        cli_completion_zsh(stdout);
    else
        return cli_usage_error("completion");
    return 0;
}

/* CMD --help (or -h) anywhere before "--": that command's help, whatever it would do with it. */
static int wants_help(const cli_command *cmd, int argc, char **argv)
{
    int end = cli_scan_end(cmd, argc, argv);
    for (int i = 1; i < end; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            return 1;
        if (cli_takes_value(cmd, argv[i]))
            i++;   /* an option's value, even "-h" */
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "url", required_argument, NULL, 'u' }, { "token", required_argument, NULL, 't' },
        { "output", required_argument, NULL, 'o' }, { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' }, { NULL, 0, NULL, 0 }
    };
    cli_ctx ctx = { NULL, NULL, 0, 0, 0, NULL };
    const cli_command *command;
    const char *cmd;
    char **norm = NULL;
    int c, rc;

    while ((c = getopt_long(argc, argv, "+u:t:o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'u': ctx.url = optarg; break;
        case 't': ctx.token = optarg; break;
        case 'o':
            if (cli_output_flag(&ctx, optarg) != 0)
                return 2;
            break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("kestrel %s (libkestrel %s)\n", KESTREL_VERSION_STRING, kestrel_version()); return 0;
        default:
            fputs("usage: kestrel [--url URL] [--token TOKEN] [-o table|wide|json|yaml] COMMAND [ARGS]\n"
                  "see 'kestrel --help'\n", stderr);
            return 2;
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
    if ((command = cli_command_find(cmd)) == NULL) {
        const char *s = cli_suggest_command(cmd);
        fprintf(stderr, "kestrel: '%s' is not a kestrel command.", cmd);
        if (s)
            fprintf(stderr, " Did you mean '%s'?", s);
        fputs("\nsee 'kestrel --help'\n", stderr);
        return 2;
    }
    if (wants_help(command, argc, argv)) {
        fputs(command->help, stdout);
        return 0;
    }
    if (!strcmp(cmd, "help"))
        return cmd_help(argc, argv);
    if (!strcmp(cmd, "completion"))
        return cmd_completion(argc, argv);
    if ((rc = cli_take_output_flags(&ctx, command, &argc, argv)) != 0 || (rc = cli_check_options(command, argc, argv)) != 0)
        return rc;
    if ((norm = cli_normalize_options(command, &argc, argv)) != NULL)
        argv = norm;
    if (kestrel_init() < 0)
        return cli_fail("init", -1);
    if (!ctx.json)
        cli_safe_stdout();   /* tables and text: what the server holds is shown, never obeyed */
    if (command->run == NULL)
        rc = cmd_version(&ctx);
    else if (ctx.yaml)
        rc = cli_run_as_yaml(&ctx, command, argc, argv);
    else
        rc = command->run(&ctx, argc, argv);
    kestrel_client_free(ctx.client);
    kestrel_shutdown();
    free(norm);
    cli_raw_stdout();   /* the filter's last bytes written */
    return rc;
}

/* cli/token_cmds.c - `kestrel token create|list|revoke`, `kestrel user set`, `kestrel login`, `kestrel admin`. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "cli.h"

const char cli_help_token[] =
    "Usage: kestrel token create [--user U] [--team T] [--expires 30d] [--scope read|write|admin|metrics] [--name N]\n"
    "       kestrel token list [--user U]\n"
    "       kestrel token revoke ID\n"
    "\n"
    "Tokens are shown once, at creation; the server keeps only their hash.\n"
    "  create   a token for yourself (read or write), or, as an admin, for any user (the user is\n"
    "           created, in --team, when it does not exist) and admin tokens for admins.\n"
    "           --expires takes seconds or a number with s, m, h, d or w (default: never).\n"
    "           read-scoped tokens can only read (GET): give them to inference programs and CI.\n"
    "           metrics-scoped tokens (made by an admin) can only GET /metrics: give one to Prometheus.\n"
    "  list     your tokens (an admin: everyone's, or --user's): id, scope, expiry, last 4 characters\n"
    "  revoke   the token gets 401 from now on\n";


static void fmt_time(char *buf, size_t n, int64_t ms, const char *none)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (ms <= 0)
        snprintf(buf, n, "%s", none);
    else
        strftime(buf, n, "%Y-%m-%d %H:%M:%S", gmtime_r(&t, &tm));
}

const struct option cli_opts_token_create[] = {
    { "user", required_argument, NULL, 'u' }, { "team", required_argument, NULL, 't' },
    { "expires", required_argument, NULL, 'e' }, { "scope", required_argument, NULL, 's' },
    { "name", required_argument, NULL, 'n' }, { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 }
};

static int token_create(cli_ctx *ctx, int argc, char **argv)
{
    const struct option *opts = cli_opts_token_create;
    kestrel_token_options o = KESTREL_TOKEN_OPTIONS_INIT;
    kestrel_buf tok = KESTREL_BUF_INIT;
    int64_t id = 0;
    int c, rc;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'u': o.user = optarg; break;
        case 't': o.team = optarg; break;
        case 'n': o.name = optarg; break;
        case 's':
            if (strcmp(optarg, "read") && strcmp(optarg, "write") && strcmp(optarg, "admin") && strcmp(optarg, "metrics")) {
                fprintf(stderr, "kestrel: --scope takes read, write, admin or metrics, not '%s'\n", optarg);
                return 2;
            }
            o.scope = optarg;
            break;
        case 'e':
            if ((o.expires_s = cli_parse_duration(optarg)) <= 0) {
                fprintf(stderr, "kestrel: --expires takes a duration such as 3600, 90m, 12h, 30d or 2w, not '%s'\n",
                        optarg);
                return 2;
            }
            break;
        case 'h': fputs(cli_help_token, stdout); return 0;
        default: return cli_usage_error("token");
        }
    }
    if (optind < argc) {
        fprintf(stderr, "kestrel: token create: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (cli_connect(ctx) < 0)
        return 1;
    if ((rc = kestrel_token_create(&tok, &id, ctx->client, &o)) < 0)
        return cli_fail("token create", rc);
    if (ctx->json) {
        printf("{\"id\": %" PRId64 ", \"token\": ", id);
        cli_json_string(stdout, tok.ptr);
        printf("}\n");
    } else {
        printf("%s\n", tok.ptr);
        fprintf(stderr, "kestrel: token %" PRId64 " created; it is shown only now\n", id);
    }
    kestrel_buf_dispose(&tok);
    return 0;
}

const struct option cli_opts_token_list[] = {
    { "user", required_argument, NULL, 'u' }, { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 }
};

static int token_list(cli_ctx *ctx, int argc, char **argv)
{
    const struct option *opts = cli_opts_token_list;
    kestrel_token_list *l;
    const char *user = NULL;
    int c, rc;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'u': user = optarg; break;
        case 'h': fputs(cli_help_token, stdout); return 0;
        default: return cli_usage_error("token");
        }
    }
    if (cli_connect(ctx) < 0)
        return 1;
    if (ctx->json) {   /* the API's TokenList, as curl shows it */
        char path[512];
        const char *const query[] = { "user", user, NULL };
        int st;
        if (cli_api_path(path, sizeof(path), "/api/v1/tokens", query) < 0) {
            fprintf(stderr, "kestrel: token list: --user is too long\n");
            return 2;
        }
        if ((st = cli_print_api_json(ctx, path)) != 1)
            return st ? 1 : 0;
    }
    if ((rc = kestrel_token_list_get(&l, ctx->client, user)) < 0)
        return cli_fail("token list", rc);
    cli_row("%-5s %-16s %-6s %-20s %-20s %-8s %s", "ID", "USER", "SCOPE", "CREATED", "EXPIRES", "STATE", "NAME");
    for (size_t i = 0; i < kestrel_token_list_count(l); i++) {
        const kestrel_token_info *t = kestrel_token_list_at(l, i);
        int expired = t->expires_ms && t->expires_ms <= (int64_t)time(NULL) * 1000;
        const char *state = t->revoked_ms ? "revoked" : expired ? "expired" : "live";
        char created[32], expires[32];
        fmt_time(created, sizeof(created), t->created_ms, "-");
        fmt_time(expires, sizeof(expires), t->expires_ms, "never");
        cli_row("%-5" PRId64 " %-16s %-6s %-20s %-20s %-8s %s%s…%s", t->id, t->user, t->scope, created, expires, state,
                t->name, t->name[0] ? " " : "", t->hint);
    }
    kestrel_token_list_free(l);
    return 0;
}

int cmd_token(cli_ctx *ctx, int argc, char **argv)
{
    int64_t id;
    int rc;
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(cli_help_token, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "create"))
        return token_create(ctx, argc - 1, argv + 1);
    if (!strcmp(argv[1], "list"))
        return token_list(ctx, argc - 1, argv + 1);
    if (!strcmp(argv[1], "revoke")) {
        if (argc != 3) {
            fprintf(stderr, "kestrel: usage: kestrel token revoke ID\n");
            return 2;
        }
        if (cli_job_id(argv[2], &id) < 0)
            return 2;
        if (cli_connect(ctx) < 0)
            return 1;
        if ((rc = kestrel_token_revoke(ctx->client, id)) < 0)
            return cli_fail("token revoke", rc);
        printf("token %" PRId64 " revoked\n", id);
        return 0;
    }
    fprintf(stderr, "kestrel: token: unknown subcommand '%s' (create, list, revoke)\n", argv[1]);
    return 2;
}

int cmd_user(cli_ctx *ctx, int argc, char **argv)
{
    int rc;
    if (argc != 5 || strcmp(argv[1], "set") || strcmp(argv[3], "--team")) {
        fprintf(stderr, "Usage: kestrel user set NAME --team TEAM   (admins; TEAM \"\" takes the user out of its team)\n");
        return argc == 2 && !strcmp(argv[1], "--help") ? 0 : 2;
    }
    if (cli_connect(ctx) < 0)
        return 1;
    if ((rc = kestrel_user_set_team(ctx->client, argv[2], argv[4])) < 0)
        return cli_fail("user set", rc);
    printf("user %s: team '%s'\n", argv[2], argv[4]);
    return 0;
}

/* kestrel login URL [--token T]: check the token against the server, then store both (0600). */
int cmd_login(cli_ctx *ctx, int argc, char **argv)
{
    char path[1024], tmp[1100], line[512];
    const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME"), *token = ctx->token;
    kestrel_job_list_options lo = KESTREL_JOB_LIST_OPTIONS_INIT;
    kestrel_client_options co = KESTREL_CLIENT_OPTIONS_INIT;
    kestrel_job_page *page;
    kestrel_client *c;
    FILE *f;
    int rc, fd;
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--token") && i + 1 < argc)
            token = argv[++i];
    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr, "Usage: kestrel login URL [--token TOKEN]\n"
                        "Stores URL and TOKEN (asked for on standard input when not given) in the config file\n"
                        "(mode 0600) after checking them against the server.\n");
        return argc >= 2 && !strcmp(argv[1], "--help") ? 0 : 2;
    }
    if (token == NULL || !*token) {
        fprintf(stderr, "token for %s: ", argv[1]);
        if (!fgets(line, sizeof(line), stdin)) {
            fprintf(stderr, "\nkestrel: no token given\n");
            return 2;
        }
        line[strcspn(line, "\r\n")] = '\0';
        token = line;
    }
    co.token = token;
    if ((rc = kestrel_client_new(&c, argv[1], &co)) < 0)
        return cli_fail("login", rc);
    lo.page_size = 1;
    rc = kestrel_job_list(&page, c, &lo);
    kestrel_client_free(c);
    if (rc < 0)
        return cli_fail("login", rc);
    kestrel_job_page_free(page);
    if (xdg && *xdg)
        snprintf(path, sizeof(path), "%s/kestrel", xdg);
    else if (home && *home)
        snprintf(path, sizeof(path), "%s/.config", home);
    else {
        fprintf(stderr, "kestrel: login: no HOME to store the config in\n");
        return 1;
    }
    mkdir(path, 0700);
    if (!(xdg && *xdg)) {
        strncat(path, "/kestrel", sizeof(path) - strlen(path) - 1);
        mkdir(path, 0700);
    }
    snprintf(tmp, sizeof(tmp), "%s/config.tmp", path);
    strncat(path, "/config", sizeof(path) - strlen(path) - 1);
    unlink(tmp);   /* a leftover may have another mode: the new file is made 0600 or not at all */
    if ((fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0 || (f = fdopen(fd, "w")) == NULL) {
        fprintf(stderr, "kestrel: login: cannot write %s: %s\n", tmp, strerror(errno));
        return 1;
    }
    fprintf(f, "# written by kestrel login\nurl = %s\ntoken = %s\n", argv[1], token);
    if (fflush(f) != 0 || fsync(fd) != 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
        fprintf(stderr, "kestrel: login: cannot write %s: %s\n", path, strerror(errno));
        unlink(tmp);
        return 1;
    }
    printf("logged in to %s (stored in %s)\n", argv[1], path);
    return 0;
}

/* kestrel admin backup DIR */
int cmd_admin(cli_ctx *ctx, int argc, char **argv)
{
    int64_t files = 0, bytes = 0;
    int rc;
    if (argc == 2 && !strcmp(argv[1], "fsck")) {
        kestrel_buf damaged = KESTREL_BUF_INIT;
        int64_t checked = 0, bad = 0;
        if (cli_connect(ctx) < 0)
            return 1;
        if ((rc = kestrel_admin_fsck(&damaged, &checked, &bad, ctx->client)) < 0)
            return cli_fail("admin fsck", rc);
        printf("checked %lld chunks: %lld damaged (quarantined: the next push of that data heals them)\n",
               (long long)checked, (long long)bad);
        rc = damaged.size || bad ? 1 : 0;
        if (damaged.size)
            printf("versions missing a chunk:\n%s", damaged.ptr);
        kestrel_buf_dispose(&damaged);
        return rc;
    }
    if (argc != 3 || strcmp(argv[1], "backup")) {
        fprintf(argc == 2 && !strcmp(argv[1], "--help") ? stdout : stderr,
                "Usage: kestrel admin backup DIR | kestrel admin fsck\n"
                "fsck: re-hash every stored chunk, quarantine the damaged, list the versions they break\n"
                "(exit 1 when any). backup:\n"
                "A consistent online copy of the server's catalog and repository into DIR, a new absolute\n"
                "path on the server's host (hard links where possible); kestreld --data-dir DIR starts on it.\n"
                "Admins only. Job work dirs and checkpoints are not copied.\n");
        return argc == 2 && !strcmp(argv[1], "--help") ? 0 : 2;
    }
    if (cli_connect(ctx) < 0)
        return 1;
    if ((rc = kestrel_admin_backup(ctx->client, argv[2], &files, &bytes)) < 0)
        return cli_fail("admin backup", rc);
    printf("backed up into %s: the catalog and %lld repository files (%lld bytes)\n", argv[2], (long long)files,
           (long long)bytes);
    return 0;
}

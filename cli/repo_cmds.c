/* cli/repo_cmds.c - push, pull, models, alias, rm, gc, model (a model's settings). */
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "cli.h"

/* The last progress report: the figures a push or pull ends with. */
static kestrel_progress last;

/* SIGINT or SIGTERM during a push or pull: its number. The transfer stops at its next progress
 * report (about every 100 ms while bytes move), which removes what it had half-written (a pull's
 * temp file or directory; a push commits nothing, or, stopped while its commit was unanswered, says
 * that its version may have been made), then kestrel ends by that signal. One that comes
 * after the last report (the version committed, dest in place) cannot stop it: kestrel prints the
 * result, then ends by the signal. A second one ends it at once (the handler is reset by the first). */
static volatile sig_atomic_t stopped_by;

static void on_stop(int sig)
{
    stopped_by = sig;
}

static void stop_on_signals(void)
{
    static const int sigs[] = { SIGINT, SIGTERM };
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
        struct sigaction sa, old;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_stop;
        sa.sa_flags = SA_RESETHAND | SA_RESTART;   /* the library's threads see no EINTR */
        sigemptyset(&sa.sa_mask);
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)   /* ignored (nohup, &): stays so */
            sigaction(sigs[i], &sa, NULL);
    }
}

/* End by the signal that came during the transfer, as its default action would (a shell running
 * kestrel in a script then stops too), after what was printed is out. */
static void end_by_signal(void)
{
    int sig = stopped_by;
    if (!sig)
        return;
    fflush(stdout);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* A transfer that failed: said as usual (a failure of its own, though a signal came too), or, when
 * the signal stopped it, said so; then ended by the signal if one came. A push stopped while its
 * commit was unanswered says so in the library's message (kestrel_model_push,
 * kestrel_error_outcome_unknown): that one is shown. */
static int transfer_failed(const char *what, int rc)
{
    int code = 128 + stopped_by;
    const char *msg = kestrel_error_last()->message;
    if (!stopped_by || rc != KESTREL_ECANCELLED)
        code = cli_fail(what, rc);
    else if (kestrel_error_outcome_unknown())
        fprintf(stderr, "\nkestrel: %s: stopped by %s; %s\n", what, strsignal(stopped_by), msg);
    else
        fprintf(stderr, "\nkestrel: %s: stopped by %s; nothing half-written is left\n", what, strsignal(stopped_by));
    end_by_signal();
    return code;
}

/* A one-line progress bar on a terminal (stderr), silent otherwise; stops the transfer on a signal. */
static int bar(const kestrel_progress *p, void *payload)
{
    const char *what = payload;
    double frac = p->bytes_total > 0 ? (double)p->bytes_done / (double)p->bytes_total : 1;
    int fill = (int)(frac * 30);
    last = *p;
    if (stopped_by)
        return 1;
    if (!isatty(2) || p->bytes_total < 0)   /* nothing to draw before the size is known */
        return 0;
    fprintf(stderr, "\r%s [%-30.*s] %5.1f%%  %" PRId64 " MiB", what, fill, "##############################", 100 * frac,
            p->bytes_done >> 20);
    if (p->phase == KESTREL_PHASE_PUSH)
        fprintf(stderr, ", %" PRId64 " MiB new", p->bytes_new >> 20);
    if (p->bytes_done == p->bytes_total)
        fprintf(stderr, "\n");
    return 0;
}

/* n bytes for a person: "20 bytes", "3.5 KiB", "3.0 MiB", "1.25 GiB" (a small push said "0.0 MiB"); the
 * unit picked after rounding, so that 1048575 bytes are "1.0 MiB", not "1024.0 KiB". */
static const char *size_text(int64_t n, char *out, size_t len)
{
    static const char *const unit[] = { "KiB", "MiB", "GiB", "TiB" };
    double v = (double)n / 1024;
    int u = 0;
    if (n < 1024) {
        snprintf(out, len, "%" PRId64 " byte%s", n, n == 1 ? "" : "s");
        return out;
    }
    while (u < 3 && v >= (u < 2 ? 1023.95 : 1023.995)) {
        v /= 1024;
        u++;
    }
    snprintf(out, len, u < 2 ? "%.1f %s" : "%.2f %s", v, unit[u]);
    return out;
}

/* The last name of a path (the whole of one without '/'). */
static char *last_name(char *path)
{
    char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static int push_usage(void)
{
    return cli_usage_error("push");
}

const struct option cli_opts_push[] = {
    { "alias", required_argument, NULL, 'a' }, { "meta", required_argument, NULL, 'm' }, { NULL, 0, NULL, 0 }
};

int cmd_push(cli_ctx *ctx, int argc, char **argv)
{
    const struct option *opts = cli_opts_push;
    kestrel_transfer_options o = KESTREL_TRANSFER_OPTIONS_INIT;
    char *meta = NULL;
    size_t metalen = 0;
    FILE *mf = open_memstream(&meta, &metalen);
    int64_t v = 0;
    int c, rc, nmeta = 0, has_filename = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, "a:m:", opts, NULL)) != -1) {
        const char *eq;
        if (c == 'a') {
            o.alias = optarg;
        } else if (c == 'm' && (eq = strchr(optarg, '=')) != NULL && eq != optarg) {
            char *key = strndup(optarg, (size_t)(eq - optarg));
            has_filename |= key && !strcmp(key, "filename");
            fputs(nmeta++ ? "," : "{", mf);
            cli_json_string(mf, key);
            fputc(':', mf);
            cli_json_string(mf, eq + 1);
            free(key);
        } else {
            fclose(mf);
            free(meta);
            return push_usage();
        }
    }
    if (optind == argc - 2 && !has_filename) {   /* the pushed file's name: pull gives it back */
        char *path = strdup(argv[optind + 1]), *base;
        size_t len = path ? strlen(path) : 0;
        while (len > 1 && path[len - 1] == '/')
            path[--len] = '\0';
        base = path ? last_name(path) : NULL;
        if (base && (!strcmp(base, ".") || !strcmp(base, ".."))) {
            char *real = realpath(path, NULL);   /* "tree/.", "..": the folder's own name */
            free(path);
            path = real;
            base = path ? last_name(path) : NULL;
        }
        if (base && *base && strcmp(base, ".") && strcmp(base, "..")) {
            fputs(nmeta++ ? "," : "{", mf);
            cli_json_string(mf, "filename");
            fputc(':', mf);
            cli_json_string(mf, base);
        }
        free(path);
    }
    if (nmeta)
        fputc('}', mf);
    fclose(mf);
    if (optind != argc - 2) {
        free(meta);
        return push_usage();
    }
    if (cli_connect(ctx) < 0) {
        free(meta);
        return 1;
    }
    o.metadata_json = nmeta ? meta : NULL;
    o.progress = bar;
    o.progress_payload = "push";
    stop_on_signals();
    rc = kestrel_model_push(&v, ctx->client, argv[optind], argv[optind + 1], &o);
    free(meta);
    if (rc < 0)
        return transfer_failed("push", rc);
    if (ctx->json)
        printf("{\"name\":\"%s\",\"version\":%" PRId64 ",\"bytes\":%" PRId64 ",\"bytes_new\":%" PRId64
               ",\"chunks\":%" PRId64 ",\"chunks_new\":%" PRId64 "}\n",
               argv[optind], v, last.bytes_total, last.bytes_new, last.chunks_done, last.chunks_new);
    else {
        char all[32], fresh[32];
        printf("pushed %s@%" PRId64 " (%s, %s new)\n", argv[optind], v, size_text(last.bytes_total, all, sizeof(all)),
               size_text(last.bytes_new, fresh, sizeof(fresh)));
    }
    end_by_signal();   /* one that came too late to stop it: the version is there, said above */
    return 0;
}

const struct option cli_opts_pull[] = { { "dest", required_argument, NULL, 'd' }, { "output", required_argument, NULL, 'o' },
                                        { "replace", no_argument, NULL, 'r' }, { NULL, 0, NULL, 0 } };

/* A name a version's metadata may give its pull: one plain entry of a folder, shown as it is. Not
 * hidden (no leading '.': .ssh, .bashrc), no leading '-' (an option to a later command), no separator,
 * no control character (C0, DEL, C1 as UTF-8: a terminal obeys them) nor bidirectional mark (the name
 * shown would not be the name), at most 255 bytes. The metadata is whoever pushed it's to write (it
 * arrives as UTF-8: the library checks every string it decodes). */
static int plain_name(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    if (n == 0 || n > 255 || s[0] == '.' || s[0] == '-')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (p[i] == '/' || p[i] == '\\' || cli_control_len(p + i, n - i))   /* safe_out.c */
            return 0;
    return 1;
}

/* The name a version was pushed from (its metadata's "filename", which kestrel push sets), when it
 * is a plain name (plain_name); else "", and *odd set when it gave one that is not. ref is NAME,
 * NAME@N, NAME@latest or NAME@ALIAS. */
static void pushed_name(cli_ctx *ctx, const char *ref, char *out, size_t n, int *odd)
{
    kestrel_model_versions *vs;
    const kestrel_model_version *pick;
    cJSON *meta, *f;
    out[0] = '\0';
    /* that version's listing alone (a model of thousands of versions was read whole for it) */
    if (kestrel_model_version_get(&vs, ctx->client, ref) < 0) {
        kestrel_error_clear();   /* no name to take: the pull says what is wrong with ref */
        return;
    }
    pick = kestrel_model_versions_at(vs, 0);
    if (pick && pick->metadata_json && (meta = cJSON_Parse(pick->metadata_json)) != NULL) {
        f = cJSON_GetObjectItemCaseSensitive(meta, "filename");
        if (cJSON_IsString(f) && plain_name(f->valuestring) && strlen(f->valuestring) < n)
            snprintf(out, n, "%s", f->valuestring);
        else if (cJSON_IsString(f) && *f->valuestring)
            *odd = 1;
        cJSON_Delete(meta);
    }
    kestrel_model_versions_free(vs);
}

/* The last names of a folder and of the path made in it are the same (val/val). */
static int same_leaf(const char *folder, const char *made)
{
    const char *a = strrchr(folder, '/'), *b = strrchr(made, '/');
    a = a ? a + 1 : folder;
    b = b ? b + 1 : made;
    return !strcmp(a, b);
}

/* DEST when kestrel picks the name, in folder dir ("" the current one): the pushed name, else the
 * model's last name segment (a plain name by the rules of names). 0, or 1 when the pushed name is
 * taken and exists: it replaces nothing without --replace, being the pusher's to choose; the model's
 * segment is the puller's own, typed in REF, and replaces what is there as a given DEST does. */
static int picked_dest(cli_ctx *ctx, const char *ref, const char *dir, int replace, char *out, size_t n)
{
    char name[512];
    struct stat st;
    int odd = 0, pushed;
    pushed_name(ctx, ref, name, sizeof(name), &odd);
    pushed = name[0] != '\0';
    if (!pushed) {
        const char *base = strrchr(ref, '/');
        snprintf(name, sizeof(name), "%s", base ? base + 1 : ref);
        name[strcspn(name, "@")] = '\0';
    }
    if (odd)
        fprintf(stderr, "kestrel: pull: the name %s was pushed from is not a plain file name (hidden, starting with "
                        "'-', or with a separator, a control character or a bidirectional mark): writing %s instead\n",
                ref, name);
    snprintf(out, n, "%s%s%s", dir, *dir ? "/" : "", name);
    if (pushed && !replace && lstat(out, &st) == 0) {   /* a path given that is a folder goes inside it too: */
        fprintf(stderr, "kestrel: pull: %s exists; its name is the one %s was pushed from (the pusher's choice), so "
                        "it replaces nothing there: add --replace to replace it, or give a path that does not exist "
                        "(kestrel pull %s NEW-PATH)\n", out, ref, ref);   /* (found by a hostile test) */
        return 1;
    }
    /* val/val: pulled into the folder of the same name, an earlier pull of it most likely */
    if (*dir && same_leaf(dir, out))
        fprintf(stderr, "kestrel: pull: %s is a folder, so the version goes inside it, as %s; to replace %s itself, "
                        "pull into the folder that holds it with --replace\n", dir, out, dir);
    return 0;
}

int cmd_pull(cli_ctx *ctx, int argc, char **argv)
{
    const struct option *opts = cli_opts_pull;
    kestrel_transfer_options o = KESTREL_TRANSFER_OPTIONS_INIT;
    const char *dest = NULL, *folder = NULL;   /* folder: DEST given, an existing directory */
    char picked[4096];
    struct stat st;
    int c, rc, replace = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, "o:d:", opts, NULL)) != -1) {
        if (c == 'r') {
            replace = 1;
            continue;
        }
        if (c != 'o' && c != 'd')
            return cli_usage_error("pull");
        if (c == 'o')   /* the old spelling, still taken: -o is the output format everywhere else */
            fprintf(stderr, "kestrel: pull -o PATH is now 'kestrel pull REF PATH' (or --dest PATH); -o names the "
                            "output format (table, wide, json, yaml)\n");
        dest = optarg;
    }
    if (optind == argc - 2 && dest == NULL)
        dest = argv[optind + 1];   /* kestrel pull REF DEST */
    else if (optind != argc - 1)
        return cli_usage_error("pull");
    if (cli_connect(ctx) < 0)
        return 1;
    /* no DEST: the current folder; an existing folder: the version goes in it, under a name picked */
    if (dest == NULL || (stat(dest, &st) == 0 && S_ISDIR(st.st_mode))) {
        if (picked_dest(ctx, argv[optind], dest ? dest : "", replace, picked, sizeof(picked)))
            return 1;
        folder = dest;
        dest = picked;
    }
    o.progress = bar;
    o.progress_payload = "pull";
    stop_on_signals();
    if ((rc = kestrel_model_pull(ctx->client, argv[optind], dest, &o)) < 0)
        return transfer_failed("pull", rc);
    printf("%s\n", dest);
    if (folder && lstat(dest, &st) == 0 && S_ISDIR(st.st_mode) && !same_leaf(folder, dest))
        /* a tree pulled again to the folder an earlier pull made went inside it (a hostile test): said
         * (the same name is said by picked_dest) */
        fprintf(stderr, "kestrel: pull: %s is a folder, so the directory version went inside it, as %s (if %s itself "
                        "was to be the version, pull to a new path, or move %s away first)\n", folder, dest, folder,
                folder);
    end_by_signal();   /* one that came too late to stop it: dest is in place, said above */
    return 0;
}

int cmd_models(cli_ctx *ctx, int argc, char **argv)
{
    int rc;
    if (argc > 2) {
        return cli_usage_error("models");
    }
    if (cli_connect(ctx) < 0)
        return 1;
    if (ctx->json) {   /* the API's ModelList or ManifestList, whatever the repository (file:// too) */
        char path[600];
        if (argc == 1) {
            snprintf(path, sizeof(path), "/api/v1/models");
        } else {   /* a name's '/' are path separators; anything else odd is escaped */
            size_t at = (size_t)snprintf(path, sizeof(path), "/api/v1/models/");
            for (const char *p = argv[1]; *p && at + 16 < sizeof(path); p++)
                at += (size_t)(strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~/", *p)
                                   ? snprintf(path + at, sizeof(path) - at, "%c", *p)
                                   : snprintf(path + at, sizeof(path) - at, "%%%02X", (unsigned char)*p));
            snprintf(path + at, sizeof(path) - at, "/versions");
        }
        if ((rc = cli_print_api_json(ctx, path)) == 1)   /* a client that answers none of it: say so */
            cli_fail("models", KESTREL_EUNSUPPORTED);
        return rc ? 1 : 0;
    }
    if (argc == 1) {
        kestrel_buf names = KESTREL_BUF_INIT;
        if ((rc = kestrel_model_list(&names, ctx->client)) < 0)
            return cli_fail("models", rc);
        fputs(names.ptr ? names.ptr : "", stdout);
        kestrel_buf_dispose(&names);
        return 0;
    }
    {
        kestrel_model_versions *vl;
        if ((rc = kestrel_model_versions_get(&vl, ctx->client, argv[1])) < 0)
            return cli_fail("models", rc);
        cli_row("%-8s %12s %-16s %-20s %s", "VERSION", "BYTES", "SHA256", "CREATED", "ALIASES / METADATA");
        for (size_t i = 0; i < kestrel_model_versions_count(vl); i++) {
            const kestrel_model_version *v = kestrel_model_versions_at(vl, i);
            char when[32];
            time_t t = (time_t)(v->created_ms / 1000);
            struct tm tm;
            localtime_r(&t, &tm);
            strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
            cli_row("%-8" PRId64 " %12" PRId64 " %-16.16s %-20s %s %s", v->version, v->size, v->sha256, when,
                   v->aliases, strcmp(v->metadata_json, "{}") ? v->metadata_json : "");
        }
        kestrel_model_versions_free(vl);
    }
    return 0;
}

int cmd_alias(cli_ctx *ctx, int argc, char **argv)
{
    char *end;
    long long v;
    int rc;
    if (argc != 4 || (v = strtoll(argv[2], &end, 10)) <= 0 || *end) {
        return cli_usage_error("alias");
    }
    if (cli_connect(ctx) < 0)
        return 1;
    if ((rc = kestrel_model_alias_set(ctx->client, argv[1], argv[3], v)) < 0)
        return cli_fail("alias", rc);
    printf("%s@%s -> %lld\n", argv[1], argv[3], v);
    return 0;
}

int cmd_rm(cli_ctx *ctx, int argc, char **argv)
{
    char name[256], *at, *end;
    long long v;
    int rc;
    if (argc != 2 || (at = strrchr(argv[1], '@')) == NULL || (v = strtoll(at + 1, &end, 10)) <= 0 || *end) {
        return cli_usage_error("rm");
    }
    snprintf(name, sizeof(name), "%.*s", (int)(at - argv[1]), argv[1]);
    if (cli_connect(ctx) < 0)
        return 1;
    if ((rc = kestrel_model_delete(ctx->client, name, v)) < 0)
        return cli_fail("rm", rc);
    printf("deleted %s@%lld\n", name, v);
    return 0;
}

const struct option cli_opts_gc[] = { { "grace", required_argument, NULL, 'g' }, { NULL, 0, NULL, 0 } };

int cmd_gc(cli_ctx *ctx, int argc, char **argv)
{
    kestrel_repo_gc_result r = KESTREL_REPO_GC_RESULT_INIT;
    int64_t grace = -1;
    int c, rc;
    optind = 0;
    while ((c = getopt_long(argc, argv, "", cli_opts_gc, NULL)) != -1)
        if (c != 'g' || (grace = cli_parse_duration(optarg)) < 0)
            return cli_usage_error("gc");
    if (optind != argc)
        return cli_usage_error("gc");
    if (cli_connect(ctx) < 0)
        return 1;
    if ((rc = kestrel_repo_gc(ctx->client, grace, &r)) < 0)
        return cli_fail("gc", rc);
    if (ctx->json)
        printf("{\"chunks_live\":%" PRId64 ",\"chunks_removed\":%" PRId64 ",\"temps_removed\":%" PRId64
               ",\"bytes_freed\":%" PRId64 "}\n", r.chunks_live, r.chunks_removed, r.temps_removed, r.bytes_freed);
    else {
        char freed[32];
        printf("removed %" PRId64 " chunks and %" PRId64 " temp files, %s freed; %" PRId64 " chunk references live\n",
               r.chunks_removed, r.temps_removed, size_text(r.bytes_freed, freed, sizeof(freed)), r.chunks_live);
    }
    return 0;
}

int cmd_model(cli_ctx *ctx, int argc, char **argv)
{
    int rc;
    if (argc != 5 || strcmp(argv[1], "set") || strcmp(argv[3], "--visibility")) {
        fprintf(argc == 2 && !strcmp(argv[1], "--help") ? stdout : stderr,
                "Usage: kestrel model set NAME --visibility all|team|private\n"
                "  all      every authenticated user may read it (the default)\n"
                "  team     the team of its namespace and its writers\n"
                "  private  its writers only (the namespace's user or team members; admins)\n");
        return argc == 2 && !strcmp(argv[1], "--help") ? 0 : 2;
    }
    if (cli_connect(ctx) < 0)
        return 1;
    if ((rc = kestrel_model_set_visibility(ctx->client, argv[2], argv[4])) < 0)
        return cli_fail("model set", rc);
    printf("%s: visibility %s\n", argv[2], argv[4]);
    return 0;
}

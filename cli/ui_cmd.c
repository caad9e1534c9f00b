/* cli/ui_cmd.c - kestrel ui: the web console's address with the caller's token, which logs the
 * browser in (kestreld swaps the token for a session cookie and drops it from the address). */
#include <getopt.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include "cli.h"

extern char **environ;

static const char ui_help[] =
    "Usage: kestrel ui [--open]\n"
    "\n"
    "Print the address of the web console kestreld serves, with your token in it: opening it logs\n"
    "the browser in (kestreld turns the token into a session cookie and takes it out of the\n"
    "address). The address holds your token: do not paste it where others can read it.\n"
    "A job's token and a metrics token cannot log in.\n"
    "\n"
    "  --open   also open it in the desktop's browser (xdg-open)\n";

/* Tokens are URL-safe already; anything else is percent-escaped. */
static void put_escaped(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || strchr("-._~", c))
            fputc(c, f);
        else
            fprintf(f, "%%%02X", c);
    }
}

int cmd_ui(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = { { "open", no_argument, NULL, 'O' }, { "help", no_argument, NULL, 'h' },
                                          { NULL, 0, NULL, 0 } };
    kestrel_job_list_options lo = KESTREL_JOB_LIST_OPTIONS_INIT;
    kestrel_job_page *page = NULL;
    char *url, *token, *addr = NULL;
    size_t addrlen = 0;
    int c, open_ = 0, rc;
    FILE *f;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'O': open_ = 1; break;
        case 'h': fputs(ui_help, stdout); return 0;
        default: fputs("see 'kestrel ui --help'\n", stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "kestrel: ui takes no arguments (see 'kestrel ui --help')\n");
        return 2;
    }
    if (cli_resolve(ctx, &url, &token) < 0)
        return 1;
    if (token == NULL || !*token) {
        fprintf(stderr, "kestrel: ui needs a token: --token, KESTREL_TOKEN or the config file (kestrel login)\n");
        free(url);
        free(token);
        return 1;
    }
    /* the token must work before an address with it is handed out */
    lo.page_size = 1;
    if (cli_connect(ctx) < 0) {
        free(url);
        free(token);
        return 1;
    }
    if ((rc = kestrel_job_list(&page, ctx->client, &lo)) < 0) {
        free(url);
        free(token);
        return cli_fail("ui: the token does not work", rc);
    }
    kestrel_job_page_free(page);
    if ((f = open_memstream(&addr, &addrlen)) == NULL) {
        free(url);
        free(token);
        return cli_fail("ui", KESTREL_ENOMEM);
    }
    fputs(url, f);
    if (!*url || url[strlen(url) - 1] != '/')
        fputc('/', f);
    fputs("?token=", f);
    put_escaped(f, token);
    fclose(f);
    printf("%s\n", addr);
    if (open_) {
        char *args[] = { "xdg-open", addr, NULL };
        pid_t pid;
        int st = 0;
        if (posix_spawnp(&pid, "xdg-open", NULL, NULL, args, environ) != 0) {
            fprintf(stderr, "kestrel: no xdg-open here: open the address above in a browser\n");
        } else if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) {
            fprintf(stderr, "kestrel: xdg-open failed: open the address above in a browser\n");
        }
    }
    explicit_bzero(addr, addrlen);
    free(addr);
    explicit_bzero(token, strlen(token));
    free(url);
    free(token);
    return 0;
}

/* cli/ui_cmd.c - kestrel ui: the web console's address with a one-time login code, which logs the
 * browser in as the caller's token without the token ever being in an address. */
#include <getopt.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include "cli.h"

extern char **environ;

const char cli_help_ui[] =
    "Usage: kestrel ui [--open]\n"
    "\n"
    "Print the address of the web console kestreld serves, with a one-time login code in it:\n"
    "opening it within 2 minutes logs the browser in as your token (kestreld turns the code into a\n"
    "session cookie; the code is then spent). Your token itself is never in the address, so it is\n"
    "not left in the browser's history. A job's token and a metrics token cannot log in.\n"
    "(The console also takes http://HOST:PORT/?token=TOKEN, like Jupyter, or the token in its\n"
    "login form.)\n"
    "\n"
    "  --open   also open it in the desktop's browser (xdg-open)\n";

const struct option cli_opts_ui[] = { { "open", no_argument, NULL, 'O' }, { "help", no_argument, NULL, 'h' },
                                      { NULL, 0, NULL, 0 } };

int cmd_ui(cli_ctx *ctx, int argc, char **argv)
{
    const struct option *opts = cli_opts_ui;
    kestrel_buf url = KESTREL_BUF_INIT;
    int c, open_ = 0, rc;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'O': open_ = 1; break;
        case 'h': fputs(cli_help_ui, stdout); return 0;
        default: return cli_usage_error("ui");
        }
    }
    if (optind < argc) {
        fprintf(stderr, "kestrel: ui takes no arguments (see 'kestrel ui --help')\n");
        return 2;
    }
    if (cli_connect(ctx) < 0)
        return 1;
    if ((rc = kestrel_client_console_url(&url, ctx->client)) < 0)
        return cli_fail("ui", rc);
    printf("%s\n", url.ptr);
    fflush(stdout);
    if (open_) {
        char *args[] = { "xdg-open", url.ptr, NULL };
        pid_t pid;
        int st = 0;
        if (posix_spawnp(&pid, "xdg-open", NULL, NULL, args, environ) != 0)
            fprintf(stderr, "kestrel: no xdg-open here: open the address above in a browser\n");
        else if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
            fprintf(stderr, "kestrel: xdg-open failed: open the address above in a browser\n");
    }
    kestrel_buf_dispose(&url);
    return 0;
}

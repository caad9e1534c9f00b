/* cli/table.c - how every table of the CLI meets a terminal: on a tty each line fits its width, cut
 * at a whole UTF-8 character with '~'; piped, nothing is cut (scripts and grep see every byte). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include "cli.h"

int cli_term_columns(void)
{
    struct winsize ws;
    return isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 40 ? ws.ws_col : 0;
}

void cli_cell(char *out, size_t n, size_t *at, const char *s, int width, int cut)
{
    int cols = 0;
    const unsigned char *p = (const unsigned char *)s;
    if (*at + 2 >= n)
        return;
    while (*p && *at + 8 < n) {
        size_t len = *p < 0x80 ? 1 : (*p & 0xE0) == 0xC0 ? 2 : (*p & 0xF0) == 0xE0 ? 3 : 4;
        if (cut && cols == width - 1 && p[len]) {   /* one column left and more to come */
            out[(*at)++] = '~';
            cols++;
            break;
        }
        for (size_t k = 0; k < len && p[k]; k++)
            out[(*at)++] = (char)p[k];
        p += len;
        cols++;
    }
    while (cols++ < width && *at + 2 < n)
        out[(*at)++] = ' ';
    out[(*at)++] = ' ';
    out[*at] = '\0';
}

void cli_put_line(const char *line)
{
    int width = cli_term_columns();
    if (width) {
        char fit[8192];
        size_t at = 0;
        cli_cell(fit, sizeof(fit), &at, line, width - 1, 1);
        while (at && fit[at - 1] == ' ')
            fit[--at] = '\0';
        puts(fit);
    } else {
        puts(line);
    }
}

void cli_row(const char *fmt, ...)
{
    char line[8192];
    va_list ap;
    size_t len;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    len = strlen(line);
    if (len && line[len - 1] == '\n')
        line[len - 1] = '\0';
    cli_put_line(line);
}

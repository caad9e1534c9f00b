/* cli/table.c - how every table of the CLI meets a terminal: on a tty each line fits its width, cut
 * at a whole UTF-8 character with '~'; piped, nothing is cut (scripts and grep see every byte).
 * A code point counts as one column (wide CJK characters take two on a terminal: such rows may wrap). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include "cli.h"

int cli_term_columns(void)
{
    static int cols = -1;   /* asked once a run: every table line would ask again */
    struct winsize ws;
    if (cols < 0)
        cols = isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40 ? ws.ws_col : 0;
    return cols;
}

/* Bytes of the UTF-8 sequence at p: its lead byte's length, shortened at a NUL or a byte that does
 * not continue it (so a malformed or cut sequence never reads past the string). */
static size_t seq_len(const unsigned char *p)
{
    size_t want = *p < 0x80 ? 1 : (*p & 0xE0) == 0xC0 ? 2 : (*p & 0xF0) == 0xE0 ? 3 : (*p & 0xF8) == 0xF0 ? 4 : 1;
    size_t len = 1;
    while (len < want && (p[len] & 0xC0) == 0x80)
        len++;
    return len;
}

void cli_cell(char *out, size_t n, size_t *at, const char *s, int width, int cut)
{
    int cols = 0;
    const unsigned char *p = (const unsigned char *)s;
    if (*at + 2 >= n)
        return;
    while (*p && *at + 8 < n) {
        size_t len = seq_len(p);
        if (cut && cols == width - 1 && p[len]) {   /* one column left and more to come */
            out[(*at)++] = '~';
            cols++;
            break;
        }
        for (size_t k = 0; k < len; k++)
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
    char *fit;
    size_t at = 0, size;
    if (strchr(line, '\n')) {   /* a row is one line: a newline in its data (argv) is shown, ^J, not obeyed */
        char *one = malloc(2 * strlen(line) + 1), *o = one;
        if (one == NULL)
            return;
        for (const char *p = line; *p; p++)
            if (*p == '\n') {
                *o++ = '^';
                *o++ = 'J';
            } else {
                *o++ = *p;
            }
        *o = '\0';
        cli_put_line(one);
        free(one);
        return;
    }
    if (!width) {
        puts(line);
        return;
    }
    size = (size_t)width * 4 + 16;   /* width code points of up to 4 bytes */
    if ((fit = malloc(size)) == NULL) {
        puts(line);
        return;
    }
    cli_cell(fit, size, &at, line, width - 1, 1);
    while (at && fit[at - 1] == ' ')
        fit[--at] = '\0';
    puts(fit);
    free(fit);
}

void cli_row(const char *fmt, ...)
{
    char *line = NULL;
    va_list ap;
    size_t len;
    int rc;
    va_start(ap, fmt);
    rc = vasprintf(&line, fmt, ap);
    va_end(ap);
    if (rc < 0)
        return;
    len = strlen(line);
    if (len && line[len - 1] == '\n')
        line[len - 1] = '\0';
    cli_put_line(line);
    free(line);
}

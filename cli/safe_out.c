/* cli/safe_out.c - what the server holds is text to a terminal, never its commands. Any user writes
 * job output, argv, names and alert texts that an admin's `kestrel logs`, `status`, `alerts` and
 * tables print; a terminal obeys the control characters in them (a hostile test: ESC[2J cleared the
 * screen, OSC 52 wrote the clipboard, ESC[6n made the terminal type into the admin's shell, a
 * carriage return overwrote the line, a newline in argv made a false row of `jobs -o wide`). So the
 * human formats' stdout goes through a filter that writes each control character (C0 but tab and
 * newline, DEL, C1) and bidirectional mark as a visible escape: ^[ ^M ^? (caret notation, as cat -v),
 * <U+009B>, <U+202E>. JSON and YAML are left as they are (their escapes are the format's), and
 * `kestrel logs --raw` prints a job's bytes as they are, for a terminal that should obey them. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"

size_t cli_control_len(const unsigned char *p, size_t left)
{
    unsigned c2 = left > 1 ? p[1] : 0, c3 = left > 2 ? p[2] : 0;
    if (p[0] < 0x20 || p[0] == 0x7f)
        return 1;
    if (p[0] == 0xc2 && c2 >= 0x80 && c2 <= 0x9f)   /* C1 */
        return 2;
    if (p[0] == 0xd8 && c2 == 0x9c)                  /* U+061C, the Arabic letter mark */
        return 2;
    if ((p[0] == 0xe2 && c2 == 0x80 && ((c3 >= 0x8e && c3 <= 0x8f) || (c3 >= 0xaa && c3 <= 0xae))) ||
        (p[0] == 0xe2 && c2 == 0x81 && c3 >= 0xa6 && c3 <= 0xa9))   /* marks, embeddings, overrides, isolates */
        return 3;
    return 0;
}

unsigned cli_control_code(const unsigned char *p, size_t len)
{
    return len == 1 ? p[0] : len == 2 ? ((p[0] & 0x1fu) << 6 | (p[1] & 0x3fu))
                                      : ((p[0] & 0x0fu) << 12 | (p[1] & 0x3fu) << 6 | (p[2] & 0x3fu));
}

/* The escape of the control sequence p[0..len) into out (at least 12 bytes): its length. */
static size_t escape(const unsigned char *p, size_t len, char *out)
{
    if (len == 1)
        return (size_t)snprintf(out, 12, "^%c", p[0] == 0x7f ? '?' : p[0] + '@');
    return (size_t)snprintf(out, 12, "<U+%04X>", cli_control_code(p, len));
}

void cli_fputs_safe(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    char esc[12];
    while (n) {
        size_t len = cli_control_len(p, n), plain = 0;
        if (len && *p != '\t') {
            fwrite(esc, 1, escape(p, len, esc), f);
            p += len;
            n -= len;
            continue;
        }
        while (plain < n && (p[plain] == '\t' || !cli_control_len(p + plain, n - plain)))
            plain++;
        fwrite(p, 1, plain, f);
        p += plain;
        n -= plain;
    }
}

static FILE *raw_out;           /* the real stdout, while the filter stands in for it */
static unsigned char held[2];   /* the start of a sequence the last write cut (a C1 or a mark) */
static size_t nheld;

static int put(const char *s, size_t n)
{
    while (n) {
        ssize_t w = write(STDOUT_FILENO, s, n);
        if (w < 0)
            return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The filter's write: buf escaped (tab and newline kept), a sequence cut at its end held for the
 * next write. */
static ssize_t filter_write(void *cookie, const char *buf, size_t size)
{
    unsigned char in[4096 + 2];
    char out[sizeof(in) * 4 + 16];
    size_t done = 0;
    (void)cookie;
    while (done < size) {
        size_t n = nheld, take = size - done < sizeof(in) - nheld ? size - done : sizeof(in) - nheld, o = 0, i = 0;
        memcpy(in, held, nheld);
        memcpy(in + nheld, buf + done, take);
        n += take;
        done += take;
        nheld = 0;
        while (i < n) {
            size_t len = cli_control_len(in + i, n - i);
            if (len == 0 && (((in[i] == 0xc2 || in[i] == 0xd8) && n - i == 1) || (in[i] == 0xe2 && n - i < 3))) {
                memcpy(held, in + i, n - i);   /* may begin a control sequence the next bytes end */
                nheld = n - i;
                break;
            }
            if (len && in[i] != '\t' && in[i] != '\n') {
                o += escape(in + i, len, out + o);
                i += len;
            } else {
                out[o++] = (char)in[i++];
            }
        }
        if (put(out, o) < 0)
            return -1;
    }
    return (ssize_t)size;
}

static int filter_close(void *cookie)
{
    (void)cookie;
    if (nheld)
        put((const char *)held, nheld);
    nheld = 0;
    return 0;
}

void cli_safe_stdout(void)
{
    cookie_io_functions_t io = { .write = filter_write, .close = filter_close };
    FILE *f;
    if (raw_out)
        return;
    fflush(stdout);
    if ((f = fopencookie(NULL, "w", io)) == NULL)
        return;   /* as it was: the server's own checks still stand */
    setvbuf(f, NULL, isatty(STDOUT_FILENO) ? _IOLBF : _IOFBF, BUFSIZ);
    raw_out = stdout;
    stdout = f;
}

void cli_raw_stdout(void)
{
    if (raw_out == NULL)
        return;
    fclose(stdout);
    stdout = raw_out;
    raw_out = NULL;
}

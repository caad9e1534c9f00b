/* lib/repo/records.c - fields read from a file front to back, a buffer at a time (records.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "records.h"

#define READ_BUF (64u * 1024)
#define RECORD_MAX (64u << 20)   /* the longest record read back */

int kestrel__records_next(kestrel__records *r, unsigned *field, unsigned *type, const uint8_t **data, size_t *n,
                          const uint8_t **raw, size_t *raw_n)
{
    for (;;) {
        size_t start = r->at;
        ssize_t got;
        int rc = r->buf ? kestrel__wire_next_field(r->buf, r->len, &r->at, field, type, data, n) : 0;
        if (rc < 0)
            return kestrel__error_set(r->bad, "%s is damaged: %s", r->what, kestrel_error_last()->message);
        if (rc == 1) {
            if (raw) {
                *raw = r->buf + start;
                *raw_n = r->at - start;
            }
            return 1;
        }
        if (r->at) {   /* the start of a record: keep it, read on */
            memmove(r->buf, r->buf + r->at, r->len - r->at);
            r->len -= r->at;
            r->at = 0;
        }
        if (r->len == r->cap) {   /* a record longer than the buffer */
            size_t cap = r->cap ? r->cap * 2 : READ_BUF;
            uint8_t *b = cap <= RECORD_MAX ? realloc(r->buf, cap) : NULL;
            if (b == NULL)
                return cap <= RECORD_MAX ? kestrel__error_oom()
                                         : kestrel__error_set(r->bad, "%s is damaged: a record over 64 MiB", r->what);
            r->buf = b;
            r->cap = cap;
        }
        got = pread(r->fd, r->buf + r->len, r->cap - r->len, r->off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return kestrel__error_sys(KESTREL_EIO, errno, "cannot read %s", r->what);
        if (got == 0)   /* the end: nothing left, or a record cut short */
            return r->len == 0 ? 0 : kestrel__error_set(r->bad, "%s is damaged: it ends inside a record", r->what);
        r->len += (size_t)got;
        r->off += got;
    }
}

void kestrel__records_init(kestrel__records *r, int fd, const char *what, int bad)
{
    memset(r, 0, sizeof(*r));
    r->fd = fd;
    r->what = what;
    r->bad = bad;
}

void kestrel__records_rewind(kestrel__records *r)
{
    r->len = r->at = 0;
    r->off = 0;
}

void kestrel__records_free(kestrel__records *r)
{
    free(r->buf);
    r->buf = NULL;
    r->cap = 0;
    kestrel__records_rewind(r);
}

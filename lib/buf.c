/* lib/buf.c - kestrel_buf, small string helpers and input validation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "internal.h"

void kestrel_buf_dispose(kestrel_buf *buf)
{
    if (buf == NULL)
        return;
    free(buf->ptr);
    buf->ptr = NULL;
    buf->size = 0;
    buf->reserved = 0;
}

int kestrel__buf_grow(kestrel_buf *buf, size_t extra)
{
    size_t need = buf->size + extra + 1, cap;
    char *p;
    if (need < buf->size)
        return kestrel__error_oom();
    if (need <= buf->reserved)
        return 0;
    cap = buf->reserved ? buf->reserved : 64;
    while (cap < need)
        cap *= 2;
    p = realloc(buf->ptr, cap);
    if (p == NULL)
        return kestrel__error_oom();
    buf->ptr = p;
    buf->reserved = cap;
    return 0;
}

int kestrel__buf_reserve(kestrel_buf *buf, size_t cap)
{
    char *p;
    if (cap <= buf->reserved)
        return 0;
    if ((p = realloc(buf->ptr, cap)) == NULL)
        return kestrel__error_oom();
    buf->ptr = p;
    buf->reserved = cap;
    return 0;
}

int kestrel__array_grow(void *arrp, size_t *cap, size_t need, size_t elem)
{
    void **arr = arrp, *p;
    size_t ncap = *cap ? *cap : 16;
    if (need <= *cap)
        return 0;
    while (ncap < need)
        ncap *= 2;
    if (ncap > SIZE_MAX / elem || (p = realloc(*arr, ncap * elem)) == NULL)
        return kestrel__error_oom();
    *arr = p;
    *cap = ncap;
    return 0;
}

int kestrel__buf_put(kestrel_buf *buf, const void *data, size_t len)
{
    int rc = kestrel__buf_grow(buf, len);
    if (rc < 0)
        return rc;
    if (len)
        memcpy(buf->ptr + buf->size, data, len);
    buf->size += len;
    buf->ptr[buf->size] = '\0';
    return 0;
}

int kestrel__buf_puts(kestrel_buf *buf, const char *s)
{
    return kestrel__buf_put(buf, s, strlen(s));
}

int kestrel__buf_printf(kestrel_buf *buf, const char *fmt, ...)
{
    va_list ap;
    int n, rc;
    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return kestrel__error_set(KESTREL_ERROR, "bad format");
    if ((rc = kestrel__buf_grow(buf, (size_t)n)) < 0)
        return rc;
    va_start(ap, fmt);
    vsnprintf(buf->ptr + buf->size, (size_t)n + 1, fmt, ap);
    va_end(ap);
    buf->size += (size_t)n;
    return 0;
}

char *kestrel__strdup(const char *s)
{
    size_t n = strlen(s ? s : "") + 1;
    char *p = malloc(n);
    if (p)
        memcpy(p, s ? s : "", n);
    return p;
}

char *kestrel__hex(const void *bytes, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    const unsigned char *b = bytes;
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * n] = '\0';
    return out;
}

static int nibble(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int kestrel__unhex(const char *hex, size_t n, void *out)
{
    unsigned char *b = out;
    for (size_t i = 0; i < n; i++) {
        int hi = nibble(hex[2 * i]), lo = hi < 0 ? -1 : nibble(hex[2 * i + 1]);
        if (lo < 0)
            return -1;
        b[i] = (unsigned char)(hi << 4 | lo);
    }
    return 0;
}

int kestrel__utf8_valid(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    while (p < end) {
        unsigned char c = *p;
        size_t n;
        uint32_t cp;
        if (c < 0x80) { p++; continue; }
        if ((c & 0xe0) == 0xc0) { n = 1; cp = c & 0x1f; }
        else if ((c & 0xf0) == 0xe0) { n = 2; cp = c & 0x0f; }
        else if ((c & 0xf8) == 0xf0) { n = 3; cp = c & 0x07; }
        else return 0;
        if ((size_t)(end - p) <= n)
            return 0;
        for (size_t i = 1; i <= n; i++) {
            if ((p[i] & 0xc0) != 0x80)
                return 0;
            cp = (cp << 6) | (p[i] & 0x3f);
        }
        if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        p += n + 1;
    }
    return 1;
}

/* A code point a terminal obeys or that reorders what is shown: C0, DEL, C1 (U+0080..U+009F: CSI,
 * OSC ...; a hostile test put them in job names), and the bidirectional marks, embeddings, overrides
 * and isolates (a name shown would not be the name). */
static int is_control(uint32_t cp)
{
    return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x061c || cp == 0x200e || cp == 0x200f ||
           (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

int kestrel__text_is_clean(const char *s, size_t max_len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t len;
    if (s == NULL)
        return 0;
    len = strlen(s);
    if (len > max_len || !kestrel__utf8_valid(s, len))
        return 0;
    while (*p) {   /* valid UTF-8: each sequence whole */
        size_t n = *p < 0x80 ? 1 : *p < 0xe0 ? 2 : *p < 0xf0 ? 3 : 4;
        uint32_t cp = n == 1 ? *p : (uint32_t)(*p & (0x7f >> n));
        for (size_t k = 1; k < n; k++)
            cp = cp << 6 | (p[k] & 0x3fu);
        if (is_control(cp))
            return 0;
        p += n;
    }
    return 1;
}

int64_t kestrel__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t kestrel__mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

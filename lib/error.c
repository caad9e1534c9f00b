/* lib/error.c - the thread-local last error. */
#include <stdio.h>
#include <string.h>
#include "internal.h"

typedef struct {
    kestrel_error pub;
    char message[KESTREL__MSG_MAX];
    int outcome_unknown;   /* kestrel_error_outcome_unknown() */
    int sys_errno;         /* kestrel__error_errno() */
} error_record;

static _Thread_local error_record tls_error;
/* OOM is reported through a static record so that the path never allocates. */
static const kestrel_error oom_error = { "out of memory", KESTREL_ENOMEM, 0, 0 };
static _Thread_local int tls_oom;

static int record(int code, int http_status, int transport_code, const char *msg)
{
    size_t n = 0;
    tls_oom = 0;
    tls_error.outcome_unknown = 0;
    tls_error.sys_errno = 0;
    if (msg) {
        /* one line: stop at the first newline, drop control characters */
        for (; msg[n] && n < KESTREL__MSG_MAX - 1; n++) {
            char c = msg[n];
            if (c == '\n' || c == '\r')
                break;
            tls_error.message[n] = ((unsigned char)c < 0x20) ? ' ' : c;
        }
    }
    tls_error.message[n] = '\0';
    tls_error.pub.message = tls_error.message;
    tls_error.pub.code = code;
    tls_error.pub.http_status = http_status;
    tls_error.pub.transport_code = transport_code;
    return code;
}

int kestrel__error_set(int code, const char *fmt, ...)
{
    char tmp[KESTREL__MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    return record(code, 0, 0, tmp);
}

int kestrel__error_sys(int code, int err, const char *fmt, ...)
{
    char tmp[KESTREL__MSG_MAX], why[128];
    size_t room;
    int n;
    va_list ap;
    /* the reason is kept whole: what it is said of (a path near PATH_MAX) is cut instead, with "..." */
    snprintf(why, sizeof(why), ": %s", strerror(err));
    room = sizeof(tmp) - strlen(why);
    va_start(ap, fmt);
    n = vsnprintf(tmp, room, fmt, ap);
    va_end(ap);
    if (n < 0)
        tmp[0] = '\0';
    else if ((size_t)n >= room) {   /* cut at a character's start (UTF-8 continuation bytes are 10xxxxxx) */
        size_t at = room - 4;
        while (at > 0 && ((unsigned char)tmp[at] & 0xC0) == 0x80)
            at--;
        memcpy(tmp + at, "...", 4);
    }
    for (char *c = tmp; *c; c++)   /* a newline in a path would end the one line before its reason */
        if (*c == '\n' || *c == '\r')
            *c = ' ';
    snprintf(tmp + strlen(tmp), sizeof(tmp) - strlen(tmp), "%s", why);
    record(code, 0, 0, tmp);
    tls_error.sys_errno = err;
    return code;
}

int kestrel__error_errno(void)
{
    return tls_oom ? 0 : tls_error.sys_errno;
}

int kestrel__error_set_http(int code, int http_status, const char *message)
{
    return record(code, http_status, 0, message);
}

int kestrel__error_restore(const kestrel__error_kept *k)
{
    int rc = record(k->err.code, k->err.http_status, k->err.transport_code, k->err.message);
    tls_error.outcome_unknown = k->outcome_unknown;
    tls_error.sys_errno = k->sys_errno;
    return rc;
}

void kestrel__error_keep(kestrel__error_kept *k)
{
    const kestrel_error *e = kestrel_error_last();
    snprintf(k->msg, sizeof(k->msg), "%s", e->message ? e->message : "");
    k->err = *e;
    k->err.message = k->msg;
    k->outcome_unknown = !tls_oom && tls_error.outcome_unknown;
    k->sys_errno = kestrel__error_errno();
}

void kestrel__error_outcome_unknown(void)
{
    tls_error.outcome_unknown = !tls_oom;
}

int kestrel_error_outcome_unknown(void)
{
    return !tls_oom && tls_error.outcome_unknown;
}

int kestrel__error_set_net(int transport_code, const char *message)
{
    return record(KESTREL_ENET, 0, transport_code, message);
}

int kestrel__error_oom(void)
{
    tls_oom = 1;
    return KESTREL_ENOMEM;
}

int kestrel__check_handle(const void *h, uint32_t magic, uint32_t expected, const char *what)
{
    if (h == NULL)
        return kestrel__error_set(KESTREL_EMISUSE, "%s is NULL", what);
    if (magic != expected)
        return kestrel__error_set(KESTREL_EMISUSE, "%s is not a live %s handle", what, what);
    return 0;
}

const kestrel_error *kestrel_error_last(void)
{
    if (tls_oom)
        return &oom_error;
    if (tls_error.pub.message == NULL)
        tls_error.pub.message = tls_error.message;
    return &tls_error.pub;
}

void kestrel_error_clear(void)
{
    tls_oom = 0;
    record(0, 0, 0, "");
}

const char *kestrel_strerror(int code)
{
    switch (code) {
    case KESTREL_OK: return "success";
    case KESTREL_ERROR: return "error";
    case KESTREL_ENOMEM: return "out of memory";
    case KESTREL_EINVALID: return "invalid argument";
    case KESTREL_EMISUSE: return "library misuse";
    case KESTREL_ENOTFOUND: return "not found";
    case KESTREL_EEXISTS: return "already exists";
    case KESTREL_EAUTH: return "authentication failed";
    case KESTREL_ENET: return "network error";
    case KESTREL_EHTTP: return "HTTP error";
    case KESTREL_EPROTO: return "protocol error";
    case KESTREL_ETIMEOUT: return "timed out";
    case KESTREL_ECANCELLED: return "cancelled";
    case KESTREL_EUSER: return "user callback error";
    case KESTREL_EUNSUPPORTED: return "unsupported";
    case KESTREL_EIO: return "I/O error";
    case KESTREL_ETOOLARGE: return "request too large";
    default: return "unknown error";
    }
}

/* lib/internal.h - private helpers shared by libkestrel's sources (never installed). */
#ifndef KESTREL_INTERNAL_H
#define KESTREL_INTERNAL_H

#include <stdarg.h>
#include <stdint.h>
#include "kestrel.h"

#define KESTREL__ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Handle magics: set on creation, scrambled on free. */
#define KESTREL__MAGIC_CLIENT 0x6b436c69u
#define KESTREL__MAGIC_SPEC   0x6b537063u
#define KESTREL__MAGIC_JOB    0x6b4a6f62u
#define KESTREL__MAGIC_LIST   0x6b4c7374u
#define KESTREL__MAGIC_METRIC 0x6b4d7472u
#define KESTREL__MAGIC_GPUS   0x6b477075u
#define KESTREL__MAGIC_GPUSEL 0x6b47536cu
#define KESTREL__MAGIC_QUEUE  0x6b517565u
#define KESTREL__MAGIC_TOKENS 0x6b546f6bu
#define KESTREL__MAGIC_GPUTEL 0x6b47546cu
#define KESTREL__MAGIC_ALERTS 0x6b416c74u
#define KESTREL__MAGIC_DEAD   0xdeadbeefu

/* error.c */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
int kestrel__error_set(int code, const char *fmt, ...);
/* A system call's failure: fmt's message, then ": " and strerror(err); err is kept beside it, so that
 * a caller asks what failed (kestrel__error_errno: ENOSPC, say), not the message's words. */
int kestrel__error_sys(int code, int err, const char *fmt, ...);
/* The errno kestrel__error_sys kept with this thread's last error; 0 for any other error. */
int kestrel__error_errno(void);
int kestrel__error_set_http(int code, int http_status, const char *message);
int kestrel__error_set_net(int transport_code, const char *message);
#define KESTREL__MSG_MAX 512
/* An error kept: a helper thread's, for the thread that reports it (the last error is per thread),
 * or this thread's, across calls that record others: kestrel__error_keep, then
 * kestrel__error_restore(&kept). err.message may be pointed elsewhere before the restore. */
typedef struct {
    kestrel_error err;
    char msg[KESTREL__MSG_MAX];
    int outcome_unknown;   /* kestrel_error_outcome_unknown() */
    int sys_errno;         /* kestrel__error_errno() */
} kestrel__error_kept;
void kestrel__error_keep(kestrel__error_kept *k);
/* Record k as this thread's error; returns its code. */
int kestrel__error_restore(const kestrel__error_kept *k);
/* The error just recorded on this thread came after a request went out whole and its answer was
 * lost: what it asked may have been done (kestrel_error_outcome_unknown). Any later error clears it. */
void kestrel__error_outcome_unknown(void);
int kestrel__error_oom(void);
/* Misuse check for a handle: returns 0 when h is non-NULL and alive. */
int kestrel__check_handle(const void *h, uint32_t magic, uint32_t expected, const char *what);
#define KESTREL__CHECK(h, MAGIC, what) \
    do { int rc__ = kestrel__check_handle((h), (h) ? (h)->magic : 0u, (MAGIC), (what)); \
         if (rc__ < 0) return rc__; } while (0)

/* init.c */
int kestrel__initialized(void);
int kestrel__require_init(void);

/* fdio.c: write all n bytes at offset at of fd: 0, or -1 with errno (ENOSPC where the file
 * took none). */
int kestrel__pwrite_all(int fd, const void *data, size_t n, int64_t at);

/* buf.c */
int kestrel__buf_grow(kestrel_buf *buf, size_t extra);
/* Make buf's memory exactly cap bytes when it has less (for a caller that counts it: a later put
 * that fits takes no more). */
int kestrel__buf_reserve(kestrel_buf *buf, size_t cap);
/* Make the array *arrp (elements of elem bytes, capacity *cap) hold at least need elements,
 * doubling; 0 or KESTREL_ENOMEM (the array is untouched then). */
int kestrel__array_grow(void *arrp, size_t *cap, size_t need, size_t elem);
int kestrel__buf_put(kestrel_buf *buf, const void *data, size_t len);
int kestrel__buf_puts(kestrel_buf *buf, const char *s);
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
int kestrel__buf_printf(kestrel_buf *buf, const char *fmt, ...);
char *kestrel__strdup(const char *s);
/* n bytes as 2n lowercase hex digits and a NUL into out (2n + 1 bytes); returns out. */
char *kestrel__hex(const void *bytes, size_t n, char *out);
/* The 2n hex digits at hex as n bytes into out: 0, or -1 where one is not a hex digit (out then partly
 * written). */
int kestrel__unhex(const char *hex, size_t n, void *out);

/* Validation shared by the library and kestreld: printable UTF-8 without control characters (C0,
 * DEL, C1) or bidirectional marks and overrides. */
int kestrel__text_is_clean(const char *s, size_t max_len);
int kestrel__utf8_valid(const char *s, size_t len);

int64_t kestrel__now_ms(void);
/* Milliseconds of CLOCK_MONOTONIC: for intervals and deadlines, which a step of the wall clock must
 * not move. */
int64_t kestrel__mono_ms(void);

#endif

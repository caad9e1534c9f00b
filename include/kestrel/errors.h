/* kestrel/errors.h - error codes and the thread-local last error. */
#ifndef KESTREL_ERRORS_H
#define KESTREL_ERRORS_H

#include "common.h"

KESTREL_BEGIN_DECL

/** Return codes. Append only: the values are ABI. */
typedef enum kestrel_error_code {
    KESTREL_OK = 0,
    KESTREL_ERROR = -1,        /**< generic failure; see kestrel_error_last() */
    KESTREL_ENOMEM = -2,       /**< out of memory */
    KESTREL_EINVALID = -3,     /**< bad argument value, or the server rejected the input (400) */
    KESTREL_EMISUSE = -4,      /**< NULL/freed handle, bad options version, call before kestrel_init() */
    KESTREL_ENOTFOUND = -5,    /**< 404: no such object, or not yours */
    KESTREL_EEXISTS = -6,      /**< 409: conflict */
    KESTREL_EAUTH = -7,        /**< 401/403: missing or bad token */
    KESTREL_ENET = -8,         /**< DNS/connect/TLS/transport failure */
    KESTREL_EHTTP = -9,        /**< other non-2xx status; see kestrel_error.http_status */
    KESTREL_EPROTO = -10,      /**< malformed response from the server */
    KESTREL_ETIMEOUT = -11,    /**< a timeout expired */
    KESTREL_ECANCELLED = -12,  /**< a callback returned non-zero */
    KESTREL_EUSER = -13,       /**< reserved for callbacks; returned unchanged, never produced by the library */
    KESTREL_EUNSUPPORTED = -14,/**< feature not built in or not available here */
    KESTREL_EIO = -15,         /**< file error: local, a file:// store's, or kestreld's own storage
                                    (HTTP 507: its disk full or at its floor; 500 "io_error": its files
                                    or catalog failed) */
    KESTREL_ETOOLARGE = -16    /**< 413: request body over the server's limit */
} kestrel_error_code;

/** The last error of this thread. Library-owned; fields may be appended. */
typedef struct kestrel_error {
    const char *message;   /**< one line, never NULL ("" when none) */
    int code;              /**< a kestrel_error_code, 0 when none */
    int http_status;       /**< HTTP status when the error came from the server, else 0 */
    int transport_code;    /**< raw transport (libcurl) code when code == KESTREL_ENET, else 0 */
} kestrel_error;

/**
 * The last error recorded on the calling thread (borrowed, never NULL). Valid
 * until the next failing call on this thread. Check the return code first: the
 * record may be stale after a success.
 */
KESTREL_API const kestrel_error *kestrel_error_last(void);
/**
 * 1 when the calling thread's last error left the outcome of its request unknown: the request went
 * out whole and its answer was lost (a timeout, a broken connection, a proxy's 502, 503 or 504, a
 * 5xx, an unreadable answer, or a stop by the progress callback while it was unanswered), so what it
 * asked may have been done all the same. 0 for every other error, after kestrel_error_clear(), and
 * when the record is out of memory's. Like the record, stale after a success: check the return code
 * first.
 *
 * Set today by the calls that push a version, for its commit (kestrel_model_push, and
 * kestrel_code_push and a job submitted with code, which push a code snapshot): one that fails or
 * stops so may have made its version (list the model's versions to see before pushing again, which
 * would make another). The failures before the commit, which make nothing, and the other calls leave
 * it 0. Since KESTREL_1.6.
 */
KESTREL_API int kestrel_error_outcome_unknown(void);
/** Clear the calling thread's error record. */
KESTREL_API void kestrel_error_clear(void);
/** A static description of an error code (borrowed, never NULL). */
KESTREL_API const char *kestrel_strerror(int code);

KESTREL_END_DECL

#endif

/* lib/http.h - one request/response exchange with kestreld over libcurl. */
#ifndef KESTREL_HTTP_H
#define KESTREL_HTTP_H

#include "wire.h"

struct kestrel_client;

typedef struct {
    const char *method;                          /* "GET", "POST" */
    const char *path;                            /* "/api/v1/jobs?x=y" */
    const ProtobufCMessage *body;                /* NULL: no body */
    const ProtobufCMessageDescriptor *response;  /* expected 2xx message type */
    int idempotent;                              /* may be retried after it was sent */
    long extra_timeout_ms;                       /* added to the client timeout (long polls) */
    kestrel_buf *raw_json;                       /* set: ask for JSON and keep the 2xx body here as it came */
    /* set: asked while the request is under way (about once a second while it waits for the server,
     * more often while bytes move; libcurl 7.88's pace, checked by tests/python/test_repo_stop.py) and
     * before a retry: 0 goes on, a KESTREL_E* code (its error recorded) gives the request up with
     * that code, never retried */
    int (*stop)(void *ctx);
    void *stop_ctx;
    /* set: after the packed message, the body goes on with tail_size more bytes, the records of a
     * list too long to hold in memory (kestrel__wire_pack_element). tail copies up to n of them,
     * from offset at of those bytes, into buf and returns how many (> 0); 0 (they ended early) or a
     * negative KESTREL_E* code gives the request up. Each retry reads them again from offset 0. */
    int64_t (*tail)(void *ctx, int64_t at, void *buf, size_t n);
    void *tail_ctx;
    int64_t tail_size;
    /* set: a 2xx body, which must be protobuf, is written to this file from offset 0 (and again from
     * 0 on a retry) instead of decoded: a body too long to hold (a pull's manifest). out is not set. */
    const int *to_fd;
    /* set: what it does may be done by now (a push's commit), so where it is retried at all it is
     * retried as kestreld's busy answer is, for about 25 s with the default backoff, not
     * max_retries times (a kestreld restarted after it made the version answers the retry with it),
     * and an idempotent one is retried once after its timeout too (kestreld still making the version
     * answers the retry 503 "unavailable" until it is made, then with it) */
    int patient;
    /* set: where the request fails, *outcome_unknown is 1 when a try of it may have been done by the
     * server all the same: the whole of it went out (libcurl's counts) and then came a proxy's 502,
     * 503 or 504, a 5xx, a broken connection, a timeout or a stop; or a 2xx whose body was unreadable.
     * Else 0: no try went out whole. Such a request goes on a fresh connection each try: libcurl
     * sends a request again by itself where a reused one closes unanswered, and its upload count then
     * starts again from 0 (a kestreld that died having made the version read as never sent). */
    int *outcome_unknown;
} kestrel__request;

/* Below this many bytes a second for a whole stall time (a stream's STALL_S, an answer into a file's
 * timeout), a transfer is given up as hung: at 1 byte a second (curl's counting) a 2.5 B/s trickle held
 * a pull's chunk for days (a hostile test). */
#define KESTREL__SLOW_BYTES_S 1024

/* Perform req; on 2xx *out is the decoded response (protobuf_c_message_free_unpacked).
 * Non-2xx answers become the KESTREL_E* code of their status with the server's message. */
int kestrel__http_call(ProtobufCMessage **out, struct kestrel_client *client, const kestrel__request *req);

/* Record the error of a non-2xx answer (the server's Error message wins); returns the code. */
int kestrel__http_failure(long status, const char *content_type, const kestrel_buf *body);
/* 1 when an answer is kestreld's 503 "unavailable" (server/upload_mem.h: its memory for requests
 * was spent and nothing was done; or a commit's key is held by the request still making its
 * version, server/repo_commit_key.c), which any request may send again shortly. */
int kestrel__http_busy(long status, const kestrel_buf *body);
/* The headers of a request of ours: accept, content_type (NULL: none, for a GET), the client's token.
 * A body of body_bytes >= 64 KiB goes with "Expect: 100-continue": it is sent once the server has
 * accepted the headers (curl waits 1 s for that, then sends it anyway), so a refusal at the headers
 * (kestreld's 401, 403, 413 or 503 of a pack or a large body, before it reads one) is heard, where a
 * body already on its way meets a connection the server closed and reads "Failed sending data to
 * the peer". A smaller one is in the socket whole before an answer could come, and is read after
 * it: none ("Expect:"), sparing it a round trip. */
struct curl_slist;
struct curl_slist *kestrel__http_headers(struct kestrel_client *c, const char *accept, const char *content_type,
                                         int64_t body_bytes);

/* TLS on an easy handle: peer and host verified against the system CAs, or the bundle in
 * $KESTREL_CA_FILE (a PEM file) when set. */
void kestrel__http_tls(void *curl_handle);

/* Map an HTTP status to a kestrel_error_code (the one place that does). */
int kestrel__http_status_code(long status);

/* Append "key=escaped(value)" (with '?' or '&') to a path buffer. */
int kestrel__query_add(kestrel_buf *path, const char *key, const char *value);

#endif

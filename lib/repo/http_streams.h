/* lib/repo/http_streams.h - the HTTP transport's connection pool (transport_http.c): one curl multi
 * handle a transport, and at most STREAMS transfers on it at once, each started and ended by the
 * caller's functions (kestrel__streams_run). */
#ifndef KESTREL_HTTP_STREAMS_H
#define KESTREL_HTTP_STREAMS_H

#include <curl/curl.h>
#include "transport.h"

#define STREAMS 4
#define STALL_S 60
#define ERROR_MAX (64u << 10)   /* what an error answer may bring, whatever max is */

typedef struct kestrel__http_transport {
    kestrel__transport base;
    kestrel_client *c;
    CURLM *multi;   /* the connection pool of this transfer */
    /* the run of the file being sent (kestreld hashes a file's chunks sent in order as they come,
     * so its commit need not read them back): which file, its id, where its next pack starts */
    uint32_t run_file;
    char run_id[33];
    int64_t run_next;
    int run_busy;   /* a pack of the run is in flight: its next one waits for it */
    int no_batch;   /* kestreld refused a batch of downloads: one chunk a request from then on (2: it was
                       busy, until the refused batch's chunks came) */
} kestrel__http_transport;

#define CLIENT(t) (((kestrel__http_transport *)(t))->c)

/* One transfer on the pool: its handle, and the answer, at most max bytes. */
typedef struct {
    CURL *e;
    struct curl_slist *hdrs;
    kestrel_buf resp;
    size_t max;
    int over;        /* a 2xx answer brought more than max: the transfer failed for that */
    void *job;
} kestrel__stream;

/* s's answer's status (0 before one came). */
long kestrel__stream_status(const kestrel__stream *s);
/* curl's write function of an answer into s->resp: at most s->max bytes (an error's, ERROR_MAX). */
size_t kestrel__stream_collect(char *data, size_t size, size_t n, void *payload);
/* A new transfer on the pool into s: the client's token and TLS settings, and the headers of a body
 * of body_bytes (kestrel__http_headers); it gives up when under KESTREL__SLOW_BYTES_S move for STALL_S
 * seconds (a hung or trickling server or network), never because it is slow beyond that. */
int kestrel__stream_open(kestrel__http_transport *h, kestrel__stream *s, const char *url, const char *content_type,
                         size_t max, int64_t body_bytes);
/* A finished transfer's error (curl's, or a non-2xx answer's, the server's message kept), or 0. */
int kestrel__stream_result(CURL *e, CURLcode cc, kestrel_buf *resp, const char *what);
/* A push's or pull's stop, asked by a request that waits (transport.h: tick): t is the transport. */
int kestrel__http_tick(void *t);

/* start: begin the next transfer on s (0: nothing left, 1: started, 2: nothing now, until a transfer
 * in flight ends or 20 ms pass, < 0: error); end: it finished; release: free what start gave s->job
 * (every started transfer gets end or release, never both). */
typedef int (*kestrel__stream_start)(void *ctx, kestrel__http_transport *h, kestrel__stream *s);
typedef int (*kestrel__stream_end)(void *ctx, kestrel__stream *s, CURLcode cc);
typedef void (*kestrel__stream_release)(kestrel__stream *s);
/* Run transfers until start has none left and none is in flight, or the first error (the others
 * are then stopped). */
int kestrel__streams_run(kestrel__http_transport *h, kestrel__stream_start start, kestrel__stream_end end,
                         kestrel__stream_release release, void *ctx);

#endif

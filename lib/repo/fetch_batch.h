/* lib/repo/fetch_batch.h - the answer to POST /api/v1/chunks/fetch (server/repo_fetch.c), parsed as
 * it streams in: for each chunk asked for, in the order asked, 32 bytes of digest, its length in 4
 * bytes (big-endian), its bytes - the framing of a pack. A pure function of the bytes fed, split
 * anywhere (tests/fuzz/batch_fuzzer.c). */
#ifndef KESTREL_FETCH_BATCH_H
#define KESTREL_FETCH_BATCH_H

#include "transport.h"

typedef struct {
    const kestrel__want *want;  /* the chunks asked for, in order */
    size_t count, done;         /* done of them handed on */
    kestrel__fetched got;
    void *ctx;
    uint8_t head[36];
    size_t in_head;
    uint32_t expect;            /* the length its head gives the chunk being received */
    kestrel_buf chunk;          /* the chunk being received, when it came in pieces */
} kestrel__batch;

/* Ready to parse the answer for want[0, count), each chunk handed to got(ctx, ...) once whole: the
 * bytes its head announces (at most 4 MiB, what kestreld stores), which got() checks as it checks a
 * chunk from a GET: a stored copy of another size is a damaged chunk the repository is told of. */
void kestrel__batch_init(kestrel__batch *b, const kestrel__want *want, size_t count, kestrel__fetched got, void *ctx);
/* The next len bytes of the answer. 0; got()'s failure; or KESTREL_EPROTO when a head names another
 * chunk than the one asked for at its place, announces more than 4 MiB, or bytes come after the last. */
int kestrel__batch_feed(kestrel__batch *b, const uint8_t *data, size_t len);
/* The answer ended: 0 when every chunk came whole, else KESTREL_EPROTO. */
int kestrel__batch_end(const kestrel__batch *b);
void kestrel__batch_dispose(kestrel__batch *b);

#endif

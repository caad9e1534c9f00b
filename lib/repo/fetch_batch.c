/* lib/repo/fetch_batch.c - a batch of downloaded chunks, parsed as it streams in (fetch_batch.h). */
#include <string.h>
#include "fetch_batch.h"
#include "chunk.h"
#include "store.h"

void kestrel__batch_init(kestrel__batch *b, const kestrel__want *want, size_t count, kestrel__fetched got, void *ctx)
{
    memset(b, 0, sizeof(*b));
    b->want = want;
    b->count = count;
    b->got = got;
    b->ctx = ctx;
}

/* The chunk at b->done is whole: hand it on. */
static int deliver(kestrel__batch *b, const void *data, size_t len)
{
    const kestrel__want *w = &b->want[b->done];
    b->done++;
    b->in_head = 0;
    b->chunk.size = 0;
    return b->got(b->ctx, w, data, len);
}

/* The head just read: it must name the chunk asked for at this place; the length it gives is what
 * follows (a stored copy of the wrong size is handed on as it is, for got() to find damaged). */
static int head_read(kestrel__batch *b, const kestrel__want *w)
{
    char hex[KESTREL__HEX_LEN + 1];
    b->expect = (uint32_t)b->head[32] << 24 | (uint32_t)b->head[33] << 16 | (uint32_t)b->head[34] << 8 | b->head[35];
    kestrel__hex(b->head, 32, hex);
    if (strcmp(hex, w->digest))
        return kestrel__error_set(KESTREL_EPROTO, "chunk %.12s arrived damaged: its place in the batch holds chunk %.12s",
                                  w->digest, hex);
    if (b->expect == KESTREL__CHUNK_GONE)   /* as the local store's pull says it */
        return kestrel__error_set(KESTREL_ENOTFOUND, "chunk %.12s is not in the repository (any more: its version was "
                                  "deleted as it was pulled?)", w->digest);
    if (b->expect > 4 * KESTREL__CHUNK_MAX)
        return kestrel__error_set(KESTREL_EPROTO, "chunk %.12s arrived damaged: kestreld announces %u bytes of it",
                                  w->digest, b->expect);
    return 0;
}

int kestrel__batch_feed(kestrel__batch *b, const uint8_t *data, size_t len)
{
    int rc = 0;
    while (len > 0 && rc == 0) {
        const kestrel__want *w;
        size_t take;
        if (b->done == b->count)
            return kestrel__error_set(KESTREL_EPROTO, "chunk download: kestreld sent more than the %zu chunks asked for",
                                      b->count);
        w = &b->want[b->done];
        if (b->in_head < 36) {
            take = 36 - b->in_head < len ? 36 - b->in_head : len;
            memcpy(b->head + b->in_head, data, take);
            b->in_head += take;
            data += take;
            len -= take;
            if (b->in_head == 36 && (rc = head_read(b, w)) == 0 && b->expect == 0)
                rc = deliver(b, "", 0);
            continue;
        }
        take = b->expect - b->chunk.size < len ? b->expect - b->chunk.size : len;
        if (b->chunk.size == 0 && take == b->expect)
            rc = deliver(b, data, take);   /* whole in what was fed: no copy */
        else if ((rc = kestrel__buf_put(&b->chunk, data, take)) == 0 && b->chunk.size == b->expect)
            rc = deliver(b, b->chunk.ptr, b->chunk.size);
        data += take;
        len -= take;
    }
    return rc;
}

int kestrel__batch_end(const kestrel__batch *b)
{
    if (b->done < b->count)
        return kestrel__error_set(KESTREL_EPROTO, "chunk download: kestreld's answer ended after %zu of %zu chunks",
                                  b->done, b->count);
    return 0;
}

void kestrel__batch_dispose(kestrel__batch *b)
{
    kestrel_buf_dispose(&b->chunk);
}

/* lib/repo/chunk_hash.c - SHA-256 of the chunks cut from one read buffer, on two threads: the caller
 * takes the first half of the bytes, a helper the rest (a thread per 8 MiB buffer costs about as
 * much as hashing 20 KiB). While it runs, the whole-file hash (filehash.c) runs beside. */
#include <pthread.h>
#include "repo.h"
#include "store.h"

typedef struct {
    const uint8_t *buf;
    int64_t buf_at;
    kestrel__chunk_ref *refs;
    size_t count;
} span;

static void *hash_span(void *arg)
{
    span *s = arg;
    for (size_t i = 0; i < s->count; i++)
        kestrel__sha256_hex(s->buf + (s->refs[i].offset - s->buf_at), s->refs[i].len, s->refs[i].hex);
    return NULL;
}

void kestrel__hash_chunks(const uint8_t *buf, int64_t buf_at, kestrel__chunk_ref *refs, size_t count)
{
    size_t total = 0, half = 0, split = 0;
    pthread_t helper;
    span mine, theirs;
    for (size_t i = 0; i < count; i++)
        total += refs[i].len;
    while (split < count && half + refs[split].len <= total / 2)
        half += refs[split++].len;
    mine = (span){ buf, buf_at, refs, split };
    theirs = (span){ buf, buf_at, refs + split, count - split };
    if (count < 2 || pthread_create(&helper, NULL, hash_span, &theirs) != 0) {
        mine.count = count;   /* one chunk, or no thread to be had: all on this one */
        hash_span(&mine);
        return;
    }
    hash_span(&mine);
    pthread_join(helper, NULL);
}

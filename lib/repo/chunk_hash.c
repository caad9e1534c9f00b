/* lib/repo/chunk_hash.c - SHA-256 of the chunks cut from one read buffer, on two threads. With a
 * whole-file hash to advance, the caller hashes the chunks and a helper feeds the whole-file hash the
 * buffer's new bytes (the two passes are about the same size, and the file is read once); without
 * one, the caller takes the first half of the chunk bytes and the helper the rest. A thread per
 * 8 MiB buffer costs about as much as hashing 20 KiB. */
#include <pthread.h>
#include <openssl/evp.h>
#include "repo.h"
#include "store.h"

typedef struct {
    const uint8_t *buf;
    int64_t buf_at;
    kestrel__chunk_ref *refs;
    size_t count;
} span;

typedef struct {
    EVP_MD_CTX *ctx;
    const uint8_t *p;
    size_t len;
    int ok;
} feed;

static void *hash_span(void *arg)
{
    span *s = arg;
    for (size_t i = 0; i < s->count; i++)
        kestrel__sha256_hex(s->buf + (s->refs[i].offset - s->buf_at), s->refs[i].len, s->refs[i].hex);
    return NULL;
}

static void *hash_feed(void *arg)
{
    feed *f = arg;
    f->ok = f->len == 0 || EVP_DigestUpdate(f->ctx, f->p, f->len) == 1;
    return NULL;
}

int kestrel__hash_chunks(const uint8_t *buf, int64_t buf_at, kestrel__chunk_ref *refs, size_t count,
                         EVP_MD_CTX *whole, const uint8_t *whole_bytes, size_t whole_len)
{
    size_t total = 0, half = 0, split = 0;
    pthread_t helper;
    span mine, theirs;
    if (whole) {
        feed f = { whole, whole_bytes, whole_len, 0 };
        mine = (span){ buf, buf_at, refs, count };
        if (pthread_create(&helper, NULL, hash_feed, &f) != 0) {
            hash_feed(&f);   /* no thread to be had: one after the other */
            hash_span(&mine);
        } else {
            hash_span(&mine);
            pthread_join(helper, NULL);
        }
        return f.ok ? 0 : kestrel__error_oom();
    }
    for (size_t i = 0; i < count; i++)
        total += refs[i].len;
    while (split < count && half + refs[split].len <= total / 2)
        half += refs[split++].len;
    mine = (span){ buf, buf_at, refs, split };
    theirs = (span){ buf, buf_at, refs + split, count - split };
    if (count < 2 || pthread_create(&helper, NULL, hash_span, &theirs) != 0) {
        mine.count = count;   /* one chunk, or no thread to be had: all on this one */
        hash_span(&mine);
        return 0;
    }
    hash_span(&mine);
    pthread_join(helper, NULL);
    return 0;
}

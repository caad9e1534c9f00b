/* lib/chunk_cache.h - the local content cache of pulled chunks: files named by their SHA-256 in
 * KESTREL_CACHE_DIR (default $XDG_CACHE_HOME/kestrel/chunks or ~/.cache/kestrel/chunks; "" turns
 * it off), verified on every read, bounded by KESTREL_CACHE_MAX (bytes, with an optional K/M/G/T
 * suffix; default 10G; 0 turns it off), enforced after each pull: least recently used chunks go
 * first. */
#ifndef KESTREL_CHUNK_CACHE_H
#define KESTREL_CHUNK_CACHE_H

#include <stdint.h>
#include "kestrel.h"

typedef struct {
    char dir[2048];
    int64_t max_bytes;
    int on;
} kestrel__chunk_cache;

/* The chunk's bytes match its SHA-256 and size. */
int kestrel__chunk_verified(const char *hex, const kestrel_buf *b, int64_t size);
/* Locate (and create) the cache; cache->on is 0 when there is none. */
void kestrel__cache_open(kestrel__chunk_cache *cache);
/* A verified chunk from the cache (1), or 0: missing, or damaged (then dropped). */
int kestrel__cache_get(kestrel__chunk_cache *cache, const char *hex, int64_t size, kestrel_buf *out);
/* Keep a verified chunk (best effort: a full disk only costs a later download). */
void kestrel__cache_put(kestrel__chunk_cache *cache, const char *hex, const void *data, size_t len);
/* Evict least recently used chunks until the cache fits its bound. */
void kestrel__cache_trim(kestrel__chunk_cache *cache);

#endif

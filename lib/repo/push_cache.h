/* lib/repo/push_cache.h - what a push learned about a file (its chunks and whole-file SHA-256), kept
 * next to the chunk cache (KESTREL_CACHE_DIR + ".stat") and keyed by the file's absolute path. A
 * later push of the same path reuses it only when device, inode, size, mtime and ctime are all
 * unchanged and the file was last modified before that push began reading it (git's rule against
 * racy timestamps), so re-pushing an unchanged checkpoint or dataset costs a stat, not a hash. */
#ifndef KESTREL_PUSH_CACHE_H
#define KESTREL_PUSH_CACHE_H

#include <sys/stat.h>
#include "repo.h"

typedef struct {
    char dir[2100];   /* "" when there is no cache */
} kestrel__pushcache;

/* Find (and make, once a push) the cache's folder. */
void kestrel__pushcache_open(kestrel__pushcache *pc);
/* 1 with the chunk list (malloc'd) and digest when the earlier result for abs (an absolute path)
 * still holds, else 0. */
int kestrel__pushcache_lookup(const kestrel__pushcache *pc, const char *abs, const struct stat *st,
                              kestrel__chunk_ref **refs, size_t *n, char sha[65]);
/* Remember the result of chunking abs, read from started_ns on (best effort). */
void kestrel__pushcache_store(const kestrel__pushcache *pc, const char *abs, const struct stat *st, int64_t started_ns,
                              const kestrel__chunk_ref *refs, size_t n, const char sha[65]);

#endif

/* lib/repo/push_cache.h - what a push learned about its files (each one's chunks and SHA-256), kept
 * beside the chunk cache (KESTREL_CACHE_DIR + ".stat") in one entry a pushed path (a file, or a
 * directory with all its files), keyed by its absolute path. A later push of the same path reuses a
 * file's result only when its device, inode, size, mtime and ctime are all unchanged and it was last
 * modified before that push began reading it (git's rule against racy timestamps), so re-pushing
 * an unchanged checkpoint or dataset costs a stat a file and one read of the entry, not a hash. */
#ifndef KESTREL_PUSH_CACHE_H
#define KESTREL_PUSH_CACHE_H

#include <sys/stat.h>
#include "repo.h"

typedef struct kestrel__pushcache kestrel__pushcache;

/* The entry of abs (the pushed path, absolute), opened for a push to the repository where (16 hex
 * digits, transport.h; "" or NULL: none): it is read as the push asks, in the order it was written
 * (the listing's), one record at a time. NULL when there is no cache (or memory). */
kestrel__pushcache *kestrel__pushcache_open(const char *abs, const char *where);
/* 1 with the chunk list (malloc'd, file index 0) and digest when the earlier result for rel (the
 * file's path relative to the pushed directory, "" for a pushed file) still holds, else 0. Asked for
 * files in the listing's order (strcmp of rel): an entry's records before rel are passed for good. */
int kestrel__pushcache_lookup(kestrel__pushcache *pc, const char *rel, const struct stat *st,
                              kestrel__chunk_ref **refs, size_t *n, char sha[65]);
/* Whether kestrel__pushcache_lookup would find rel's earlier result (and nothing more: no copy, no
 * record carried over). A reader of its own, asked in the same order, ahead of the lookups. */
int kestrel__pushcache_holds(kestrel__pushcache *pc, const char *rel, const struct stat *st);
/* Remember rel's result (read from started_ns on) for the next push: written to the entry's temp
 * file at once, so a push of many files holds none of them in memory for the cache. by (NULL or "":
 * hashed here): the repository whose answers named its chunks, for whose pushes alone it holds. */
void kestrel__pushcache_remember(kestrel__pushcache *pc, const char *rel, const struct stat *st, int64_t started_ns,
                                 const kestrel__chunk_ref *refs, size_t n, const char sha[65], const char *by);
/* An empty cache tied to no file (kestrel__pushcache_close frees it, writing nothing), and an
 * entry's bytes given to it to read (data must outlive it; the number of records it holds before
 * the end or the first one damaged or out of order). For the fuzzer. */
kestrel__pushcache *kestrel__pushcache_new(void);
int kestrel__pushcache_parse(kestrel__pushcache *pc, const char *data, size_t size);
/* Forget the path's entry: the push failed on what it read (a chunk or a digest refused, a file
 * that changed), which a record the cache vouched for may have caused; the next push hashes every
 * file. kestrel__pushcache_close then removes the entry and writes none. */
void kestrel__pushcache_forget(kestrel__pushcache *pc);
/* Make what this push remembered the path's entry (its count filled in, then renamed over the old
 * one: best effort), then free. The entry has no name until then (O_TMPFILE), so a killed push leaves
 * nothing; where the file system has no O_TMPFILE, a named temp a killed push left is removed by a
 * later open once it is an hour old. */
void kestrel__pushcache_close(kestrel__pushcache *pc);

#endif

/* lib/repo/chunk_cache.h - the local content cache of pulled chunks. A pull does not write its chunks a
 * second time: once the file is in place, the cache keeps a hard link to it (a "pack") and an index
 * of where each chunk lies in it.
 * Chunks are read back from packs and verified on every read (a pack changed in place is dropped).
 * Lives in KESTREL_CACHE_DIR (default $XDG_CACHE_HOME/kestrel/chunks or ~/.cache/kestrel/chunks;
 * "" turns it off), bounded by KESTREL_CACHE_MAX (bytes, with an optional K/M/G/T suffix; default
 * 10G; 0 turns it off), enforced after each pull: least recently used packs go first. A file version
 * pulled to another filesystem than the cache's is not cached (a hard link cannot cross). A pulled
 * directory is kept as a tree pack (kestrel__cache_add_tree), an index of where its chunks lie in
 * the directory's own files, whatever the filesystem. */
#ifndef KESTREL_CHUNK_CACHE_H
#define KESTREL_CHUNK_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "kestrel.h"
#include "wire.h"

/* Where a cached chunk lies: 56 bytes (its digest in binary, a tree pack's path as an offset into one
 * buffer of them, relative to its root: a second pull of a 50,000-file directory loaded 190 bytes a
 * chunk with a hex digest and a whole path each). */
typedef struct {
    uint8_t digest[32]; /* the chunk's SHA-256 */
    uint32_t len;
    int32_t pack;       /* index into packs, -1 once the pack was dropped */
    int64_t path;       /* a tree pack's file: its path's offset in names; -1: the pack's own file */
    int64_t offset;     /* in that file */
} kestrel__cache_entry;

typedef struct {
    char dir[2048];
    int64_t max_bytes;
    int on;
    int loaded;
    kestrel__cache_entry *ents;   /* sorted by digest */
    size_t nents;
    char (*packs)[40];
    char **roots;                 /* a tree pack's directory (owned), NULL for a file pack */
    size_t npacks, cap_packs, cap_roots;
    kestrel_buf names;            /* the files of tree packs: their paths below their roots, each NUL-ended */
} kestrel__chunk_cache;

/* One chunk of a pulled file, in file order; indexed only where keep (a digest's first place, and a
 * chunk large enough to be worth its index line). */
typedef struct {
    const char *hex;
    int64_t len;
    int keep;
} kestrel__cache_item;

/* The chunk's bytes match its SHA-256 and size. */
int kestrel__chunk_verified(const char *hex, const kestrel_buf *b, int64_t size);
/* Parse one pack's index (tree: a tree pack's) from its bytes into cache: the entries it adds to
 * cache->nents, the pack to cache->packs. The loader's parser, for the fuzzer. */
int kestrel__cache_parse_index(kestrel__chunk_cache *cache, const char *id, int tree, const char *data, size_t len);
/* Locate (and create) the cache; cache->on is 0 when there is none. */
void kestrel__cache_open(kestrel__chunk_cache *cache);
void kestrel__cache_close(kestrel__chunk_cache *cache);
/* A verified chunk from the cache (1), or 0: missing, or damaged (its pack is then dropped). */
int kestrel__cache_get(kestrel__chunk_cache *cache, const char *hex, int64_t size, kestrel_buf *out);
/* Keep the pulled file at path, whose chunks are items (in order), as a pack: a hard link to it.
 * Best effort: without it a later pull only downloads more. */
void kestrel__cache_add(kestrel__chunk_cache *cache, const char *path, const kestrel__cache_item *items, size_t n);
/* The files of a pulled directory and their chunks, a window at a time (manifest_file.h): 1 and *win,
 * 0 at the end, < 0 a failure. */
typedef int (*kestrel__cache_windows)(void *ctx, const Kestrel__V1__Manifest **win);
/* Keep the pulled directory dest (its n_files files, given by next) as a tree pack: an index of where
 * each chunk lies in its files, no copy of them (they are read, and verified, where they are; a pack
 * whose files changed or went is dropped). Replaces an earlier tree pack of the same directory. */
void kestrel__cache_add_tree(kestrel__chunk_cache *cache, const char *dest, size_t n_files,
                             kestrel__cache_windows next, void *ctx);
/* Evict least recently used packs until the cache fits its bound: a pack's bytes, a tree pack's index
 * (it holds no bytes of its own); then of the tree packs, the newest are kept, at most TREE_PACKS_MAX
 * and TREE_BYTES_MAX of index (64 MiB: about 600,000 small files), which bounds what a pull loads. */
void kestrel__cache_trim(kestrel__chunk_cache *cache);
/* Drop every pack on file system dev whose bytes only the cache holds (the pulled file it links to
 * was removed since): what a pull that ran out of space there may take back. The bytes freed. */
int64_t kestrel__cache_free_sole(kestrel__chunk_cache *cache, dev_t dev);

#endif

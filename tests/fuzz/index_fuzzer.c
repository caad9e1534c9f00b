/* tests/fuzz/index_fuzzer.c - the client's own index files, read back from disk: a stat cache entry
 * (lib/repo/push_cache.c, "kestrel-stat 2"), a file pack's index and a tree pack's index
 * (lib/repo/chunk_cache.c). The first byte picks which; the rest is the file. No crash or leak;
 * every entry kept names a digest found in the file and a chunk of 1 byte to 4 MiB, and a tree
 * pack's entries name one of its files. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "chunk_cache.h"
#include "push_cache.h"
#include "internal.h"
#include "store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    const char *text = (const char *)data + 1;
    if (len < 1)
        return 0;
    if (data[0] % 3 == 0) {
        kestrel__pushcache *pc = kestrel__pushcache_new();
        kestrel__chunk_ref *refs = NULL;
        struct stat st;
        size_t n = 0;
        char sha[65];
        if (pc == NULL)
            return 0;
        kestrel__pushcache_parse(pc, text, len - 1);
        memset(&st, 0, sizeof(st));
        if (kestrel__pushcache_lookup(pc, "", &st, &refs, &n, sha)) {   /* only an entry that says so */
            for (size_t i = 0; i < n; i++)
                if (!kestrel__is_sha256_hex(refs[i].hex) || refs[i].len == 0)
                    abort();
            free(refs);
        }
        kestrel__pushcache_close(pc);   /* tied to no file: writes nothing */
    } else {
        kestrel__chunk_cache cache;
        char hex[65];
        memset(&cache, 0, sizeof(cache));
        kestrel__cache_parse_index(&cache, "0123456789abcdef0123456789abcdef", data[0] % 3 == 2, text, len - 1);
        for (size_t i = 0; i < cache.nents; i++) {
            const kestrel__cache_entry *e = &cache.ents[i];
            if (e->len == 0 || e->len > (4u << 20) || e->offset < 0 || e->pack < 0 || (size_t)e->pack >= cache.npacks ||
                (e->path >= 0 && ((size_t)e->path >= cache.names.size || cache.roots[e->pack] == NULL ||
                                  memchr(cache.names.ptr + e->path, '\0', cache.names.size - (size_t)e->path) == NULL)))
                abort();
            kestrel__hex(e->digest, 32, hex);   /* read from one of the file's lines */
            if (memmem(text, len - 1, hex, 64) == NULL)
                abort();
        }
        kestrel__cache_close(&cache);
    }
    return 0;
}

/* lib/repo/push_cache.c - the stat cache of pushed files (see push_cache.h). One small text file per path:
 *   kestrel-stat 1 DEV INO SIZE MTIME_NS CTIME_NS STARTED_NS SHA256 NCHUNKS
 *   HEX LEN            (one line per chunk, in file order)                                       */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "push_cache.h"
#include "chunk.h"
#include "chunk_cache.h"
#include "store.h"

#define MAX_ENTRY_CHUNKS (64u << 20)

static int64_t ns(struct timespec t)
{
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

void kestrel__pushcache_open(kestrel__pushcache *pc)
{
    if (!kestrel__cache_dir(pc->dir, sizeof(pc->dir), ".stat", "stat") || kestrel__mkdirs(pc->dir, 0700) < 0)
        pc->dir[0] = '\0';
}

/* The entry's file for abs ("" when there is no cache). */
static void entry_path(const kestrel__pushcache *pc, const char *abs, char *out, size_t n)
{
    char key[KESTREL__HEX_LEN + 1];
    out[0] = '\0';
    if (!pc->dir[0])
        return;
    kestrel__sha256_hex(abs, strlen(abs), key);
    snprintf(out, n, "%s/%s", pc->dir, key);
}

int kestrel__pushcache_lookup(const kestrel__pushcache *pc, const char *abs, const struct stat *st,
                              kestrel__chunk_ref **refs, size_t *n, char sha[65])
{
    char file[2300], hex[KESTREL__HEX_LEN + 1];
    unsigned long long dev, ino, nchunks;
    long long size, mtime, ctime, started, offset = 0, total = 0;
    kestrel__chunk_ref *v = NULL;
    FILE *f;
    int ok = 0;
    entry_path(pc, abs, file, sizeof(file));
    if (!file[0] || (f = fopen(file, "r")) == NULL)
        return 0;
    if (fscanf(f, "kestrel-stat 1 %llu %llu %lld %lld %lld %lld %64s %llu\n", &dev, &ino, &size, &mtime, &ctime,
               &started, hex, &nchunks) == 8 &&
        dev == (unsigned long long)st->st_dev && ino == (unsigned long long)st->st_ino && size == (long long)st->st_size &&
        mtime == ns(st->st_mtim) && ctime == ns(st->st_ctim) && mtime < started && strlen(hex) == 64 &&
        nchunks <= MAX_ENTRY_CHUNKS && (v = malloc((nchunks + 1) * sizeof(*v))) != NULL) {
        ok = 1;
        for (unsigned long long i = 0; i < nchunks && ok; i++) {
            unsigned long len;
            ok = fscanf(f, "%64s %lu\n", v[i].hex, &len) == 2 && strlen(v[i].hex) == 64 && len > 0 &&
                 len <= KESTREL__CHUNK_MAX;
            v[i].offset = offset;
            v[i].len = (uint32_t)len;
            v[i].missing = 0;
            v[i].file = 0;
            offset += (long long)len;
            total += (long long)len;
        }
        ok = ok && total == size;
    }
    fclose(f);
    if (!ok) {
        free(v);
        return 0;
    }
    memcpy(sha, hex, 65);
    *refs = v;
    *n = (size_t)nchunks;
    return 1;
}

void kestrel__pushcache_store(const kestrel__pushcache *pc, const char *abs, const struct stat *st, int64_t started_ns,
                              const kestrel__chunk_ref *refs, size_t n, const char sha[65])
{
    char file[2300], tmp[2400];
    FILE *f;
    int fd, ok;
    entry_path(pc, abs, file, sizeof(file));
    if (!file[0] || ns(st->st_mtim) >= started_ns)   /* modified while we read it: never trusted */
        return;
    snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", file);
    if ((fd = mkstemp(tmp)) < 0 || (f = fdopen(fd, "w")) == NULL) {
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
        return;
    }
    ok = fprintf(f, "kestrel-stat 1 %llu %llu %lld %lld %lld %lld %s %zu\n", (unsigned long long)st->st_dev,
                 (unsigned long long)st->st_ino, (long long)st->st_size, (long long)ns(st->st_mtim),
                 (long long)ns(st->st_ctim), (long long)started_ns, sha, n) > 0;
    for (size_t i = 0; i < n && ok; i++)
        ok = fprintf(f, "%s %lu\n", refs[i].hex, (unsigned long)refs[i].len) > 0;
    if (fclose(f) == 0 && ok && rename(tmp, file) == 0)
        return;
    unlink(tmp);
}

/* lib/chunk_cache.c - the local content cache of pulled chunks (see chunk_cache.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "chunk_cache.h"
#include "internal.h"
#include "store.h"

#define DEFAULT_MAX (10ll << 30)

int kestrel__chunk_verified(const char *hex, const kestrel_buf *b, int64_t size)
{
    char got[KESTREL__HEX_LEN + 1];
    kestrel__sha256_hex(b->ptr ? b->ptr : "", b->size, got);
    return (int64_t)b->size == size && !strcmp(got, hex);
}

static int64_t parse_size(const char *s)
{
    char *end;
    double v = s ? strtod(s, &end) : -1;
    if (s == NULL || end == s || v < 0)
        return DEFAULT_MAX;
    switch (*end) {
    case 'k': case 'K': v *= 1024.0; end++; break;
    case 'm': case 'M': v *= 1048576.0; end++; break;
    case 'g': case 'G': v *= 1073741824.0; end++; break;
    case 't': case 'T': v *= 1099511627776.0; end++; break;
    default: break;
    }
    return *end ? DEFAULT_MAX : (int64_t)v;
}

void kestrel__cache_open(kestrel__chunk_cache *cache)
{
    const char *env = getenv("KESTREL_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (env)
        snprintf(cache->dir, sizeof(cache->dir), "%s", env);
    else if (xdg && *xdg)
        snprintf(cache->dir, sizeof(cache->dir), "%s/kestrel/chunks", xdg);
    else
        snprintf(cache->dir, sizeof(cache->dir), "%s/.cache/kestrel/chunks", home ? home : "/tmp");
    cache->max_bytes = parse_size(getenv("KESTREL_CACHE_MAX"));
    cache->on = 0;
    if (!cache->dir[0] || cache->max_bytes == 0)
        return;
    cache->on = kestrel__mkdirs(cache->dir, 0700) == 0 && access(cache->dir, W_OK) == 0;
}

int kestrel__cache_get(kestrel__chunk_cache *cache, const char *hex, int64_t size, kestrel_buf *b)
{
    char path[2300], chunk[65536];
    size_t r;
    FILE *f;
    if (!cache->on)
        return 0;
    snprintf(path, sizeof(path), "%s/%s", cache->dir, hex);
    if ((f = fopen(path, "rb")) == NULL)
        return 0;
    b->size = 0;
    while ((r = fread(chunk, 1, sizeof(chunk), f)) > 0)
        kestrel__buf_put(b, chunk, r);
    fclose(f);
    if (!kestrel__chunk_verified(hex, b, size)) {   /* a damaged entry is dropped, never trusted */
        unlink(path);
        return 0;
    }
    utimensat(AT_FDCWD, path, NULL, 0);   /* recently used: evicted last */
    return 1;
}

void kestrel__cache_put(kestrel__chunk_cache *cache, const char *hex, const void *data, size_t len)
{
    char path[2300], tmp[2400];
    int fd, ok;
    if (!cache->on || (int64_t)len > cache->max_bytes)
        return;
    snprintf(path, sizeof(path), "%s/%s", cache->dir, hex);
    snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", path);
    if ((fd = mkstemp(tmp)) < 0)
        return;
    ok = write(fd, data, len) == (ssize_t)len;
    if (close(fd) == 0 && ok && rename(tmp, path) == 0)
        return;
    unlink(tmp);
}

typedef struct {
    char name[KESTREL__HEX_LEN + 32];
    int64_t size;
    int64_t used_ns;
} entry;

static int older_first(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    return (x->used_ns > y->used_ns) - (x->used_ns < y->used_ns);
}

void kestrel__cache_trim(kestrel__chunk_cache *cache)
{
    DIR *d;
    struct dirent *e;
    entry *v = NULL;
    size_t n = 0, cap = 0;
    int64_t total = 0;
    if (!cache->on || (d = opendir(cache->dir)) == NULL)
        return;
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        if (e->d_name[0] == '.' || strlen(e->d_name) >= sizeof(v->name) ||
            fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
            continue;
        if (kestrel__array_grow(&v, &cap, n + 1, sizeof(*v)) < 0)
            break;
        snprintf(v[n].name, sizeof(v[n].name), "%s", e->d_name);
        v[n].size = st.st_size;
        v[n].used_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        total += st.st_size;
        n++;
    }
    if (total > cache->max_bytes && n > 0) {
        qsort(v, n, sizeof(*v), older_first);
        for (size_t i = 0; i < n && total > cache->max_bytes; i++)
            if (unlinkat(dirfd(d), v[i].name, 0) == 0)
                total -= v[i].size;
    }
    closedir(d);
    free(v);
}

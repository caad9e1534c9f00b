/* lib/repo/chunk_cache.c - the local content cache of pulled chunks, as packs (see chunk_cache.h).
 *   DIR/packs/ID      a hard link to a pulled file
 *   DIR/packs/ID.idx  "kestrel-pack 1 SIZE" then one "HEX OFFSET LEN" line per chunk; its mtime is
 *                     the pack's last use
 *   DIR/packs/ID.tree a pulled directory where it was put: "kestrel-tree 1 NFILES ROOTLEN", the root's
 *                     bytes and "\n", then for each file "F SIZE NCHUNKS PATHLEN", its path and "\n",
 *                     and one "HEX LEN" line per chunk of it */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <openssl/crypto.h>
#include "chunk_cache.h"
#include "own_dir.h"
#include "internal.h"
#include "store.h"

#define TREE_PACKS_MAX 32
/* Tree packs' indexes, all together, at most: what a pull loads of them (56 bytes a chunk and the
 * path, in memory, for the 80-110 bytes of index a small file takes: about 50 MiB for this much).
 * Their count alone bounded nothing: 32 indexes of 200,000 files would be about 0.5 GiB to load. */
#define TREE_BYTES_MAX (64ll << 20)
#define ENTRY_MAX (4u << 20)   /* a chunk is at most 1 MiB; kestreld takes up to 4 */
#define TREE_PATH_MAX 8192

int kestrel__chunk_verified(const char *hex, const kestrel_buf *b, int64_t size)
{
    char got[KESTREL__HEX_LEN + 1];
    kestrel__sha256_hex(b->ptr ? b->ptr : "", b->size, got);
    return (int64_t)b->size == size && !strcmp(got, hex);
}

void kestrel__cache_open(kestrel__chunk_cache *cache)
{
    char packs[2100];
    memset(cache, 0, sizeof(*cache));
    cache->max_bytes = kestrel__cache_max();
    if (!kestrel__cache_dir(cache->dir, sizeof(cache->dir), "", "chunks"))
        return;
    snprintf(packs, sizeof(packs), "%s/packs", cache->dir);
    /* only in folders no one else can change: another user's would show them every pulled file */
    cache->on = kestrel__mkdirs(packs, 0700) == 0 && access(packs, W_OK) == 0 && kestrel__dir_own(cache->dir) &&
                kestrel__dir_own(packs);
}

void kestrel__cache_close(kestrel__chunk_cache *cache)
{
    for (size_t i = 0; i < cache->npacks; i++)
        free(cache->roots[i]);
    free(cache->ents);
    free(cache->packs);
    free(cache->roots);
    kestrel_buf_dispose(&cache->names);
    cache->ents = NULL;
    cache->packs = NULL;
    cache->roots = NULL;
    cache->nents = cache->npacks = 0;
    cache->cap_packs = cache->cap_roots = 0;
    cache->loaded = 0;
}

static int by_digest(const void *a, const void *b)
{
    return memcmp(((const kestrel__cache_entry *)a)->digest, ((const kestrel__cache_entry *)b)->digest, 32);
}

/* A digest's 64 lowercase hex digits as its 32 bytes: 0, or -1 where it is not one. */
static int digest_of(const char *hex, uint8_t out[32])
{
    size_t n = 0;
    return kestrel__is_sha256_hex(hex) && OPENSSL_hexstr2buf_ex(out, 32, &n, hex, '\0') && n == 32 ? 0 : -1;
}

static int is_pack_id(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= 40)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

/* A new pack (root: a tree pack's directory, owned; NULL a file pack); its index or -1. */
static int new_pack(kestrel__chunk_cache *cache, const char *id, char *root)
{
    if (kestrel__array_grow(&cache->packs, &cache->cap_packs, cache->npacks + 1, sizeof(*cache->packs)) < 0 ||
        kestrel__array_grow(&cache->roots, &cache->cap_roots, cache->npacks + 1, sizeof(*cache->roots)) < 0) {
        free(root);
        return -1;
    }
    snprintf(cache->packs[cache->npacks], sizeof(cache->packs[0]), "%s", id);
    cache->roots[cache->npacks] = root;
    return (int)cache->npacks++;
}

static int add_entry(kestrel__chunk_cache *cache, size_t *cap, const char *hex, int pack, int64_t path, int64_t off,
                     uint32_t len)
{
    kestrel__cache_entry *e;
    if (kestrel__array_grow(&cache->ents, cap, cache->nents + 1, sizeof(*cache->ents)) < 0)
        return -1;
    e = &cache->ents[cache->nents];
    if (digest_of(hex, e->digest) < 0)
        return -1;
    e->pack = pack;
    e->path = path;
    e->offset = off;
    e->len = len;
    cache->nents++;
    return 0;
}

/* A file pack's index: "kestrel-pack 1 SIZE" then "HEX OFFSET LEN" lines. */
static void load_file_pack(kestrel__chunk_cache *cache, size_t *cap, FILE *f, const char *id)
{
    char line[160];
    long long size;
    int pack;
    if (!fgets(line, sizeof(line), f) || sscanf(line, "kestrel-pack 1 %lld", &size) != 1 ||
        (pack = new_pack(cache, id, NULL)) < 0)
        return;
    while (fgets(line, sizeof(line), f)) {
        char hex[65];
        long long off;
        unsigned long l;
        if (sscanf(line, "%64s %lld %lu", hex, &off, &l) != 3 || !kestrel__is_sha256_hex(hex) || off < 0 ||
            off > size || l == 0 || l > ENTRY_MAX)
            continue;   /* a damaged line: that chunk is not cached */
        if (add_entry(cache, cap, hex, pack, -1, off, (uint32_t)l) < 0)
            break;
    }
}

/* A length-prefixed name: len bytes, then a newline; NULL where it is not one. With prefix, that and
 * a '/' before it (malloc'd); else appended to names, NUL-ended (the returned pointer is valid until
 * names grows). */
static char *read_name(FILE *f, size_t len, const char *prefix, kestrel_buf *names)
{
    size_t pl = prefix ? strlen(prefix) + 1 : 0, at = names ? names->size : 0;
    char *s;
    if (len == 0 || len > TREE_PATH_MAX)
        return NULL;
    if (names) {
        if (kestrel__buf_grow(names, len + 1) < 0)
            return NULL;
        s = names->ptr + at;
    } else if ((s = malloc(pl + len + 1)) == NULL) {
        return NULL;
    }
    if (prefix)
        snprintf(s, pl + 1, "%s/", prefix);
    if (fread(s + pl, 1, len, f) != len || fgetc(f) != '\n' || memchr(s + pl, '\0', len)) {
        if (!names)
            free(s);
        return NULL;
    }
    s[pl + len] = '\0';
    if (names)
        names->size = at + len + 1;
    return s;
}

/* A tree pack's index (format at the top). */
static void load_tree_pack(kestrel__chunk_cache *cache, size_t *cap, FILE *f, const char *id)
{
    unsigned long long nfiles;
    size_t rootlen;
    char *root;
    int pack;
    if (fscanf(f, "kestrel-tree 1 %llu %zu", &nfiles, &rootlen) != 2 || fgetc(f) != '\n' ||
        (root = read_name(f, rootlen, NULL, NULL)) == NULL || (pack = new_pack(cache, id, root)) < 0)
        return;
    for (unsigned long long k = 0; k < nfiles; k++) {
        long long size, off = 0;
        unsigned long long nchunks;
        size_t plen;
        int64_t path = (int64_t)cache->names.size;
        if (fscanf(f, "F %lld %llu %zu", &size, &nchunks, &plen) != 3 || fgetc(f) != '\n' ||
            read_name(f, plen, NULL, &cache->names) == NULL)
            return;
        for (unsigned long long i = 0; i < nchunks; i++) {
            char hex[65];
            unsigned long l;
            if (fscanf(f, "%64s %lu\n", hex, &l) != 2 || !kestrel__is_sha256_hex(hex) || l == 0 || l > ENTRY_MAX ||
                (long long)l > size - off || add_entry(cache, cap, hex, pack, path, off, (uint32_t)l) < 0)
                return;
            off += (long long)l;
        }
    }
}

/* One pack's index (tree: a tree pack's), from its bytes. */
static void parse_index(kestrel__chunk_cache *cache, size_t *cap, const char *id, int tree, const char *data, size_t len)
{
    FILE *f = len ? fmemopen((void *)data, len, "r") : NULL;
    if (f == NULL)
        return;
    if (tree)
        load_tree_pack(cache, cap, f, id);
    else
        load_file_pack(cache, cap, f, id);
    fclose(f);
}

/* Read every pack's index once per pull; of the tree packs', at most TREE_BYTES_MAX (a cache that an
 * earlier build filled past it, before this pull trims it). */
static void load(kestrel__chunk_cache *cache)
{
    char packs[2100];
    size_t cap_e = 0;
    int64_t tree_bytes = 0;
    struct dirent *de;
    DIR *d;
    cache->loaded = 1;
    snprintf(packs, sizeof(packs), "%s/packs", cache->dir);
    if ((d = opendir(packs)) == NULL)
        return;
    while ((de = readdir(d)) != NULL) {
        char id[40];
        size_t len = strlen(de->d_name);
        int tree = len > 5 && !strcmp(de->d_name + len - 5, ".tree");
        FILE *f;
        int fd;
        if (!tree && (len < 5 || strcmp(de->d_name + len - 4, ".idx")))
            continue;
        if (len - 4 - (size_t)tree >= sizeof(id))
            continue;
        snprintf(id, sizeof(id), "%.*s", (int)(len - 4 - (size_t)tree), de->d_name);
        if (!is_pack_id(id) || (fd = openat(dirfd(d), de->d_name, O_RDONLY | O_CLOEXEC)) < 0)
            continue;
        if (tree) {
            struct stat st;
            if (fstat(fd, &st) < 0 || st.st_size > TREE_BYTES_MAX - tree_bytes) {
                close(fd);
                continue;
            }
            tree_bytes += st.st_size;
        }
        if ((f = fdopen(fd, "r")) == NULL) {
            close(fd);
            continue;
        }
        if (tree)   /* read as it is parsed: never held whole */
            load_tree_pack(cache, &cap_e, f, id);
        else
            load_file_pack(cache, &cap_e, f, id);
        fclose(f);
    }
    closedir(d);
    if (cache->nents > 1)
        qsort(cache->ents, cache->nents, sizeof(*cache->ents), by_digest);
}

int kestrel__cache_parse_index(kestrel__chunk_cache *cache, const char *id, int tree, const char *data, size_t len)
{
    size_t cap = cache->nents;   /* the entries array may have spare room: grow from its count */
    parse_index(cache, &cap, id, tree, data, len);
    return (int)cache->nents;
}

/* A pack that failed a check goes, with its index. */
static void drop_pack(kestrel__chunk_cache *cache, int pack)
{
    char path[2200];
    if (cache->roots[pack]) {   /* a tree pack: its index only, never the files it points at */
        snprintf(path, sizeof(path), "%s/packs/%s.tree", cache->dir, cache->packs[pack]);
        unlink(path);
    } else {
        snprintf(path, sizeof(path), "%s/packs/%s.idx", cache->dir, cache->packs[pack]);
        unlink(path);
        path[strlen(path) - 4] = '\0';
        unlink(path);
    }
    for (size_t i = 0; i < cache->nents; i++)
        if (cache->ents[i].pack == pack)
            cache->ents[i].pack = -1;
}

int kestrel__cache_get(kestrel__chunk_cache *cache, const char *hex, int64_t size, kestrel_buf *b)
{
    kestrel__cache_entry key, *e;
    if (!cache->on)
        return 0;
    if (!cache->loaded)
        load(cache);
    if (cache->nents == 0 || digest_of(hex, key.digest) < 0 ||
        (e = bsearch(&key, cache->ents, cache->nents, sizeof(key), by_digest)) == NULL)
        return 0;
    while (e > cache->ents && !by_digest(e - 1, &key))
        e--;
    for (; e < cache->ents + cache->nents && !by_digest(e, &key); e++) {
        char path[2 * TREE_PATH_MAX + 2200];
        struct stat st;
        ssize_t r;
        int fd, n;
        if (e->pack < 0 || (int64_t)e->len != size)
            continue;
        if (e->path >= 0)
            n = snprintf(path, sizeof(path), "%s/%s", cache->roots[e->pack], cache->names.ptr + e->path);
        else
            n = snprintf(path, sizeof(path), "%s/packs/%s", cache->dir, cache->packs[e->pack]);
        if (n < 0 || (size_t)n >= sizeof(path))
            continue;
        if ((fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)) < 0 || fstat(fd, &st) < 0 ||
            !S_ISREG(st.st_mode)) {
            if (fd >= 0)
                close(fd);
            drop_pack(cache, e->pack);
            continue;
        }
        b->size = 0;
        if (kestrel__buf_grow(b, e->len) < 0) {
            close(fd);
            return 0;
        }
        r = pread(fd, b->ptr, e->len, e->offset);
        close(fd);
        b->size = r > 0 ? (size_t)r : 0;
        if (!kestrel__chunk_verified(hex, b, size)) {   /* changed in place: never trusted again */
            drop_pack(cache, e->pack);
            continue;
        }
        snprintf(path, sizeof(path), "%s/packs/%s.%s", cache->dir, cache->packs[e->pack], e->path >= 0 ? "tree" : "idx");
        utimensat(AT_FDCWD, path, NULL, 0);   /* recently used: evicted last */
        return 1;
    }
    return 0;
}

/* A new pack's name: 32 hex digits, from what it holds, the time and this process. */
static void pack_id(const char *what, char id[40])
{
    char seed[8400], hex[KESTREL__HEX_LEN + 1];
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    snprintf(seed, sizeof(seed), "%s %lld %ld %d", what, (long long)now.tv_sec, now.tv_nsec, (int)getpid());
    kestrel__sha256_hex(seed, strlen(seed), hex);
    snprintf(id, 40, "%.32s", hex);
}

void kestrel__cache_add(kestrel__chunk_cache *cache, const char *path, const kestrel__cache_item *items, size_t n)
{
    char id[40], pack[2200], idx[2300], tmp[2400];
    int64_t off = 0;
    FILE *f;
    int fd, ok;
    if (!cache->on)
        return;
    pack_id(path, id);
    snprintf(pack, sizeof(pack), "%s/packs/%s", cache->dir, id);
    snprintf(idx, sizeof(idx), "%s.idx", pack);
    if (link(path, pack) < 0)   /* another filesystem: not cached */
        return;
    snprintf(tmp, sizeof(tmp), "%s.tmp", idx);
    if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0 || (f = fdopen(fd, "w")) == NULL) {
        if (fd >= 0)
            close(fd);
        unlink(pack);
        return;
    }
    for (size_t i = 0; i < n; i++)
        off += items[i].len;
    ok = fprintf(f, "kestrel-pack 1 %lld\n", (long long)off) > 0;
    off = 0;
    for (size_t i = 0; i < n && ok; i++) {
        ok = !items[i].keep || fprintf(f, "%s %lld %lld\n", items[i].hex, (long long)off, (long long)items[i].len) > 0;
        off += items[i].len;
    }
    if (fclose(f) != 0 || !ok || rename(tmp, idx) < 0) {
        unlink(tmp);
        unlink(pack);
    }
}

void kestrel__cache_add_tree(kestrel__chunk_cache *cache, const char *dest, size_t n_files,
                             kestrel__cache_windows next, void *ctx)
{
    char id[40], idx[2300], tmp[2400], root[TREE_PATH_MAX];
    const Kestrel__V1__Manifest *m;
    FILE *f;
    int fd, ok, more = 0;
    if (!cache->on || realpath(dest, root) == NULL)
        return;
    if (!cache->loaded)
        load(cache);
    for (size_t p = 0; p < cache->npacks; p++)   /* the same directory pulled before: that pack is stale */
        if (cache->roots[p] && !strcmp(cache->roots[p], root))
            drop_pack(cache, (int)p);
    pack_id(root, id);
    snprintf(idx, sizeof(idx), "%s/packs/%s.tree", cache->dir, id);
    snprintf(tmp, sizeof(tmp), "%s.tmp", idx);
    if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0 || (f = fdopen(fd, "w")) == NULL) {
        if (fd >= 0)
            close(fd);
        unlink(tmp);
        return;
    }
    ok = fprintf(f, "kestrel-tree 1 %zu %zu\n%s\n", n_files, strlen(root), root) > 0;
    while (ok && (more = next(ctx, &m)) == 1) {
        size_t chunk = 0;
        for (size_t j = 0; j < m->n_files && ok; j++) {
            const Kestrel__V1__TreeFile *t = m->files[j];
            /* an index past what the cache keeps of them all would be removed by the trim that follows */
            ok = ftell(f) <= TREE_BYTES_MAX &&
                 fprintf(f, "F %lld %lld %zu\n%s\n", (long long)t->size, (long long)t->chunks, strlen(t->path), t->path) > 0;
            for (int64_t k = 0; k < t->chunks && ok && chunk < m->n_chunks; k++, chunk++)
                ok = fprintf(f, "%s %lld\n", m->chunks[chunk]->digest, (long long)m->chunks[chunk]->size) > 0;
        }
    }
    if (fclose(f) != 0 || !ok || more != 0 || rename(tmp, idx) < 0)
        unlink(tmp);
}

typedef struct {
    char id[40];
    int64_t size;       /* a pack's file; a tree pack's index */
    int64_t used_ns;
    int tree, gone;
} pack_use;

static int older_first(const void *a, const void *b)
{
    const pack_use *x = a, *y = b;
    return (x->used_ns > y->used_ns) - (x->used_ns < y->used_ns);
}

/* Remove pack u (a tree pack: its index only, never the files it points at): 0 (gone, also when
 * another pull's trim took it first), or -1 when it stays. */
static int pack_remove(int dir, pack_use *u)
{
    char name[48];
    snprintf(name, sizeof(name), "%s.%s", u->id, u->tree ? "tree" : "idx");
    if (unlinkat(dir, name, 0) < 0 && errno != ENOENT && u->tree)
        return -1;
    if (!u->tree && unlinkat(dir, u->id, 0) < 0 && errno != ENOENT)
        return -1;
    u->gone = 1;
    return 0;
}

void kestrel__cache_trim(kestrel__chunk_cache *cache)
{
    char packs[2100];
    DIR *d;
    struct dirent *e;
    pack_use *v = NULL;
    size_t n = 0, cap = 0, kept_trees = 0;
    int64_t total = 0, tree_bytes = 0;
    if (!cache->on)
        return;
    snprintf(packs, sizeof(packs), "%s/packs", cache->dir);
    if ((d = opendir(packs)) == NULL)
        return;
    while ((e = readdir(d)) != NULL) {
        struct stat si, sp;
        char id[40];
        size_t len = strlen(e->d_name);
        int tree = len > 5 && !strcmp(e->d_name + len - 5, ".tree");
        if (!tree && (len < 5 || strcmp(e->d_name + len - 4, ".idx")))
            continue;
        if (len - 4 - (size_t)tree >= sizeof(id))
            continue;
        snprintf(id, sizeof(id), "%.*s", (int)(len - 4 - (size_t)tree), e->d_name);
        if (fstatat(dirfd(d), e->d_name, &si, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (!tree && fstatat(dirfd(d), id, &sp, AT_SYMLINK_NOFOLLOW) < 0) {   /* a pack without its file */
            unlinkat(dirfd(d), e->d_name, 0);
            continue;
        }
        if (kestrel__array_grow(&v, &cap, n + 1, sizeof(*v)) < 0)
            break;
        memcpy(v[n].id, id, sizeof(id));
        v[n].size = tree ? si.st_size : sp.st_size + si.st_size;   /* a pack's index counts too */
        v[n].used_ns = (int64_t)si.st_mtim.tv_sec * 1000000000 + si.st_mtim.tv_nsec;
        v[n].tree = tree;
        v[n].gone = 0;
        total = v[n].size > INT64_MAX - total ? INT64_MAX : total + v[n].size;   /* sparse files say anything */
        n++;
    }
    if (n > 0)
        qsort(v, n, sizeof(*v), older_first);
    /* the bytes the cache holds, a tree pack's index among them: least recently used first */
    for (size_t i = 0; i < n && total > cache->max_bytes; i++)
        if (pack_remove(dirfd(d), &v[i]) == 0)
            total -= v[i].size;
    /* and of the tree packs, the newest that fit both of their own bounds */
    for (size_t i = n; i-- > 0;)
        if (v[i].tree && !v[i].gone) {
            if (kept_trees < TREE_PACKS_MAX && v[i].size <= TREE_BYTES_MAX - tree_bytes) {
                kept_trees++;
                tree_bytes += v[i].size;
            } else {
                pack_remove(dirfd(d), &v[i]);
            }
        }
    closedir(d);
    free(v);
}

int64_t kestrel__cache_free_sole(kestrel__chunk_cache *cache, dev_t dev)
{
    char packs[2100];
    DIR *d;
    struct dirent *e;
    int64_t freed = 0;
    if (!cache->on)
        return 0;
    snprintf(packs, sizeof(packs), "%s/packs", cache->dir);
    if ((d = opendir(packs)) == NULL)
        return 0;
    while ((e = readdir(d)) != NULL) {
        struct stat sp;
        char idx[300];
        size_t len = strlen(e->d_name);
        if (len < 5 || len > 200 || strchr(e->d_name, '.') ||
            fstatat(dirfd(d), e->d_name, &sp, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(sp.st_mode) ||
            sp.st_nlink != 1 || sp.st_dev != dev)
            continue;   /* not a pack's file, or its bytes are also a pulled file's (or elsewhere) */
        snprintf(idx, sizeof(idx), "%s.idx", e->d_name);
        unlinkat(dirfd(d), idx, 0);
        if (unlinkat(dirfd(d), e->d_name, 0) == 0)
            freed += (int64_t)sp.st_blocks * 512;
    }
    closedir(d);
    return freed;
}

/* lib/repo/push_cache.c - the stat cache of pushes (see push_cache.h). One file an entry:
 *   kestrel-stat 2 NFILES   (written as 20 digits, filled in once the push's files are counted)
 *   then for each file: "F PATHLEN DEV INO SIZE MTIME_NS CTIME_NS STARTED_NS SHA256 NCHUNKS\n" (SHA256 "-"
 *   when the push left it to kestreld), the
 *   path's bytes and "\n", then one "HEX LEN\n" line per chunk, in file order. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "push_cache.h"
#include "chunk.h"
#include "chunk_cache.h"
#include "own_dir.h"
#include "store.h"

#define MAX_PATH_LEN 4096

typedef struct {
    char *path;
    unsigned long long dev, ino;
    long long size, mtime, ctime, started;
    char sha[65];
    size_t first, n;         /* its chunks: refs[first, first + n) */
} record;

typedef struct {
    record *r;
    size_t n, cap;
    kestrel__chunk_ref *refs;
    size_t nrefs, caprefs;
} record_set;

struct kestrel__pushcache {
    char file[2300];
    record_set old;          /* as loaded, sorted by path */
    FILE *out;               /* this push's entry, written as it goes (memory does not grow with it) */
    char tmp[2400];          /* its temp name */
    size_t written;          /* files in it */
    int changed;             /* files remembered anew (not carried over) */
    int failed;              /* the entry could not be written: it is dropped */
};

static int64_t ns(struct timespec t)
{
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void set_free(record_set *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->r[i].path);
    free(s->r);
    free(s->refs);
    memset(s, 0, sizeof(*s));
}

static int by_path(const void *a, const void *b)
{
    return strcmp(((const record *)a)->path, ((const record *)b)->path);
}

/* Read an entry from f into pc->old (closes f). */
static int parse_stream(kestrel__pushcache *pc, FILE *f)
{
    unsigned long long nfiles;
    int ok;
    ok = fscanf(f, "kestrel-stat 2 %llu\n", &nfiles) == 1;
    for (unsigned long long k = 0; ok && k < nfiles; k++) {
        record r;
        unsigned long long nchunks;
        size_t len;
        long long offset = 0;
        memset(&r, 0, sizeof(r));
        ok = fscanf(f, "F %zu %llu %llu %lld %lld %lld %lld %64s %llu", &len, &r.dev, &r.ino, &r.size, &r.mtime, &r.ctime,
                    &r.started, r.sha, &nchunks) == 9 && fgetc(f) == '\n' && len <= MAX_PATH_LEN &&
             r.size >= 0 && nchunks <= (unsigned long long)r.size / KESTREL__CHUNK_MIN + 1 &&
             (kestrel__is_sha256_hex(r.sha) || !strcmp(r.sha, "-")) && (r.path = malloc(len + 1)) != NULL;
        if (ok && r.sha[0] == '-')
            r.sha[0] = '\0';   /* the digest the repository computed, not known here */
        if (ok) {
            ok = fread(r.path, 1, len, f) == len && fgetc(f) == '\n';
            r.path[len] = '\0';
        }
        ok = ok && kestrel__array_grow(&pc->old.refs, &pc->old.caprefs, pc->old.nrefs + nchunks + 1,
                                       sizeof(*pc->old.refs)) == 0;
        r.first = pc->old.nrefs;
        r.n = (size_t)nchunks;
        for (unsigned long long i = 0; ok && i < nchunks; i++) {
            kestrel__chunk_ref *c = &pc->old.refs[pc->old.nrefs++];
            unsigned long l;
            ok = fscanf(f, "%64s %lu\n", c->hex, &l) == 2 && kestrel__is_sha256_hex(c->hex) && l > 0 &&
                 l <= KESTREL__CHUNK_MAX;
            c->offset = offset;
            c->len = (uint32_t)l;
            c->file = 0;
            c->missing = 0;
            offset += (long long)l;
        }
        ok = ok && offset == r.size && kestrel__array_grow(&pc->old.r, &pc->old.cap, pc->old.n + 1, sizeof(*pc->old.r)) == 0;
        if (ok)
            pc->old.r[pc->old.n++] = r;
        else
            free(r.path);
    }
    fclose(f);
    if (!ok)
        set_free(&pc->old);
    else if (pc->old.n > 1)
        qsort(pc->old.r, pc->old.n, sizeof(*pc->old.r), by_path);
    return (int)pc->old.n;
}

int kestrel__pushcache_parse(kestrel__pushcache *pc, const char *data, size_t size)
{
    FILE *f = size ? fmemopen((void *)data, size, "r") : NULL;
    return f ? parse_stream(pc, f) : 0;
}

/* Read the entry (streamed, never whole in memory): whatever is damaged or missing just means a
 * cold cache. */
static void load(kestrel__pushcache *pc)
{
    FILE *f = fopen(pc->file, "r");
    if (f)
        parse_stream(pc, f);
    kestrel_error_clear();
}

kestrel__pushcache *kestrel__pushcache_new(void)
{
    return calloc(1, sizeof(kestrel__pushcache));
}

/* Remove the temp entries of key that a push killed mid-way left (a live push writes to its own
 * as it goes: one untouched for an hour is dead). */
static void sweep_temps(const char *dir, const char *key)
{
    char prefix[80], path[2400];
    struct dirent *e;
    struct stat st;
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    snprintf(prefix, sizeof(prefix), "%s.tmp.", key);
    while ((e = readdir(d)) != NULL)
        if (!strncmp(e->d_name, prefix, strlen(prefix))) {
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            if (lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_mtime < time(NULL) - 3600)
                unlink(path);
        }
    closedir(d);
}

kestrel__pushcache *kestrel__pushcache_open(const char *abs)
{
    char dir[2100], key[KESTREL__HEX_LEN + 1];
    kestrel__pushcache *pc;
    /* only in a folder no one else can change: another user's record would choose what is not sent */
    if (!kestrel__cache_dir(dir, sizeof(dir), ".stat", "stat") || kestrel__mkdirs(dir, 0700) < 0 ||
        !kestrel__dir_own(dir) || (pc = calloc(1, sizeof(*pc))) == NULL)
        return NULL;
    kestrel__sha256_hex(abs, strlen(abs), key);
    snprintf(pc->file, sizeof(pc->file), "%s/%s", dir, key);
    sweep_temps(dir, key);
    load(pc);
    return pc;
}

/* The earlier push's record of rel when it still holds for st, else NULL. */
static const record *holding(const kestrel__pushcache *pc, const char *rel, const struct stat *st)
{
    record key;
    const record *r;
    if (pc == NULL || pc->old.n == 0)
        return NULL;
    key.path = (char *)rel;
    if ((r = bsearch(&key, pc->old.r, pc->old.n, sizeof(*pc->old.r), by_path)) == NULL)
        return NULL;
    if (r->dev != (unsigned long long)st->st_dev || r->ino != (unsigned long long)st->st_ino ||
        r->size != (long long)st->st_size || r->mtime != ns(st->st_mtim) || r->ctime != ns(st->st_ctim) ||
        r->mtime >= r->started)
        return NULL;
    return r;
}

int kestrel__pushcache_holds(const kestrel__pushcache *pc, const char *rel, const struct stat *st)
{
    return holding(pc, rel, st) != NULL;
}

int kestrel__pushcache_lookup(kestrel__pushcache *pc, const char *rel, const struct stat *st,
                              kestrel__chunk_ref **refs, size_t *n, char sha[65])
{
    const record *r = holding(pc, rel, st);
    kestrel__chunk_ref *v;
    if (r == NULL || (v = malloc((r->n + 1) * sizeof(*v))) == NULL)
        return 0;
    memcpy(v, pc->old.refs + r->first, r->n * sizeof(*v));
    memcpy(sha, r->sha, 65);
    *refs = v;
    *n = r->n;
    kestrel__pushcache_remember(pc, rel, st, r->started, v, r->n, sha);
    pc->changed--;   /* carried over, not new */
    return 1;
}

/* The temp file this push's entry is written to, with a header whose count is filled in at the end. */
static int out_open(kestrel__pushcache *pc)
{
    int fd;
    snprintf(pc->tmp, sizeof(pc->tmp), "%s.tmp.XXXXXX", pc->file);
    if ((fd = mkstemp(pc->tmp)) < 0)
        return -1;
    if ((pc->out = fdopen(fd, "w")) == NULL) {
        close(fd);
        unlink(pc->tmp);
        return -1;
    }
    return fprintf(pc->out, "kestrel-stat 2 %020zu\n", (size_t)0) > 0 ? 0 : -1;
}

void kestrel__pushcache_remember(kestrel__pushcache *pc, const char *rel, const struct stat *st, int64_t started_ns,
                                 const kestrel__chunk_ref *refs, size_t n, const char sha[65])
{
    int ok;
    if (pc == NULL || !pc->file[0] || pc->failed || ns(st->st_mtim) >= started_ns)   /* modified while read: never trusted */
        return;
    ok = (pc->out || out_open(pc) == 0) &&
         fprintf(pc->out, "F %zu %llu %llu %lld %lld %lld %lld %s %zu\n%s\n", strlen(rel), (unsigned long long)st->st_dev,
                 (unsigned long long)st->st_ino, (long long)st->st_size, (long long)ns(st->st_mtim),
                 (long long)ns(st->st_ctim), (long long)started_ns, sha[0] ? sha : "-", n, rel) > 0;
    for (size_t k = 0; ok && k < n; k++)
        ok = fprintf(pc->out, "%s %lu\n", refs[k].hex, (unsigned long)refs[k].len) > 0;
    if (!ok) {
        pc->failed = 1;
        return;
    }
    pc->written++;
    pc->changed++;
}

void kestrel__pushcache_close(kestrel__pushcache *pc)
{
    char head[40];
    int keep;
    if (pc == NULL)
        return;
    keep = !pc->failed && (pc->changed > 0 || pc->written != pc->old.n);
    if (pc->out == NULL && keep)   /* nothing to remember any more */
        unlink(pc->file);
    if (pc->out) {   /* the count in place, then the entry under its name (best effort) */
        snprintf(head, sizeof(head), "kestrel-stat 2 %020zu\n", pc->written);
        keep = keep && fflush(pc->out) == 0 && pwrite(fileno(pc->out), head, strlen(head), 0) == (ssize_t)strlen(head);
        keep = fclose(pc->out) == 0 && keep && rename(pc->tmp, pc->file) == 0;
        if (!keep)
            unlink(pc->tmp);
    }
    set_free(&pc->old);
    free(pc);
}

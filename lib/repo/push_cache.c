/* lib/repo/push_cache.c - the stat cache of pushes (see push_cache.h). One file an entry:
 *   kestrel-stat 2 NFILES   (written as 20 digits, filled in once the push's files are counted)
 *   then for each file: "F PATHLEN DEV INO SIZE MTIME_NS CTIME_NS STARTED_NS SHA256 NCHUNKS\n" (SHA256 "-"
 *   when the push left it to kestreld), the
 *   path's bytes and "\n", then one "HEX LEN\n" line per chunk, in file order. A file whose chunks
 *   kestreld named (sent unnamed: push.c) starts "N REPO " instead of "F ", REPO the first 16 hex
 *   digits of SHA-256 of that kestreld's URL: such a record holds for pushes to it only, since
 *   another repository would take its word for what those digests are (an older build reads the
 *   entry up to there, and hashes the files from there on).
 * A push writes its files in its own order, which is the listing's (paths sorted by strcmp), and asks
 * for them in that order again; so an entry is read as a merge, front to back, never held whole: a
 * push of 200,000 unchanged files holds one record of it at a time, not 200,000. A record out of
 * order, damaged or cut short ends the entry there: the files after it are hashed again. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "push_cache.h"
#include "chunk.h"
#include "own_dir.h"
#include "store.h"

#define MAX_PATH_LEN 4096

typedef struct {
    char path[MAX_PATH_LEN + 1];
    unsigned long long dev, ino;
    long long size, mtime, ctime, started;
    char sha[65];
    char by[17];                /* "": hashed here; else the repository that named its chunks */
    kestrel__chunk_ref *refs;   /* its chunks (grown to the longest file read so far) */
    size_t n, cap;
} record;

/* A reader of the entry, front to back: r is the record it stands at (when have). */
typedef struct {
    FILE *f;
    unsigned long long left;    /* records the header announced, not read yet */
    record r;
    int have;
    int started;                /* a record was read (r.path is the last one's, for the order) */
} cursor;

struct kestrel__pushcache {
    char file[2300];
    char where[17];             /* the repository pushed to (kestrel__pushcache_open) */
    cursor look;                /* kestrel__pushcache_lookup's */
    cursor ahead;               /* kestrel__pushcache_holds': the read-ahead asks ahead of the lookups */
    unsigned long long old_n;   /* files the earlier entry announced */
    FILE *out;                  /* this push's entry, written as it goes (memory does not grow with it) */
    char tmp[2400];             /* its temp name ("": unnamed, O_TMPFILE, until it is complete) */
    size_t written;             /* files in it */
    int changed;                /* files remembered anew (not carried over) */
    int failed;                 /* the entry could not be written: it is dropped */
};

static int64_t ns(struct timespec t)
{
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void cursor_close(cursor *c)
{
    if (c->f)
        fclose(c->f);
    free(c->r.refs);
    memset(c, 0, sizeof(*c));
}

/* Start reading f (taken: closed by cursor_close) at its header; the count it announces in *count.
 * A header that is not an entry's leaves the cursor empty. */
static void cursor_open(cursor *c, FILE *f, unsigned long long *count)
{
    memset(c, 0, sizeof(*c));
    if (f == NULL)
        return;
    c->f = f;
    if (fscanf(f, "kestrel-stat 2 %llu", &c->left) != 1 || fgetc(f) != '\n')
        c->left = 0;
    if (count)
        *count = c->left;
}

/* Read the next record into c->r: 0 when there is none (the end, or one damaged or out of order:
 * the entry ends there, and the cursor stays empty). */
static int cursor_next(cursor *c)
{
    record *r = &c->r;
    char prev[MAX_PATH_LEN + 1], tag[2];
    unsigned long long nchunks;
    size_t len;
    long long offset = 0;
    int ok;
    c->have = 0;
    if (c->f == NULL || c->left == 0)
        return 0;
    c->left--;
    memcpy(prev, r->path, strlen(r->path) + 1);
    r->by[0] = '\0';
    ok = fscanf(c->f, "%1[FN]", tag) == 1 && (tag[0] == 'F' || (fscanf(c->f, " %16[0-9a-f]", r->by) == 1 && strlen(r->by) == 16)) &&
         fscanf(c->f, " %zu %llu %llu %lld %lld %lld %lld %64s %llu", &len, &r->dev, &r->ino, &r->size, &r->mtime,
                &r->ctime, &r->started, r->sha, &nchunks) == 9 && fgetc(c->f) == '\n' && len <= MAX_PATH_LEN &&
         r->size >= 0 && nchunks <= (unsigned long long)r->size / KESTREL__CHUNK_MIN + 1 &&
         (kestrel__is_sha256_hex(r->sha) || !strcmp(r->sha, "-")) && fread(r->path, 1, len, c->f) == len &&
         fgetc(c->f) == '\n';
    if (ok) {
        r->path[len] = '\0';
        ok = strlen(r->path) == len && (!c->started || strcmp(prev, r->path) < 0);
    }
    if (ok && r->sha[0] == '-')
        r->sha[0] = '\0';   /* the digest the repository computed, not known here */
    r->n = 0;
    for (unsigned long long i = 0; ok && i < nchunks; i++) {
        kestrel__chunk_ref *k;
        unsigned long l;
        if (kestrel__array_grow(&r->refs, &r->cap, r->n + 1, sizeof(*r->refs)) < 0)
            break;
        k = &r->refs[r->n++];
        ok = fscanf(c->f, "%64s %lu", k->hex, &l) == 2 && fgetc(c->f) == '\n' && kestrel__is_sha256_hex(k->hex) &&
             l > 0 && l <= KESTREL__CHUNK_MAX;
        k->offset = offset;
        k->len = (uint32_t)l;
        k->file = 0;
        k->missing = 0;
        k->unnamed = 0;
        offset += (long long)l;
    }
    if (!ok || r->n != nchunks || offset != r->size) {
        kestrel_error_clear();
        fclose(c->f);
        c->f = NULL;
        return 0;
    }
    c->started = 1;
    return c->have = 1;
}

/* The record of rel, when the entry has one: the cursor moves past every record before rel (the
 * asks come in the entry's order, so none of those is asked for later). */
static const record *cursor_find(cursor *c, const char *rel)
{
    int cmp = -1;
    if (!c->started)
        cursor_next(c);
    while (c->have && (cmp = strcmp(c->r.path, rel)) < 0)
        cursor_next(c);
    return c->have && cmp == 0 ? &c->r : NULL;
}

int kestrel__pushcache_parse(kestrel__pushcache *pc, const char *data, size_t size)
{
    int n = 0;
    cursor_close(&pc->look);
    cursor_close(&pc->ahead);
    cursor_open(&pc->look, size ? fmemopen((void *)data, size, "r") : NULL, &pc->old_n);
    cursor_open(&pc->ahead, size ? fmemopen((void *)data, size, "r") : NULL, NULL);
    {   /* counted by a reader of its own, so the two above still stand at the start */
        cursor count;
        cursor_open(&count, size ? fmemopen((void *)data, size, "r") : NULL, NULL);
        while (cursor_next(&count))
            n++;
        cursor_close(&count);
    }
    return n;
}

/* Open the entry for both readers: whatever is damaged or missing just means a cold cache (from
 * there on). */
static void load(kestrel__pushcache *pc)
{
    cursor_open(&pc->look, fopen(pc->file, "r"), &pc->old_n);
    cursor_open(&pc->ahead, fopen(pc->file, "r"), NULL);
    kestrel_error_clear();
}

kestrel__pushcache *kestrel__pushcache_new(void)
{
    return calloc(1, sizeof(kestrel__pushcache));
}

/* Remove the temp entries of key that a push killed mid-way left (a live push writes to its own
 * as it goes: one untouched for an hour is dead). Named temps are made only where O_TMPFILE is not
 * supported, or for the instant between naming a complete entry and renaming it (out_name). */
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

kestrel__pushcache *kestrel__pushcache_open(const char *abs, const char *where)
{
    char dir[2100], key[KESTREL__HEX_LEN + 1];
    kestrel__pushcache *pc;
    /* only in a folder no one else can change: another user's record would choose what is not sent */
    if (!kestrel__cache_dir(dir, sizeof(dir), ".stat", "stat") || kestrel__mkdirs(dir, 0700) < 0 ||
        !kestrel__dir_own(dir) || (pc = calloc(1, sizeof(*pc))) == NULL)
        return NULL;
    kestrel__sha256_hex(abs, strlen(abs), key);
    snprintf(pc->file, sizeof(pc->file), "%s/%s", dir, key);
    snprintf(pc->where, sizeof(pc->where), "%s", where ? where : "");
    sweep_temps(dir, key);
    load(pc);
    return pc;
}

/* The earlier push's record of rel, read by c, when it still holds for st, else NULL. */
static const record *holding(cursor *c, const char *where, const char *rel, const struct stat *st)
{
    const record *r = cursor_find(c, rel);
    if (r == NULL || r->dev != (unsigned long long)st->st_dev || r->ino != (unsigned long long)st->st_ino ||
        r->size != (long long)st->st_size || r->mtime != ns(st->st_mtim) || r->ctime != ns(st->st_ctim) ||
        r->mtime >= r->started || (r->by[0] && strcmp(r->by, where)))   /* named by another repository */
        return NULL;
    return r;
}

int kestrel__pushcache_holds(kestrel__pushcache *pc, const char *rel, const struct stat *st)
{
    return pc != NULL && holding(&pc->ahead, pc->where, rel, st) != NULL;
}

int kestrel__pushcache_lookup(kestrel__pushcache *pc, const char *rel, const struct stat *st,
                              kestrel__chunk_ref **refs, size_t *n, char sha[65])
{
    const record *r = pc ? holding(&pc->look, pc->where, rel, st) : NULL;
    kestrel__chunk_ref *v;
    if (r == NULL || (v = malloc((r->n + 1) * sizeof(*v))) == NULL)
        return 0;
    memcpy(v, r->refs, r->n * sizeof(*v));
    memcpy(sha, r->sha, 65);
    *refs = v;
    *n = r->n;
    kestrel__pushcache_remember(pc, rel, st, r->started, v, r->n, sha, r->by);
    pc->changed--;   /* carried over, not new */
    return 1;
}

/* The temp file this push's entry is written to, with a header whose count is filled in at the end:
 * unnamed (O_TMPFILE) until it is complete, so a push killed meanwhile leaves nothing behind; where
 * the file system cannot, a named temp (pc->tmp), which a later open removes once it is an hour old. */
static int out_open(kestrel__pushcache *pc)
{
    char dir[sizeof(pc->file)];
    int fd;
    snprintf(dir, sizeof(dir), "%s", pc->file);
    *strrchr(dir, '/') = '\0';
    pc->tmp[0] = '\0';
    /* named through /proc at the end: without it (a chroot), a named temp from the start */
    if (access("/proc/self/fd", X_OK) != 0 || (fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600)) < 0) {
        snprintf(pc->tmp, sizeof(pc->tmp), "%s.tmp.XXXXXX", pc->file);
        if ((fd = mkstemp(pc->tmp)) < 0)
            return -1;
    }
    if ((pc->out = fdopen(fd, "w")) == NULL) {
        close(fd);
        if (pc->tmp[0])
            unlink(pc->tmp);
        return -1;
    }
    return fprintf(pc->out, "kestrel-stat 2 %020zu\n", (size_t)0) > 0 ? 0 : -1;
}

/* Give the unnamed entry a temp name beside its final one (pc->tmp), to be renamed over it: a link
 * through /proc (linkat's AT_EMPTY_PATH needs a privilege), under a name no one else has. */
static int out_name(kestrel__pushcache *pc)
{
    char self[64], hex[13];
    unsigned char r[6];
    snprintf(self, sizeof(self), "/proc/self/fd/%d", fileno(pc->out));
    for (int tries = 0; tries < 8; tries++) {
        if (getentropy(r, sizeof(r)) < 0)
            return -1;
        snprintf(pc->tmp, sizeof(pc->tmp), "%s.tmp.%s", pc->file, kestrel__hex(r, sizeof(r), hex));
        if (linkat(AT_FDCWD, self, AT_FDCWD, pc->tmp, AT_SYMLINK_FOLLOW) == 0)
            return 0;
        if (errno != EEXIST)
            break;
    }
    pc->tmp[0] = '\0';
    return -1;
}

void kestrel__pushcache_remember(kestrel__pushcache *pc, const char *rel, const struct stat *st, int64_t started_ns,
                                 const kestrel__chunk_ref *refs, size_t n, const char sha[65], const char *by)
{
    int ok;
    if (pc == NULL || !pc->file[0] || pc->failed || ns(st->st_mtim) >= started_ns)   /* modified while read: never trusted */
        return;
    ok = (pc->out || out_open(pc) == 0) &&
         fprintf(pc->out, "%s%s %zu %llu %llu %lld %lld %lld %lld %s %zu\n%s\n", by && by[0] ? "N " : "F",
                 by && by[0] ? by : "", strlen(rel), (unsigned long long)st->st_dev,
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

void kestrel__pushcache_forget(kestrel__pushcache *pc)
{
    if (pc == NULL)
        return;
    pc->failed = 1;
    if (pc->file[0])
        unlink(pc->file);
}

void kestrel__pushcache_close(kestrel__pushcache *pc)
{
    char head[40];
    int keep;
    if (pc == NULL)
        return;
    keep = !pc->failed && (pc->changed > 0 || pc->written != pc->old_n);
    if (pc->out == NULL && keep && pc->file[0])   /* nothing to remember any more */
        unlink(pc->file);
    if (pc->out) {   /* the count in place, then the entry under its name (best effort) */
        snprintf(head, sizeof(head), "kestrel-stat 2 %020zu\n", pc->written);
        keep = keep && fflush(pc->out) == 0 && pwrite(fileno(pc->out), head, strlen(head), 0) == (ssize_t)strlen(head) &&
               (pc->tmp[0] || out_name(pc) == 0);
        keep = fclose(pc->out) == 0 && keep && rename(pc->tmp, pc->file) == 0;
        if (!keep && pc->tmp[0])
            unlink(pc->tmp);
    }
    cursor_close(&pc->look);
    cursor_close(&pc->ahead);
    free(pc);
}

/* lib/repo/store_gc.c - reclaiming chunks no version needs, safely beside concurrent pushes.
 *
 * Mark: every chunk named by a committed manifest. Sweep: a chunk that is not marked is removed
 * only if it is older than the grace period. A push relies on a chunk either because it wrote it
 * (its mtime is fresh) or because the store told it the chunk was there (kestrel__store_has_chunk
 * refreshes the mtime), so nothing a running push depends on is ever old enough to go; and a
 * commit checks that every chunk exists, so even a push slower than the grace period fails
 * cleanly instead of committing a version with a hole; it holds the store from that check to its
 * link (kestrel__store_commit_hold), and the cutoff is taken only between such holds, so a chunk
 * it checked is either touched at or after the cutoff or named by a version the marking sees. Temp
 * files left by a killed writer go after the same grace period, and never younger than KESTREL__TEMP_GRACE_S (a temp is a live
 * writer's until its rename, whatever the grace): chunks' in chunks/XX/, manifests' and aliases'
 * anywhere under models/ (a killed commit's versions/N.json.tmp.X; no version or alias file has
 * ".tmp." in its name, so a regular file that has is a temp: a model's folder may, and folders are
 * only walked), the format file's in the root; a tombstone from before they were empty is emptied
 * and a listing left by a killed delete removed (models_entry). Marking goes through the store's own listing
 * (models, versions, manifests), sweeping through chunks/XX/. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "dir_each.h"
#include "repo.h"
#include "store.h"

typedef struct {
    char (*hex)[KESTREL__HEX_LEN + 1];
    size_t n, cap;
} mark_set;

static int add_mark(mark_set *m, const char *hex)
{
    int rc;
    if (strlen(hex) != KESTREL__HEX_LEN)
        return 0;
    if ((rc = kestrel__array_grow(&m->hex, &m->cap, m->n + 1, sizeof(*m->hex))) < 0)
        return rc;
    memcpy(m->hex[m->n++], hex, KESTREL__HEX_LEN + 1);
    return 0;
}

/* Every chunk of every committed version, through the store's own listing. A manifest that
 * cannot be read stops the collection: better keep garbage than lose a version's chunks. */
static int mark_all(kestrel__store *s, mark_set *m)
{
    kestrel_buf names = KESTREL_BUF_INIT;
    int rc = kestrel__store_list(s, &names);
    for (char *save = NULL, *name = rc == 0 && names.ptr ? strtok_r(names.ptr, "\n", &save) : NULL; rc == 0 && name;
         name = strtok_r(NULL, "\n", &save)) {
        int64_t *versions = NULL;
        size_t n = 0;
        if (kestrel__store_versions(s, name, &versions, &n) < 0) {
            kestrel_error_clear();   /* every version deleted meanwhile */
            continue;
        }
        for (size_t i = 0; i < n && rc == 0; i++) {
            Kestrel__V1__Manifest *doc;
            if ((rc = kestrel__store_manifest_json(s, name, versions[i], &doc)) == KESTREL_ENOTFOUND) {
                kestrel_error_clear();   /* deleted meanwhile */
                rc = 0;
                continue;
            }
            if (rc < 0)
                break;
            for (size_t k = 0; k < doc->n_chunks && rc == 0; k++)
                rc = add_mark(m, doc->chunks[k]->digest);
            kestrel__manifest_free(doc);
        }
        free(versions);
    }
    kestrel_buf_dispose(&names);
    return rc;
}

static int hex_cmp(const void *a, const void *b)
{
    return strcmp(a, b);
}

typedef struct {
    time_t cutoff;              /* temps: older than the grace and KESTREL__TEMP_GRACE_S */
    kestrel__store_gc_stats *st;
} temp_sweep;

/* A temp file older than the cutoff goes (kestrel__dir_each). */
static void temp_entry(int at, const char *name, const struct stat *sb, int walked, void *ctx)
{
    temp_sweep *t = ctx;
    (void)walked;
    if (S_ISREG(sb->st_mode) && sb->st_mtime <= t->cutoff && strstr(name, ".tmp.") && unlinkat(at, name, 0) == 0) {
        t->st->temps_removed++;
        t->st->bytes_freed += sb->st_size;
    }
}

/* models/...: temps; a tombstone written before tombstones were empty (versions/N.deleted was a
 * link to the deleted manifest, keeping its file names and metadata) is emptied, but not one still
 * linked to its N.json (a delete killed between the two: the version is live); a listing whose
 * version is gone (N.listing or N.pb without N.json: a delete killed before removing it) goes. An alias
 * cannot be named N.anything (it starts with a letter), and folders are only walked. */
static void models_entry(int at, const char *name, const struct stat *sb, int walked, void *ctx)
{
    char *end, json[64];
    long long n;
    int fd;
    struct stat now;
    temp_entry(at, name, sb, walked, ctx);
    if (!S_ISREG(sb->st_mode) || !(*name >= '1' && *name <= '9'))
        return;
    n = strtoll(name, &end, 10);
    if (!strcmp(end, ".listing") || !strcmp(end, ".pb")) {
        snprintf(json, sizeof(json), "%lld.json", n);
        if (faccessat(at, json, F_OK, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT && unlinkat(at, name, 0) == 0)
            ((temp_sweep *)ctx)->st->bytes_freed += sb->st_size;
        return;
    }
    if (strcmp(end, ".deleted") || sb->st_size == 0 || sb->st_nlink != 1 ||
        (fd = openat(at, name, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)) < 0)
        return;
    if (fstat(fd, &now) == 0 && S_ISREG(now.st_mode) && now.st_nlink == 1 && ftruncate(fd, 0) == 0)
        ((temp_sweep *)ctx)->st->bytes_freed += now.st_size;
    close(fd);
}

typedef struct {
    temp_sweep temps;
    const char *prefix;         /* the folder's two hex digits */
    const mark_set *m;
    struct timespec cutoff;
} chunk_sweep;

/* Touched at or after the cutoff. */
static int young(const struct stat *sb, struct timespec cutoff)
{
    return sb->st_mtim.tv_sec > cutoff.tv_sec ||
           (sb->st_mtim.tv_sec == cutoff.tv_sec && sb->st_mtim.tv_nsec >= cutoff.tv_nsec);
}

/* Remove chunk name, unless a commit touched it since it was looked at: it is first renamed aside
 * (a commit's check then finds it missing and refuses, and the push sends it again), then looked at
 * once more, and put back when it was touched meanwhile. Found by a hostile test's race: a chunk
 * looked at, then touched by a commit's check, then removed on what was seen before, left a hole. */
static int going(int at, const char *name, struct timespec cutoff)
{
    char aside[96];
    struct stat now;
    snprintf(aside, sizeof(aside), "%s.tmp.gc", name);   /* a temp: a kill here leaves one to collect */
    if (renameat(at, name, at, aside) < 0)
        return 0;
    if (fstatat(at, aside, &now, AT_SYMLINK_NOFOLLOW) == 0 && young(&now, cutoff)) {
        (void)renameat(at, aside, at, name);   /* the same bytes, whatever came meanwhile */
        return 0;
    }
    return unlinkat(at, aside, 0) == 0;
}

/* chunks/ab/cdef...: a chunk no version names once older than the grace, and temps (kestrel__dir_each). */
static void chunk_entry(int at, const char *name, const struct stat *sb, int walked, void *ctx)
{
    chunk_sweep *c = ctx;
    char hex[KESTREL__HEX_LEN + 8];
    size_t n = strlen(name);
    if (n > 7 && !strcmp(name + n - 7, ".tmp.gc")) {   /* set aside by a killed collection: back, unless */
        char back[96];                                 /* stored again meanwhile (we hold gc.lock) */
        snprintf(back, sizeof(back), "%.*s", (int)(n - 7), name);
        if (renameat2(at, name, at, back, RENAME_NOREPLACE) < 0 && errno == EEXIST)
            unlinkat(at, name, 0);
        return;
    }
    if (strstr(name, ".tmp.")) {
        temp_entry(at, name, sb, walked, &c->temps);
        return;
    }
    if (!S_ISREG(sb->st_mode) || strlen(name) != KESTREL__HEX_LEN - 2 || young(sb, c->cutoff))
        return;   /* not ours, or young: at or after the cutoff */
    snprintf(hex, sizeof(hex), "%s%s", c->prefix, name);
    if (c->m->n && bsearch(hex, c->m->hex, c->m->n, sizeof(*c->m->hex), hex_cmp))   /* none marked: NULL array */
        return;
    if (going(at, name, c->cutoff)) {
        c->temps.st->chunks_removed++;
        c->temps.st->bytes_freed += sb->st_size;
    }
}

/* ROOT/name, a lock file: a regular one, since flock is emulated with fcntl locks on NFS, which want
 * it open for writing (read-only where this process may not write it). -1 when it cannot be opened. */
static int lock_file(kestrel__store *s, const char *name)
{
    char path[PATH_MAX];
    int fd;
    snprintf(path, sizeof(path), "%s/%s", kestrel__store_root(s), name);
    if ((fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666)) < 0 && errno == EACCES)
        fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    return fd;
}

/* flock through signals; fd closed and -1 when it cannot be had. */
static int locked(int fd, int how)
{
    int rc;
    while (fd >= 0 && (rc = flock(fd, how)) < 0 && errno == EINTR)
        ;
    if (fd >= 0 && rc < 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

int kestrel__store_commit_hold(kestrel__store *s)
{
    return locked(lock_file(s, "commit.lock"), LOCK_SH);   /* one open file each: a flock is its file's */
}

int kestrel__store_all_stored(kestrel__store *s, const Kestrel__V1__Manifest *m)
{
    for (size_t i = 0; i < m->n_chunks; i++)
        if (!kestrel__store_has_chunk(s, m->chunks[i]->digest))
            return kestrel__store_not_stored(m->chunks[i]->digest);
    return 0;
}

void kestrel__store_commit_release(int hold)
{
    if (hold >= 0)
        close(hold);
}

/* The time a chunk must be older than to go: taken while no commit is between its check of its
 * chunks and its link (the exclusive lock of ROOT/commit.lock), so that each chunk a commit checked
 * is either touched at or after it or named by a version already linked, which the marking that
 * follows sees; and read off the file system (the lock file stamped now), whose clock and precision
 * a commit's touch of a chunk gets (a review: an ext4 of 1 s stamps or NFS's server clock would
 * make a touch at 10.7 look older than a cutoff of 10.5 read off this host's clock). Found by a
 * hostile test: with whole seconds and no exclusion, grace 0 beside pushes left versions with holes.
 * Without the lock (none to be had) nothing younger than KESTREL__TEMP_GRACE_S goes. */
static struct timespec sweep_cutoff(kestrel__store *s, int64_t grace_s)
{
    struct timespec at;
    struct stat st;
    int fd = locked(lock_file(s, "commit.lock"), LOCK_EX);
    if (fd >= 0 && futimens(fd, NULL) == 0 && fstat(fd, &st) == 0) {
        at = st.st_mtim;
    } else {
        clock_gettime(CLOCK_REALTIME, &at);
        if (grace_s < KESTREL__TEMP_GRACE_S)
            grace_s = KESTREL__TEMP_GRACE_S;
    }
    if (fd >= 0)
        close(fd);
    at.tv_sec -= (time_t)grace_s;
    return at;
}

static int store_gc(kestrel__store *s, int64_t grace_s, kestrel__store_gc_stats *stats);

/* One collection at a time, in any process (ROOT/gc.lock): another's would take a chunk set aside
 * (going) for a killed writer's temp. */
int kestrel__store_gc(kestrel__store *s, int64_t grace_s, kestrel__store_gc_stats *stats)
{
    int alone = locked(lock_file(s, "gc.lock"), LOCK_EX), rc;
    if (alone < 0)
        return kestrel__error_sys(KESTREL_EIO, errno, "cannot lock %s/gc.lock", kestrel__store_root(s));
    rc = store_gc(s, grace_s, stats);
    close(alone);
    return rc;
}

static int store_gc(kestrel__store *s, int64_t grace_s, kestrel__store_gc_stats *stats)
{
    char path[PATH_MAX];
    mark_set marks = { NULL, 0, 0 };
    kestrel__store_gc_stats local = { 0, 0, 0, 0 };
    /* the cutoff is taken before marking: a chunk written after it is never swept this round; a temp
     * is some writer's until its rename, however short the grace asked (found by a test: grace 0
     * beside a push removed a chunk's temp before its rename, and the push failed) */
    struct timespec cutoff = sweep_cutoff(s, grace_s);
    time_t temp_cutoff = time(NULL) - (time_t)(grace_s > KESTREL__TEMP_GRACE_S ? grace_s : KESTREL__TEMP_GRACE_S);
    DIR *top;
    struct dirent *e;
    temp_sweep temps = { temp_cutoff, &local };
    int dfd, rc = mark_all(s, &marks);
    if (rc == 0) {
        local.chunks_live = (int64_t)marks.n;
        if (marks.n > 1)
            qsort(marks.hex, marks.n, sizeof(*marks.hex), hex_cmp);
        snprintf(path, sizeof(path), "%s/chunks", kestrel__store_root(s));
        if ((top = opendir(path)) == NULL)
            rc = kestrel__error_sys(KESTREL_EIO, errno, "cannot list %s", path);
        while (top && (e = readdir(top)) != NULL) {
            if (strlen(e->d_name) == 2 && e->d_name[0] != '.' &&
                (dfd = openat(dirfd(top), e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0)
                kestrel__dir_each(dfd, 0, chunk_entry, &(chunk_sweep){ temps, e->d_name, &marks, cutoff });
        }
        if (top)
            closedir(top);
        /* models/NAME/{versions,aliases}/: a name has at most 100 segments */
        snprintf(path, sizeof(path), "%s/models", kestrel__store_root(s));
        if ((dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0)
            kestrel__dir_each(dfd, 104, models_entry, &temps);
        if ((dfd = open(kestrel__store_root(s), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0)
            kestrel__dir_each(dfd, 0, temp_entry, &temps);
    }
    free(marks.hex);
    if (stats)
        *stats = local;
    return rc;
}

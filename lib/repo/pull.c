/* lib/repo/pull.c - the one pull, over any transport: resolve the version into a temp file and check
 * its manifest there a record at a time (a repository's answer is input too; manifest_file.h), then,
 * a window of its files at a time, take what the local cache has (each chunk verified as it is
 * read), fetch the rest (each placed at every offset it occupies in the window), then check the
 * whole and install it. A file: a helper hashes it as it fills in, and that one hash covers every byte, so a fetched
 * chunk's own digest is checked only when the whole does not match, to name the damaged chunk and
 * tell the repository (a second SHA-256 of every byte cost a 1 GiB pull 1.2 s of its 3 s of CPU);
 * then fsync and rename. A directory: each chunk is verified as it arrives (a file of one chunk has
 * no other check) and goes straight into its files in a fresh directory, each file checked against
 * its digest, then renamed over dest. Nothing half-written is ever left at dest.
 * One error code per failure kind, whatever the transport: data that does not match its digest
 * (a chunk, the file, a directory's file or listing) is KESTREL_EPROTO; a local file that cannot be
 * written is KESTREL_EIO; what the repository lacks is KESTREL_ENOTFOUND. */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "chunk_cache.h"
#include "manifest_file.h"
#include "own_dir.h"
#include "pull_layout.h"
#include "store.h"
#include "transfer.h"
#include "transport.h"

/* Chunks received and not yet checked and placed: the transport goes on receiving while the
 * placer thread checks (a directory's: hashes) and writes. Each buffer holds a chunk of its wanted size (1 MiB at most as
 * Kestrel cuts them, 2 MiB of buffer with its growth, so 32 MiB at most in all); a copy of another
 * size (one that grew on the repository's disk, up to the 4 MiB a batch may announce) is not kept,
 * only its length, and the placer refuses it. 16, not 4: a 1 GiB pull from a cold store, the
 * queue's size alone changed, alternating: 2.41-2.57 s with 4, 2.29-2.48 s with 8, 2.04-2.30 s
 * with 16; peak RSS 24, 27 and 32 MiB. */
#define QUEUED 16

typedef struct {
    kestrel_buf buf;   /* the chunk, when it came at its wanted size */
    size_t len;        /* the length it came with */
    kestrel__want w;
} queued;

typedef struct {
    kestrel__transport *t;
    kestrel__layout *lay;
    kestrel__progress *pr;
    /* the placer: checks each fetched chunk (place()) and places it, on its own thread */
    pthread_t th;
    int running;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    queued q[QUEUED];
    size_t head, n;             /* q[head .. head + n) waits; q[head] is being placed */
    int closing, abandon;       /* no more will come; drop what waits (the fetch failed) */
    int done;                   /* the placer ended (under mu) */
    int stop;                   /* atomic: the layout places no more (a cancel while the placer works) */
    int rc;                     /* the placer's first failure, and its error */
    kestrel__error_kept err;
    int whole_hashed;           /* a file: its whole digest covers every byte, chunks are not hashed */
    char damaged[KESTREL__HEX_LEN + 1];   /* a chunk that arrived damaged: the transport is told */
    int64_t bytes_placed, chunks_placed;  /* atomic: read by the fetching thread for progress (a window's) */
    int64_t bytes_before, chunks_before;  /* progress before the window's fetch */
    int64_t downloaded;                   /* chunks fetched, every window's */
} pull_state;

/* Check a fetched chunk (it came with len bytes, data holds them when that is its size): its size,
 * and its digest unless the whole file's covers it; then place it. */
static int place(pull_state *ps, const kestrel__want *w, const void *data, size_t len)
{
    kestrel_buf b = { (char *)data, len, 0 };
    int rc;
    if (len != (size_t)w->size || (!ps->whole_hashed && !kestrel__chunk_verified(w->digest, &b, w->size))) {
        snprintf(ps->damaged, sizeof(ps->damaged), "%s", w->digest);
        return kestrel__error_set(KESTREL_EPROTO, "chunk %.12s arrived damaged or truncated (%zu of %" PRId64 " bytes)",
                                  w->digest, len, w->size);
    }
    if ((rc = kestrel__layout_place(ps->lay, w->idx, data, len)) < 0)
        return rc;
    __atomic_add_fetch(&ps->bytes_placed, w->size, __ATOMIC_RELAXED);
    __atomic_add_fetch(&ps->chunks_placed, 1, __ATOMIC_RELAXED);
    return 0;
}

static void *placer_main(void *arg)
{
    pull_state *ps = arg;
    for (;;) {
        queued *c;
        int rc;
        pthread_mutex_lock(&ps->mu);
        while (ps->n == 0 && !ps->closing)
            pthread_cond_wait(&ps->cv, &ps->mu);
        if (ps->n == 0 || ps->abandon) {
            pthread_mutex_unlock(&ps->mu);
            break;
        }
        c = &ps->q[ps->head];
        pthread_mutex_unlock(&ps->mu);
        rc = place(ps, &c->w, c->buf.ptr ? c->buf.ptr : "", c->len);
        pthread_mutex_lock(&ps->mu);
        ps->head = (ps->head + 1) % QUEUED;
        ps->n--;
        if (rc < 0) {   /* kept for the fetching thread */
            kestrel__error_keep(&ps->err);
            ps->rc = rc;
        }
        pthread_cond_broadcast(&ps->cv);
        pthread_mutex_unlock(&ps->mu);
        if (rc < 0)
            break;
    }
    pthread_mutex_lock(&ps->mu);
    ps->done = 1;
    pthread_cond_broadcast(&ps->cv);
    pthread_mutex_unlock(&ps->mu);
    return NULL;
}

static int placer_start(pull_state *ps)
{
    ps->bytes_before = ps->pr->p.bytes_done;
    ps->chunks_before = ps->pr->p.chunks_done;
    ps->bytes_placed = ps->chunks_placed = 0;   /* no placer runs: a window's count from 0 */
    ps->closing = ps->abandon = ps->done = ps->stop = 0;
    ps->head = ps->n = 0;
    kestrel__layout_stop_on(ps->lay, &ps->stop);
    if (pthread_create(&ps->th, NULL, placer_main, ps) != 0)
        return kestrel__error_set(KESTREL_ENOMEM, "cannot start the thread that places pulled chunks");
    ps->running = 1;
    return 0;
}

static void progress_sync(pull_state *ps)
{
    ps->pr->p.bytes_done = ps->bytes_before + __atomic_load_n(&ps->bytes_placed, __ATOMIC_RELAXED);
    ps->pr->p.chunks_done = ps->chunks_before + __atomic_load_n(&ps->chunks_placed, __ATOMIC_RELAXED);
}

/* Wait for the placer to place what it has (fetch_rc < 0: to drop it), then end it. Its failure,
 * if it had one, becomes this thread's error (after the transport is told of a damaged chunk),
 * unless the fetch failed for a reason of its own (a cancel by the progress callback, the
 * network): KESTREL_ERROR is arrived()'s word for "the placer failed". */
static int placer_finish(pull_state *ps, int fetch_rc)
{
    if (!ps->running)
        return fetch_rc;
    pthread_mutex_lock(&ps->mu);
    ps->closing = 1;
    ps->abandon = fetch_rc < 0;
    if (ps->abandon)   /* what it places now is dropped too */
        __atomic_store_n(&ps->stop, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&ps->cv);
    while (!ps->done) {   /* progress (and a cancel) while it places what came: one chunk may be many */
        if (kestrel__progress_wait(&ps->cv, &ps->mu) != ETIMEDOUT || ps->done || ps->stop)
            continue;
        pthread_mutex_unlock(&ps->mu);
        progress_sync(ps);
        if (kestrel__progress_report(ps->pr, 0) < 0) {
            fetch_rc = KESTREL_ECANCELLED;   /* the error is the cancel's */
            __atomic_store_n(&ps->stop, 1, __ATOMIC_RELEASE);
        }
        pthread_mutex_lock(&ps->mu);
    }
    pthread_mutex_unlock(&ps->mu);
    pthread_join(ps->th, NULL);
    ps->running = 0;
    progress_sync(ps);
    ps->downloaded += ps->chunks_placed;
    if (ps->damaged[0])
        ps->t->ops->damaged(ps->t, ps->damaged);   /* before the error is restored: it may set its own */
    if (ps->rc < 0 && (fetch_rc >= 0 || fetch_rc == KESTREL_ERROR)) {
        kestrel__error_restore(&ps->err);
        return ps->rc;
    }
    return fetch_rc;
}

/* A chunk from the transport: queued for the placer (copied: the transport reuses its buffer). The
 * slot after the queue's last is this thread's alone until n counts it, so it is filled unlocked. */
static int arrived(void *ctx, const kestrel__want *w, const void *data, size_t len)
{
    pull_state *ps = ctx;
    queued *c;
    int rc;
    pthread_mutex_lock(&ps->mu);
    while (ps->n == QUEUED && ps->rc == 0)
        pthread_cond_wait(&ps->cv, &ps->mu);
    rc = ps->rc;
    c = &ps->q[(ps->head + ps->n) % QUEUED];
    pthread_mutex_unlock(&ps->mu);
    if (rc < 0)   /* the placer failed: the fetch stops; placer_finish gives the placer's error */
        return KESTREL_ERROR;
    c->buf.size = 0;
    c->len = len;
    c->w = *w;
    if (len == (size_t)w->size && (rc = kestrel__buf_put(&c->buf, data, len)) < 0)   /* else refused */
        return rc;
    pthread_mutex_lock(&ps->mu);
    ps->n++;
    pthread_cond_broadcast(&ps->cv);
    pthread_mutex_unlock(&ps->mu);
    progress_sync(ps);
    return kestrel__progress_report(ps->pr, 0);
}

/* The assembled file fd does not match its digest: find the first chunk whose bytes there do not match
 * its own (read back: this costs a pass only when something is wrong), tell the repository (one
 * report a pull, as when chunks were checked as they came), and say which; when every chunk
 * matches, the manifest contradicts itself. */
static int whole_mismatch(pull_state *ps, const Kestrel__V1__Manifest *mf, int fd, const char *ref)
{
    kestrel_buf b = KESTREL_BUF_INIT;
    int64_t at = 0;
    int rc = 0;
    for (size_t i = 0; i < mf->n_chunks && rc == 0; at += mf->chunks[i]->size, i++) {
        const Kestrel__V1__ChunkRef *r = mf->chunks[i];
        b.size = 0;
        if ((rc = kestrel__buf_grow(&b, (size_t)r->size)) < 0)
            break;
        while (b.size < (size_t)r->size) {
            ssize_t got = pread(fd, b.ptr + b.size, (size_t)r->size - b.size, at + (int64_t)b.size);
            if (got < 0 && errno == EINTR)
                continue;
            if (got < 0)
                rc = kestrel__error_sys(KESTREL_EIO, errno, "cannot read back %s", ref);
            if (got <= 0)
                break;
            b.size += (size_t)got;
        }
        if (rc == 0 && !kestrel__chunk_verified(r->digest, &b, r->size)) {
            ps->t->ops->damaged(ps->t, r->digest);
            rc = kestrel__error_set(KESTREL_EPROTO, "chunk %.12s of %s arrived damaged", r->digest, ref);
        }
    }
    kestrel_buf_dispose(&b);
    return rc < 0 ? rc : kestrel__error_set(KESTREL_EPROTO, "%s: the assembled file does not match its digest", ref);
}

/* A chunk smaller than this is not indexed, but a file's last (its tail, or a small file whole): its
 * line (about 80 bytes) would outweigh it. A hostile manifest of 2 million one-byte chunks left a
 * 149 MB index that every later pull loaded (2 s and 144 MB for a pull of 120 bytes: a hostile
 * test); each digest is indexed once too. kestreld's chunks are 64 KiB or more but a file's last. */
#define KEEP_CHUNK_MIN 256

static int by_digest_then_place(const void *a, const void *b, void *items)
{
    const kestrel__cache_item *it = items;
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    int c = strcmp(it[x].hex, it[y].hex);
    return c ? c : (x > y) - (x < y);
}

/* Keep the pulled file at path in the chunk cache as a pack (a hard link), then bound the cache. */
static void keep_pack(kestrel__chunk_cache *cache, const char *path, const Kestrel__V1__Manifest *mf, int64_t downloaded)
{
    kestrel__cache_item *items = downloaded ? calloc(mf->n_chunks + 1, sizeof(*items)) : NULL;
    size_t *order = items ? calloc(mf->n_chunks + 1, sizeof(*order)) : NULL;
    if (order == NULL) {   /* all of it came from the cache already (or no memory): nothing new to keep */
        free(items);
        return;
    }
    for (size_t i = 0; i < mf->n_chunks; i++) {
        items[i].hex = mf->chunks[i]->digest;
        items[i].len = mf->chunks[i]->size;
        order[i] = i;
    }
    qsort_r(order, mf->n_chunks, sizeof(*order), by_digest_then_place, items);
    for (size_t k = 0; k < mf->n_chunks; k++) {   /* each digest at its first place only */
        size_t i = order[k];
        items[i].keep = (k == 0 || strcmp(items[order[k - 1]].hex, items[i].hex)) &&
                        (items[i].len >= KEEP_CHUNK_MIN || i + 1 == mf->n_chunks);
    }
    kestrel__cache_add(cache, path, items, mf->n_chunks);
    free(order);
    free(items);
    kestrel__cache_trim(cache);
}

/* Take what the cache holds; list the rest (the first occurrence of each digest) in want. */
static int from_cache(pull_state *ps, kestrel__chunk_cache *cache, const Kestrel__V1__Manifest *mf, kestrel__want *want,
                      size_t *nwant)
{
    kestrel_buf b = KESTREL_BUF_INIT;
    int rc = 0;
    *nwant = 0;
    for (size_t i = 0; i < mf->n_chunks && rc == 0; i++) {
        const Kestrel__V1__ChunkRef *r = mf->chunks[i];
        if (!kestrel__layout_first(ps->lay, i))
            continue;   /* a digest seen before is placed everywhere at once */
        if (kestrel__cache_get(cache, r->digest, r->size, &b)) {
            if ((rc = kestrel__layout_place(ps->lay, i, b.ptr, b.size)) == 0) {
                ps->pr->p.bytes_done += r->size;
                ps->pr->p.chunks_done++;
                rc = kestrel__progress_report(ps->pr, 0);
            }
            continue;
        }
        want[(*nwant)++] = (kestrel__want){ r->digest, r->size, i };
    }
    kestrel_buf_dispose(&b);
    return rc;
}

/* The chunks of window w (manifest_file.h), placed: what the cache holds, then the rest fetched (a
 * digest in two windows is fetched for each: the layout places a chunk at its offsets in one). A
 * directory's go into its files (tree), a file's into fd (all its chunks are one window). Then
 * ps->lay waits for kestrel__layout_finish. */
static int pull_window(pull_state *ps, kestrel__chunk_cache *cache, const Kestrel__V1__Manifest *w, int fd,
                       const char *tmp, kestrel__tree_out *tree)
{
    kestrel__want *want = calloc(w->n_chunks + 1, sizeof(*want));
    size_t nwant = 0;
    int rc;
    if (want == NULL)
        return kestrel__error_oom();
    if (tree && (rc = kestrel__tree_out_window(tree, w)) == 0)   /* each chunk written straight into its file(s) */
        rc = kestrel__layout_new(&ps->lay, w, -1, NULL, kestrel__tree_out_write, tree);
    else if (tree == NULL)   /* a temp file beside dest, hashed as it fills in */
        rc = kestrel__layout_new(&ps->lay, w, fd, tmp, NULL, NULL);
    if (rc == 0)
        rc = from_cache(ps, cache, w, want, &nwant);
    if (rc == 0 && nwant && (rc = placer_start(ps)) == 0) {
        ps->t->tick = ps->pr;   /* a stop is seen while the repository does not answer, too */
        rc = ps->t->ops->fetch(ps->t, want, nwant, arrived, ps);
        ps->t->tick = NULL;
        rc = placer_finish(ps, rc);
    }
    free(want);
    return rc;
}

static int next_window(void *ctx, const Kestrel__V1__Manifest **w)
{
    return kestrel__mfile_next(ctx, w);
}

/* A directory: each window's files written and checked in a fresh directory, which replaces dest. */
static int pull_tree(pull_state *ps, kestrel__chunk_cache *cache, kestrel__mfile *mf, const char *dest)
{
    const Kestrel__V1__Manifest *w;
    kestrel__tree_out *tree = NULL;
    char sha[65];
    int rc = kestrel__tree_out_new(&tree, dest);
    kestrel__mfile_rewind(mf, KESTREL__WINDOW_FILES, KESTREL__WINDOW_CHUNKS);
    while (rc == 0 && (rc = kestrel__mfile_next(mf, &w)) == 1) {
        if ((rc = pull_window(ps, cache, w, -1, NULL, tree)) == 0) {
            rc = kestrel__layout_finish(ps->lay, sha);
            ps->lay = NULL;
        }
        if (rc == 0)
            rc = kestrel__tree_out_settle(tree);   /* every file of the window checked */
    }
    kestrel__layout_free(ps->lay);   /* before the directory it writes into goes */
    ps->lay = NULL;
    if (rc < 0) {
        kestrel__tree_out_abandon(tree);
        return rc;
    }
    if ((rc = kestrel__tree_out_finish(tree, dest)) < 0)   /* renamed to dest */
        return rc;
    if (ps->downloaded) {   /* its files are the pack: nothing written twice */
        kestrel__mfile_rewind(mf, KESTREL__WINDOW_FILES, KESTREL__WINDOW_CHUNKS);
        kestrel__cache_add_tree(cache, dest, kestrel__mfile_files(mf), next_window, mf);
        kestrel__cache_trim(cache);
    }
    return 0;
}

/* A file: its chunks into a temp file beside dest, its whole digest checked, then renamed to dest. */
static int pull_file(pull_state *ps, kestrel__chunk_cache *cache, kestrel__mfile *mf, const char *ref, const char *dest)
{
    const Kestrel__V1__Manifest *w;
    char tmp[PATH_MAX + 32], sha[65];
    struct stat st;
    int fd, hold = -1, rc;
    if (lstat(dest, &st) == 0 && S_ISDIR(st.st_mode))   /* said before a byte is fetched */
        return kestrel__error_set(KESTREL_EEXISTS, "%s is a directory: a file version replaces only a file or a "
                                  "symbolic link (name the file to make inside it)", dest);
    if ((rc = kestrel__pull_temp_name(dest, KESTREL__PULL_TEMP_MARK, tmp, sizeof(tmp))) < 0)
        return rc;
    if ((fd = mkostemp(tmp, O_CLOEXEC)) < 0)
        return kestrel__error_sys(KESTREL_EIO, errno, "cannot create a temp file next to %s", dest);
    if (kestrel__pull_temp_lock(fd) == 0)   /* ours while this process lives (pull_sweep.c), */
        hold = dup(fd);                      /* until it is renamed, not only until it is closed */
    kestrel__mfile_rewind(mf, 1, SIZE_MAX);   /* every chunk in one window: the file is hashed from its front */
    ps->whole_hashed = 1;
    if ((rc = kestrel__mfile_next(mf, &w)) == 0) {   /* an empty file */
        static const Kestrel__V1__Manifest empty = KESTREL__V1__MANIFEST__INIT;
        w = &empty;
    }
    if (rc >= 0 && (rc = pull_window(ps, cache, w, fd, tmp, NULL)) == 0) {
        rc = kestrel__layout_finish(ps->lay, sha);
        ps->lay = NULL;
    }
    if (rc == 0 && strcmp(sha, kestrel__mfile_head(mf)->sha256))
        rc = whole_mismatch(ps, w, fd, ref);
    if (rc == 0) {   /* a file pulled is like any file made here (mkstemp's 0600 is the temp's, found by a test) */
        int synced = fchmod(fd, 0666 & ~kestrel__umask()) == 0 && fsync(fd) == 0, closed = close(fd) == 0;
        fd = -1;
        if (!synced || !closed)
            rc = kestrel__error_sys(KESTREL_EIO, errno, "cannot sync %s", tmp);
    }
    if (rc == 0 && rename(tmp, dest) < 0)
        rc = kestrel__error_sys(KESTREL_EIO, errno, "cannot rename to %s", dest);
    if (rc == 0)
        keep_pack(cache, dest, w, ps->downloaded);   /* a hard link: no byte is written twice */
    kestrel__layout_free(ps->lay);
    ps->lay = NULL;
    if (fd >= 0)
        close(fd);
    if (rc < 0)
        unlink(tmp);   /* never leave half a file behind */
    if (hold >= 0)
        close(hold);
    return rc;
}

static int pull_once(kestrel__transport *t, const char *ref, const char *dest, kestrel__progress *pr)
{
    kestrel__mfile *mf = NULL;
    kestrel__chunk_cache cache;
    pull_state ps;
    int rc;

    memset(&ps, 0, sizeof(ps));
    memset(&cache, 0, sizeof(cache));   /* closed at the end, opened or not */
    ps.t = t;
    ps.pr = pr;
    pthread_mutex_init(&ps.mu, NULL);
    pthread_cond_init(&ps.cv, NULL);
    if ((rc = kestrel__mfile_open(&mf)) < 0)
        goto done;
    t->tick = pr;   /* a stop is seen while the manifest does not come, too (a dataset's is large) */
    rc = t->ops->resolve(t, ref, kestrel__mfile_fd(mf));
    t->tick = NULL;
    if (rc < 0)
        goto done;
    if ((rc = kestrel__mfile_scan(mf)) < 0 || (rc = kestrel__mfile_check(mf)) < 0) {
        if (rc == KESTREL_EINVALID)   /* a check failed: what the repository sent is wrong */
            rc = kestrel__error_set(KESTREL_EPROTO, "the manifest of %s is damaged: %s", ref, kestrel_error_last()->message);
        else if (rc == KESTREL_EPROTO)   /* not a manifest: the reader says where */
            rc = kestrel__error_set(KESTREL_EPROTO, "%s: %s", ref, kestrel_error_last()->message);
        goto done;   /* else the temp file (KESTREL_EIO) or memory, as they are */
    }
    pr->p.bytes_total = kestrel__mfile_head(mf)->size;
    kestrel__cache_open(&cache);
    kestrel__pull_sweep(dest);   /* what killed pulls to dest left beside it */
    if ((rc = kestrel__mfile_files(mf) ? pull_tree(&ps, &cache, mf, dest) : pull_file(&ps, &cache, mf, ref, dest)) < 0)
        goto done;
    (void)kestrel__progress_report(pr, 1);   /* dest is in place: too late to cancel (repo.h) */
    rc = 0;
done:
    for (size_t i = 0; i < QUEUED; i++)
        kestrel_buf_dispose(&ps.q[i].buf);
    pthread_mutex_destroy(&ps.mu);
    pthread_cond_destroy(&ps.cv);
    kestrel__cache_close(&cache);
    kestrel__mfile_close(mf);
    return rc;
}

/* The file system dest goes on (its folder's), for the cache: 0, or -1 when it cannot be read. */
static int dest_dev(const char *dest, dev_t *dev)
{
    char dir[PATH_MAX];
    struct stat st;
    if (kestrel__dest_dir(dest, dir, sizeof(dir)) < 0 || stat(dir, &st) < 0)
        return -1;
    *dev = st.st_dev;
    return 0;
}

int kestrel__pull(kestrel__transport *t, const char *ref, const char *dest, kestrel__progress *pr)
{
    kestrel__progress start = *pr;
    kestrel__chunk_cache cache;
    kestrel__error_kept why;
    int64_t freed = 0;
    dev_t dev;
    int rc = pull_once(t, ref, dest, pr);
    int err = kestrel__error_errno();
    if (rc != KESTREL_EIO || (err != ENOSPC && err != EDQUOT) || dest_dev(dest, &dev) < 0)
        return rc;
    /* the disk is full: the pull cache may hold there the only link to files pulled and removed
     * since (up to KESTREL_CACHE_MAX, a hostile round found: a pull failed for space only the cache
     * held); those go, then the pull runs once more */
    kestrel__error_keep(&why);
    memset(&cache, 0, sizeof(cache));
    kestrel__cache_open(&cache);
    freed = kestrel__cache_free_sole(&cache, dev);
    kestrel__cache_close(&cache);
    if (freed == 0)
        return kestrel__error_restore(&why);
    *pr = start;   /* progress from the beginning again */
    return pull_once(t, ref, dest, pr);
}

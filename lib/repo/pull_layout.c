/* lib/repo/pull_layout.c - placing pulled chunks (see pull_layout.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "filehash.h"
#include "pull_layout.h"

#define KICK_BYTES (32 << 20)

typedef struct {
    const char *digest;
    size_t i;
} ref_ix;

struct kestrel__layout {
    const Kestrel__V1__Manifest *mf;
    int fd;
    const char *name;        /* the file fd writes, for errors */
    int64_t *off;            /* offset of chunk i */
    ref_ix *sorted;          /* (digest, i), sorted: the occurrences of a digest are adjacent */
    size_t *slot;            /* where chunk i sits in sorted */
    unsigned char *placed;
    size_t front;            /* chunks [0, front) are all written */
    kestrel__filehash *hash;
    int64_t kicked;          /* bytes [0, kicked) of the file are being written back already */
    kestrel__layout_sink sink;   /* fd < 0: where the bytes go */
    void *sink_ctx;
    const int *stop;         /* set (atomic): place no more */
};

static int ref_cmp(const void *a, const void *b)
{
    const ref_ix *x = a, *y = b;
    int c = strcmp(x->digest, y->digest);
    return c ? c : (x->i > y->i) - (x->i < y->i);
}

int kestrel__layout_new(kestrel__layout **out, const Kestrel__V1__Manifest *mf, int fd, const char *name,
                        kestrel__layout_sink sink, void *sink_ctx)
{
    size_t n = mf->n_chunks;
    kestrel__layout *l = calloc(1, sizeof(*l));
    int rc;
    *out = NULL;
    if (l == NULL || (l->off = calloc(n + 1, sizeof(*l->off))) == NULL ||
        (l->sorted = calloc(n + 1, sizeof(*l->sorted))) == NULL || (l->slot = calloc(n + 1, sizeof(*l->slot))) == NULL ||
        (l->placed = calloc(n + 1, 1)) == NULL) {
        kestrel__layout_free(l);
        return kestrel__error_oom();
    }
    l->mf = mf;
    l->fd = fd;
    l->name = name;
    l->sink = sink;
    l->sink_ctx = sink_ctx;
    for (size_t i = 0; i < n; i++) {
        l->off[i] = i ? l->off[i - 1] + mf->chunks[i - 1]->size : 0;
        l->sorted[i] = (ref_ix){ mf->chunks[i]->digest, i };
    }
    if (n > 1)
        qsort(l->sorted, n, sizeof(*l->sorted), ref_cmp);
    for (size_t k = 0; k < n; k++) {
        l->slot[l->sorted[k].i] = k;
        if (k && !strcmp(l->sorted[k - 1].digest, l->sorted[k].digest) &&
            mf->chunks[l->sorted[k - 1].i]->size != mf->chunks[l->sorted[k].i]->size) {
            kestrel__layout_free(l);
            return kestrel__error_set(KESTREL_EPROTO, "the manifest gives chunk %.12s two sizes", l->sorted[k].digest);
        }
    }
    if (fd >= 0 && (rc = kestrel__filehash_follow(&l->hash, fd)) < 0) {
        kestrel__layout_free(l);
        return rc;
    }
    *out = l;
    return 0;
}

int kestrel__layout_first(const kestrel__layout *l, size_t i)
{
    size_t k = l->slot[i];
    return k == 0 || strcmp(l->sorted[k - 1].digest, l->sorted[k].digest) != 0;
}

static int write_at(int fd, const char *name, const char *p, size_t left, int64_t at)
{
    if (kestrel__pwrite_all(fd, p, left, at) < 0)
        return kestrel__error_sys(KESTREL_EIO, errno, "cannot write %s", name);
    return 0;
}

int kestrel__layout_place(kestrel__layout *l, size_t i, const void *data, size_t len)
{
    size_t n = l->mf->n_chunks;
    const char *digest = l->mf->chunks[i]->digest;
    int rc;
    for (size_t k = l->slot[i]; k < n && !strcmp(l->sorted[k].digest, digest); k++) {
        if (l->stop && __atomic_load_n(l->stop, __ATOMIC_ACQUIRE))
            return kestrel__error_set(KESTREL_ECANCELLED, "the progress callback cancelled the transfer");
        if ((rc = l->fd >= 0 ? write_at(l->fd, l->name, data, len, l->off[l->sorted[k].i])
                             : l->sink(l->sink_ctx, l->off[l->sorted[k].i], data, len)) < 0)
            return rc;
        l->placed[l->sorted[k].i] = 1;
    }
    if (l->hash == NULL)
        return 0;
    while (l->front < n && l->placed[l->front])
        l->front++;
    {
        int64_t ready = l->front < n ? l->off[l->front] : l->mf->size;
        kestrel__filehash_advance(l->hash, ready);
        if (ready - l->kicked >= KICK_BYTES) {   /* the disk writes beside the download, not all at the end */
            (void)sync_file_range(l->fd, l->kicked, ready - l->kicked, SYNC_FILE_RANGE_WRITE);
            l->kicked = ready;
        }
    }
    return 0;
}

void kestrel__layout_stop_on(kestrel__layout *l, const int *stop)
{
    l->stop = stop;
}

int kestrel__layout_finish(kestrel__layout *l, char sha[65])
{
    int rc = 0;
    sha[0] = '\0';
    for (size_t i = 0; i < l->mf->n_chunks && rc == 0; i++)
        if (!l->placed[i])
            rc = kestrel__error_set(KESTREL_EPROTO, "chunk %.12s never arrived", l->mf->chunks[i]->digest);
    if (l->hash) {
        int r = kestrel__filehash_finish(l->hash, rc < 0 ? -1 : l->mf->size, sha);
        rc = rc < 0 ? rc : r;
    }
    l->hash = NULL;
    kestrel__layout_free(l);
    return rc;
}

void kestrel__layout_free(kestrel__layout *l)
{
    char ignored[65];
    if (l == NULL)
        return;
    kestrel__filehash_finish(l->hash, -1, ignored);
    free(l->off);
    free(l->sorted);
    free(l->slot);
    free(l->placed);
    free(l);
}

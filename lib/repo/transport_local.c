/* lib/repo/transport_local.c - a file:// repository: the store (store.c) opened in this process, no
 * daemon. Chunks are read back from the pushed files and checked against their digests before they
 * are stored (the file may have changed since it was hashed). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "chunk.h"
#include "file_open.h"
#include "store.h"
#include "transport.h"

typedef struct {
    kestrel__transport base;
    kestrel__store *s;
} local;

#define STORE(t) (((local *)(t))->s)

/* Its N.pb copied into fd a buffer at a time, not decoded (store_manifest.c). */
static int resolve(kestrel__transport *t, const char *ref, int fd)
{
    char name[256];
    int64_t version;
    int rc = kestrel__store_resolve_version(STORE(t), ref, name, &version);
    return rc < 0 ? rc : kestrel__store_manifest_write(STORE(t), name, version, fd);
}

static int missing(kestrel__transport *t, kestrel__chunk_ref *refs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        refs[i].missing = (i && !strcmp(refs[i].hex, refs[i - 1].hex)) ? refs[i - 1].missing
                                                                        : !kestrel__store_has_chunk(STORE(t), refs[i].hex);
    return 0;
}

static int send_chunks(kestrel__transport *t, const kestrel__push_files *files, kestrel__chunk_ref *const *todo,
                       size_t n, kestrel__progress *pr, const struct stat *read)
{
    (void)read;   /* never unnamed: the push hashes every chunk to a store here */
    uint8_t *buf = malloc(KESTREL__CHUNK_MAX);
    char path[KESTREL__PUSH_PATH_MAX];
    int fd = -1, rc = 0;
    uint32_t open_file = UINT32_MAX;
    if (buf == NULL)
        return kestrel__error_oom();
    for (size_t i = 0; i < n && rc == 0; i++) {
        const kestrel__chunk_ref *c = todo[i];
        char got[KESTREL__HEX_LEN + 1];
        ssize_t r;
        if (c->file != open_file) {
            if (fd >= 0)
                close(fd);
            open_file = c->file;
            struct stat st;
            if ((fd = kestrel__file_open_regular(-1, kestrel__push_file_path(files, c->file, path), 1, &st)) < 0) {
                rc = fd;
                break;
            }
        }
        r = pread(fd, buf, c->len, c->offset);
        if (r >= 0)
            kestrel__sha256_hex(buf, (size_t)r, got);
        if (r != (ssize_t)c->len || strcmp(got, c->hex)) {
            rc = kestrel__error_set(KESTREL_EIO, "%s changed while it was pushed", path);
            break;
        }
        if ((rc = kestrel__store_put_chunk(STORE(t), c->hex, buf, c->len)) < 0)
            break;
        __atomic_fetch_add(&pr->p.bytes_new, (int64_t)c->len, __ATOMIC_RELAXED);   /* read by the push's thread */
        __atomic_fetch_add(&pr->p.chunks_new, 1, __ATOMIC_RELAXED);
        rc = kestrel__progress_report(pr, 0);
    }
    if (fd >= 0)
        close(fd);
    free(buf);
    return rc;
}

static int commit(kestrel__transport *t, Kestrel__V1__Manifest *m, kestrel__spool *chunks, int64_t *version)
{
    int rc, hold;
    /* the store commits a manifest it holds whole, as kestreld does (once: a commit again after
     * resending lost chunks finds the lists in m) */
    if (chunks && m->n_chunks == 0 && m->n_files == 0 && (rc = kestrel__spool_fill(chunks, m)) < 0)
        return rc;
    /* its form, as kestreld checks it (server/api_repo.c); the digests given are the push's own,
     * hashed in this process from the bytes it chunked */
    if ((rc = kestrel__manifest_check_commit(m)) < 0 || (rc = kestrel__store_all_stored(STORE(t), m)) < 0)
        return rc;
    if (kestrel__manifest_digests_open(m)) {   /* a digest the push left to the repository (a file of one
                                                 * chunk's, one from the stat cache) */
        unsigned char *given = calloc(m->n_files + 1, 1);   /* only the empty ones are read */
        char msg[300];
        if (given == NULL)
            return kestrel__error_oom();
        for (size_t i = 0; i < (m->n_files ? m->n_files : 1); i++)
            given[i] = (m->n_files ? m->files[i]->sha256 : m->sha256)[0] != '\0';
        rc = kestrel__store_fill_digests(STORE(t), m, given, NULL, msg, sizeof(msg));
        free(given);
        if (rc < 0 || (rc = kestrel__manifest_check(m)) < 0)   /* whole now: a listing digest given must hold */
            return rc;
    }
    hold = kestrel__store_commit_hold(STORE(t));   /* checked again and linked under it (store_gc.c) */
    if ((rc = kestrel__store_all_stored(STORE(t), m)) == 0)
        rc = kestrel__store_commit(STORE(t), m->name, m, version);
    kestrel__store_commit_release(hold);
    if (rc < 0)
        return rc;
    return m->alias[0] ? kestrel__store_alias_forward(STORE(t), m->name, m->alias, *version) : 0;
}

static int fetch(kestrel__transport *t, const kestrel__want *want, size_t n, kestrel__fetched got, void *ctx)
{
    kestrel_buf b = KESTREL_BUF_INIT;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        char path[4200];
        FILE *f;
        kestrel__store_chunk_path(STORE(t), want[i].digest, path, sizeof(path));
        if ((f = fopen(path, "rb")) == NULL) {
            rc = errno == ENOENT ? kestrel__error_set(KESTREL_ENOTFOUND, "chunk %.12s is not in the repository", want[i].digest)
                                 : kestrel__error_sys(KESTREL_EIO, errno, "cannot read %s", path);
            break;
        }
        b.size = 0;
        if ((rc = kestrel__buf_grow(&b, (size_t)want[i].size + 1)) == 0) {
            b.size = fread(b.ptr, 1, (size_t)want[i].size + 1, f);   /* one byte more: a longer chunk is damaged */
            rc = got(ctx, &want[i], b.ptr, b.size);
        }
        fclose(f);
    }
    kestrel_buf_dispose(&b);
    return rc;
}

static void damaged(kestrel__transport *t, const char *digest)
{
    kestrel__store_check_chunk(STORE(t), digest);   /* quarantined when the stored bytes are wrong */
}

static int versions(kestrel__transport *t, const char *name, const char *sel, Kestrel__V1__ManifestList **out)
{
    Kestrel__V1__ManifestList *l = malloc(sizeof(*l));
    int64_t *vs = NULL;
    size_t n = 0;
    int rc = 0;
    if (l == NULL)
        return kestrel__error_oom();
    kestrel__v1__manifest_list__init(l);
    if (sel) {   /* the one version sel names */
        char ref[600], model[256];
        snprintf(ref, sizeof(ref), "%s@%s", name, sel);
        if ((vs = malloc(sizeof(*vs))) == NULL)
            rc = kestrel__error_oom();
        else if ((rc = kestrel__store_resolve_version(STORE(t), ref, model, vs)) == 0)
            n = 1;
    } else {
        rc = kestrel__store_versions(STORE(t), name, &vs, &n);
    }
    if (rc < 0 || (l->versions = calloc(n + 1, sizeof(*l->versions))) == NULL) {
        free(l);
        free(vs);
        return rc < 0 ? rc : kestrel__error_oom();
    }
    {   /* the aliases read once for every version (store.h) */
        kestrel__alias_map map;
        int mapped = n > 1 && kestrel__store_alias_map(STORE(t), name, &map) == 0;
        for (size_t i = 0; i < n; i++)
            if (kestrel__store_listing_mapped(STORE(t), name, vs[i], mapped ? &map : NULL,
                                              &l->versions[l->n_versions]) == 0)
                l->n_versions++;   /* else deleted meanwhile */
        if (mapped)
            kestrel__alias_map_free(&map);
    }
    kestrel_error_clear();
    free(vs);
    *out = l;
    return 0;
}

static int list(kestrel__transport *t, kestrel_buf *out)
{
    return kestrel__store_list(STORE(t), out);
}

static int alias_set(kestrel__transport *t, const char *name, const char *alias, int64_t version)
{
    return kestrel__store_alias_set(STORE(t), name, alias, version);
}

static int alias_delete(kestrel__transport *t, const char *name, const char *alias)
{
    return kestrel__store_alias_delete(STORE(t), name, alias);
}

static int remove_version(kestrel__transport *t, const char *name, int64_t version)
{
    return kestrel__store_delete(STORE(t), name, version);
}

static int gc(kestrel__transport *t, int64_t grace_s, kestrel__store_gc_stats *out)
{
    return kestrel__store_gc(STORE(t), grace_s < 0 ? KESTREL__GC_GRACE_S : grace_s, out);
}

static void close_local(kestrel__transport *t)
{
    kestrel__store_close(STORE(t));
    free(t);
}

static const kestrel__transport_ops ops = {
    resolve, missing, send_chunks, commit, fetch, damaged, versions, list, alias_set, alias_delete, remove_version, gc,
    close_local,
};

int kestrel__transport_local(kestrel__transport **out, const char *root)
{
    local *l = calloc(1, sizeof(*l));
    int rc;
    if (l == NULL)
        return kestrel__error_oom();
    if ((rc = kestrel__store_open(&l->s, root)) < 0) {
        free(l);
        return rc;
    }
    l->base.ops = &ops;
    l->base.hash_whole = 1;   /* in process: hashing beside the read costs less than reading the chunks back */
    l->base.fills_digests = 1;
    *out = &l->base;
    return 0;
}

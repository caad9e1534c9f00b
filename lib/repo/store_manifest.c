/* lib/repo/store_manifest.c - a version's manifest, read. versions/N.json is the truth: what a
 * commit links and a delete removes, and what a collection and fsck read
 * (kestrel__store_manifest_json). versions/N.pb is the same manifest as protobuf, for the reads that
 * serve it (kestrel__store_manifest: a pull's resolve): the JSON mapper makes a cJSON tree of the
 * whole text, and kestreld's read of a 20,000-file dataset's manifest peaked at 37.5 MB of heap
 * (massif), its protobuf form's at a third of that. N.pb is written at the commit (store.c), or at
 * the first read of a version without one (an earlier build's, or one whose N.pb was damaged), and
 * rewritten by fsck; it is used only when it reads as N's (its number and its model's name) and was
 * written no earlier than N.json last changed (a hand edit of N.json, or an N.json made anew under a
 * number an earlier build reused, is newer: N.pb is then made anew from it), and one a killed
 * delete left goes at the next collection. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "records.h"
#include "repo.h"
#include "store.h"

static void pb_path(kestrel__store *s, const char *name, int64_t version, const char *ext, char *out, size_t n)
{
    snprintf(out, n, "%s/models/%s/versions/%lld.%s", kestrel__store_root(s), name, (long long)version, ext);
}

Kestrel__V1__Manifest *kestrel__store_sidecar_read(const char *path, const char *content_type)
{
    kestrel_buf b = KESTREL_BUF_INIT;
    ProtobufCMessage *pm = NULL;
    if (kestrel__read_text(path, &b) < 0 ||
        kestrel__wire_decode(&pm, &kestrel__v1__manifest__descriptor, content_type, b.ptr, b.size) < 0)
        pm = NULL;
    kestrel_buf_dispose(&b);
    kestrel_error_clear();
    return (Kestrel__V1__Manifest *)pm;
}

int kestrel__store_json_ctime(kestrel__store *s, const char *name, int64_t version, struct timespec *out)
{
    char path[PATH_MAX];
    struct stat json;
    pb_path(s, name, version, "json", path, sizeof(path));
    if (stat(path, &json) < 0)
        return kestrel__error_set(KESTREL_ENOTFOUND, "no version %lld of %s", (long long)version, name);
    *out = json.st_ctim;
    return 0;
}

/* 1 when N.pb and N.json both exist and N.pb is dated no earlier than N.json last changed: its
 * ctime, which its link and the temp's unlink at a commit set before N.pb is written, and which a
 * hand edit, or a restore that sets the mtime back, moves on (no tool sets a ctime back). An N.pb
 * made from a read of N.json is dated at N.json's ctime before that read (kestrel__store_pb_write),
 * so an edit during the read leaves it stale too. */
static int pb_current(kestrel__store *s, const char *name, int64_t version)
{
    char path[PATH_MAX];
    struct stat pb;
    struct timespec json;
    pb_path(s, name, version, "pb", path, sizeof(path));
    if (stat(path, &pb) < 0 || kestrel__store_json_ctime(s, name, version, &json) < 0) {
        kestrel_error_clear();
        return 0;
    }
    return pb.st_mtim.tv_sec > json.tv_sec || (pb.st_mtim.tv_sec == json.tv_sec && pb.st_mtim.tv_nsec >= json.tv_nsec);
}

int kestrel__store_pb_write(kestrel__store *s, const char *name, const Kestrel__V1__Manifest *m,
                            const struct timespec *read_at)
{
    char path[PATH_MAX];
    kestrel_buf b = KESTREL_BUF_INIT, was = KESTREL_BUF_INIT;
    int rc = 0, stale = 1;
    pb_path(s, name, m->version, "pb", path, sizeof(path));
    if (!pb_current(s, name, m->version))   /* a commit's: written as it is packed, never held whole */
        rc = kestrel__write_message_atomic(path, &m->base, 0, 0);
    else if ((rc = kestrel__wire_pack(&b, &m->base)) == 0 &&
             (stale = !(kestrel__read_text(path, &was) == 0 && was.size == b.size &&
                        !memcmp(was.ptr, b.ptr, b.size))))
        rc = kestrel__write_file_atomic(path, b.ptr ? b.ptr : "", b.size, 0);   /* not when it says so already */
    if (rc == 0 && stale && read_at) {
        struct timespec times[2] = { { 0, UTIME_OMIT }, *read_at };
        if (utimensat(AT_FDCWD, path, times, 0) < 0)   /* undated, it could hide an edit: gone */
            unlink(path);
    }
    kestrel_error_clear();   /* of the read */
    kestrel_buf_dispose(&b);
    kestrel_buf_dispose(&was);
    return rc;
}

/* versions/N.pb, when it reads as name@version's and is no older than N.json; NULL else. */
static Kestrel__V1__Manifest *pb_read(kestrel__store *s, const char *name, int64_t version)
{
    char path[PATH_MAX];
    Kestrel__V1__Manifest *m;
    if (!pb_current(s, name, version))   /* N is gone, or N.json is newer */
        return NULL;
    pb_path(s, name, version, "pb", path, sizeof(path));
    if ((m = kestrel__store_sidecar_read(path, KESTREL__CT_PROTOBUF)) == NULL)
        return NULL;
    /* not N's, or holding what no commit stores (aliases, an alias, the listings' counts): made
     * anew from N.json, as a stream of it would be refused (kestrel__store_manifest_open) */
    if (m->version != version || strcmp(m->name, name) || m->n_aliases || m->alias[0] || m->file_count ||
        m->chunk_count) {
        kestrel__manifest_free(m);
        return NULL;
    }
    return m;
}

void kestrel__store_pb_remove(kestrel__store *s, const char *name, int64_t version)
{
    char path[PATH_MAX];
    pb_path(s, name, version, "pb", path, sizeof(path));
    unlink(path);
}

int kestrel__store_manifest(kestrel__store *s, const char *name, int64_t version, Kestrel__V1__Manifest **out)
{
    char dir[PATH_MAX];
    struct timespec read_at;
    int rc, dated;
    if ((*out = pb_read(s, name, version)) != NULL)
        return 0;
    dated = kestrel__store_json_ctime(s, name, version, &read_at) == 0;   /* before the read */
    kestrel_error_clear();
    rc = kestrel__store_manifest_json(s, name, version, out);
    snprintf(dir, sizeof(dir), "%s/models/%s/versions", kestrel__store_root(s), name);
    /* its N.pb for next time, where this process may write (a file:// store may be another's) */
    if (rc == 0 && dated && access(dir, W_OK) == 0 && kestrel__store_pb_write(s, name, *out, &read_at) < 0)
        kestrel_error_clear();
    return rc;
}

#define COPY_BUF (256 * 1024)

/* What out gathered, written at *at of fd. */
static int put_out(int fd, kestrel_buf *out, int64_t *at)
{
    if (out->size && kestrel__pwrite_all(fd, out->ptr, out->size, *at) < 0)
        return kestrel__error_sys(KESTREL_EIO, errno, "cannot write a manifest to its temp file");
    *at += (int64_t)out->size;
    out->size = 0;
    return 0;
}

/* What a read of N.pb found. */
typedef struct {
    int named, numbered;        /* its name and version fields (the last one given counts, as in
                                 * protobuf) are those of name@version */
    int64_t files, chunks;      /* the records of its two lists */
    int metadata;               /* its metadata_json (the last one given) is not empty */
    int foreign;                /* it holds fields a commit never stores: aliases, alias, the counts */
} pb_facts;

/* A walk's caller (kestrel__store_manifest_each): its function, given each record, and the pass. */
typedef struct {
    kestrel__manifest_each_fn fn;
    void *ctx;
    int pass;
    int rc;                     /* what fn returned, when not 0: the walk ended there */
} each_call;

/* N.pb open on pb read once, a record at a time, each record decoded alone as the whole would be
 * (the same codec: a wrong wire type, an unknown field, bad UTF-8 or a damaged chunk or file is
 * damage here as it is there), and, when out >= 0, copied into out as read, and, when each, given to
 * it (a non-zero answer ends the read: in each->rc): 1 when it read whole (or each ended it), 0 when
 * it is damaged (N.json is read then), < 0 when out could not be written. */
static int pb_walk(int pb, const char *name, int64_t version, int out, pb_facts *f, each_call *each)
{
    kestrel__records r;
    kestrel_buf copy = KESTREL_BUF_INIT;
    const uint8_t *data, *raw;
    size_t n, raw_n;
    unsigned field, type;
    int64_t at = 0;
    int rc = 0, got, damaged = 0;
    memset(f, 0, sizeof(*f));
    kestrel__records_init(&r, pb, "a version's N.pb", KESTREL_EIO);
    while ((got = kestrel__records_next(&r, &field, &type, &data, &n, &raw, &raw_n)) == 1) {
        Kestrel__V1__Manifest *one = NULL;
        if (kestrel__wire_unpack((ProtobufCMessage **)&one, &kestrel__v1__manifest__descriptor, raw, raw_n) < 0) {
            damaged = 1;
            break;
        }
        if (field == 1)
            f->named = !strcmp(one->name, name);
        else if (field == 2)
            f->numbered = one->version == version;
        else if (field == 5)
            f->chunks++;
        else if (field == 10)
            f->files++;
        else if (field == 6)
            f->metadata = one->metadata_json[0] != '\0';
        else if (field == 8 || field == 9 || field == 11 || field == 12)
            f->foreign = 1;
        if (each && (each->rc = each->fn(each->ctx, each->pass, field, one)) != 0) {
            kestrel__manifest_free(one);
            break;
        }
        kestrel__manifest_free(one);
        if (out >= 0 && ((rc = kestrel__buf_put(&copy, raw, raw_n)) < 0 ||
                         (copy.size >= COPY_BUF && (rc = put_out(out, &copy, &at)) < 0)))
            break;
    }
    damaged = damaged || got < 0;   /* cut short, malformed, unreadable: N.pb itself, its N.json says */
    if (!damaged && rc == 0 && out >= 0)
        rc = put_out(out, &copy, &at);
    kestrel__records_free(&r);
    kestrel_buf_dispose(&copy);
    return damaged ? 0 : rc < 0 ? rc : 1;
}

/* versions/N.pb open for reading when it is current (pb_current), else -1. */
static int pb_open(kestrel__store *s, const char *name, int64_t version)
{
    char path[PATH_MAX];
    pb_path(s, name, version, "pb", path, sizeof(path));
    return pb_current(s, name, version) ? open(path, O_RDONLY | O_CLOEXEC) : -1;
}

int kestrel__store_manifest_write(kestrel__store *s, const char *name, int64_t version, int fd)
{
    Kestrel__V1__Manifest *m = NULL;
    kestrel_buf b = KESTREL_BUF_INIT;
    pb_facts f;
    int pb, rc;
    if ((pb = pb_open(s, name, version)) >= 0) {
        rc = pb_walk(pb, name, version, fd, &f, NULL);
        close(pb);
        if (rc < 0)
            return rc;
        if (rc == 1 && f.named && f.numbered && !f.foreign)
            return 0;
        if (ftruncate(fd, 0) < 0)   /* not N's, or unreadable: what was copied goes, N.json is read */
            return kestrel__error_sys(KESTREL_EIO, errno, "cannot empty a manifest's temp file");
    }
    kestrel_error_clear();
    if ((rc = kestrel__store_manifest(s, name, version, &m)) == 0 && (rc = kestrel__wire_pack(&b, &m->base)) == 0 &&
        kestrel__pwrite_all(fd, b.ptr ? b.ptr : "", b.size, 0) < 0)
        rc = kestrel__error_sys(KESTREL_EIO, errno, "cannot write a manifest to its temp file");
    kestrel__manifest_free(m);
    kestrel_buf_dispose(&b);
    return rc;
}

/* versions/N.pb open when it will do (current, whole, N's, holding nothing a commit never stores:
 * read through once, each record decoded alone), what that read found in f; else -1 (no error left). */
static int pb_usable(kestrel__store *s, const char *name, int64_t version, pb_facts *f)
{
    int pb = pb_open(s, name, version);
    if (pb >= 0 && (pb_walk(pb, name, version, -1, f, NULL) != 1 || !f->named || !f->numbered || f->foreign)) {
        close(pb);
        pb = -1;
    }
    kestrel_error_clear();
    return pb;
}

int kestrel__store_manifest_open(kestrel__store *s, const char *name, int64_t version, int *out_fd,
                                 kestrel_buf *out_tail)
{
    Kestrel__V1__Manifest t = KESTREL__V1__MANIFEST__INIT;
    pb_facts f;
    int pb, rc;
    *out_fd = -1;
    if ((pb = pb_usable(s, name, version, &f)) < 0)
        return 0;   /* the caller decodes it: kestrel__store_manifest says what is wrong, or mends it */
    /* what kestrel__store_decorate adds, as records that follow N.pb's: a scalar's last value counts,
     * a list's records append */
    t.name = (char *)name;   /* for kestrel__store_aliases, then left out of the tail */
    t.version = version;
    if ((rc = kestrel__store_aliases(s, &t)) == 0) {
        t.name = (char *)protobuf_c_empty_string;
        t.version = 0;
        if (f.files || f.chunks) {
            t.file_count = f.files;
            t.chunk_count = f.chunks;
        }
        if (!f.metadata)
            t.metadata_json = (char *)"{}";
        rc = kestrel__wire_pack(out_tail, &t.base);
    }
    for (size_t i = 0; i < t.n_aliases; i++)
        free(t.aliases[i]);
    free(t.aliases);
    if (rc < 0) {
        close(pb);
        return rc;
    }
    *out_fd = pb;
    return 0;
}

/* The records of decoded m given to each as N.pb's are: its size (field 3) and digest (4), then its
 * chunks, then its files, each alone in a manifest on the stack (its other scalars are not given). */
static int each_decoded(const Kestrel__V1__Manifest *m, each_call *each)
{
    Kestrel__V1__Manifest one = KESTREL__V1__MANIFEST__INIT;
    one.size = m->size;
    if ((each->rc = each->fn(each->ctx, each->pass, 3, &one)) != 0)
        return 0;
    one.size = 0;
    one.sha256 = m->sha256;
    if ((each->rc = each->fn(each->ctx, each->pass, 4, &one)) != 0)
        return 0;
    one.sha256 = (char *)protobuf_c_empty_string;
    one.n_chunks = 1;
    for (size_t i = 0; i < m->n_chunks; i++) {
        one.chunks = &m->chunks[i];
        if ((each->rc = each->fn(each->ctx, each->pass, 5, &one)) != 0)
            return 0;
    }
    one.n_chunks = 0;
    one.chunks = NULL;
    one.n_files = 1;
    for (size_t i = 0; i < m->n_files; i++) {
        one.files = &m->files[i];
        if ((each->rc = each->fn(each->ctx, each->pass, 10, &one)) != 0)
            return 0;
    }
    return 0;
}

int kestrel__store_manifest_each(kestrel__store *s, const char *name, int64_t version, int passes,
                                 kestrel__manifest_each_fn fn, void *ctx)
{
    Kestrel__V1__Manifest *m = NULL;
    each_call each = { fn, ctx, 0, 0 };
    pb_facts f;
    int pb = pb_usable(s, name, version, &f), rc = 0;
    if (pb < 0 && (rc = kestrel__store_manifest(s, name, version, &m)) < 0)
        return rc;
    for (; each.pass < passes && each.rc == 0 && rc == 0; each.pass++) {
        if (pb < 0)
            rc = each_decoded(m, &each);
        else if ((rc = pb_walk(pb, name, version, -1, &f, &each)) == 0)   /* found whole a moment ago */
            rc = kestrel__error_set(KESTREL_EIO, "%s@%lld: its N.pb changed as it was read (fsck rewrote it?): "
                                    "send it again", name, (long long)version);
        else if (rc == 1)
            rc = 0;
        if (rc == 0 && each.rc == 0)   /* the pass is over */
            each.rc = fn(ctx, each.pass, 0, NULL);
    }
    if (pb >= 0)
        close(pb);
    kestrel__manifest_free(m);
    return rc < 0 ? rc : each.rc;
}

int kestrel__store_manifest_json(kestrel__store *s, const char *name, int64_t version, Kestrel__V1__Manifest **out)
{
    char path[PATH_MAX];
    kestrel_buf b = KESTREL_BUF_INIT;
    ProtobufCMessage *m = NULL;
    int rc;
    pb_path(s, name, version, "json", path, sizeof(path));
    rc = kestrel__read_text(path, &b);
    if (rc == KESTREL_ENOTFOUND)   /* say which is missing: the model (no version of it is left: as
                                    * listings and kestreld say), or only its version */
        rc = !kestrel__store_model_exists(s, name)
                 ? kestrel__error_set(KESTREL_ENOTFOUND, "no model %s", name)
                 : kestrel__error_set(KESTREL_ENOTFOUND, "no version %lld of %s", (long long)version, name);
    if (rc == 0 && kestrel__wire_from_json(&m, &kestrel__v1__manifest__descriptor, b.ptr, b.size) == 0)
        *out = (Kestrel__V1__Manifest *)m;
    else if (rc == 0 && kestrel__store_legacy_manifest(b.ptr, out) < 0)
        rc = kestrel__error_set(KESTREL_EIO, "the manifest of %s@%lld is damaged", name, (long long)version);
    kestrel_buf_dispose(&b);
    if (rc == 0) {
        Kestrel__V1__Manifest *got = *out;
        got->version = version;   /* its file's name is its number, its folder's the model's name */
        if (strcmp(got->name, name) && (rc = kestrel__wire_set_string(&got->name, name)) < 0) {
            kestrel__manifest_free(got);
            *out = NULL;
        }
    }
    return rc;
}

int kestrel__store_resolve(kestrel__store *s, const char *ref, Kestrel__V1__Manifest **out)
{
    char name[256];
    int64_t version;
    int rc = kestrel__store_resolve_version(s, ref, name, &version);
    return rc < 0 ? rc : kestrel__store_manifest(s, name, version, out);
}

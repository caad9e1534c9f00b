/* lib/repo/chunk_spool.c - a push's chunk and file lists in an unlinked temp file (see chunk_spool.h). Records
 * are gathered 1 MiB at a time before they are written, and read back 64 KiB at a time. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "chunk_spool.h"
#include "store.h"

#define WRITE_AT (1u << 20)   /* records gathered before they are written */

struct kestrel__spool {
    int fd;
    unsigned chunk_field, file_field;   /* the manifest's `chunks` and `files` field numbers */
    kestrel_buf pending;      /* records not written yet */
    int64_t written;          /* bytes in the file */
    size_t files;
    kestrel__records rd;      /* reading back */
};

/* An unlinked file in dir (O_TMPFILE, else a named one unlinked at once); -1 where it cannot be. */
static int temp_in(const char *dir)
{
    char path[4200];
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0 || snprintf(path, sizeof(path), "%s/kestrel-temp.XXXXXX", dir) >= (int)sizeof(path))
        return fd;
    if ((fd = mkostemp(path, O_CLOEXEC)) >= 0)
        unlink(path);
    return fd;
}

int kestrel__temp_fd(const char *what)
{
    const char *env = getenv("TMPDIR");
    const char *dirs[] = { env && env[0] ? env : "/var/tmp", "/var/tmp", "/tmp" };
    int first_errno = 0, fd = -1;
    for (size_t i = 0; i < sizeof(dirs) / sizeof(*dirs) && fd < 0; i++)
        if ((i == 0 || strcmp(dirs[i], dirs[0])) && (fd = temp_in(dirs[i])) < 0 && i == 0)
            first_errno = errno;
    if (fd < 0)
        return kestrel__error_sys(KESTREL_EIO, first_errno, "cannot make a temp file for %s in %s", what, dirs[0]);
    return fd;
}

int kestrel__spool_open(kestrel__spool **out)
{
    kestrel__spool *s = calloc(1, sizeof(*s));
    *out = NULL;
    if (s == NULL)
        return kestrel__error_oom();
    if ((s->fd = kestrel__temp_fd("the push's lists")) < 0) {
        int rc = s->fd;
        free(s);
        return rc;
    }
    kestrel__records_init(&s->rd, s->fd, "the push's temp list", KESTREL_EIO);
    s->chunk_field = protobuf_c_message_descriptor_get_field_by_name(&kestrel__v1__manifest__descriptor, "chunks")->id;
    s->file_field = protobuf_c_message_descriptor_get_field_by_name(&kestrel__v1__manifest__descriptor, "files")->id;
    *out = s;
    return 0;
}

/* Write what is gathered. */
static int flush(kestrel__spool *s)
{
    if (s->pending.size && kestrel__pwrite_all(s->fd, s->pending.ptr, s->pending.size, s->written) < 0)
        return kestrel__error_sys(KESTREL_EIO, errno, "cannot write the push's temp list");
    s->written += (int64_t)s->pending.size;
    s->pending.size = 0;
    return 0;
}

int kestrel__spool_add(kestrel__spool *s, const kestrel__chunk_ref *refs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        Kestrel__V1__ChunkRef c = KESTREL__V1__CHUNK_REF__INIT;
        int rc;
        c.digest = (char *)refs[i].hex;
        c.size = refs[i].len;
        if ((rc = kestrel__wire_pack_element(&s->pending, s->chunk_field, &c.base)) < 0 ||
            (s->pending.size >= WRITE_AT && (rc = flush(s)) < 0))
            return rc;
    }
    return 0;
}

int kestrel__spool_add_file(kestrel__spool *s, const Kestrel__V1__TreeFile *f)
{
    int rc;
    if ((rc = kestrel__wire_pack_element(&s->pending, s->file_field, &f->base)) < 0 ||
        (s->pending.size >= WRITE_AT && (rc = flush(s)) < 0))
        return rc;
    s->files++;
    return 0;
}

int64_t kestrel__spool_bytes(const kestrel__spool *s)
{
    return s->written + (int64_t)s->pending.size;
}

int kestrel__spool_rewind(kestrel__spool *s)
{
    kestrel__records_rewind(&s->rd);
    return flush(s);
}


/* A record's bytes as what it is: 1 a chunk, 2 a file; KESTREL_EIO where it is neither. */
static int record(kestrel__spool *s, unsigned field, const uint8_t *data, size_t n, char hex[65], uint32_t *len,
                  Kestrel__V1__TreeFile **file)
{
    Kestrel__V1__ChunkRef *c;
    int ok;
    if (field == s->file_field) {
        *file = (Kestrel__V1__TreeFile *)protobuf_c_message_unpack(&kestrel__v1__tree_file__descriptor, NULL, n, data);
        return *file ? 2 : kestrel__error_set(KESTREL_EIO, "the push's temp list is damaged");
    }
    c = field == s->chunk_field
            ? (Kestrel__V1__ChunkRef *)protobuf_c_message_unpack(&kestrel__v1__chunk_ref__descriptor, NULL, n, data)
            : NULL;
    ok = c && kestrel__is_sha256_hex(c->digest) && c->size > 0 && c->size <= UINT32_MAX;
    if (ok) {
        memcpy(hex, c->digest, 65);
        *len = (uint32_t)c->size;
    }
    if (c)
        protobuf_c_message_free_unpacked(&c->base, NULL);
    return ok ? 1 : kestrel__error_set(KESTREL_EIO, "the push's temp list is damaged");
}

int kestrel__spool_next(kestrel__spool *s, char hex[65], uint32_t *len, Kestrel__V1__TreeFile **file)
{
    const uint8_t *data;
    size_t n;
    unsigned field, type;
    int rc = kestrel__records_next(&s->rd, &field, &type, &data, &n, NULL, NULL);
    *file = NULL;
    if (rc == 1 && type != 2)
        return kestrel__error_set(KESTREL_EIO, "the push's temp list is damaged");
    return rc == 1 ? record(s, field, data, n, hex, len, file) : rc;
}

int64_t kestrel__spool_pread(kestrel__spool *s, int64_t at, void *buf, size_t n)
{
    ssize_t got;
    int rc = flush(s);
    if (rc < 0)
        return rc;
    do
        got = pread(s->fd, buf, n, at);
    while (got < 0 && errno == EINTR);
    return got < 0 ? kestrel__error_sys(KESTREL_EIO, errno, "cannot read the push's temp list")
                   : (int64_t)got;
}

int kestrel__spool_fill(kestrel__spool *s, Kestrel__V1__Manifest *m)
{
    kestrel__chunk_ref r;
    Kestrel__V1__TreeFile *f;
    int rc = kestrel__spool_rewind(s);
    memset(&r, 0, sizeof(r));
    if (rc == 0 && s->files && (m->files = calloc(s->files, sizeof(*m->files))) == NULL)
        rc = kestrel__error_oom();
    while (rc == 0 && (rc = kestrel__spool_next(s, r.hex, &r.len, &f)) > 0) {
        if (rc == 1)
            rc = kestrel__manifest_add_chunks(m, &r, 1);
        else if (m->n_files < s->files) {
            m->files[m->n_files++] = f;
            rc = 0;
        } else {
            protobuf_c_message_free_unpacked(&f->base, NULL);
            rc = kestrel__error_set(KESTREL_EIO, "the push's temp list is damaged");
        }
    }
    return rc;
}

void kestrel__spool_close(kestrel__spool *s)
{
    if (s == NULL)
        return;
    if (s->fd >= 0)
        close(s->fd);
    kestrel_buf_dispose(&s->pending);
    kestrel__records_free(&s->rd);
    free(s);
}

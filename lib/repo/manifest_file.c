/* lib/repo/manifest_file.c - a pulled manifest in a temp file, read a window at a time (see
 * manifest_file.h). Two readers go through the file, one for each list, so the records may come in any
 * order protobuf allows (kestreld sends every chunk, then every file; a message followed by more
 * records of its lists is the same manifest). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "chunk_spool.h"
#include "manifest_file.h"

struct kestrel__mfile {
    int fd;
    unsigned chunk_field, file_field;
    Kestrel__V1__Manifest *head;
    size_t n_chunks, n_files;
    kestrel__records files, chunks;     /* the two readers */
    size_t max_files, max_chunks;
    size_t chunks_read, files_read;
    Kestrel__V1__TreeFile *pending;     /* read, and not in a window yet: the next one begins with it */
    Kestrel__V1__Manifest win;          /* the window handed out, its records owned */
    size_t cap_chunks, cap_files;
};

static void reader(kestrel__mfile *m, kestrel__records *r)
{
    kestrel__records_init(r, m->fd, "the pulled manifest", KESTREL_EPROTO);
}

int kestrel__mfile_open(kestrel__mfile **out)
{
    kestrel__mfile *m = calloc(1, sizeof(*m));
    *out = NULL;
    if (m == NULL)
        return kestrel__error_oom();
    if ((m->fd = kestrel__temp_fd("the pulled manifest")) < 0) {
        int rc = m->fd;
        free(m);
        return rc;
    }
    m->chunk_field = protobuf_c_message_descriptor_get_field_by_name(&kestrel__v1__manifest__descriptor, "chunks")->id;
    m->file_field = protobuf_c_message_descriptor_get_field_by_name(&kestrel__v1__manifest__descriptor, "files")->id;
    reader(m, &m->files);
    reader(m, &m->chunks);
    kestrel__v1__manifest__init(&m->win);
    *out = m;
    return 0;
}

int kestrel__mfile_fd(const kestrel__mfile *m)
{
    return m->fd;
}

int kestrel__mfile_scan(kestrel__mfile *m)
{
    kestrel__records r;
    kestrel_buf other = KESTREL_BUF_INIT;
    const uint8_t *data, *raw;
    size_t n, raw_n;
    unsigned field, type;
    int rc;
    reader(m, &r);
    m->n_chunks = m->n_files = 0;
    while ((rc = kestrel__records_next(&r, &field, &type, &data, &n, &raw, &raw_n)) == 1) {
        if (field == m->chunk_field || field == m->file_field) {
            if (type != 2) {
                rc = kestrel__error_set(KESTREL_EPROTO, "the pulled manifest is damaged: field %u is a list of "
                                        "messages, not of wire type %u", field, type);
                break;
            }
            *(field == m->chunk_field ? &m->n_chunks : &m->n_files) += 1;
        } else if (other.size + raw_n > KESTREL__MANIFEST_HEAD_MAX) {
            rc = kestrel__error_set(KESTREL_EPROTO, "the pulled manifest is damaged: its fields besides the lists "
                                    "take more than %u MiB", KESTREL__MANIFEST_HEAD_MAX >> 20);
            break;
        } else if ((rc = kestrel__buf_put(&other, raw, raw_n)) < 0) {
            break;
        }
    }
    kestrel__records_free(&r);
    kestrel__manifest_free(m->head);
    m->head = NULL;
    if (rc == 0 && kestrel__wire_unpack((ProtobufCMessage **)&m->head, &kestrel__v1__manifest__descriptor,
                                        (const uint8_t *)(other.ptr ? other.ptr : ""), other.size) < 0)
        rc = kestrel__error_set(KESTREL_EPROTO, "the pulled manifest is damaged: %s", kestrel_error_last()->message);
    kestrel_buf_dispose(&other);
    return rc;
}

const Kestrel__V1__Manifest *kestrel__mfile_head(const kestrel__mfile *m)
{
    return m->head;
}

size_t kestrel__mfile_files(const kestrel__mfile *m)
{
    return m->n_files;
}

/* The next record of r's list (field), decoded as desc (1), or 0 at its end. */
static int next_of(kestrel__records *r, unsigned want, const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out)
{
    const uint8_t *data;
    size_t n;
    unsigned field, type;
    int rc;
    *out = NULL;
    while ((rc = kestrel__records_next(r, &field, &type, &data, &n, NULL, NULL)) == 1) {
        if (field != want)
            continue;
        if (type != 2)
            return kestrel__error_set(KESTREL_EPROTO, "the pulled manifest is damaged: field %u is a list of messages, "
                                      "not of wire type %u", field, type);
        if (kestrel__wire_unpack(out, desc, data, n) < 0)
            return kestrel__error_set(KESTREL_EPROTO, "the pulled manifest is damaged: %s", kestrel_error_last()->message);
        return 1;
    }
    return rc;
}

static void window_clear(kestrel__mfile *m)
{
    for (size_t i = 0; i < m->win.n_chunks; i++)
        protobuf_c_message_free_unpacked(&m->win.chunks[i]->base, NULL);
    for (size_t j = 0; j < m->win.n_files; j++)
        protobuf_c_message_free_unpacked(&m->win.files[j]->base, NULL);
    m->win.n_chunks = m->win.n_files = 0;
    m->win.size = 0;
}

void kestrel__mfile_rewind(kestrel__mfile *m, size_t max_files, size_t max_chunks)
{
    window_clear(m);
    if (m->pending)
        protobuf_c_message_free_unpacked(&m->pending->base, NULL);
    m->pending = NULL;
    kestrel__records_rewind(&m->files);
    kestrel__records_rewind(&m->chunks);
    m->chunks_read = m->files_read = 0;
    m->max_files = max_files ? max_files : 1;
    m->max_chunks = max_chunks ? max_chunks : 1;
}

/* The next chunk into the window. */
static int take_chunk(kestrel__mfile *m)
{
    ProtobufCMessage *c;
    int rc = kestrel__array_grow(&m->win.chunks, &m->cap_chunks, m->win.n_chunks + 1, sizeof(*m->win.chunks));
    if (rc == 0 && (rc = next_of(&m->chunks, m->chunk_field, &kestrel__v1__chunk_ref__descriptor, &c)) == 0)
        rc = kestrel__error_set(KESTREL_EPROTO, "the pulled manifest is damaged: it lists fewer chunks than it counts");
    if (rc < 0)
        return rc;
    m->win.chunks[m->win.n_chunks++] = (Kestrel__V1__ChunkRef *)c;
    m->win.size += ((Kestrel__V1__ChunkRef *)c)->size;
    m->chunks_read++;
    return 0;
}

int kestrel__mfile_next(kestrel__mfile *m, const Kestrel__V1__Manifest **win)
{
    int rc = 0;
    window_clear(m);
    *win = &m->win;
    while (m->pending || m->files_read < m->n_files) {
        Kestrel__V1__TreeFile *f = m->pending;
        size_t take;
        if (f == NULL) {
            if ((rc = next_of(&m->files, m->file_field, &kestrel__v1__tree_file__descriptor, (ProtobufCMessage **)&f)) <= 0)
                return rc < 0 ? rc : kestrel__error_set(KESTREL_EPROTO, "the pulled manifest is damaged: it lists fewer "
                                                        "files than it counts");
            m->files_read++;
            if (f->chunks < 0 || f->chunks > (int64_t)(m->n_chunks - m->chunks_read)) {   /* never read past the end */
                protobuf_c_message_free_unpacked(&f->base, NULL);
                return kestrel__error_set(KESTREL_EINVALID, "field 'files': the files do not add up to the version's "
                                          "size and chunks");
            }
            m->pending = f;
        }
        take = (size_t)f->chunks;
        if (m->win.n_files && (m->win.n_files >= m->max_files || m->win.n_chunks + take > m->max_chunks))
            return 1;   /* it begins the next window */
        if ((rc = kestrel__array_grow(&m->win.files, &m->cap_files, m->win.n_files + 1, sizeof(*m->win.files))) < 0)
            return rc;
        m->win.files[m->win.n_files++] = f;
        m->pending = NULL;
        while (take-- > 0)
            if ((rc = take_chunk(m)) < 0)
                return rc;
    }
    if (m->win.n_files)
        return 1;
    while (m->chunks_read < m->n_chunks && m->win.n_chunks < m->max_chunks)   /* no file's, or a file version's */
        if ((rc = take_chunk(m)) < 0)
            return rc;
    return m->win.n_chunks ? 1 : 0;
}

int kestrel__mfile_check(kestrel__mfile *m)
{
    kestrel__mcheck *c = malloc(sizeof(*c));
    const Kestrel__V1__Manifest *w;
    int rc;
    if (c == NULL)
        return kestrel__error_oom();
    rc = kestrel__mcheck_begin(c, m->head, m->n_chunks, m->n_files, 0);
    kestrel__mfile_rewind(m, KESTREL__WINDOW_FILES, KESTREL__WINDOW_CHUNKS);
    while (rc == 0 && (rc = kestrel__mfile_next(m, &w)) == 1)
        rc = kestrel__mcheck_lists(c, w);
    if (rc == 0)
        rc = kestrel__mcheck_end(c);
    kestrel__mcheck_free(c);
    free(c);
    kestrel__mfile_rewind(m, 1, 1);   /* the window's records go */
    return rc;
}

void kestrel__mfile_close(kestrel__mfile *m)
{
    if (m == NULL)
        return;
    kestrel__mfile_rewind(m, 1, 1);
    free(m->win.chunks);
    free(m->win.files);
    kestrel__records_free(&m->files);
    kestrel__records_free(&m->chunks);
    kestrel__manifest_free(m->head);
    if (m->fd >= 0)
        close(m->fd);
    free(m);
}

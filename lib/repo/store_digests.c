/* lib/repo/store_digests.c - a version's whole-file digests, from the chunks in the store: checked
 * where the manifest gives them, filled in where it leaves them empty. kestreld's commit runs it on
 * every new version (so nothing unverifiable commits, and a client need not hash each file twice),
 * except for files hashed as they streamed in and a re-push of the latest version's files; a
 * file:// commit, only for the digests a push left empty. A file of one chunk is not read: its
 * digest is the chunk's, checked when it was stored. */
#include <stdlib.h>
#include <string.h>
#include "repo.h"
#include "store.h"

int kestrel__manifest_chunk_arrays(const Kestrel__V1__Manifest *m, char ***hex, int64_t **size)
{
    *hex = calloc(m->n_chunks + 1, sizeof(**hex));
    *size = calloc(m->n_chunks + 1, sizeof(**size));
    if (*hex == NULL || *size == NULL) {
        free(*hex);
        free(*size);
        *hex = NULL;
        *size = NULL;
        return kestrel__error_oom();
    }
    for (size_t i = 0; i < m->n_chunks; i++) {
        (*hex)[i] = m->chunks[i]->digest;
        (*size)[i] = m->chunks[i]->size;
    }
    return 0;
}

int kestrel__manifest_settle_digest(Kestrel__V1__Manifest *m, size_t i, const char *got, char *msg, size_t n)
{
    Kestrel__V1__TreeFile *f = m->n_files ? m->files[i] : NULL;
    char **want = f ? &f->sha256 : &m->sha256;
    if (!(*want)[0]) {
        int rc = kestrel__wire_set_string(want, got);
        if (rc < 0)
            snprintf(msg, n, "out of memory");
        return rc;
    }
    if (!strcmp(got, *want))
        return 0;
    if (f)
        snprintf(msg, n, "field 'files': the chunks of '%.100s' hash to %.12s, not its sha256 %.12s", f->path, got, *want);
    else
        snprintf(msg, n, "field 'sha256': the chunks hash to %.12s, not %.12s", got, *want);
    return kestrel__error_set(KESTREL_EINVALID, "%s", msg);
}

int kestrel__store_fill_digests(kestrel__store *s, Kestrel__V1__Manifest *m, const unsigned char *known,
                                uint64_t *read_back, char *msg, size_t n)
{
    char **hex, got[KESTREL__HEX_LEN + 1];
    int64_t *size;
    size_t at = 0;
    int rc = kestrel__manifest_chunk_arrays(m, &hex, &size);
    if (rc < 0) {
        snprintf(msg, n, "out of memory");
        return rc;
    }
    for (size_t i = 0; rc == 0 && i < (m->n_files ? m->n_files : 1); i++) {
        size_t k = m->n_files ? (size_t)m->files[i]->chunks : m->n_chunks;
        if (!(known && known[i])) {   /* else the caller vouches for it */
            if ((rc = kestrel__store_digest_chunks(s, hex + at, size + at, k, got)) < 0)
                snprintf(msg, n, "%s", kestrel_error_last()->message);
            else
                rc = kestrel__manifest_settle_digest(m, i, got, msg, n);
            if (read_back && k > 1)
                *read_back += (uint64_t)(m->n_files ? m->files[i]->size : m->size);
        }
        at += k;
    }
    if (rc == 0 && m->n_files && !m->sha256[0]) {   /* the listing's digest, from the files' */
        kestrel__manifest_tree_digest(m->files, m->n_files, got);
        if ((rc = kestrel__wire_set_string(&m->sha256, got)) < 0)
            snprintf(msg, n, "out of memory");
    }
    free(hex);
    free(size);
    return rc;
}

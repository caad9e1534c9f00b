/* lib/repo/store_digests.c - a version's whole-file digests, from the chunks in the store: checked
 * where the manifest gives them, filled in where it leaves them empty. kestreld's commit runs it on
 * every new version (so nothing unverifiable commits, and a client need not hash each file twice),
 * except for files hashed as they streamed in; a file:// commit, only for the digests a push left
 * empty. */
#include <stdlib.h>
#include <string.h>
#include "repo.h"
#include "store.h"

int kestrel__manifest_set_digest(char **field, const char *hex)
{
    char *s = kestrel__strdup(hex);
    if (s == NULL)
        return kestrel__error_oom();
    if (*field != protobuf_c_empty_string)
        free(*field);
    *field = s;
    return 0;
}

int kestrel__store_fill_digests(kestrel__store *s, Kestrel__V1__Manifest *m, const unsigned char *known, char *msg,
                                size_t n)
{
    char **hex = calloc(m->n_chunks + 1, sizeof(*hex)), got[KESTREL__HEX_LEN + 1];
    int64_t *size = calloc(m->n_chunks + 1, sizeof(*size));
    size_t at = 0;
    int rc = 0;
    if (hex == NULL || size == NULL) {
        rc = kestrel__error_oom();
        snprintf(msg, n, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < m->n_chunks; i++) {
        hex[i] = m->chunks[i]->digest;
        size[i] = m->chunks[i]->size;
    }
    for (size_t i = 0; rc == 0 && i < (m->n_files ? m->n_files : 1); i++) {
        Kestrel__V1__TreeFile *f = m->n_files ? m->files[i] : NULL;
        size_t k = f ? (size_t)f->chunks : m->n_chunks;
        char **want = f ? &f->sha256 : &m->sha256;
        if (known && known[i]) {   /* the caller vouches for it */
            at += k;
            continue;
        }
        if ((rc = kestrel__store_digest_chunks(s, hex + at, size + at, k, got)) < 0) {
            snprintf(msg, n, "%s", kestrel_error_last()->message);
        } else if (!(*want)[0]) {
            if ((rc = kestrel__manifest_set_digest(want, got)) < 0)
                snprintf(msg, n, "out of memory");
        } else if (strcmp(got, *want)) {
            if (f)
                snprintf(msg, n, "field 'files': the chunks of '%.100s' hash to %.12s, not its sha256 %.12s",
                         f->path, got, *want);
            else
                snprintf(msg, n, "field 'sha256': the chunks hash to %.12s, not %.12s", got, *want);
            rc = kestrel__error_set(KESTREL_EINVALID, "%s", msg);
        }
        at += k;
    }
    if (rc == 0 && m->n_files && !m->sha256[0]) {   /* the listing's digest, from the files' */
        kestrel__manifest_tree_digest(m->files, m->n_files, got);
        if ((rc = kestrel__manifest_set_digest(&m->sha256, got)) < 0)
            snprintf(msg, n, "out of memory");
    }
out:
    free(hex);
    free(size);
    return rc;
}

/* lib/repo/store_digests.c - a version's whole-file digests, from the chunks in the store: checked
 * where the manifest gives them, filled in where it leaves them empty. kestreld's commit runs it on
 * every new version (so nothing unverifiable commits, and a client need not hash each file twice),
 * except for files hashed as they streamed in, a re-push of the latest version's files, and the files
 * a push asked it to settle later (only their chunks' sizes and the bound on what hashing them will
 * take are checked then; server/repo_settle.h, then store_settle.c runs it again, each chunk checked);
 * a file:// commit, only for the digests a push left empty. A file of one chunk is not read: its
 * digest is the chunk's, checked when it was stored. */
#include <stdlib.h>
#include <openssl/evp.h>
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

/* What a commit may make the store read back to hash its files: this many times the bytes it stores
 * (its distinct chunks), and this much besides. Found by a hostile test: a 194 KB manifest naming one
 * 4 MiB chunk 2,000 times made kestreld hash 8 GB, on the thread other requests wait on. */
#define READ_BACK_PER_STORED 16
#define READ_BACK_FREE ((int64_t)1 << 30)

typedef struct {
    unsigned char key[32];   /* SHA-256 over the file's chunk digests and sizes: files of the same chunks */
    size_t file;
} same_chunks;

static int by_key(const void *a, const void *b)
{
    const same_chunks *x = a, *y = b;
    int c = memcmp(x->key, y->key, sizeof(x->key));
    return c ? c : (x->file > y->file) - (x->file < y->file);
}

static int by_digest(const void *a, const void *b)
{
    return strcmp((*(const Kestrel__V1__ChunkRef *const *)a)->digest, (*(const Kestrel__V1__ChunkRef *const *)b)->digest);
}

/* The bytes m's distinct chunks hold. */
static int64_t stored_bytes(const Kestrel__V1__Manifest *m)
{
    const Kestrel__V1__ChunkRef **v = malloc((m->n_chunks + 1) * sizeof(*v));
    int64_t total = 0;
    if (v == NULL)
        return -1;
    for (size_t i = 0; i < m->n_chunks; i++)
        v[i] = m->chunks[i];
    qsort(v, m->n_chunks, sizeof(*v), by_digest);
    for (size_t i = 0; i < m->n_chunks; i++)
        if (i == 0 || strcmp(v[i]->digest, v[i - 1]->digest))
            total += v[i]->size;
    free(v);
    return total;
}

static int fill(kestrel__store *s, Kestrel__V1__Manifest *m, const unsigned char *known, const unsigned char *later,
                int check, uint64_t *read_back, char *msg, size_t n);

int kestrel__store_fill_digests(kestrel__store *s, Kestrel__V1__Manifest *m, const unsigned char *known,
                                uint64_t *read_back, char *msg, size_t n)
{
    return fill(s, m, known, NULL, 0, read_back, msg, n);
}

int kestrel__store_fill_digests_but(kestrel__store *s, Kestrel__V1__Manifest *m, const unsigned char *known,
                                    const unsigned char *later, uint64_t *read_back, char *msg, size_t n)
{
    return fill(s, m, known, later, 0, read_back, msg, n);
}

int kestrel__store_fill_digests_checked(kestrel__store *s, Kestrel__V1__Manifest *m, const unsigned char *known,
                                        uint64_t *read_back, char *msg, size_t n)
{
    return fill(s, m, known, NULL, 1, read_back, msg, n);
}

static int fill(kestrel__store *s, Kestrel__V1__Manifest *m, const unsigned char *known, const unsigned char *later,
                int check, uint64_t *read_back, char *msg, size_t n)
{
    char **hex, got[KESTREL__HEX_LEN + 1];
    int64_t *size, planned = 0, stored;
    size_t at = 0, nf = m->n_files ? m->n_files : 1, nsame = 0;
    int whole = 1;
    size_t *first = calloc(nf + 1, sizeof(*first));   /* the first file with the same chunks: hashed once */
    same_chunks *same = calloc(nf + 1, sizeof(*same));
    char (*done)[KESTREL__HEX_LEN + 1] = calloc(nf + 1, sizeof(*done));
    int rc = kestrel__manifest_chunk_arrays(m, &hex, &size);
    if (rc == 0 && (first == NULL || same == NULL || done == NULL))
        rc = kestrel__error_oom();
    for (size_t i = 0; rc == 0 && i < nf; i++) {   /* what would be read back, and who shares chunks */
        size_t k = m->n_files ? (size_t)m->files[i]->chunks : m->n_chunks;
        first[i] = i;
        if (k > 1 && !(known && known[i])) {
            EVP_MD_CTX *ctx = EVP_MD_CTX_new();
            unsigned int len = 0;
            if (ctx == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1)
                rc = kestrel__error_oom();
            for (size_t c = 0; rc == 0 && c < k; c++) {   /* digests and sizes: one digest may be listed */
                EVP_DigestUpdate(ctx, hex[at + c], strlen(hex[at + c]) + 1);   /* with a wrong size (a review) */
                EVP_DigestUpdate(ctx, &size[at + c], sizeof(size[at + c]));
            }
            if (rc == 0)
                EVP_DigestFinal_ex(ctx, same[nsame].key, &len);
            EVP_MD_CTX_free(ctx);
            same[nsame++].file = i;
        }
        at += k;
    }
    if (rc == 0 && nsame > 1)
        qsort(same, nsame, sizeof(*same), by_key);
    for (size_t j = 0; rc == 0 && j < nsame; j++) {
        if (j && !memcmp(same[j].key, same[j - 1].key, sizeof(same[j].key)))
            first[same[j].file] = first[same[j - 1].file];
        else
            planned += m->n_files ? m->files[same[j].file]->size : m->size;
    }
    if (rc == 0 && (stored = stored_bytes(m)) < 0)
        rc = kestrel__error_oom();
    if (rc == 0 && planned > READ_BACK_PER_STORED * stored + READ_BACK_FREE)
        rc = kestrel__error_set(KESTREL_EINVALID, "the files repeat their chunks too often: their digests would "
                                "mean hashing %lld MiB for %lld MiB stored (at most %dx, plus %lld MiB)",
                                (long long)(planned >> 20), (long long)(stored >> 20), READ_BACK_PER_STORED,
                                (long long)(READ_BACK_FREE >> 20));
    if (rc < 0)
        snprintf(msg, n, "%s", kestrel_error_last()->message);
    at = 0;
    for (size_t i = 0; rc == 0 && i < nf; i++) {
        size_t k = m->n_files ? (size_t)m->files[i]->chunks : m->n_chunks;
        if (later && later[i] && (rc = kestrel__store_chunks_sized(s, hex + at, size + at, k)) < 0)
            snprintf(msg, n, "%s", kestrel_error_last()->message);   /* hashed later: its sizes hold now */
        else if (!(known && known[i]) && !(later && later[i])) {   /* else the caller vouches for it, or waits */
            if (first[i] != i && !(later && later[first[i]]))
                memcpy(got, done[first[i]], sizeof(got));   /* the same chunks as an earlier file */
            else if ((rc = kestrel__store_digest_chunks(s, hex + at, size + at, k, check, got)) < 0)
                snprintf(msg, n, "%s", kestrel_error_last()->message);
            if (rc == 0) {
                memcpy(done[i], got, sizeof(got));
                rc = kestrel__manifest_settle_digest(m, i, got, msg, n);
            }
            if (read_back && k > 1 && first[i] == i)
                *read_back += (uint64_t)(m->n_files ? m->files[i]->size : m->size);
        }
        at += k;
    }
    for (size_t i = 0; rc == 0 && i < m->n_files; i++)
        if (!m->files[i]->sha256[0])
            whole = 0;   /* a file left for later: so is the listing's digest */
    if (rc == 0 && m->n_files && !m->sha256[0] && whole) {   /* the listing's digest, from the files' */
        kestrel__manifest_tree_digest(m->files, m->n_files, got);
        if ((rc = kestrel__wire_set_string(&m->sha256, got)) < 0)
            snprintf(msg, n, "out of memory");
    }
    free(hex);
    free(size);
    free(first);
    free(same);
    free(done);
    return rc;
}

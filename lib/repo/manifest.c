/* lib/repo/manifest.c - Kestrel__V1__Manifest, the one form of a version: built by a push, sent as
 * protobuf, stored as its proto3 JSON (lib/wire.c), read back by a pull. Here: allocation, the checks
 * every reader makes, and the digest of a directory's listing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/evp.h>
#include "chunk.h"
#include "repo.h"
#include "store.h"

Kestrel__V1__Manifest *kestrel__manifest_new(void)
{
    Kestrel__V1__Manifest *m = malloc(sizeof(*m));
    if (m)
        kestrel__v1__manifest__init(m);
    return m;
}

void kestrel__manifest_free(Kestrel__V1__Manifest *m)
{
    if (m)
        protobuf_c_message_free_unpacked(&m->base, NULL);
}

/* Room for n chunk pointers as add_chunks keeps it: a power of two, so that a push adding a file's
 * chunks at a time reallocates a few dozen times, not once a file. */
static size_t chunks_room(size_t n)
{
    size_t c = 16;
    while (c < n)
        c <<= 1;
    return c;
}

int kestrel__manifest_add_chunks(Kestrel__V1__Manifest *m, const kestrel__chunk_ref *refs, size_t n)
{
    Kestrel__V1__ChunkRef **arr = m->chunks;
    size_t need = m->n_chunks + n + 1;
    if (arr == NULL || need > chunks_room(m->n_chunks + 1)) {
        if ((arr = realloc(m->chunks, chunks_room(need) * sizeof(*arr))) == NULL)
            return kestrel__error_oom();
        m->chunks = arr;
    }
    for (size_t i = 0; i < n; i++) {
        Kestrel__V1__ChunkRef *c = malloc(sizeof(*c));
        if (c == NULL)
            return kestrel__error_oom();
        kestrel__v1__chunk_ref__init(c);
        if ((c->digest = kestrel__strdup(refs[i].hex)) == NULL) {
            free(c);
            return kestrel__error_oom();
        }
        c->size = refs[i].len;
        arr[m->n_chunks++] = c;
    }
    return 0;
}

int kestrel__tree_path_valid(const char *p)
{
    size_t len = p ? strlen(p) : 0;
    if (len == 0 || len > 4000 || p[0] == '/' || p[len - 1] == '/' || !kestrel__utf8_valid(p, len))
        return 0;   /* UTF-8: a manifest is JSON in the store and protobuf strings on the wire */
    for (const char *seg = p; seg;) {
        const char *slash = strchr(seg, '/');
        size_t sl = slash ? (size_t)(slash - seg) : strlen(seg);
        if (sl == 0 || (sl == 1 && seg[0] == '.') || (sl == 2 && seg[0] == '.' && seg[1] == '.'))
            return 0;
        seg = slash ? slash + 1 : NULL;
    }
    return 1;
}

int kestrel__ref_split(const char *ref, char *name, size_t n, const char **at)
{
    const char *a = ref ? strrchr(ref, '@') : NULL;
    size_t len = ref ? (a ? (size_t)(a - ref) : strlen(ref)) : 0;
    if (ref == NULL || len >= n)
        return kestrel__error_set(KESTREL_EINVALID, "bad model name '%.64s'", ref ? ref : "");
    memcpy(name, ref, len);
    name[len] = '\0';
    if (!kestrel__repo_name_valid(name))
        return kestrel__error_set(KESTREL_EINVALID, "bad model name '%.64s': " KESTREL__NAME_RULE,
                                  name);
    if (a && !a[1])
        return kestrel__error_set(KESTREL_EINVALID, "bad reference '%.64s': a version or an alias after '@'", ref);
    *at = a ? a + 1 : "latest";
    if (**at >= '0' && **at <= '9') {   /* a version number */
        size_t digits = strspn(*at, "0123456789");
        if ((*at)[digits] || digits > 18 || **at == '0')
            return kestrel__error_set(KESTREL_EINVALID, "bad version in '%.64s'", ref);
    } else if (!kestrel__alias_valid(*at)) {
        return kestrel__error_set(KESTREL_EINVALID, "bad alias in '%.64s'", ref);
    }
    return 0;
}

void kestrel__manifest_tree_digest_file(EVP_MD_CTX *ctx, const Kestrel__V1__TreeFile *f)
{
    char line[128];
    int len = snprintf(line, sizeof(line), "%o %lld %.64s ", (unsigned)f->mode, (long long)f->size, f->sha256);
    EVP_DigestUpdate(ctx, line, (size_t)len);
    EVP_DigestUpdate(ctx, f->path, strlen(f->path) + 1);   /* NUL-terminated: names may hold newlines */
}

void kestrel__manifest_tree_digest(Kestrel__V1__TreeFile *const *f, size_t n, char hex[65])
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdn = 0;
    hex[0] = '\0';
    if (ctx == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(ctx);
        return;
    }
    for (size_t i = 0; i < n; i++)
        kestrel__manifest_tree_digest_file(ctx, f[i]);
    EVP_DigestFinal_ex(ctx, md, &mdn);
    EVP_MD_CTX_free(ctx);
    kestrel__hex(md, 32, hex);
}

/* 1 when the first len bytes of path are one of m's files (sorted: a binary search). */
static int is_file(const Kestrel__V1__Manifest *m, const char *path, size_t len)
{
    size_t lo = 0, hi = m->n_files;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *p = m->files[mid]->path;
        int c = strncmp(path, p, len);
        if (c == 0 && p[len] == '\0')
            return 1;
        if (c < 0 || (c == 0 && p[len] != '\0'))   /* a proper prefix sorts first */
            hi = mid;
        else
            lo = mid + 1;
    }
    return 0;
}

/* The folders path lies in are none of m's files ("a" beside "a/c": the pull could not make both, and
 * "a-b" sorts between them, so neighbours alone do not tell). A folder path shares with the previous
 * path was looked at for it. */
static int folders_are_no_files(const Kestrel__V1__Manifest *m, const char *path, const char *prev)
{
    size_t same = 0;
    while (prev && prev[same] && prev[same] == path[same])
        same++;
    for (const char *q = strchr(path, '/'); q; q = strchr(q + 1, '/'))
        if ((size_t)(q - path) >= same && is_file(m, path, (size_t)(q - path)))
            return kestrel__error_set(KESTREL_EINVALID, "field 'files': '%.*s' is both a file and a directory",
                                      (int)((q - path) > 100 ? 100 : (q - path)), path);
    return 0;
}

static int tree_check(const Kestrel__V1__Manifest *m, int open)
{
    int unknown = !m->sha256[0];
    int64_t total = 0, chunks = 0;
    size_t at = 0;
    char hex[65];
    for (size_t i = 0; i < m->n_files; i++) {
        const Kestrel__V1__TreeFile *f = m->files[i], *p = i ? m->files[i - 1] : NULL;
        int64_t sum = 0;
        if (!kestrel__tree_path_valid(f->path))
            return kestrel__error_set(KESTREL_EINVALID, "field 'files': bad path '%.100s'", f->path);
        if (p && strcmp(p->path, f->path) >= 0)
            return kestrel__error_set(KESTREL_EINVALID, "field 'files': paths must be unique and sorted ('%.100s')", f->path);
        if (folders_are_no_files(m, f->path, p ? p->path : NULL) < 0)
            return KESTREL_EINVALID;
        if (f->size < 0 || f->chunks < 0 || (f->size > 0) != (f->chunks > 0) || (f->mode & ~0777u))
            return kestrel__error_set(KESTREL_EINVALID, "field 'files': bad entry '%.100s'", f->path);
        if (open && !f->sha256[0])
            unknown = 1;   /* left for the repository to compute */
        else if (!kestrel__is_sha256_hex(f->sha256))
            return kestrel__error_set(KESTREL_EINVALID, "field 'files': the sha256 of '%.100s' is not 64 hex digits", f->path);
        if (f->chunks > (int64_t)m->n_chunks - chunks || f->size > m->size - total)   /* never past the ends */
            return kestrel__error_set(KESTREL_EINVALID,
                                      "field 'files': the files do not add up to the version's size and chunks");
        total += f->size;
        chunks += f->chunks;
        for (int64_t k = 0; k < f->chunks; k++)
            sum += m->chunks[at++]->size;
        if (sum != f->size)
            return kestrel__error_set(KESTREL_EINVALID, "field 'files': the chunks of '%.100s' do not add up to its size",
                                      f->path);
    }
    if (total != m->size || chunks != (int64_t)m->n_chunks)
        return kestrel__error_set(KESTREL_EINVALID, "field 'files': the files do not add up to the version's size and chunks");
    if (open && unknown)
        return 0;   /* checked once the repository has filled the digests in */
    kestrel__manifest_tree_digest(m->files, m->n_files, hex);
    if (strcmp(hex, m->sha256))
        return kestrel__error_set(KESTREL_EINVALID, "field 'sha256': not the digest of the listed files");
    return 0;
}

static int check(const Kestrel__V1__Manifest *m, int open)
{
    int64_t total = 0;
    if (!(open && !m->sha256[0]) && !kestrel__is_sha256_hex(m->sha256))
        return kestrel__error_set(KESTREL_EINVALID, "field 'sha256': 64 lowercase hex digits");
    if (m->size < 0)
        return kestrel__error_set(KESTREL_EINVALID, "field 'size': negative");
    for (size_t i = 0; i < m->n_chunks; i++) {
        const Kestrel__V1__ChunkRef *c = m->chunks[i];
        if (!kestrel__is_sha256_hex(c->digest))
            return kestrel__error_set(KESTREL_EINVALID, "field 'chunks': digests are 64 lowercase hex digits");
        if (c->size <= 0 || c->size > (int64_t)KESTREL__CHUNK_MAX * 4)
            return kestrel__error_set(KESTREL_EINVALID, "field 'chunks': a chunk holds 1 byte to 4 MiB");
        total += c->size;
        if (total > m->size)
            break;
    }
    if (total != m->size)
        return kestrel__error_set(KESTREL_EINVALID, "field 'size': the chunks do not add up to it");
    return m->n_files ? tree_check(m, open) : 0;
}

int kestrel__manifest_check(const Kestrel__V1__Manifest *m)
{
    return check(m, 0);
}

int kestrel__manifest_check_commit(const Kestrel__V1__Manifest *m)
{
    return check(m, 1);
}

int kestrel__manifest_file_digests_open(const Kestrel__V1__Manifest *m)
{
    for (size_t i = 0; i < m->n_files; i++)
        if (!m->files[i]->sha256[0])
            return 1;
    return 0;
}

int kestrel__manifest_digests_open(const Kestrel__V1__Manifest *m)
{
    return kestrel__manifest_file_digests_open(m) || !m->sha256[0];
}

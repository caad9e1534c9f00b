/* lib/repo/manifest.c - Kestrel__V1__Manifest, the one form of a version: built by a push, sent as
 * protobuf, stored as its proto3 JSON (lib/wire.c), read back by a pull. Here: allocation, paths and
 * references, and the digest of a directory's listing (the checks every reader makes are in
 * manifest_check.c). */
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
    if (len == 0 || len > KESTREL__TREE_PATH_MAX || p[0] == '/' || p[len - 1] == '/' || !kestrel__utf8_valid(p, len))
        return 0;   /* UTF-8: a manifest is JSON in the store and protobuf strings on the wire */
    for (const char *seg = p; seg;) {
        const char *slash = strchr(seg, '/');
        size_t sl = slash ? (size_t)(slash - seg) : strlen(seg);
        /* past 255 bytes, a name no Linux file system holds (NAME_MAX): committed, never pulled */
        if (sl == 0 || sl > 255 || (sl == 1 && seg[0] == '.') || (sl == 2 && seg[0] == '.' && seg[1] == '.'))
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

/* 1 when a listed file's digest is left empty. */
static int file_digests_open(const Kestrel__V1__Manifest *m)
{
    for (size_t i = 0; i < m->n_files; i++)
        if (!m->files[i]->sha256[0])
            return 1;
    return 0;
}

int kestrel__manifest_digests_open(const Kestrel__V1__Manifest *m)
{
    return file_digests_open(m) || !m->sha256[0];
}

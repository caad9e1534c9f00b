/* lib/repo/manifest_check.c - the checks every reader of a manifest makes (a pull, kestreld at a
 * commit), made a record at a time: a whole manifest in memory is fed through the same steps as one a
 * pull reads from a temp file (manifest_file.c), so the two cannot disagree. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/evp.h>
#include "chunk.h"
#include "repo.h"
#include "store.h"

int kestrel__mcheck_begin(kestrel__mcheck *c, const Kestrel__V1__Manifest *head, size_t n_chunks, size_t n_files,
                          int open)
{
    memset(c, 0, sizeof(*c));
    c->head = head;
    c->n_chunks = n_chunks;
    c->n_files = n_files;
    c->open = open;
    c->unknown = !head->sha256[0];
    if (!(open && !head->sha256[0]) && !kestrel__is_sha256_hex(head->sha256))
        return kestrel__error_set(KESTREL_EINVALID, "field 'sha256': 64 lowercase hex digits");
    if (head->size < 0)
        return kestrel__error_set(KESTREL_EINVALID, "field 'size': negative");
    if (n_files && ((c->digest = EVP_MD_CTX_new()) == NULL || EVP_DigestInit_ex(c->digest, EVP_sha256(), NULL) != 1))
        return kestrel__error_oom();
    return 0;
}

/* The file before has all its chunks: they add up to its size. */
static int file_closed(kestrel__mcheck *c)
{
    if (c->files_seen && c->file_sum != c->file_size)
        return kestrel__error_set(KESTREL_EINVALID, "field 'files': the chunks of '%.100s' do not add up to its size",
                                  c->prev);
    return 0;
}

static int mcheck_chunk(kestrel__mcheck *c, const Kestrel__V1__ChunkRef *r)
{
    if (!kestrel__is_sha256_hex(r->digest))
        return kestrel__error_set(KESTREL_EINVALID, "field 'chunks': digests are 64 lowercase hex digits");
    if (r->size <= 0 || r->size > (int64_t)KESTREL__CHUNK_MAX * 4)
        return kestrel__error_set(KESTREL_EINVALID, "field 'chunks': a chunk holds 1 byte to 4 MiB");
    if (c->chunks_seen >= c->n_chunks)
        return kestrel__error_set(KESTREL_EINVALID, "field 'chunks': more than were counted");
    c->chunks_seen++;
    c->total += r->size;
    if (c->total > c->head->size)
        return kestrel__error_set(KESTREL_EINVALID, "field 'size': the chunks do not add up to it");
    if (c->files_seen && c->file_left > 0) {
        c->file_left--;
        c->file_sum += r->size;
    }
    return 0;
}

/* The files that could still be a folder of a later path are prefixes of the last path: paths come
 * sorted, a file F is a folder only of the paths in [F/, F0), and a file between F and F/ is F and a
 * character below '/', a longer prefix of the paths after it. So they are kept as lengths, a stack
 * (4001 at most: a path is 4000 bytes), and looked at as each path comes: "a" beside "a/c", with
 * "a-b" between them, is found (neighbours alone do not tell). */
static int folders_are_no_files(kestrel__mcheck *c, const char *path)
{
    while (c->depth > 0) {
        size_t l = c->stack[c->depth - 1];
        if (strncmp(path, c->prev, l) == 0 && path[l] == '/')
            return kestrel__error_set(KESTREL_EINVALID, "field 'files': '%.*s' is both a file and a directory",
                                      (int)(l > 100 ? 100 : l), path);
        if (strncmp(path, c->prev, l) == 0 && (unsigned char)path[l] < '/')
            break;   /* still ahead of path, and every shorter one too */
        c->depth--;  /* its paths are behind */
    }
    c->stack[c->depth++] = (uint16_t)strlen(path);
    return 0;
}

static int mcheck_file(kestrel__mcheck *c, const Kestrel__V1__TreeFile *f)
{
    int rc;
    if ((rc = file_closed(c)) < 0)
        return rc;
    if (!kestrel__tree_path_valid(f->path))
        return kestrel__error_set(KESTREL_EINVALID, "field 'files': bad path '%.100s'", f->path);
    if (c->files_seen && strcmp(c->prev, f->path) >= 0)
        return kestrel__error_set(KESTREL_EINVALID, "field 'files': paths must be unique and sorted ('%.100s')", f->path);
    if (c->files_seen >= c->n_files)
        return kestrel__error_set(KESTREL_EINVALID, "field 'files': more than were counted");
    if (folders_are_no_files(c, f->path) < 0)
        return KESTREL_EINVALID;
    if (f->size < 0 || f->chunks < 0 || (f->size > 0) != (f->chunks > 0) || (f->mode & ~0777u))
        return kestrel__error_set(KESTREL_EINVALID, "field 'files': bad entry '%.100s'", f->path);
    if (c->open && !f->sha256[0])
        c->unknown = 1;   /* left for the repository to compute */
    else if (!kestrel__is_sha256_hex(f->sha256))
        return kestrel__error_set(KESTREL_EINVALID, "field 'files': the sha256 of '%.100s' is not 64 hex digits", f->path);
    if (f->chunks > (int64_t)c->n_chunks - c->file_chunks || f->size > c->head->size - c->file_total)   /* never past the ends */
        return kestrel__error_set(KESTREL_EINVALID, "field 'files': the files do not add up to the version's size and chunks");
    if (c->chunks_seen != (size_t)c->file_chunks)
        return kestrel__error_set(KESTREL_EINVALID, "field 'files': a file's chunks were not given in order");
    c->file_total += f->size;
    c->file_chunks += f->chunks;
    c->file_size = f->size;
    c->file_left = f->chunks;
    c->file_sum = 0;
    c->files_seen++;
    memcpy(c->prev, f->path, strlen(f->path) + 1);
    kestrel__manifest_tree_digest_file(c->digest, f);
    return 0;
}

int kestrel__mcheck_end(kestrel__mcheck *c)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdn = 0;
    char hex[65];
    int rc;
    if (c->total != c->head->size || c->chunks_seen != c->n_chunks)
        return kestrel__error_set(KESTREL_EINVALID, "field 'size': the chunks do not add up to it");
    if (c->n_files == 0)
        return 0;
    if ((rc = file_closed(c)) < 0)
        return rc;
    if (c->file_total != c->head->size || c->file_chunks != (int64_t)c->n_chunks || c->files_seen != c->n_files)
        return kestrel__error_set(KESTREL_EINVALID, "field 'files': the files do not add up to the version's size and chunks");
    if (c->open && c->unknown)
        return 0;   /* checked once the repository has filled the digests in */
    EVP_DigestFinal_ex(c->digest, md, &mdn);
    kestrel__hex(md, 32, hex);
    if (strcmp(hex, c->head->sha256))
        return kestrel__error_set(KESTREL_EINVALID, "field 'sha256': not the digest of the listed files");
    return 0;
}

void kestrel__mcheck_free(kestrel__mcheck *c)
{
    EVP_MD_CTX_free(c->digest);
    c->digest = NULL;
}

int kestrel__mcheck_lists(kestrel__mcheck *c, const Kestrel__V1__Manifest *w)
{
    size_t at = 0;
    int rc = 0;
    for (size_t j = 0; j < w->n_files && rc == 0; j++) {
        rc = mcheck_file(c, w->files[j]);
        for (int64_t k = 0; k < w->files[j]->chunks && at < w->n_chunks && rc == 0; k++)
            rc = mcheck_chunk(c, w->chunks[at++]);
    }
    while (at < w->n_chunks && rc == 0)
        rc = mcheck_chunk(c, w->chunks[at++]);
    return rc;
}

static int check(const Kestrel__V1__Manifest *m, int open)
{
    kestrel__mcheck *c = malloc(sizeof(*c));
    int rc;
    if (c == NULL)
        return kestrel__error_oom();
    if ((rc = kestrel__mcheck_begin(c, m, m->n_chunks, m->n_files, open)) == 0 && (rc = kestrel__mcheck_lists(c, m)) == 0)
        rc = kestrel__mcheck_end(c);
    kestrel__mcheck_free(c);
    free(c);
    return rc;
}

int kestrel__manifest_check(const Kestrel__V1__Manifest *m)
{
    return check(m, 0);
}

int kestrel__manifest_check_commit(const Kestrel__V1__Manifest *m)
{
    return check(m, 1);
}

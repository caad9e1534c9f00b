/* lib/tree.h - directories as repository versions (tree manifests); see lib/tree.c. */
#ifndef KESTREL_TREE_H
#define KESTREL_TREE_H

#include <cjson/cJSON.h>
#include "internal.h"
#include "repo_priv.h"
#include "wire.h"

/* One regular file of a tree version. */
typedef struct {
    char *path;         /* relative, '/'-separated, no '.' or '..' segments */
    int64_t size;
    char sha[65];       /* SHA-256 of the file, hex */
    uint32_t mode;      /* permission bits (0777) */
    int64_t chunks;     /* how many of the version's chunks (in order) are this file's */
} kestrel__tree_file;

/* The regular files under root, sorted by path; symlinks and special files are an error. */
int kestrel__tree_list(const char *root, kestrel__tree_file **out, size_t *n);
/* select NULL: kestrel__tree_list; else those files of root (relative paths; each must be a
 * regular file), sorted. */
int kestrel__tree_select(const char *root, char *const *select, size_t n, kestrel__tree_file **out, size_t *nout);
void kestrel__tree_free(kestrel__tree_file *f, size_t n);
int kestrel__tree_path_valid(const char *path);
/* Paths valid, unique, sorted; sizes and chunk counts add up to the version's. */
int kestrel__tree_check(const kestrel__tree_file *f, size_t n, int64_t size, size_t nchunks);
/* A tree version's digest (its manifest's sha256): SHA-256 over "mode size sha path\0" per file. */
void kestrel__tree_digest(const kestrel__tree_file *f, size_t n, char hex[65]);
/* Check the listing (kestrel__tree_check, and its digest against want), split the pulled
 * concatenation (blob, verified chunk by chunk) into a fresh directory, verify every file against
 * its digest, and rename it to dest (an existing directory there is replaced). */
int kestrel__tree_install(int blob, const kestrel__tree_file *f, size_t n, int64_t size, size_t nchunks,
                          const char *want, const char *dest);
/* A manifest's files as a listing (paths borrowed from mf; free() the array only). NULL: no memory. */
kestrel__tree_file *kestrel__tree_of_pb(const Kestrel__V1__Manifest *mf);

/* Called after each file of a tree is chunked (the HTTP push sends its new chunks from there). */
typedef int (*kestrel__tree_each)(void *ctx, const char *path, kestrel__chunk_ref *refs, size_t n);
/* Chunk every file of f (listed under root) in order: all chunks into *out, each file's digest and
 * chunk count into f; progress over the whole tree. */
int kestrel__chunk_tree(const char *root, kestrel__tree_file *f, size_t nf, kestrel__chunk_ref **out, size_t *n,
                        kestrel__progress *pr, kestrel__chunk_sink sink, void *sink_ctx, kestrel__tree_each each,
                        void *each_ctx);
/* The store's JSON form: [[path, size, sha256, mode, chunks], ...]. */
cJSON *kestrel__tree_to_json(const kestrel__tree_file *f, size_t n);
int kestrel__tree_from_json(const cJSON *arr, kestrel__tree_file **out, size_t *n);

#endif

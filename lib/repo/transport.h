/* lib/repo/transport.h - where a repository lives, behind one small interface: the store opened
 * in-process for file:// (transport_local.c) or kestreld over HTTP (transport_http.c). Push and pull
 * (push.c, pull.c) are written once against it. On the pull's side a transport moves chunks and
 * manifests and decides nothing about them: every check of what arrives is the pull's, but where
 * the bytes never reach it (an HTTP answer longer than its chunk, a batch's chunk under another
 * digest: transport_http.c, fetch_batch.c). On the push's side it is the repository: the local
 * transport checks what it stores and commits as kestreld does (chunks against their digests, the
 * manifest's form, the whole-file digests left empty filled in); the HTTP one leaves that to
 * kestreld. */
#ifndef KESTREL_TRANSPORT_H
#define KESTREL_TRANSPORT_H

#include <sys/stat.h>
#include "chunk_spool.h"
#include "repo.h"
#include "store.h"

typedef struct kestrel__transport kestrel__transport;

/* One chunk a pull wants: its digest and size, and its index in the manifest. */
typedef struct {
    const char *digest;
    int64_t size;
    size_t idx;
} kestrel__want;

/* A fetched chunk, not yet verified: the pull checks it. data is the transport's until it returns. */
typedef int (*kestrel__fetched)(void *ctx, const kestrel__want *w, const void *data, size_t len);

typedef struct {
    /* The manifest of "name", "name@N" or "name@alias", with its chunks and files, packed, written
     * into fd (an empty file) from offset 0: a pull reads it from there a window at a time
     * (manifest_file.h). */
    int (*resolve)(kestrel__transport *t, const char *ref, int fd);
    /* Set missing on the refs (sorted by digest, a digest possibly repeated) the repository lacks. */
    int (*missing)(kestrel__transport *t, kestrel__chunk_ref *refs, size_t n);
    /* Store these chunks (each digest once), read from the push's file ref->file; progress counts them
     * as new. A ref marked unnamed (only where t->names_chunks) goes without its digest: the repository
     * names it by its bytes, and its hex is filled in from the answer. read (NULL: none): the file whose
     * unnamed chunks these are, as the push read it: another file there now (one renamed over it) fails
     * the send, since no digest would tell its bytes from those the push cut. */
    int (*send)(kestrel__transport *t, const kestrel__push_files *files, kestrel__chunk_ref *const *todo, size_t n,
                kestrel__progress *pr, const struct stat *read);
    /* Commit m (its chunks all stored) as the next version of m->name; *version is the number given.
     * chunks (NULL: m holds them): m's chunk and file lists, which m leaves out (chunk_spool.h); a
     * transport may move them into m (the local store does), so m holds both or neither after
     * (or, when that failed, only what is good to free). */
    int (*commit)(kestrel__transport *t, Kestrel__V1__Manifest *m, kestrel__spool *chunks, int64_t *version);
    /* Fetch the wanted chunks, in any order, each handed to got as it arrives. */
    int (*fetch)(kestrel__transport *t, const kestrel__want *want, size_t n, kestrel__fetched got, void *ctx);
    /* A chunk arrived damaged: let the repository re-check its copy (best effort). */
    void (*damaged)(kestrel__transport *t, const char *digest);
    /* Every version of name, chunk lists left out, aliases filled in; with sel (a number, "latest"
     * or an alias, checked), the one it names (ENOTFOUND: none). A kestreld before ?version= answers
     * every version to that: front.c picks the one. */
    int (*versions)(kestrel__transport *t, const char *name, const char *sel, Kestrel__V1__ManifestList **out);
    /* The model names, one a line. */
    int (*list)(kestrel__transport *t, kestrel_buf *out);
    int (*alias_set)(kestrel__transport *t, const char *name, const char *alias, int64_t version);
    int (*alias_delete)(kestrel__transport *t, const char *name, const char *alias);
    int (*remove)(kestrel__transport *t, const char *name, int64_t version);
    /* Collect the repository (store_gc.c's rules); grace_s < 0: the repository's own default. */
    int (*gc)(kestrel__transport *t, int64_t grace_s, kestrel__store_gc_stats *out);
    void (*close)(kestrel__transport *t);
} kestrel__transport_ops;

struct kestrel__transport {
    const kestrel__transport_ops *ops;
    int hash_whole;      /* a push hashes each whole file as it reads it (file://); else the repository does */
    int fills_digests;   /* the repository fills in a whole-file digest a commit leaves empty (file://;
                            kestreld says so in its answer to missing, and missing() sets it) */
    int names_chunks;    /* send may send chunks unnamed (kestreld says so in its answer to missing) */
    int settles_later;   /* the repository settles whole-file digests after the commit (kestreld says so in
                            its answer to missing): send's runs say &whole=0, commit asks ?settle=later
                            (atomic) */
    char where[17];      /* the repository: 16 hex digits of SHA-256 of kestreld's URL ("" for file://), the
                            stat cache's mark on what its answers named (push_cache.h) */
    int64_t found_unnamed;   /* chunks sent unnamed that the repository held already (atomic: send adds) */
    /* Set by a push or a pull while it sends, fetches or commits (NULL: none): the progress a request
     * reports while it waits, so that a stop is seen even while a server does not answer (HTTP:
     * missing, send, commit, resolve and fetch; every 100 ms in a transfer of chunks, about every
     * second in the others). The report's error (the callback said stop) gives the request up with it. */
    kestrel__progress *tick;
};

/* The transport of client c: the store of a file:// client, else its kestreld (front.c). */
int kestrel__transport_open(kestrel__transport **out, kestrel_client *c);
int kestrel__transport_local(kestrel__transport **out, const char *root);
int kestrel__transport_http(kestrel__transport **out, kestrel_client *c);
void kestrel__transport_close(kestrel__transport *t);

#endif

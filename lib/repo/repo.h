/* lib/repo/repo.h - what the repository wing's files share: a transfer's progress (progress.c), a
 * pushed chunk's reference and its hashing (chunk_hash.c), the manifest and its checks (manifest.c,
 * manifest_check.c), directories listed and installed (tree.c), a pull's temps (pull_sweep.c), the
 * push that lib/job's code upload makes (front.c) and a file:// store's JSON listings (get_json.c).
 * The map of the wing's files, and a push and a pull walked through, are lib/repo/README.md. */
#ifndef KESTREL_REPO_PRIV_H
#define KESTREL_REPO_PRIV_H

#include <pthread.h>
#include "client.h"
#include "wire.h"

typedef struct {
    kestrel_progress p;
    kestrel_progress_cb cb;
    void *payload;
    int64_t last_ms;
} kestrel__progress;

/* Call the progress callback (at most every 100 ms unless final); KESTREL_ECANCELLED / EUSER when it says stop. */
int kestrel__progress_report(kestrel__progress *pr, int final);
/* With mu held: wait on cv for another thread, at most one report's interval (100 ms), so that the
 * waiter can report progress (and hear a stop) while it waits. ETIMEDOUT when the time ran out. */
int kestrel__progress_wait(pthread_cond_t *cv, pthread_mutex_t *mu);

/* One chunk of a pushed file: its digest and where it lies (file: an index into the push's files).
 * unnamed: not hashed by the push, sent for the repository to name (hex "" until its answer; seq:
 * its place among the file's unnamed chunks). */
typedef struct {
    char hex[65];
    int64_t offset;
    uint32_t len;
    uint32_t file;
    int missing;
    int unnamed;
    uint32_t seq;
} kestrel__chunk_ref;

struct evp_md_ctx_st;
/* Fill in the hex digest of count chunks that lie in buf (buf[0] is file offset buf_at), the
 * work split across the caller's thread and one helper (chunk_hash.c). whole (NULL: none): a
 * whole-file SHA-256 to advance by whole_len bytes at whole_bytes at the same time, on the helper.
 * Fails only when OpenSSL does (out of memory). */
int kestrel__hash_chunks(const uint8_t *buf, int64_t buf_at, kestrel__chunk_ref *refs, size_t count,
                         struct evp_md_ctx_st *whole, const uint8_t *whole_bytes, size_t whole_len);

/* ---- manifest.c ---------------------------------------------------------------------------- */

/* A new, empty manifest (every field owned: free with kestrel__manifest_free). NULL: no memory. */
Kestrel__V1__Manifest *kestrel__manifest_new(void);
void kestrel__manifest_free(Kestrel__V1__Manifest *m);
/* Append n chunks (digest, size) to m, whose chunks only this has added (it grows them by doubling). */
int kestrel__manifest_add_chunks(Kestrel__V1__Manifest *m, const kestrel__chunk_ref *refs, size_t n);
/* m is whole: sha256 and chunk digests are 64 hex digits, the chunks add up to size and, for a
 * directory, the listing is valid (tree paths, sorted, unique, no file also a directory), each
 * file's chunks add up to its size and the listing's digest is sha256. KESTREL_EINVALID with a
 * message naming the field when not. A manifest from the server or the store is checked too. */
int kestrel__manifest_check(const Kestrel__V1__Manifest *m);
/* The same for a manifest offered for commit, where whole-file digests (the version's, a listed
 * file's) may be empty: the repository fills them in (kestrel__store_fill_digests), then the
 * manifest must pass kestrel__manifest_check. */
int kestrel__manifest_check_commit(const Kestrel__V1__Manifest *m);
/* The same checks a record at a time (manifest_check.c), for a manifest too long to hold: begin with
 * its other fields (head) and how many chunks and files it lists; then each file, followed by its
 * chunks (a file version: its chunks); the chunks no file claims; then end. Each step fails as the
 * whole check would; free in any case. About 12 KB (the last path, and which of its prefixes are
 * files): allocate it. */
typedef struct {
    const Kestrel__V1__Manifest *head;
    size_t n_chunks, n_files, chunks_seen, files_seen;
    int open, unknown;
    int64_t total;                        /* the chunks' bytes so far */
    int64_t file_total, file_chunks;      /* the files' bytes and chunks so far */
    int64_t file_size, file_left, file_sum;   /* the last file: its size, chunks still to come, their bytes */
    struct evp_md_ctx_st *digest;         /* the listing's */
    char prev[4001];
    uint16_t stack[4001];
    size_t depth;
} kestrel__mcheck;
int kestrel__mcheck_begin(kestrel__mcheck *c, const Kestrel__V1__Manifest *head, size_t n_chunks, size_t n_files,
                          int open);
/* Each file of w, then its chunks; then w's chunks no file claims (a whole manifest, or a window of
 * one: manifest_file.h). */
int kestrel__mcheck_lists(kestrel__mcheck *c, const Kestrel__V1__Manifest *w);
int kestrel__mcheck_end(kestrel__mcheck *c);
void kestrel__mcheck_free(kestrel__mcheck *c);
/* 1 when a whole-file digest of m is left empty: the version's or a listed file's. */
int kestrel__manifest_digests_open(const Kestrel__V1__Manifest *m);
/* A directory version's digest: SHA-256 over "mode size sha256 path\0" per file, in order. */
void kestrel__manifest_tree_digest(Kestrel__V1__TreeFile *const *files, size_t n, char hex[65]);
/* The same a file at a time: f's part of it, into ctx (an EVP SHA-256 digest begun by the caller). */
void kestrel__manifest_tree_digest_file(struct evp_md_ctx_st *ctx, const Kestrel__V1__TreeFile *f);
/* A relative, '/'-separated UTF-8 path without empty, '.' or '..' segments, each at most 255 bytes
 * (NAME_MAX), at most KESTREL__TREE_PATH_MAX bytes in all. */
#define KESTREL__TREE_PATH_MAX 4000
int kestrel__tree_path_valid(const char *path);
/* Split "name[@ref]" into name (checked) and ref ("latest" when absent). */
int kestrel__ref_split(const char *ref, char *name, size_t n, const char **at);

/* ---- tree.c -------------------------------------------------------------------------------- */

/* A pushed directory's files as a push holds them: each one's path (all in one buffer), size and mode,
 * sorted by path (strcmp); about 40 bytes a small file. Its chunks and digest are not kept: they go
 * to the push's chunk spool as it is hashed (chunk_spool.h). */
typedef struct {
    size_t at;               /* its path: paths + at */
    int64_t size;
    uint32_t mode;
} kestrel__listed;
typedef struct {
    char *paths;             /* NUL-terminated, one after another */
    size_t paths_len, paths_cap;
    kestrel__listed *f;
    size_t n, cap;
} kestrel__listing;
#define kestrel__listed_path(l, i) ((const char *)(l)->paths + (l)->f[(i)].at)
/* The regular files under root (select NULL), or those of select (relative paths), listed into l
 * (empty; kestrel__listing_free frees it, whatever this returned). Symlinks and special files are
 * an error. */
int kestrel__tree_list(const char *root, char *const *select, size_t nselect, kestrel__listing *l);
void kestrel__listing_free(kestrel__listing *l);
/* The files of a push: a pushed file (list NULL: root is the file), or a pushed directory (root,
 * resolved) and its listing. Each is opened by its path, made when it is needed (file_open.h: no
 * link in it followed), so a push holds no path beside the listing's own. */
typedef struct {
    const char *root;
    const kestrel__listing *list;
} kestrel__push_files;
#define KESTREL__PUSH_PATH_MAX 8200   /* a root (PATH_MAX), "/", a listed path (4000 at most) */
/* File i's path (root, or root/its listed path) in buf. */
const char *kestrel__push_file_path(const kestrel__push_files *f, uint32_t i, char buf[KESTREL__PUSH_PATH_MAX]);
/* A directory being pulled: a fresh one beside dest that the files are written into as their chunks
 * arrive, a window of the listing at a time (manifest_file.h): kestrel__tree_out_window says which
 * files the offsets of kestrel__tree_out_write (a pull layout's sink) are in, from 0 at the first. */
typedef struct kestrel__tree_out kestrel__tree_out;
int kestrel__tree_out_new(kestrel__tree_out **out, const char *dest);
int kestrel__tree_out_window(kestrel__tree_out *t, const Kestrel__V1__Manifest *w);
int kestrel__tree_out_write(void *ctx, int64_t at, const void *data, size_t len);
/* The window's chunks all placed: check each of its files against its digest (a file of one chunk is
 * that chunk, verified as it came; a longer one is read back and hashed) and give it its mode. */
int kestrel__tree_out_settle(kestrel__tree_out *t);
/* Every window settled: make the files durable at once (one syncfs), rename the directory to dest
 * (an existing directory there is replaced). Frees t. */
int kestrel__tree_out_finish(kestrel__tree_out *t, const char *dest);
/* Remove the half-made directory and free t (NULL is fine). */
void kestrel__tree_out_abandon(kestrel__tree_out *t);

/* ---- pull_sweep.c -------------------------------------------------------------------------- */

/* A pull's temp is named DEST.kestrel-tmp.v2.XXXXXX (a file, or a directory: fd open on it); it is
 * locked while the pull lives, and a directory's mtime kept fresh (touch: at most every 30 s, *last
 * the time of the last touch). */
#define KESTREL__PULL_TEMP_MARK ".kestrel-tmp.v2."
#define KESTREL__PULL_OLD_MARK ".kestrel-old."   /* the old tree moved aside (tree.c) */
/* A name beside dest, the template for mkostemp or mkdtemp, in out (n bytes): DEST MARK XXXXXX, DEST's
 * last name cut (at a UTF-8 character's start) so that it fits NAME_MAX: a name of 234-255 bytes is
 * pulled under its own name too (found by a hostile test: "File name too long"). 0; else
 * KESTREL_EINVALID, recorded, and out "": DEST's last name is longer than NAME_MAX, or the name
 * does not fit in n. */
int kestrel__pull_temp_name(const char *dest, const char *mark, char *out, size_t n);
int kestrel__pull_temp_lock(int fd);
void kestrel__pull_temp_touch(int fd, int64_t *last);
/* The folder dest is in ("." for a bare name): 0, or -1 when it does not fit in n. */
int kestrel__dest_dir(const char *dest, char *dir, size_t n);
/* Remove what killed pulls left beside dest, and beside the folder dest is in (such temps no process
 * holds, 5 minutes old): best effort, before a pull to dest makes its own. */
void kestrel__pull_sweep(const char *dest);

/* ---- front.c ------------------------------------------------------------------------------- */

/* kestrel_model_push of a directory's selected files only (select NULL: all of them; kestrel_code_push). */
int kestrel__model_push(int64_t *version_out, kestrel_client *c, const char *name, const char *path,
                        const kestrel_transfer_options *in, char *const *select, size_t nselect);
/* ---- get_json.c ----------------------------------------------------------------------------- */

/* kestrel_client_get_json for a file:// client: the repository's two listings, /api/v1/models
 * (ModelList) and /api/v1/models/NAME/versions (ManifestList), read from the store and written
 * through the same mapper kestreld answers with, so that -o json prints one form whatever the
 * repository; any other path KESTREL_EUNSUPPORTED (it needs a kestreld). */
int kestrel__repo_get_json(kestrel_buf *out, kestrel_client *c, const char *path);

#endif

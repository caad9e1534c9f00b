/* lib/repo/store.h - the content-addressed repository store on a filesystem. One implementation for
 * file:// URLs in the library and for kestreld, so both share one on-disk format:
 *   ROOT/chunks/ab/cdef...            chunk bytes, named by their SHA-256
 *   ROOT/models/NAME/versions/N.json  immutable manifests: the proto3 JSON of Kestrel__V1__Manifest
 *                                     (lib/wire.c); stores before format 2 kept another JSON form,
 *                                     read by store_legacy.c and rewritten once by kestreld's claim
 *   ROOT/models/NAME/versions/N.pb    the same manifest as protobuf, for the reads that serve it
 *                                     (store_manifest.c); N.listing, what listings show of it (store_list.c)
 *   ROOT/models/NAME/aliases/ALIAS    the version an alias points at
 * Every file is written to a temp name and renamed (manifests are link()ed so that two writers
 * can never take the same version number); chunks are synced once, before the manifest commits. */
#ifndef KESTREL_STORE_H
#define KESTREL_STORE_H

#include <sys/types.h>
#include "internal.h"
#include "wire.h"
#include "files.h"
#include "names.h"

typedef struct kestrel__store kestrel__store;

int kestrel__store_open(kestrel__store **out, const char *root);
void kestrel__store_close(kestrel__store *s);
int kestrel__store_has_chunk(kestrel__store *s, const char *hex);
int kestrel__store_put_chunk(kestrel__store *s, const char *hex, const void *data, size_t len);
/* Make every chunk written so far durable (one syncfs, not one fsync per chunk). */
int kestrel__store_sync(kestrel__store *s);
/* Where chunk hex lives: ROOT/chunks/ab/cdef... (hex: 64 lowercase hex digits, checked by the caller). */
void kestrel__store_chunk_path(const kestrel__store *s, const char *hex, char *out, size_t n);
/* Re-hash a stored chunk: 0 intact (or absent), 1 damaged and moved to ROOT/quarantine (so it no
 * longer counts as stored), < 0 on error. */
int kestrel__store_check_chunk(kestrel__store *s, const char *hex);
/* Each of chunks hexes[0..n) stored with sizes[i] bytes (a stat each, nothing read): 0, or
 * KESTREL_EINVALID with why (KESTREL_ENOTFOUND where one is not stored). */
int kestrel__store_chunks_sized(kestrel__store *s, char *const *hexes, const int64_t *sizes, size_t n);
/* SHA-256 over chunks hexes[0..n) as stored, each checked to hold sizes[i] bytes (KESTREL_EINVALID
 * with why when one is missing or of another size). Their own digests were checked as they came, so
 * the digest of a single chunk is its name: only its size is looked at (stat), nothing read. check:
 * each chunk of several is hashed too, and one whose bytes are not its name's is quarantined
 * (kestrel__store_check_chunk) and KESTREL_EINVALID (a settle long after the chunks came). */
int kestrel__store_digest_chunks(kestrel__store *s, char *const *hexes, const int64_t *sizes, size_t n, int check,
                                 char out[KESTREL__HEX_LEN + 1]);
/* The whole-file digests of m (the version's, or each listed file's and then the listing's) from
 * its chunks as stored (store_digests.c): an empty one is filled in, a given one must match
 * (KESTREL_EINVALID). known (NULL: none) marks the files (index 0 for a file version) whose digest
 * is not to be read (kestreld: set from a run; file://: given by this process's own push). A file
 * of one chunk takes that chunk's digest (kestrel__store_digest_chunks). *read_back (NULL: none)
 * receives the bytes of the files read back and hashed; msg, why it failed. */
int kestrel__store_fill_digests(kestrel__store *s, Kestrel__V1__Manifest *m, const unsigned char *known,
                                uint64_t *read_back, char *msg, size_t n);
/* The same, but the files later marks (kestreld's commit that settles them after it) are left
 * empty, and so is the listing's digest while one is: they count against the bound on what would be
 * read back all the same (a version is never committed whose digests can never be settled). */
int kestrel__store_fill_digests_but(kestrel__store *s, Kestrel__V1__Manifest *m, const unsigned char *known,
                                    const unsigned char *later, uint64_t *read_back, char *msg, size_t n);
/* The same as kestrel__store_fill_digests, each chunk read back checked against its name as it is
 * hashed (kestrel__store_digest_chunks' check): a version's digests settled after its commit. */
int kestrel__store_fill_digests_checked(kestrel__store *s, Kestrel__V1__Manifest *m, const unsigned char *known,
                                        uint64_t *read_back, char *msg, size_t n);
/* Settle name@version's whole-file digests that its commit left empty (store_settle.c), in two
 * steps, so that the hashing holds no lock: _hash reads the version and, where digests are empty,
 * reads its chunks back and hashes them (*hashed: the bytes; 0 when nothing was left), giving the
 * manifest whole (checked) in *out; _write then writes it as name@version's N.json, its protobuf
 * form and its listing, unless its listing shows it settled already (another settle's write is the
 * same bytes). KESTREL_ENOTFOUND when the version is gone. kestreld's only (the store's sole writer),
 * which keeps a delete of the version from running beside a _write. */
int kestrel__store_settle_hash(kestrel__store *s, const char *name, int64_t version, Kestrel__V1__Manifest **out,
                               uint64_t *hashed);
int kestrel__store_settle_write(kestrel__store *s, const Kestrel__V1__Manifest *m);
/* m's chunk digests and sizes, in order, as two arrays (free both). */
int kestrel__manifest_chunk_arrays(const Kestrel__V1__Manifest *m, char ***hex, int64_t **size);
/* got, the SHA-256 of file i of m (0 for a file version), computed from its chunks: set where m
 * leaves it empty; where m gives one, they must be equal (KESTREL_EINVALID, msg naming the field). */
int kestrel__manifest_settle_digest(Kestrel__V1__Manifest *m, size_t i, const char *got, char *msg, size_t n);
/* Declare this process the store's only writer (kestreld over its data directory): after one
 * sync now, a sync is skipped when this process wrote no chunk since the last one. Also repairs
 * "latest" where a writer was killed before it moved, and rewrites an old store's manifests once
 * (store_commit.c). */
int kestrel__store_claim(kestrel__store *s);
/* The sole-writer part of it: the flags (store.c). */
void kestrel__store_own(kestrel__store *s);
/* Commit m (its version is set here; aliases and alias are not stored) as the next version of name;
 * moves "latest". */
int kestrel__store_commit(kestrel__store *s, const char *name, Kestrel__V1__Manifest *m, int64_t *version_out);
/* "name", "name@N", "name@alias" -> the manifest (owned: kestrel__manifest_free). */
int kestrel__store_resolve(kestrel__store *s, const char *ref, Kestrel__V1__Manifest **out);
/* The same -> the model's name (checked) and the version's number. */
int kestrel__store_resolve_version(kestrel__store *s, const char *ref, char name[256], int64_t *version);
/* store_manifest.c. name@version's manifest: from versions/N.pb when it reads as name@N's, else
 * from N.json (and N.pb written then, where this process may write). For reads that serve it. */
int kestrel__store_manifest(kestrel__store *s, const char *name, int64_t version, Kestrel__V1__Manifest **out);
/* The same, packed, written into fd from offset 0 without holding it decoded: N.pb copied a buffer
 * at a time where it is current and names name@version (a pull of a long listing, file://); else
 * read as above and packed. */
int kestrel__store_manifest_write(kestrel__store *s, const char *name, int64_t version, int fd);
/* The same as kestreld answers it in protobuf (kestrel__store_manifest, then
 * kestrel__store_decorate), without decoding it whole: *out_fd the open N.pb, found current and N's
 * by one read of its records here, each decoded alone, to be sent as it lies and followed by
 * out_tail, the records decorate would add (the counts, metadata_json "{}", the aliases), which
 * protobuf's merge rule lays over N.pb's. *out_fd is -1 (0 returned) where N.pb will not do
 * (missing, older than N.json, damaged, another's, holding what no commit stores: aliases, an alias,
 * the counts): the caller decodes the manifest then, which says what is wrong or mends N.pb. */
int kestrel__store_manifest_open(kestrel__store *s, const char *name, int64_t version, int *out_fd,
                                 kestrel_buf *out_tail);
/* name@version's manifest a record at a time, passes times over the same bytes (pass 0, 1, ...): from
 * its N.pb where it will do (as for kestrel__store_manifest_open), never decoded whole, else decoded
 * (kestrel__store_manifest) and its records given alike, of its scalars only its size and digest.
 * fn(ctx, pass, field, one): one holds that record alone (field 5: a chunk, one->chunks[0]; 10: a file,
 * one->files[0]; else that scalar of the manifest: 3 its size, 4 its digest, a field given twice
 * counting by its last record, as protobuf's), in the stored order (the scalars, the chunks, the
 * files), and its memory is the walk's; field 0 and one NULL once a pass has given every record. A
 * non-zero answer ends the walk and is returned; 0 when every pass ran, < 0 an error (one past the
 * first pass: N.pb changed as it was read, or memory). Its payload comes first, as the other walks'
 * of this wing (pull_layout.h, transport.h). */
typedef int (*kestrel__manifest_each_fn)(void *ctx, int pass, unsigned field, const Kestrel__V1__Manifest *one);
int kestrel__store_manifest_each(kestrel__store *s, const char *name, int64_t version, int passes,
                                 kestrel__manifest_each_fn fn, void *ctx);
/* name@version's manifest from N.json alone, the truth: what a collection keeps and fsck checks. */
int kestrel__store_manifest_json(kestrel__store *s, const char *name, int64_t version, Kestrel__V1__Manifest **out);
/* A manifest file beside N.json (N.pb: content_type KESTREL__CT_PROTOBUF; N.listing: JSON), decoded;
 * NULL when it is missing or does not decode (no error left set): its reader checks it is N's. */
Kestrel__V1__Manifest *kestrel__store_sidecar_read(const char *path, const char *content_type);
/* versions/N.pb: m (committed as name@m->version) as protobuf, written atomically unless it already
 * holds exactly that and is current (fsck rewrites each); removed. read_at: N.json's ctime taken
 * before m was read from it (kestrel__store_json_ctime), the time N.pb is dated, so that an edit of
 * N.json after that read leaves N.pb stale; NULL: now (the commit that has just written N.json). */
int kestrel__store_pb_write(kestrel__store *s, const char *name, const Kestrel__V1__Manifest *m,
                            const struct timespec *read_at);
int kestrel__store_json_ctime(kestrel__store *s, const char *name, int64_t version, struct timespec *out);
void kestrel__store_pb_remove(kestrel__store *s, const char *name, int64_t version);
/* m's aliases (m->name@m->version's, as the aliases folder says; whatever m held is freed). */
int kestrel__store_aliases(kestrel__store *s, Kestrel__V1__Manifest *m);
/* m as readers see it: file_count, its aliases, metadata_json "{}" when it has none. */
int kestrel__store_decorate(kestrel__store *s, Kestrel__V1__Manifest *m);
/* kestrel__store_decorate but its aliases (the caller's). */
int kestrel__store_decorate_counts(Kestrel__V1__Manifest *m);

/* name@version as listings show it: chunks and files left out (chunk_count and file_count say how
 * many), its aliases filled in, metadata_json "{}" when it has none, no commit_key. Read from versions/N.listing,
 * written at the commit, so that a listing never reads a whole manifest (a dataset's is megabytes); a
 * version without one (an earlier build's) is read from its manifest and its N.listing written then. */
int kestrel__store_listing(kestrel__store *s, const char *name, int64_t version, Kestrel__V1__Manifest **out);
/* A model's aliases read once, for a listing of its versions: each version read its whole aliases
 * folder, so 300 versions and 3,000 aliases were 900,000 reads, 8 s of kestreld a listing (a
 * hostile test). A listing made with one shows the aliases as they were when it was read. */
typedef struct {
    char **alias;
    int64_t *version;
    size_t n;
} kestrel__alias_map;
int kestrel__store_alias_map(kestrel__store *s, const char *name, kestrel__alias_map *out);
void kestrel__alias_map_free(kestrel__alias_map *map);
/* m's aliases from map, in the aliases folder's order (whatever m held is freed). */
int kestrel__store_aliases_from(const kestrel__alias_map *map, Kestrel__V1__Manifest *m);
/* kestrel__store_listing with its aliases from map (NULL: read from the store, as it does). */
int kestrel__store_listing_mapped(kestrel__store *s, const char *name, int64_t version, const kestrel__alias_map *map,
                                  Kestrel__V1__Manifest **out);
/* How many aliases name has (its aliases folder's entries, temps aside). */
size_t kestrel__store_alias_count(kestrel__store *s, const char *name);
/* Write versions/N.listing for m, committed as name@m->version (atomically; errors are the caller's
 * to ignore: the manifest stays the truth). */
int kestrel__store_listing_write(kestrel__store *s, const char *name, const Kestrel__V1__Manifest *m);
/* The highest version number name ever had (a deleted one's too: never given out again); 0: none. */
int64_t kestrel__store_top_version(kestrel__store *s, const char *name);
/* The newest of name's KESTREL__COMMIT_KEYS_SEEN newest versions whose commit_key is key (as stored):
 * 1 with its N.listing as written (no aliases; the caller frees it) in *out; 0 when none is (a version
 * that cannot be read counts as none). */
#define KESTREL__COMMIT_KEYS_SEEN 16
int kestrel__store_find_commit(kestrel__store *s, const char *name, const char *key, Kestrel__V1__Manifest **out);
/* m as a listing shows it, shallow (its strings are m's): lists and aliases left out, chunk_count and
 * file_count set, metadata_json "{}" when it has none. */
void kestrel__store_listing_of(const Kestrel__V1__Manifest *m, Kestrel__V1__Manifest *shown);
/* Rewrite, once, the manifests of a store before format 2 in the current form (ROOT/format says
 * which a store has; store_commit.c). kestrel__store_claim calls it. */
int kestrel__store_migrate(kestrel__store *s);
/* A manifest in the JSON form of stores before format 2 (store_legacy.c). */
int kestrel__store_legacy_manifest(const char *json, Kestrel__V1__Manifest **out);
/* Versions of name in ascending order (owned array). */
int kestrel__store_versions(kestrel__store *s, const char *name, int64_t **out, size_t *n);
int kestrel__store_alias_set(kestrel__store *s, const char *name, const char *alias, int64_t version);
/* A push's alias: set to version unless it points at a newer one already, the read and the write
 * under flock of the model's versions folder (threads and processes alike). Pushes that race, each
 * naming the alias, leave it on the newest version (a hostile test: six at once left it on an
 * older one in 5 of 40 rounds, the version made and the alias set in two steps, unordered). */
int kestrel__store_alias_forward(kestrel__store *s, const char *name, const char *alias, int64_t version);
/* The version alias points at, even when that version is gone (KESTREL_ENOTFOUND: no such alias). */
int kestrel__store_alias_get(kestrel__store *s, const char *name, const char *alias, int64_t *version);
int kestrel__store_alias_delete(kestrel__store *s, const char *name, const char *alias);
int kestrel__store_delete(kestrel__store *s, const char *name, int64_t version);
int kestrel__store_list(kestrel__store *s, kestrel_buf *out);
/* 1 when model name (a valid name) has a committed version, as kestrel__store_list counts one. */
int kestrel__store_model_exists(kestrel__store *s, const char *name);
/* 1 when dir (a model's versions folder) holds a committed version: a kill during its first commit
 * leaves only a versions folder (and a temp file), which is no model. */
int kestrel__store_has_version(const char *dir);
const char *kestrel__store_root(const kestrel__store *s);

/* What a collection did. */
typedef struct {
    int64_t chunks_live;      /* chunk references in committed manifests */
    int64_t chunks_removed;
    int64_t temps_removed;    /* temp files of killed writers */
    int64_t bytes_freed;
} kestrel__store_gc_stats;

/* A version's metadata (a JSON object) at most: every listing of the model carries it. */
#define KESTREL__METADATA_MAX (64 * 1024)
/* The grace of a file:// store's collection when none is asked (kestreld: --repo-gc-grace). */
#define KESTREL__GC_GRACE_S 3600
/* A temp file is removed only once older than this, whatever grace a collection is asked for. */
#define KESTREL__TEMP_GRACE_S 3600
/* Remove chunks no committed version names once older than grace_s, and temp files of killed
 * writers once older than grace_s and KESTREL__TEMP_GRACE_S (lib/repo/store_gc.c explains why this
 * is safe beside concurrent pushes). */
int kestrel__store_gc(kestrel__store *s, int64_t grace_s, kestrel__store_gc_stats *stats);
/* A commit's hold on the store (a shared flock of its root, in any process), taken before it checks
 * that every chunk is stored (which refreshes their mtimes) and released after its link: a
 * collection takes its cutoff only while no commit holds one (store_gc.c). Returns what to pass to
 * kestrel__store_commit_release (-1: none, where the file system has no flock). */
int kestrel__store_commit_hold(kestrel__store *s);
/* 0 when every chunk of m is stored (each one's mtime refreshed: a push now relies on it), else
 * KESTREL_EINVALID naming the first missing one: a commit's check, before and under its hold. */
int kestrel__store_all_stored(kestrel__store *s, const Kestrel__V1__Manifest *m);
/* KESTREL_EINVALID "chunk HEX of the manifest is not stored (never sent, or collected since ...)": the
 * one wording of a commit that names a chunk the store lacks, which push.c's resend looks for. */
int kestrel__store_not_stored(const char *hex);
void kestrel__store_commit_release(int hold);

#endif

/* kestrel/repo.h - the model and dataset repository: content-defined chunks, deduplicated,
 * immutable versions (1, 2, 3, ...) and movable aliases ("latest" follows every push).
 *
 * Two doors to one store format: file:///abs/path URLs open the store in-process (no daemon;
 * several processes may share one directory, e.g. on NFS), http(s):// URLs talk to kestreld,
 * which asks for only the chunks it lacks and takes them in packs over parallel streams.
 *
 * Names: lowercase segments of [a-z0-9._-] (each starting with a letter or digit) joined by '/',
 * at most 200 bytes, e.g. "team/resnet". References: "name", "name@3", "name@production". */
#ifndef KESTREL_REPO_H
#define KESTREL_REPO_H

#include "common.h"
#include "buffer.h"
#include "client.h"

KESTREL_BEGIN_DECL

/** What a transfer is doing. */
typedef enum kestrel_transfer_phase_t {
    KESTREL_PHASE_PUSH = 1,   /**< chunking, hashing and storing new chunks */
    KESTREL_PHASE_PULL = 2    /**< fetching and verifying chunks */
} kestrel_transfer_phase_t;

/** Progress of a transfer. Library-filled; fields may be appended. */
typedef struct kestrel_progress {
    unsigned int version;
    int phase;                /**< kestrel_transfer_phase_t */
    int64_t bytes_done;       /**< bytes of the file processed so far */
    int64_t bytes_total;      /**< file size, -1 while unknown */
    int64_t bytes_new;        /**< push: chunk bytes the repository did not have yet */
    int64_t chunks_done;
    int64_t chunks_new;
} kestrel_progress;

/** Called on the caller's thread, at most every 100 ms plus once at the end. Non-zero cancels, except
 *  at the end: that report comes once the version is committed (push) or dest is in place (pull), and
 *  what it returns is ignored. While a push sends its chunks and commits to a kestreld, and while a
 *  pull fetches its version's manifest and its chunks, it comes about every 100 ms while bytes move
 *  and about every second while none do, so a cancel is seen within a second or so though a server
 *  stopped answering (those requests are given up, not waited on until they time out); bytes_total
 *  is -1 until the pull has the manifest. A push cancelled once its commit went out cannot know
 *  whether the version was made: its error message says that it may have been, and
 *  kestrel_error_outcome_unknown() is 1. */
typedef int KESTREL_CALLBACK(kestrel_progress_cb)(const kestrel_progress *progress, void *payload);

/** Options of push and pull. Initialise with KESTREL_TRANSFER_OPTIONS_INIT. */
typedef struct kestrel_transfer_options {
    unsigned int version;           /**< KESTREL_TRANSFER_OPTIONS_VERSION */
    kestrel_progress_cb progress;   /**< NULL: no progress */
    void *progress_payload;
    const char *metadata_json;      /**< push: a JSON object stored with the version (lineage) */
    const char *alias;              /**< push: also point this alias at the new version */
} kestrel_transfer_options;

#define KESTREL_TRANSFER_OPTIONS_VERSION 1
#define KESTREL_TRANSFER_OPTIONS_INIT { KESTREL_TRANSFER_OPTIONS_VERSION }

KESTREL_API int kestrel_transfer_options_init(kestrel_transfer_options *opts, unsigned int version);

/**
 * Push the file or directory at path as the next version of name. Chunks the repository already has
 * are not stored again; the version becomes visible only once everything it needs is stored. "latest"
 * moves to it. version_out (may be NULL) receives the new version number. A directory is stored as a
 * tree of its regular files (path, size, SHA-256, permission bits); symlinks, special files and an
 * empty directory are refused with KESTREL_EINVALID. To a kestreld that keeps commit keys (one as
 * new as this library), a commit whose answer is lost (a proxy's 502, 503 or 504, a connection
 * broken once it was sent) is sent again for about 25 s, after a timeout once, and a kestreld that
 * made the version answers it with that version. A push that still fails (or is cancelled) once its
 * commit went out unanswered says first in its error message that the version may have been made,
 * and kestrel_error_outcome_unknown() is then 1 (errors.h).
 */
KESTREL_API int kestrel_model_push(int64_t *version_out, kestrel_client *client, const char *name, const char *path,
                                   const kestrel_transfer_options *opts);

/**
 * Pull ref ("name", "name@N", "name@alias") into dest: every byte is verified (a file against its
 * whole digest, each chunk's own checked too when the whole does not match, to name the damaged one
 * as KESTREL_EPROTO; a directory's chunks, files and listing each against theirs); dest appears (by
 * rename) only complete and verified, never half-written; a file version is made with the mode any
 * new file gets (0666 less the umask), a directory version's files with their pushed modes less the umask. A directory
 * version becomes the directory dest (every file verified; an existing directory is replaced whole;
 * KESTREL_EEXISTS when dest is something else). A pull that runs out of space drops what only the
 * local pull cache holds on that disk and runs once more: ref is resolved again (name@latest may be
 * a newer version by then) and progress starts again from 0.
 */
KESTREL_API int kestrel_model_pull(kestrel_client *client, const char *ref, const char *dest,
                                   const kestrel_transfer_options *opts);

/** One version of a model. Library-filled; fields may be appended. */
typedef struct kestrel_model_version {
    unsigned int version_struct;
    int64_t version;
    int64_t size;             /**< bytes */
    const char *sha256;       /**< of the whole file, hex */
    int64_t created_ms;
    int64_t chunks;
    const char *aliases;      /**< comma-separated aliases pointing at it, "" none */
    const char *metadata_json;
} kestrel_model_version;

/** The versions of a model. Opaque. */
typedef struct kestrel_model_versions kestrel_model_versions;

/** List name's versions, oldest first. *out is owned: kestrel_model_versions_free(). */
KESTREL_API int kestrel_model_versions_get(kestrel_model_versions **out, kestrel_client *client, const char *name);
KESTREL_API size_t kestrel_model_versions_count(const kestrel_model_versions *list);
/** Version i (borrowed), or NULL. */
KESTREL_API const kestrel_model_version *kestrel_model_versions_at(const kestrel_model_versions *list, size_t i);
KESTREL_API void kestrel_model_versions_free(kestrel_model_versions *list);
/**
 * The one version ref names (NAME, NAME@N, NAME@latest, NAME@ALIAS) as a list of one:
 * kestrel_model_versions_at(*out, 0). It reads that version's listing alone, where
 * kestrel_model_versions_get reads every version's (a model of thousands). KESTREL_ENOTFOUND when
 * there is none. *out is owned: kestrel_model_versions_free(). Since KESTREL_1.7.
 */
KESTREL_API int kestrel_model_version_get(kestrel_model_versions **out, kestrel_client *client, const char *ref);

/** Fill out with the names of the models, one a line, sorted. */
KESTREL_API int kestrel_model_list(kestrel_buf *out, kestrel_client *client);
/** Point alias at version (which must exist). "latest" is moved by pushes and cannot be set. An alias
 * is a model name's segment (lowercase letters, digits, '.', '_', '-', starting with a letter) without
 * ".tmp.", which marks the store's temp files. */
KESTREL_API int kestrel_model_alias_set(kestrel_client *client, const char *name, const char *alias, int64_t version);
KESTREL_API int kestrel_model_alias_delete(kestrel_client *client, const char *name, const char *alias);
/** Delete a version (its aliases go with it; its chunks stay until a collection). */
KESTREL_API int kestrel_model_delete(kestrel_client *client, const char *name, int64_t version);
/**
 * Who may read a model on a kestreld: "all" (every authenticated user, the default), "team" (the
 * namespace's team and writers) or "private" (its writers). Writers of its namespace (the first
 * segment of the name: a user, a team, or jobs/<id>) and admins may change it. A file:// repository
 * has none (its files' modes decide): KESTREL_EUNSUPPORTED.
 */
KESTREL_API int kestrel_model_set_visibility(kestrel_client *client, const char *name, const char *visibility);

/** What a collection did. The caller sets version (KESTREL_REPO_GC_RESULT_INIT); fields may be
 *  appended, each filled only for a caller whose version knows it. */
typedef struct kestrel_repo_gc_result {
    unsigned int version;     /**< KESTREL_REPO_GC_RESULT_VERSION */
    int64_t chunks_live;      /**< chunk references in the committed versions */
    int64_t chunks_removed;
    int64_t temps_removed;    /**< temp files of killed writers */
    int64_t bytes_freed;
} kestrel_repo_gc_result;

#define KESTREL_REPO_GC_RESULT_VERSION 1
#define KESTREL_REPO_GC_RESULT_INIT { KESTREL_REPO_GC_RESULT_VERSION }

/**
 * Collect the repository: remove the chunks no version names once older than grace_s seconds (a
 * push in flight relies only on younger ones, or on ones it refreshed; its commit re-checks them),
 * and temp files of killed writers once older than grace_s and an hour. grace_s < 0: the
 * repository's own (kestreld's --repo-gc-grace; a file:// store: one hour). A file:// store is
 * collected by this process, safely beside pushes from other processes and hosts; a kestreld only
 * for an admin's token (KESTREL_EAUTH otherwise). out (may be NULL) receives what was done.
 */
KESTREL_API int kestrel_repo_gc(kestrel_client *client, int64_t grace_s, kestrel_repo_gc_result *out);

KESTREL_END_DECL

#endif

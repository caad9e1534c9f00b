/* server/repo_settle.h - whole-file digests settled after the commit.
 *
 * A push that asks for it (POST /api/v1/models/NAME/versions?settle=later, sent by a client that
 * kestreld's answer to missing told it may: ChunkQueryResult.settles_later) is committed without
 * hashing the files it would read back: their digests, and a directory's listing digest, stay
 * empty in the stored version (lib/repo/store_settle.c). They are settled afterwards:
 *  - on this module's thread, at idle priority (SCHED_IDLE), once the repository has been quiet
 *    (no pack begun, no commit) for KD_SETTLE_QUIET_MS, a version at a time in commit order; and
 *  - before any read of such a version (a pull's manifest, a listing, a job's inputs, a commit's
 *    answer sent again), on the reading thread, at its priority, if the thread has not yet.
 * No answer shows an empty digest for a version that can be settled; where it cannot (a chunk lost
 * or damaged since: fsck's to say), a read of that version fails with why, and listings show it as
 * stored. The hashing holds no lock: two may hash one version at once (the thread and a reader),
 * and the first to write wins; only the writes are kept apart from a delete of the version (which
 * takes kd_settle_lock). A kestreld killed before it settled a version settles it at the version's
 * first read after the restart. Why: kestreld hashed every new file twice (each chunk, to name and
 * check it, and the whole file), and on 2 cores that second pass held the push back from the disk's
 * speed; a push is now answered once its chunks are checked and durable. */
#ifndef KD_REPO_SETTLE_H
#define KD_REPO_SETTLE_H

#include <stdint.h>

struct kestrel__store;
struct kd_metrics;

#define KD_SETTLE_QUIET_MS 1000   /* the repository quiet this long: the thread settles */
#define KD_SETTLE_QUEUE 1024      /* versions waiting for the thread; past it, each waits for its first read */

typedef struct kd_settle kd_settle;

/* The thread started over store (NULL with the error set). */
kd_settle *kd_settle_new(struct kestrel__store *store, struct kd_metrics *metrics);
/* Stop the thread (it finishes the version it is hashing) and free. NULL: nothing. */
void kd_settle_free(kd_settle *st);
/* The repository is busy (a pack begins, a commit): the quiet period starts again. NULL: nothing. */
void kd_settle_stir(kd_settle *st);
/* name@version was committed with digests left to settle. */
void kd_settle_queue(kd_settle *st, const char *name, int64_t version);
/* 1 when name@version's listing shows digests left to settle; 0 else (also when there is no such
 * version: the read says so). NULL st: 0. */
int kd_settle_due(kd_settle *st, const char *name, int64_t version);
/* Before a read of name@version: settled now if its listing shows it unsettled. 0 (also when the
 * version does not exist: the read says so), or < 0 with the error set. NULL st: 0. */
int kd_settle_read(kd_settle *st, const char *name, int64_t version);
/* After a read that gave sha256 as name@version's digest: settled now when it is empty. 1 settled
 * (read it again), 0 nothing to do, < 0 with the error set. NULL st: 0. */
int kd_settle_seen(kd_settle *st, const char *name, int64_t version, const char *sha256);
/* 1 when a version of name waits for the thread or is being settled (what this kestreld committed
 * since it started: a version a killed one left unsettled is found by its read), else 0. */
int kd_settle_pending(kd_settle *st, const char *name);
/* Those of name's versions settled now (up to 64; the rest at their reads): 0, or < 0 with the error
 * of one that cannot be. For a listing of the model made on a thread of its own (api_defer.c), not
 * version by version on the HTTP thread as it is sent. */
int kd_settle_model(kd_settle *st, const char *name);
/* Keep settles from writing (a delete of a version). NULL: nothing. */
void kd_settle_lock(kd_settle *st);
void kd_settle_unlock(kd_settle *st);

#endif

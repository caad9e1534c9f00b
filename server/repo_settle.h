/* server/repo_settle.h - whole-file digests settled after the commit.
 *
 * A push that asks for it (POST /api/v1/models/NAME/versions?settle=later, sent by a client that
 * kestreld's answer to missing told it may: ChunkQueryResult.settles_later) is committed without
 * hashing the files it would read back: their digests, and a directory's listing digest, stay
 * empty in the stored version (lib/repo/store_settle.c). They are settled afterwards:
 *  - on this module's thread, at idle priority while it hashes (SCHED_IDLE; as root only: without
 *    root it could not be lifted back, and hashes at an ordinary one), once the repository has been quiet
 *    (no pack begun, no commit) for --settle-after or the oldest has waited 10 times that, a
 *    version at a time in commit order; and
 *  - before any read of such a version (a pull's manifest, a listing, a job's inputs), on the
 *    reading thread (a listing's and a manifest's on one of their own: api_defer.c), at its priority,
 *    if the thread has not yet.
 * No read shows an empty digest for a version that can be settled; where it cannot (a chunk lost or
 * damaged since: fsck's to say), a read of that version fails with why (its chunks' sizes are looked
 * at first: one quarantined by an earlier try fails it at once), and listings show it as stored. The
 * commit's own answer (and that of a commit sent again with its key) shows the digests the commit
 * left, empty: the client that asked does not read them. A reader of a version another reader is
 * hashing waits for it; one that finds the thread at it lifts the thread to its own priority and
 * waits (where the lift is refused, it hashes the version itself); only the writes are
 * kept apart from a delete of the version (which takes kd_settle_lock). A kestreld killed before it
 * settled a version settles it at the version's first read after the restart (so does one started
 * --settle-digests at-commit, which leaves none itself). A file:// reader of
 * its data dir (a copy of it) cannot settle one: it sees such a version as damaged until kestreld
 * settled it (--settle-digests at-commit where that matters). Every chunk is checked against its
 * name as it is read back, so a chunk damaged since it came is never hashed into a digest a pull
 * then trusts. Why: kestreld hashed every new file twice (each chunk, to name and check it, and the
 * whole file), and on 2 cores that second pass held the push back from the disk's speed; a push is
 * now answered once its chunks are checked and durable, and the commit still checks what it is
 * given, the chunks' sizes and the bound on what settling them will hash
 * (lib/repo/store_digests.c). */
#ifndef KD_REPO_SETTLE_H
#define KD_REPO_SETTLE_H

#include <stdint.h>

struct kestrel__store;
struct kd_metrics;
struct Kestrel__V1__Manifest;

/* The repository quiet for --settle-after (1000 ms by default): the thread settles; and a version
 * waits no longer than 10 times that for it (a busy repository, or one kept stirred on purpose). */
#define KD_SETTLE_QUEUE 1024       /* versions waiting for the thread at most */
#define KD_SETTLE_BACKLOG ((uint64_t)16 << 30)   /* bytes they leave to hash at most: past either, a
                                                    commit settles its digests itself (kd_settle_room) */

typedef struct kd_settle kd_settle;

/* Over store: offer (--settle-digests later) starts the thread and lets commits leave digests to
 * settle; without it, only what an earlier kestreld left is settled, at its read. NULL: out of memory
 * (the error set). */
kd_settle *kd_settle_new(struct kestrel__store *store, struct kd_metrics *metrics, int offer, int64_t quiet_ms);
/* Whether commits may leave digests to settle (a client is told settles_later). */
int kd_settle_offered(const kd_settle *st);
/* Stop the thread (it finishes the version it is hashing) and free. NULL: nothing. */
void kd_settle_free(kd_settle *st);
/* The repository is busy (a pack begins, a commit): the quiet period starts again. NULL: nothing. */
void kd_settle_stir(kd_settle *st);
/* 1 when a commit may leave `bytes` to hash after it: the queue and the backlog have room (a user
 * who commits versions of hand-made manifests that name stored chunks, 27 ms each, would otherwise
 * pile up hashing without end; at-commit made each wait for its own); 0: it settles them itself. */
int kd_settle_room(kd_settle *st, uint64_t bytes);
/* name@version was committed with `bytes` left to settle. */
void kd_settle_queue(kd_settle *st, const char *name, int64_t version, uint64_t bytes);
/* 1 when name@version's listing shows digests left to settle; 0 else (also when there is no such
 * version: the read says so). NULL st: 0. */
int kd_settle_due(kd_settle *st, const char *name, int64_t version);
/* Before a read of name@version: settled now if its listing shows it unsettled. 0 (also when the
 * version does not exist: the read says so), or < 0 with the error set. NULL st: 0. */
int kd_settle_read(kd_settle *st, const char *name, int64_t version);
/* The same, giving the settled manifest in *keep when this call settled it (NULL: settled already,
 * or by another: read it), also where it could not be written (a full disk): the read is answered
 * from it, and the version settles again at its next read. */
int kd_settle_read_keep(kd_settle *st, const char *name, int64_t version, struct Kestrel__V1__Manifest **keep);
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

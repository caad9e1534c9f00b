/* server/repo_runs.h - a file's whole SHA-256, computed while its chunks stream in.
 *
 * A push sends a big file's new chunks in file order, in packs that name one run
 * (POST /api/v1/chunks/pack?run=ID&at=BYTES: ID 32 hex digits the client picked, BYTES the run's
 * length before this pack). Each chunk of such a pack that the server verified also advances the
 * run's SHA-256, on a helper thread of the pack beside the verification (which may also store
 * it: kd_run_chunk_fn). A commit whose file is exactly a run's chunks takes the
 * file's digest from the run instead of reading those chunks back and hashing them after the
 * upload: the server computed it from bytes it verified itself, so nothing is taken on the
 * client's word. A run is the user's who started it, used once, and the table is bounded (1024
 * runs; the least recently used gives way); without a run, the commit reads back a file of
 * several chunks (a file of one chunk has that chunk's digest). */
#ifndef KD_REPO_RUNS_H
#define KD_REPO_RUNS_H

#include <stddef.h>
#include <stdint.h>
#include <kestrel/buffer.h>
#include "chunk.h"

typedef struct kd_runs kd_runs;
typedef struct kd_run_feed kd_run_feed;

/* The chunk buffers a pack with a run may have at once: its own, and those it handed the helper
 * (queued, or hashed and not yet stored and taken back). KD_RUN_BUFFERS where a user's quarter of the
 * upload budget (upload_mem.h) holds KD_RUN_DEEP_ROOM beside the largest body decoded, as kestreld's
 * default budget does, else KD_RUN_BUFFERS_LEAST (repo_pack.c): the receiving thread runs up to 15
 * chunks ahead of the helper, not 4, and neither waits on the other's short stalls (a file created,
 * a page allocated). A new 1 GiB push, alternated with the same
 * kestreld at 5 over 6 or 8 rounds: medians 1.90-2.02 s against 1.95-2.16 s in five runs; of the
 * 22 rounds compared one by one, 21 faster and one even (8 buffers did less; 32 and 48 no better).
 * With the ring full, the receiving thread stores chunks the helper has not come to rather than
 * wait (kd_run_feed_chunk): the same push, alternated with the kestreld that waited, over 6, 8 and
 * 6 rounds: medians 1.87, 1.97 and 1.96 s against 1.97, 1.99 and 2.03 s (a second helper thread
 * for the stores instead did worse: 2.16 s against 2.05 s). */
#define KD_RUN_BUFFERS 16
#define KD_RUN_BUFFERS_LEAST 5
/* What one push's packs may hold at once with runs KD_RUN_BUFFERS deep: the run's buffers, one each
 * for up to 3 packs beside it (a client sends on 4 streams) and one more for the digests a pack of
 * unnamed chunks is answered, each at FastCDC's largest chunk and its NUL. With runs
 * KD_RUN_BUFFERS_LEAST deep, main.c's least budget counts KD_RUN_LEAST_ROOM for a push's packs, not
 * the digests (at most 512 KiB), which test_bounded's push under that budget shows is enough (a pack
 * past the quarter is a 503 the client sends again). */
#define KD_RUN_DEEP_ROOM ((uint64_t)(KD_RUN_BUFFERS + 4) * (KESTREL__CHUNK_MAX + 1))
/* The same with runs KD_RUN_BUFFERS_LEAST deep, as main.c's least budget counts it: the run's
 * buffers and 3 packs beside it, at FastCDC's largest chunk (8 MiB). */
#define KD_RUN_LEAST_ROOM ((uint64_t)(KD_RUN_BUFFERS_LEAST + 3) * KESTREL__CHUNK_MAX)
/* The least upload budget (--max-upload-memory) that runs packs KD_RUN_BUFFERS deep beside bodies of
 * up to `body` bytes: a user's quarter holds the largest body with what it takes decoded (5 times
 * it in all) and one push's packs. main.c's default, and repo_pack.c's choice of depth. */
#define KD_RUN_DEEP_BUDGET(body) (4 * (5 * (uint64_t)(body) + KD_RUN_DEEP_ROOM))

kd_runs *kd_runs_new(void);
void kd_runs_free(kd_runs *runs);
/* What the pack does with each chunk beside hashing it (repo_pack.c stores it): called once for each
 * chunk fed, with the tag it was fed with (opaque here, handed back), on the run's helper thread
 * before it hashes that chunk, or on the thread that feeds the pack, which stores the newest chunks
 * the helper has not come to when it finds the helper a full ring behind, rather than wait, and at
 * the pack's end (so not in order, and up to two calls at once; never two at once for chunks of the
 * same digest). One that returns < 0 drops the run; the chunks after it get no call, but the other
 * thread may start calls until the failing one's thread has taken its answer in (fewer than a ring:
 * repo_pack.c's refuses those itself). */
typedef int (*kd_run_chunk_fn)(void *ctx, const char *hex, const kestrel_buf *chunk, int tag);
/* A pack of run id (user's) starting at byte `at` of it: at 0 starts the run (again), else it must
 * continue where the run's last pack ended; with `buffers` (2 to KD_RUN_BUFFERS) chunk buffers, one
 * of them the pack's own; fn (NULL: none) with ctx as above. whole 0 (?whole=0: a push whose commit
 * settles its digests later, repo_settle.h): the helper stores the chunks in order and does not hash
 * the file, and no commit takes the run; a run's packs all ask the same. NULL: no run for
 * this pack (an id that is not 32 hex digits, a run to continue that is not there or not at `at`,
 * one busy with another pack, memory); the pack is stored all the same. */
kd_run_feed *kd_run_feed_begin(kd_runs *runs, int64_t user, const char *id, int64_t at, unsigned buffers,
                               int whole, kd_run_chunk_fn fn, void *ctx);
/* A chunk of the pack, verified: its digest and bytes. The bytes go to the helper: *chunk is
 * swapped for a buffer the helper is done with (empty), so no chunk is copied. With the ring full,
 * calls fn on chunks the helper has not come to until a buffer is free (see kd_run_chunk_fn). */
void kd_run_feed_chunk(kd_run_feed *f, const char *hex, kestrel_buf *chunk, int tag);
/* The pack ended (ok: every chunk verified): the run keeps what it was fed, or is dropped. Stores the
 * chunks the helper has not come to (as kd_run_feed_chunk does with the ring full), then waits for
 * the helper, its last call of the chunk function returned; frees f. */
void kd_run_feed_end(kd_run_feed *f, int ok);
/* When a run of user holds exactly the chunks (hex[i], size[i]), i < k, in this order: 1 with
 * their SHA-256 in out, and the run is used up; else 0. */
int kd_runs_take(kd_runs *runs, int64_t user, char *const *hex, const int64_t *size, size_t k, char out[65]);

#endif

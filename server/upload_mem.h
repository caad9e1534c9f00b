/* server/upload_mem.h - how much of kestreld's memory request bodies may hold at once.
 *
 * A body kestreld keeps while it reads it (a manifest, a job spec: up to --max-body or
 * --max-manifest), the chunk buffers of a streamed pack, the buffer of a batch of chunks being
 * answered and the copy of an answer of 1 MiB or more (held until the client reads it) are taken
 * from one budget (--max-upload-memory), of which one user may hold a quarter; a console form
 * (8 KiB at most) is outside it. A request that would pass either
 * is answered 503 "unavailable" (before its body is read; a pack, or a body sent without a length,
 * may be cut off later, what came dropped) and changes nothing: the client tries again shortly.
 * Without the bound, 200 packs stalled halfway through a chunk held 820 MiB (found by a hostile
 * test), and a user's stalled bodies as much as they pleased. Thread-safe. */
#ifndef KD_UPLOAD_MEM_H
#define KD_UPLOAD_MEM_H

#include <stddef.h>
#include <stdint.h>
#include <kestrel/buffer.h>

typedef struct kd_upload_mem kd_upload_mem;

/* A budget of total bytes, a quarter of them per user. NULL: out of memory. */
kd_upload_mem *kd_upload_mem_new(uint64_t total);
void kd_upload_mem_free(kd_upload_mem *m);
/* Take bytes for user: 0, or -1 (nothing taken) when the user's quarter or the whole would pass. */
int kd_upload_mem_take(kd_upload_mem *m, int64_t user, uint64_t bytes);
/* Give back bytes user took (NULL m or 0 bytes: nothing). */
void kd_upload_mem_give(kd_upload_mem *m, int64_t user, uint64_t bytes);
/* The budget: what it was made with (fixed; no lock taken). */
uint64_t kd_upload_mem_total(const kd_upload_mem *m);
/* What user holds, what all hold, and the budget (for messages; all 0 for a NULL m). */
void kd_upload_mem_state(kd_upload_mem *m, int64_t user, uint64_t *mine, uint64_t *held, uint64_t *total);
/* Make buf hold at least n bytes (and a NUL) on the *held bytes user took for it: its memory is
 * grown to exactly what *held pays for (doubling, for a body that comes without a length, but never
 * past cap bytes) and the difference taken. 0; -1 when the budget refuses it, KESTREL_ENOMEM when
 * memory ran out (buf and *held as they were). m NULL: no budget, buf grown all the same. */
int kd_upload_mem_fit(kd_upload_mem *m, int64_t user, uint64_t *held, kestrel_buf *buf, uint64_t n, int doubling,
                      uint64_t cap);

#endif

/* kestrel/queue.h - the scheduling queue: order, reasons, priority changes, checkpoint acks. */
#ifndef KESTREL_QUEUE_H
#define KESTREL_QUEUE_H

#include "common.h"
#include "buffer.h"
#include "client.h"
#include "job.h"

KESTREL_BEGIN_DECL

/**
 * Why a job is where it is. position_out (may be NULL) receives its 1-based place in the
 * queue (0 when not queued); reason_out (may be NULL) is filled with one line, e.g.
 * "needs 4 x a100 in pool enterprise: at most 2 free on a node; waiting for job 41 (after_ok)".
 */
KESTREL_API int kestrel_job_explain(kestrel_buf *reason_out, int *position_out, kestrel_client *client, int64_t id);

/** Change the class of a QUEUED job (KESTREL_EEXISTS when it is not queued; KESTREL_EAUTH for a class
 * above what kestreld lets the caller give, --max-priority). *out (owned, may be NULL). */
KESTREL_API int kestrel_job_set_priority(kestrel_job **out, kestrel_client *client, int64_t id, int priority);

/**
 * Tell the server the job saved a checkpoint (usually from inside the job with its own token,
 * after SIGTERM or after any save). The scheduler prefers victims that lose the least work.
 * KESTREL_EEXISTS when the job is not running.
 */
KESTREL_API int kestrel_job_ack_preempt(kestrel_client *client, int64_t id);

/** The queue as the scheduler last ordered it. Opaque. */
typedef struct kestrel_queue kestrel_queue;

/** Fetch your queued jobs in scheduling order. *out is owned: kestrel_queue_free(). */
KESTREL_API int kestrel_queue_get(kestrel_queue **out, kestrel_client *client);
KESTREL_API size_t kestrel_queue_count(const kestrel_queue *queue);
/** Entry i's job (borrowed from queue), or NULL. */
KESTREL_API const kestrel_job *kestrel_queue_job(const kestrel_queue *queue, size_t i);
/** Entry i's place in the whole queue (others' jobs count too), 0 when out of range. */
KESTREL_API int kestrel_queue_position(const kestrel_queue *queue, size_t i);
/** Entry i's reason to wait (borrowed), "" when out of range. */
KESTREL_API const char *kestrel_queue_reason(const kestrel_queue *queue, size_t i);
KESTREL_API void kestrel_queue_free(kestrel_queue *queue);

KESTREL_END_DECL

#endif

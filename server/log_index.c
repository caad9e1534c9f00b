/* server/log_index.c - kestreld's log indexer: a thread that moves the lines the write path queued
 * (log_pending) into the search index (log_fts) in batches, so a job's output is stored at the
 * speed of an append and searchable about a second later (searches read the queue too, so
 * nothing is missed meanwhile). Each batch is one transaction under the catalog's lock, short
 * enough (a few ms) not to hold up requests; at stop the queue is drained (bounded in time: what
 * is left is indexed after the next start). Nothing is indexed while the data disk has less than
 * its floor free (job_disk.h): the index grows as the lines did, and filled a disk's last bytes
 * after the lines stopped at the floor; the queue waits for room, searched as it is. */
#include <stdio.h>
#include <stdlib.h>
#include "engine.h"
#include "job_disk.h"
#include "log_index.h"
#include "worker.h"

#define BATCH 2000             /* lines a transaction (a few ms under the catalog's lock) */
#define PERIOD_MS 100
#define TICK_MS 2000           /* a tick drains the queue for at most this long (a stop waits for it) */
#define DRAIN_MS 10000

struct kd_indexer {
    kd_engine *e;
    kd_worker w;
};

static void drain(kd_engine *e, int64_t until_ms)
{
    int n = 0;
    while (!kd_job_disk_low(e) && (n = kd_catalog_log_index(e->cat, BATCH)) == BATCH && kestrel__now_ms() < until_ms)
        ;
    if (n < 0)
        fprintf(stderr, "kestreld: log index: %s\n", kestrel_error_last()->message);
}

static void tick(void *ctx)
{
    struct kd_indexer *ix = ctx;
    drain(ix->e, kestrel__now_ms() + TICK_MS);
}

int kd_indexer_start(kd_engine *e)
{
    struct kd_indexer *ix = calloc(1, sizeof(*ix));
    if (ix == NULL)
        return kestrel__error_oom();
    ix->e = e;
    if (kd_worker_start(&ix->w, PERIOD_MS, tick, ix, "log indexer") < 0) {
        free(ix);
        return KESTREL_ERROR;
    }
    e->indexer = ix;
    return 0;
}

void kd_indexer_stop(kd_engine *e)
{
    struct kd_indexer *ix = e->indexer;
    if (ix == NULL)
        return;
    kd_worker_fini(&ix->w);
    drain(e, kestrel__now_ms() + DRAIN_MS);
    free(ix);
    e->indexer = NULL;
}

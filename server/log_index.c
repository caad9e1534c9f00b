/* server/log_index.c - kestreld's log indexer: a thread that moves the lines the write path queued
 * (log_pending) into the search index (log_fts) in batches, so a job's output is stored at the
 * speed of an append and searchable about a second later (searches read the queue too, so
 * nothing is missed meanwhile). Each batch is one transaction under the catalog's lock, short
 * enough (a few ms) not to hold up requests; at stop the queue is drained (bounded in time: what
 * is left is indexed after the next start). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "engine.h"
#include "log_index.h"

#define BATCH 2000
#define PERIOD_MS 250
#define DRAIN_MS 10000

struct kd_indexer {
    kd_engine *e;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
};

static void drain(kd_engine *e, int64_t until_ms)
{
    int n;
    while ((n = kd_catalog_log_index(e->cat, BATCH)) == BATCH && kestrel__now_ms() < until_ms)
        ;
    if (n < 0)
        fprintf(stderr, "kestreld: log index: %s\n", kestrel_error_last()->message);
}

static void *run(void *arg)
{
    struct kd_indexer *ix = arg;
    struct timespec ts;
    pthread_mutex_lock(&ix->mu);
    while (!ix->stop) {
        int64_t at = kestrel__now_ms() + PERIOD_MS;
        ts.tv_sec = at / 1000;
        ts.tv_nsec = (at % 1000) * 1000000;
        while (!ix->stop && pthread_cond_timedwait(&ix->cv, &ix->mu, &ts) == 0)
            ;
        if (ix->stop)
            break;
        pthread_mutex_unlock(&ix->mu);
        drain(ix->e, kestrel__now_ms() + PERIOD_MS * 4);
        pthread_mutex_lock(&ix->mu);
    }
    pthread_mutex_unlock(&ix->mu);
    return NULL;
}

int kd_indexer_start(kd_engine *e)
{
    struct kd_indexer *ix = calloc(1, sizeof(*ix));
    if (ix == NULL)
        return kestrel__error_oom();
    ix->e = e;
    pthread_mutex_init(&ix->mu, NULL);
    pthread_cond_init(&ix->cv, NULL);
    if (pthread_create(&ix->thread, NULL, run, ix) != 0) {
        pthread_cond_destroy(&ix->cv);
        pthread_mutex_destroy(&ix->mu);
        free(ix);
        return kestrel__error_set(KESTREL_ERROR, "cannot start the log indexer thread");
    }
    e->indexer = ix;
    return 0;
}

void kd_indexer_stop(kd_engine *e)
{
    struct kd_indexer *ix = e->indexer;
    if (ix == NULL)
        return;
    pthread_mutex_lock(&ix->mu);
    ix->stop = 1;
    pthread_cond_signal(&ix->cv);
    pthread_mutex_unlock(&ix->mu);
    pthread_join(ix->thread, NULL);
    drain(e, kestrel__now_ms() + DRAIN_MS);
    pthread_cond_destroy(&ix->cv);
    pthread_mutex_destroy(&ix->mu);
    free(ix);
    e->indexer = NULL;
}

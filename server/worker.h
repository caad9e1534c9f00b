/* server/worker.h - a background thread that runs a function every period, or sooner when kicked,
 * until stopped (the GPU sampler, the log indexer, the webhook sender). */
#ifndef KD_WORKER_H
#define KD_WORKER_H

#include <pthread.h>
#include <stdint.h>

typedef struct kd_worker {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop, kicked, running, made;
    int64_t period_ms;
    void (*fn)(void *ctx);
    void *ctx;
} kd_worker;

/* Start calling fn(ctx) every period_ms (its first call after one period). 0, or < 0 with the error. */
int kd_worker_start(kd_worker *w, int64_t period_ms, void (*fn)(void *ctx), void *ctx, const char *what);
/* Run fn now rather than at the end of the period. */
void kd_worker_kick(kd_worker *w);
/* Stop and join (a call of fn in progress finishes first). No-op on a worker never started or
 * stopped already; a kick after it does nothing. */
void kd_worker_stop(kd_worker *w);
/* Stop, then free the lock (nothing may kick it after this). */
void kd_worker_fini(kd_worker *w);

#endif

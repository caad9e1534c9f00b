/* server/worker.c - periodic background threads (see worker.h). */
#include <stdlib.h>
#include <time.h>
#include "internal.h"
#include "worker.h"

static void *run(void *arg)
{
    kd_worker *w = arg;
    struct timespec ts;
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        int64_t at = kestrel__now_ms() + w->period_ms;   /* CLOCK_REALTIME, the condvar's clock */
        ts.tv_sec = at / 1000;
        ts.tv_nsec = (at % 1000) * 1000000;
        while (!w->stop && !w->kicked && pthread_cond_timedwait(&w->cv, &w->mu, &ts) == 0)
            ;
        w->kicked = 0;
        if (w->stop)
            break;
        pthread_mutex_unlock(&w->mu);
        w->fn(w->ctx);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int kd_worker_start(kd_worker *w, int64_t period_ms, void (*fn)(void *ctx), void *ctx, const char *what)
{
    w->stop = w->kicked = 0;
    w->period_ms = period_ms;
    w->fn = fn;
    w->ctx = ctx;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->thread, NULL, run, w) != 0) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        return kestrel__error_set(KESTREL_ERROR, "cannot start the %s thread", what);
    }
    w->running = 1;
    return 0;
}

void kd_worker_kick(kd_worker *w)
{
    if (!w->running)
        return;
    pthread_mutex_lock(&w->mu);
    w->kicked = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

void kd_worker_stop(kd_worker *w)
{
    if (!w->running)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    w->running = 0;
}

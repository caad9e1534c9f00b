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
    w->made = 1;
    w->running = 1;   /* before the thread: a kick may come at once */
    if (pthread_create(&w->thread, NULL, run, w) != 0) {
        w->running = 0;
        kd_worker_fini(w);
        return kestrel__error_set(KESTREL_ERROR, "cannot start the %s thread", what);
    }
    return 0;
}

void kd_worker_kick(kd_worker *w)
{
    if (!w->made)
        return;
    pthread_mutex_lock(&w->mu);   /* valid until kd_worker_fini, so a late kick is harmless */
    if (w->running) {
        w->kicked = 1;
        pthread_cond_signal(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
}

void kd_worker_stop(kd_worker *w)
{
    int running;
    if (!w->made)
        return;
    pthread_mutex_lock(&w->mu);
    running = w->running;
    w->stop = 1;
    w->running = 0;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (running)
        pthread_join(w->thread, NULL);
}

void kd_worker_fini(kd_worker *w)
{
    kd_worker_stop(w);
    if (!w->made)
        return;
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    w->made = 0;
}

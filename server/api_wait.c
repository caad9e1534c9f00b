/* server/api_wait.c - long polls (GET /jobs/{id}?wait_ms, /logs?wait_ms) as suspended connections:
 * a request that must wait is suspended (it holds no thread of the pool), and one waker thread
 * resumes it when the engine's state changes or its deadline passes; the handler then runs again
 * from the top with the same deadline. */
#include <pthread.h>
#include <stdlib.h>
#include "api.h"

#define WAKE_MS 50   /* how often deadlines are checked when nothing changes */

struct kd_waiters {
    pthread_mutex_t mu;
    kd_req *head;
    kd_engine *e;
    pthread_t thread;
    int running, stop;
};

static void resume_matching(kd_waiters *w, uint64_t gen, int64_t now, int all)
{
    pthread_mutex_lock(&w->mu);
    for (kd_req **p = &w->head; *p;) {
        kd_req *r = *p;
        if (all || r->wait_gen != gen || now >= r->deadline) {
            *p = r->wait_next;
            r->wait_next = NULL;
            r->suspended = 0;
            r->resumed = 1;
            MHD_resume_connection(r->conn);
        } else {
            p = &r->wait_next;
        }
    }
    pthread_mutex_unlock(&w->mu);
}

static void *waker(void *arg)
{
    kd_waiters *w = arg;
    uint64_t gen = kd_engine_generation(w->e);
    for (;;) {
        int stop;
        kd_engine_wait(w->e, gen, kestrel__now_ms() + WAKE_MS);
        gen = kd_engine_generation(w->e);
        pthread_mutex_lock(&w->mu);
        stop = w->stop;
        pthread_mutex_unlock(&w->mu);
        resume_matching(w, gen, kestrel__now_ms(), stop || w->e->stopping);
        if (stop)
            return NULL;
    }
}

int kd_waiters_start(kd_waiters **out, kd_engine *e)
{
    kd_waiters *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return kestrel__error_oom();
    pthread_mutex_init(&w->mu, NULL);
    w->e = e;
    if (pthread_create(&w->thread, NULL, waker, w) != 0) {
        pthread_mutex_destroy(&w->mu);
        free(w);
        return kestrel__error_set(KESTREL_ERROR, "cannot start the long-poll waker");
    }
    w->running = 1;
    *out = w;
    return 0;
}

/* Resume every waiting request (each answers with what it has) and end the waker. */
void kd_waiters_stop(kd_waiters *w)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_mutex_unlock(&w->mu);
    kd_engine_changed(w->e);
    if (w->running)
        pthread_join(w->thread, NULL);
    resume_matching(w, 0, 0, 1);
}

void kd_waiters_free(kd_waiters *w)
{
    if (w == NULL)
        return;
    pthread_mutex_destroy(&w->mu);
    free(w);
}

int kd_wait_suspend(kd_req *r, uint64_t seen)
{
    kd_waiters *w = r->waiters;
    pthread_mutex_lock(&w->mu);
    if (w->stop) {   /* stopping: the caller answers now with what there is */
        pthread_mutex_unlock(&w->mu);
        r->deadline = kestrel__now_ms();
        return 0;
    }
    r->wait_gen = seen;
    r->suspended = 1;
    r->wait_next = w->head;
    w->head = r;
    MHD_suspend_connection(r->conn);
    pthread_mutex_unlock(&w->mu);
    return 1;
}

void kd_wait_forget(kd_req *r)
{
    kd_waiters *w = r->waiters;
    if (w == NULL || !r->suspended)
        return;
    pthread_mutex_lock(&w->mu);
    for (kd_req **p = &w->head; *p; p = &(*p)->wait_next)
        if (*p == r) {
            *p = r->wait_next;
            break;
        }
    r->suspended = 0;
    pthread_mutex_unlock(&w->mu);
}

int64_t kd_wait_deadline(kd_req *r, long long wait_ms)
{
    if (r->deadline == 0)
        r->deadline = kestrel__now_ms() + wait_ms;
    return r->deadline;
}

/* server/api_defer.c - a handler that takes seconds (a commit reads back and hashes files and
 * syncs the store; a collection, fsck and a backup walk the whole store) runs on a thread of its
 * own while its connection is suspended: on the HTTP thread it would hold up every other
 * connection that thread serves (an eighth of them with the default 8 threads; all of them with
 * --http-threads 1). Its reply is made on that thread and queued once the connection is resumed
 * (api.c: on_request). At most KD_DEFER_MAX (api.h) at once; past that, and once the daemon stops, a handler
 * runs where it is called, as before. */
#include <pthread.h>
#include <stdlib.h>
#include "api.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle = PTHREAD_COND_INITIALIZER;
static int running, stopping;   /* stopping: none is deferred any more (the daemon is about to stop) */

typedef struct {
    kd_req *r;
    kd_route_fn route;   /* or work(r, arg) */
    kd_deferred_fn work;
    void *arg;
} job;

/* The handler's call: its reply is kept in r (send_bytes) when deferred, else returned. */
static enum MHD_Result run(const job *j)
{
    return j->route ? j->route(j->r) : j->work(j->r, j->arg);
}

static void *worker(void *p)
{
    job *j = p;
    kd_req *r = j->r;
    r->deferred_rc = run(j);
    free(j);
    r->deferring = 0;
    r->deferred_done = 1;
    r->resumed = 1;
    MHD_resume_connection(r->conn);
    pthread_mutex_lock(&mu);
    if (--running == 0)
        pthread_cond_broadcast(&idle);
    pthread_mutex_unlock(&mu);
    return NULL;
}

static enum MHD_Result defer(job j)
{
    job *copy = NULL;
    pthread_attr_t attr;
    pthread_t th;
    int made;
    pthread_mutex_lock(&mu);
    if (!stopping && running < KD_DEFER_MAX && (copy = malloc(sizeof(*copy))) != NULL) {
        *copy = j;
        running++;
        j.r->deferring = 1;
        MHD_suspend_connection(j.r->conn);   /* before the worker may resume it */
    }
    pthread_mutex_unlock(&mu);
    if (copy == NULL)   /* here, as before (a review: one deferred while the daemon stops would abort its stop) */
        return run(&j);
    made = pthread_attr_init(&attr) == 0;
    if (!made || pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) != 0 ||
        pthread_create(&th, &attr, worker, copy) != 0)
        worker(copy);   /* no thread: here, by the same path (its reply queued once resumed) */
    if (made)
        pthread_attr_destroy(&attr);
    return MHD_YES;
}

enum MHD_Result kd_defer(kd_req *r, kd_deferred_fn work, void *arg)
{
    return defer((job){ r, NULL, work, arg });
}

enum MHD_Result kd_defer_route(kd_req *r, kd_route_fn route)
{
    return defer((job){ r, route, NULL, NULL });
}

enum MHD_Result kd_defer_reply(kd_req *r)
{
    enum MHD_Result ok = MHD_NO;
    r->deferred_done = 0;
    if (r->deferred) {
        if ((ok = MHD_queue_response(r->conn, r->deferred_status, r->deferred)) == MHD_YES)
            r->status = r->deferred_status;
        MHD_destroy_response(r->deferred);
        r->deferred = NULL;
    }
    return r->deferred_rc == MHD_YES ? ok : MHD_NO;
}

void kd_defer_drain(void)
{
    pthread_mutex_lock(&mu);
    stopping = 1;
    while (running > 0)
        pthread_cond_wait(&idle, &mu);
    pthread_mutex_unlock(&mu);
}

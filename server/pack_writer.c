/* server/pack_writer.c - a run pack's writer threads (see pack_writer.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pack_writer.h"
#include "repo.h"

#define DEPTH 4     /* chunks the receiving thread may hand over ahead of the writers */
#define WRITERS 2   /* chunks written at once: each write waits for the disk, two keep it busy */

typedef struct {
    kd_pack_writer *w;
    kestrel__store_scratch scratch;   /* this thread's aligned buffer */
    pthread_t th;
    int started;
} writer;

struct kd_pack_writer {
    kestrel__store *store;
    writer t[WRITERS];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    kestrel_buf q[DEPTH];   /* ring: [head, head + n) to write */
    char hex[DEPTH][65];
    size_t head, n;
    kestrel_buf spare[DEPTH + WRITERS + 1];   /* written, ready to be handed back */
    size_t nspare;
    int closing, failed, full;
    char error[256];
};

static void *writer_main(void *arg)
{
    writer *me = arg;
    kd_pack_writer *w = me->w;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        kestrel_buf b;
        char hex[65];
        while (w->n == 0 && !w->closing)
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->n == 0)
            break;
        b = w->q[w->head];
        memcpy(hex, w->hex[w->head], sizeof(hex));
        w->head = (w->head + 1) % DEPTH;
        w->n--;
        pthread_cond_broadcast(&w->cv);   /* room for the receiver */
        if (!w->failed) {
            int rc;
            pthread_mutex_unlock(&w->mu);
            rc = kestrel__store_put_chunk_direct(w->store, hex, b.ptr ? b.ptr : "", b.size, &me->scratch);
            pthread_mutex_lock(&w->mu);
            if (rc < 0 && !w->failed) {
                const char *m = kestrel_error_last()->message;
                snprintf(w->error, sizeof(w->error), "%s", m);
                w->full = kestrel__store_error_full(m);
                w->failed = 1;
            }
        }
        b.size = 0;
        w->spare[w->nspare++] = b;
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static void stop(kd_pack_writer *w)
{
    pthread_mutex_lock(&w->mu);
    w->closing = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    for (int i = 0; i < WRITERS; i++)
        if (w->t[i].started)
            pthread_join(w->t[i].th, NULL);
    for (int i = 0; i < WRITERS; i++)
        free(w->t[i].scratch.ptr);
    for (size_t i = 0; i < w->nspare; i++)
        kestrel_buf_dispose(&w->spare[i]);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
}

kd_pack_writer *kd_pack_writer_start(kestrel__store *store)
{
    kd_pack_writer *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return NULL;
    w->store = store;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    for (int i = 0; i < WRITERS; i++) {
        w->t[i].w = w;
        if (pthread_create(&w->t[i].th, NULL, writer_main, &w->t[i]) != 0) {
            stop(w);
            free(w);
            return NULL;
        }
        w->t[i].started = 1;
    }
    return w;
}

int kd_pack_writer_put(kd_pack_writer *w, const char *hex, kestrel_buf *chunk)
{
    kestrel_buf fresh = KESTREL_BUF_INIT;
    size_t at;
    int failed;
    pthread_mutex_lock(&w->mu);
    while (w->n == DEPTH)
        pthread_cond_wait(&w->cv, &w->mu);
    at = (w->head + w->n) % DEPTH;
    w->q[at] = *chunk;
    snprintf(w->hex[at], sizeof(w->hex[at]), "%s", hex);
    w->n++;
    if (w->nspare)
        fresh = w->spare[--w->nspare];
    failed = w->failed;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    *chunk = fresh;   /* a buffer already grown to a chunk's size, or a new one */
    return failed ? -1 : 0;
}

int kd_pack_writer_end(kd_pack_writer *w, char *err, size_t n, int *full)
{
    int failed;
    stop(w);
    failed = w->failed;
    if (failed) {
        snprintf(err, n, "%s", w->error);
        *full = w->full;
    }
    free(w);
    return failed ? -1 : 0;
}

/* server/repo_settle.c - whole-file digests settled after the commit: the thread that settles them
 * once the repository is quiet, and the settle a read makes first (repo_settle.h). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include "metrics.h"
#include "repo_settle.h"
#include "repo.h"
#include "store.h"

typedef struct {
    char *name;
    int64_t version;
} waiting;

struct kd_settle {
    kestrel__store *store;
    kd_metrics *metrics;
    pthread_mutex_t lock;       /* the queue, the stir and stop */
    pthread_cond_t wake;
    pthread_mutex_t writing;    /* a settle's writes, or a delete (kd_settle_lock) */
    waiting queue[KD_SETTLE_QUEUE];
    size_t head, n;
    int64_t stirred_ms;         /* the repository's last pack or commit (monotonic) */
    int stop;
    pthread_t thread;
};

/* Hash and write name@version's digests: 0 (also when gone: the read says so), < 0 with the error. */
static int settle_one(kd_settle *st, const char *name, int64_t version)
{
    Kestrel__V1__Manifest *m = NULL;
    uint64_t hashed = 0;
    int rc = kestrel__store_settle_hash(st->store, name, version, &m, &hashed);
    if (rc == 0) {
        pthread_mutex_lock(&st->writing);
        rc = kestrel__store_settle_write(st->store, m);
        pthread_mutex_unlock(&st->writing);
        kestrel__manifest_free(m);
    }
    if (rc == 0 && hashed)
        kd_metrics_repo_digests(st->metrics, KD_DIGEST_LATER, hashed);
    if (rc == KESTREL_ENOTFOUND) {   /* deleted meanwhile */
        kestrel_error_clear();
        rc = 0;
    }
    return rc;
}

static void *settle_main(void *arg)
{
    kd_settle *st = arg;
    struct sched_param none = { 0 };
    if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &none) != 0)   /* only what no one else wants */
        (void)setpriority(PRIO_PROCESS, 0, 19);
    pthread_mutex_lock(&st->lock);
    for (;;) {
        int64_t quiet;
        waiting w;
        while (!st->stop && st->n == 0)
            pthread_cond_wait(&st->wake, &st->lock);
        if (st->stop)
            break;
        if ((quiet = kestrel__mono_ms() - st->stirred_ms) < KD_SETTLE_QUIET_MS) {
            struct timespec until;
            int64_t wait_ms = KD_SETTLE_QUIET_MS - quiet;
            clock_gettime(CLOCK_MONOTONIC, &until);
            until.tv_sec += wait_ms / 1000;
            until.tv_nsec += (wait_ms % 1000) * 1000000L;
            if (until.tv_nsec >= 1000000000L) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&st->wake, &st->lock, &until);
            continue;
        }
        w = st->queue[st->head];
        st->head = (st->head + 1) % KD_SETTLE_QUEUE;
        st->n--;
        pthread_mutex_unlock(&st->lock);
        if (kd_settle_read(st, w.name, w.version) < 0)
            fprintf(stderr, "kestreld: %s\n", kestrel_error_last()->message);
        kestrel_error_clear();
        free(w.name);
        pthread_mutex_lock(&st->lock);
    }
    pthread_mutex_unlock(&st->lock);
    return NULL;
}

kd_settle *kd_settle_new(kestrel__store *store, kd_metrics *metrics)
{
    kd_settle *st = calloc(1, sizeof(*st));
    pthread_condattr_t attr;
    int rc;
    if (st == NULL) {
        kestrel__error_oom();
        return NULL;
    }
    st->store = store;
    st->metrics = metrics;
    pthread_mutex_init(&st->lock, NULL);
    pthread_mutex_init(&st->writing, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&st->wake, &attr);
    pthread_condattr_destroy(&attr);
    if ((rc = pthread_create(&st->thread, NULL, settle_main, st)) != 0) {
        kestrel__error_set(KESTREL_EIO, "cannot start the thread that settles digests: %s", strerror(rc));
        pthread_cond_destroy(&st->wake);
        pthread_mutex_destroy(&st->lock);
        pthread_mutex_destroy(&st->writing);
        free(st);
        return NULL;
    }
    return st;
}

void kd_settle_free(kd_settle *st)
{
    if (st == NULL)
        return;
    pthread_mutex_lock(&st->lock);
    st->stop = 1;
    pthread_cond_signal(&st->wake);
    pthread_mutex_unlock(&st->lock);
    pthread_join(st->thread, NULL);
    for (; st->n; st->n--, st->head = (st->head + 1) % KD_SETTLE_QUEUE)   /* settled at their first read */
        free(st->queue[st->head].name);
    pthread_cond_destroy(&st->wake);
    pthread_mutex_destroy(&st->lock);
    pthread_mutex_destroy(&st->writing);
    free(st);
}

void kd_settle_stir(kd_settle *st)
{
    if (st == NULL)
        return;
    pthread_mutex_lock(&st->lock);
    st->stirred_ms = kestrel__mono_ms();
    pthread_mutex_unlock(&st->lock);
}

void kd_settle_queue(kd_settle *st, const char *name, int64_t version)
{
    char *copy;
    if (st == NULL || (copy = kestrel__strdup(name)) == NULL) {
        kestrel_error_clear();   /* settled at its first read */
        return;
    }
    pthread_mutex_lock(&st->lock);
    st->stirred_ms = kestrel__mono_ms();
    if (st->n < KD_SETTLE_QUEUE) {
        st->queue[(st->head + st->n++) % KD_SETTLE_QUEUE] = (waiting){ copy, version };
        copy = NULL;
        pthread_cond_signal(&st->wake);
    }
    pthread_mutex_unlock(&st->lock);
    free(copy);
}

int kd_settle_due(kd_settle *st, const char *name, int64_t version)
{
    Kestrel__V1__Manifest *l = NULL;
    int due;
    if (st == NULL)
        return 0;
    if (kestrel__store_listing(st->store, name, version, &l) < 0) {
        kestrel_error_clear();   /* no such version, or unreadable: the read that follows says so */
        return 0;
    }
    due = l->sha256[0] == '\0';
    kestrel__manifest_free(l);
    return due;
}

int kd_settle_read(kd_settle *st, const char *name, int64_t version)
{
    return kd_settle_due(st, name, version) ? settle_one(st, name, version) : 0;
}

int kd_settle_seen(kd_settle *st, const char *name, int64_t version, const char *sha256)
{
    int rc;
    if (st == NULL || sha256[0])
        return 0;
    return (rc = settle_one(st, name, version)) < 0 ? rc : 1;
}

void kd_settle_lock(kd_settle *st)
{
    if (st)
        pthread_mutex_lock(&st->writing);
}

void kd_settle_unlock(kd_settle *st)
{
    if (st)
        pthread_mutex_unlock(&st->writing);
}

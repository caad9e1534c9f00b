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
#include <unistd.h>
#include "metrics.h"
#include "repo_settle.h"
#include "repo.h"
#include "store.h"

typedef struct {
    char *name;
    int64_t version;
    uint64_t bytes;         /* what it leaves to hash */
    int64_t queued_ms;      /* when (monotonic) */
} waiting;

/* A version being hashed, and by whom: readers of it wait for it rather than hash it again (a gang's
 * ranks pulling a checkpoint pushed a second ago), and one that finds the idle thread at it lifts the
 * thread to its own priority while it waits. */
typedef struct {
    const char *name;   /* the settler's own (not copied) */
    int64_t version;
    int by_thread;      /* the settling thread's (else a reader's) */
} hashing;

#define HASHING_MAX 64   /* past it, a reader hashes without telling others (they hash it too) */

struct kd_settle {
    kestrel__store *store;
    kd_metrics *metrics;
    pthread_mutex_t lock;       /* the queue, the stir and stop */
    pthread_cond_t wake;
    pthread_mutex_t writing;    /* a settle's writes, or a delete (kd_settle_lock) */
    waiting queue[KD_SETTLE_QUEUE];
    size_t head, n;
    uint64_t backlog;           /* the bytes the queue leaves to hash */
    int64_t stirred_ms;         /* the repository's last pack or commit (monotonic; atomic, no lock) */
    int offered;                /* commits may leave digests to settle (--settle-digests later) */
    int can_lift;               /* the thread may go back from SCHED_IDLE (root): else it never goes idle */
    int threaded;               /* the thread runs (else every version settles at its read) */
    int64_t quiet_ms;           /* --settle-after */
    hashing busy[HASHING_MAX];  /* under lock */
    size_t nbusy;
    pthread_cond_t done;        /* one of busy ended */
    int stop;
    pthread_t thread;
};

/* The settling thread at idle priority while it hashes (it holds no lock then), else at an ordinary
 * one, so that a lock it holds never waits behind the host's other work; lifted by a reader that
 * waits for it. Where it could not go back (no root), it is never made idle. 0, or -1 refused. */
static int thread_priority(kd_settle *st, pthread_t t, int idle)
{
    struct sched_param none = { 0 };
    if (!st->can_lift)
        return 0;   /* never idle, so never to be lifted */
    return pthread_setschedparam(t, idle ? SCHED_IDLE : SCHED_OTHER, &none) == 0 ? 0 : -1;
}

/* Under lock: name@version's entry in busy, or NULL. */
static hashing *busy_with(kd_settle *st, const char *name, int64_t version)
{
    for (size_t i = 0; i < st->nbusy; i++)
        if (st->busy[i].version == version && !strcmp(st->busy[i].name, name))
            return &st->busy[i];
    return NULL;
}

enum { READER, READER_ALONE, THREAD };   /* who settles: a reader (who waits for another at it), the
                                           same not waiting (its last try), the thread (who leaves it) */

/* Hash and write name@version's digests unless another is at it (see the enum). 0 (also when gone:
 * the read says so; or when another settled it: the caller reads again), < 0 with the error. keep
 * (NULL: none): the settled manifest, also where it could not be written (a full disk: a reader is
 * answered from it, and the version settles again at its next read). */
static int settle_one(kd_settle *st, const char *name, int64_t version, int who, Kestrel__V1__Manifest **keep)
{
    Kestrel__V1__Manifest *m = NULL;
    uint64_t hashed = 0;
    hashing *h;
    int rc, listed = 0;
    pthread_mutex_lock(&st->lock);
    if ((h = busy_with(st, name, version)) != NULL && who != READER_ALONE) {
        if (who == THREAD) {
            pthread_mutex_unlock(&st->lock);
            return 0;   /* a reader is at it */
        }
        if (!h->by_thread || thread_priority(st, st->thread, 0) == 0) {
            while (busy_with(st, name, version))
                pthread_cond_wait(&st->done, &st->lock);
            pthread_mutex_unlock(&st->lock);
            return 0;
        }
        /* the thread could not be lifted: this reader hashes it too, at its own priority */
    } else if (h == NULL && st->nbusy < HASHING_MAX) {
        st->busy[st->nbusy++] = (hashing){ name, version, who == THREAD };
        listed = 1;
    }
    pthread_mutex_unlock(&st->lock);
    if (who == THREAD)
        thread_priority(st, pthread_self(), 1);
    rc = kestrel__store_settle_hash(st->store, name, version, &m, &hashed);
    if (who == THREAD)
        thread_priority(st, pthread_self(), 0);   /* before any lock (a delete waits on writing) */
    if (rc == 0) {
        pthread_mutex_lock(&st->writing);
        rc = kestrel__store_settle_write(st->store, m);
        pthread_mutex_unlock(&st->writing);
        if (keep && rc < 0 && rc != KESTREL_ENOTFOUND) {   /* not written: the reader is answered all the same */
            fprintf(stderr, "kestreld: %s@%lld: settled, not written (at its next read): %s\n", name,
                    (long long)version, kestrel_error_last()->message);
            kestrel_error_clear();
            rc = 0;
        }
        if (keep && rc == 0)
            *keep = m;
        else
            kestrel__manifest_free(m);
    }
    if (rc == 0 && hashed)
        kd_metrics_repo_digests(st->metrics, KD_DIGEST_LATER, hashed);
    if (rc == KESTREL_ENOTFOUND) {   /* deleted meanwhile */
        kestrel_error_clear();
        rc = 0;
    }
    pthread_mutex_lock(&st->lock);
    if (listed && (h = busy_with(st, name, version)) != NULL) {
        *h = st->busy[--st->nbusy];
        pthread_cond_broadcast(&st->done);
    }
    pthread_mutex_unlock(&st->lock);
    return rc;
}

static void *settle_main(void *arg)
{
    kd_settle *st = arg;
    pthread_mutex_lock(&st->lock);
    for (;;) {
        int64_t quiet, now;
        waiting w;
        while (!st->stop && st->n == 0)
            pthread_cond_wait(&st->wake, &st->lock);
        if (st->stop)
            break;
        now = kestrel__mono_ms();
        if ((quiet = now - __atomic_load_n(&st->stirred_ms, __ATOMIC_RELAXED)) < st->quiet_ms &&
            now - st->queue[st->head].queued_ms < 10 * st->quiet_ms) {
            struct timespec until;
            int64_t wait_ms = st->quiet_ms - quiet;
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
        st->backlog -= w.bytes;
        pthread_mutex_unlock(&st->lock);
        if (kd_settle_due(st, w.name, w.version) && settle_one(st, w.name, w.version, THREAD, NULL) < 0)
            fprintf(stderr, "kestreld: %s\n", kestrel_error_last()->message);
        kestrel_error_clear();
        free(w.name);
        pthread_mutex_lock(&st->lock);
    }
    pthread_mutex_unlock(&st->lock);
    return NULL;
}

kd_settle *kd_settle_new(kestrel__store *store, kd_metrics *metrics, int offer, int64_t quiet_ms)
{
    kd_settle *st = calloc(1, sizeof(*st));
    pthread_condattr_t attr;
    int rc = 0;
    if (st == NULL) {
        kestrel__error_oom();
        return NULL;
    }
    st->store = store;
    st->metrics = metrics;
    st->quiet_ms = quiet_ms;
    st->can_lift = geteuid() == 0;   /* without root, SCHED_IDLE is a one-way door */
    pthread_mutex_init(&st->lock, NULL);
    pthread_mutex_init(&st->writing, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&st->wake, &attr);
    pthread_condattr_destroy(&attr);
    pthread_cond_init(&st->done, NULL);
    /* at-commit, or no thread: nothing is left to settle, but what an earlier kestreld left (it may
     * have been started with later) is still settled as it is read */
    if (offer && (rc = pthread_create(&st->thread, NULL, settle_main, st)) != 0)
        fprintf(stderr, "kestreld: cannot start the thread that settles digests (%s): they are settled at "
                        "each commit\n", strerror(rc));
    st->threaded = st->offered = offer && rc == 0;
    return st;
}

int kd_settle_offered(const kd_settle *st)
{
    return st && st->offered;
}

void kd_settle_free(kd_settle *st)
{
    if (st == NULL)
        return;
    pthread_mutex_lock(&st->lock);
    st->stop = 1;
    pthread_cond_signal(&st->wake);
    if (st->threaded)   /* the hash under way, if any, at an ordinary priority: the stop waits for it */
        thread_priority(st, st->thread, 0);
    pthread_mutex_unlock(&st->lock);
    if (st->threaded)
        pthread_join(st->thread, NULL);
    for (; st->n; st->n--, st->head = (st->head + 1) % KD_SETTLE_QUEUE)   /* settled at their first read */
        free(st->queue[st->head].name);
    pthread_cond_destroy(&st->wake);
    pthread_cond_destroy(&st->done);
    pthread_mutex_destroy(&st->lock);
    pthread_mutex_destroy(&st->writing);
    free(st);
}

void kd_settle_stir(kd_settle *st)
{
    if (st)   /* no lock: every pack and commit passes here */
        __atomic_store_n(&st->stirred_ms, kestrel__mono_ms(), __ATOMIC_RELAXED);
}

int kd_settle_room(kd_settle *st, uint64_t bytes)
{
    int room;
    if (st == NULL || !st->offered)
        return 0;
    pthread_mutex_lock(&st->lock);
    /* a few places kept for the commits being made beside this one (a version past a full queue
     * would wait for its first read); commits beside it may take the backlog past its bound (by what
     * KD_DEFER_MAX of them hold), never round it */
    room = st->n + 16 < KD_SETTLE_QUEUE && st->backlog < KD_SETTLE_BACKLOG &&
           bytes <= KD_SETTLE_BACKLOG - st->backlog;
    pthread_mutex_unlock(&st->lock);
    return room;
}

void kd_settle_queue(kd_settle *st, const char *name, int64_t version, uint64_t bytes)
{
    char *copy;
    int64_t now = kestrel__mono_ms();
    if (st == NULL || !st->threaded || (copy = kestrel__strdup(name)) == NULL) {
        kestrel_error_clear();   /* settled at its first read */
        return;
    }
    __atomic_store_n(&st->stirred_ms, now, __ATOMIC_RELAXED);
    pthread_mutex_lock(&st->lock);
    if (st->n < KD_SETTLE_QUEUE) {
        st->queue[(st->head + st->n++) % KD_SETTLE_QUEUE] = (waiting){ copy, version, bytes, now };
        st->backlog += bytes;
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

int kd_settle_read_keep(kd_settle *st, const char *name, int64_t version, Kestrel__V1__Manifest **keep)
{
    int rc = 0;
    if (keep)
        *keep = NULL;
    /* again after one that waited for another settler, which may have failed: the last try does not
     * wait (so it says why), and no read goes on with a digest left empty */
    for (int tries = 0; rc == 0 && tries < 3 && !(keep && *keep) && kd_settle_due(st, name, version); tries++)
        rc = settle_one(st, name, version, tries < 2 ? READER : READER_ALONE, keep);
    return rc;
}

int kd_settle_read(kd_settle *st, const char *name, int64_t version)
{
    return kd_settle_read_keep(st, name, version, NULL);
}

/* Under lock: whether a version of name is queued or being hashed. */
static int pending(const kd_settle *st, const char *name)
{
    for (size_t i = 0; i < st->n; i++)
        if (!strcmp(st->queue[(st->head + i) % KD_SETTLE_QUEUE].name, name))
            return 1;
    for (size_t i = 0; i < st->nbusy; i++)
        if (!strcmp(st->busy[i].name, name))
            return 1;
    return 0;
}

int kd_settle_pending(kd_settle *st, const char *name)
{
    int any;
    if (st == NULL)
        return 0;
    pthread_mutex_lock(&st->lock);
    any = pending(st, name);
    pthread_mutex_unlock(&st->lock);
    return any;
}

int kd_settle_model(kd_settle *st, const char *name)
{
    int64_t v[64];
    size_t n = 0;
    int rc = 0;
    if (st == NULL)
        return 0;
    pthread_mutex_lock(&st->lock);
    for (size_t i = 0; i < st->n && n < sizeof(v) / sizeof(v[0]); i++) {
        const waiting *w = &st->queue[(st->head + i) % KD_SETTLE_QUEUE];
        if (!strcmp(w->name, name))
            v[n++] = w->version;
    }
    for (size_t i = 0; i < st->nbusy && n < sizeof(v) / sizeof(v[0]); i++)
        if (!strcmp(st->busy[i].name, name))
            v[n++] = st->busy[i].version;
    pthread_mutex_unlock(&st->lock);
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = kd_settle_read(st, name, v[i]);
    return rc;
}

int kd_settle_seen(kd_settle *st, const char *name, int64_t version, const char *sha256)
{
    int rc;
    if (st == NULL || sha256[0])
        return 0;
    return (rc = kd_settle_read(st, name, version)) < 0 ? rc : 1;
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

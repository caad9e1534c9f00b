/* lib/repo/push_sender.c - the push's sender (push_sender.h): a thread that asks the repository which
 * of the chunks handed to it it lacks and sends those, batch after batch, while the push goes on
 * reading and hashing; and the digests kestreld gives the chunks a big new file sends unnamed. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "push_sender.h"

/* Chunks handed to the sender and not yet taken, at most (1.5 MiB of refs). 50,000 files of 4 KB,
 * alternating 4 rounds against the push before this bound (and before refs_drop): 4.15-4.63 s and
 * 41-44 MiB peak RSS then, 3.79-4.55 s and 35 MiB with it. Half of it made the hashing wait on the
 * sender too often (5.7-6.9 s, measured while every batch went at 8 MiB). */
#define QUEUED_MAX (4 * KESTREL__PUSH_BATCH_CHUNKS)
/* ... and the bytes of them it read, at most one batch's: so the hashing runs at most about two
 * batches (the one being sent, the one waiting) ahead of the sending. Where it ran as far ahead as
 * the chunk bound let it (a whole 1 GiB file: 4,096 chunks of 256 KiB), the repository, starved of
 * the two cores meanwhile, stored a fraction of it by the time the hashing ended and the disk then
 * wrote the rest at the end, alone; alternating rounds, 1 GiB pushed 4.8-5.8 s before, 4.0-4.8 s
 * after (dd 3.2-3.5 s), four clients of 256 MiB at once 4.4-5.2 s before, 3.9-5.2 s after (median
 * 4.54 s -> 4.47 s). What the stat cache vouched for was not read and does not count: an unchanged
 * re-push still hands the sender up to 16,384 chunks a question (`missing`), not one batch's. */
#define QUEUED_BYTES ((int64_t)KESTREL__PUSH_BATCH_BYTES)

int64_t kestrel__sender_file_begin(kestrel__sender *s, uint32_t file, const struct stat *st)
{
    pthread_mutex_lock(&s->mu);
    s->probe_file = file;
    s->probe_st = *st;
    s->probe_missing = s->probe_found = 0;
    pthread_mutex_unlock(&s->mu);
    return __atomic_load_n(&s->t->found_unnamed, __ATOMIC_RELAXED);
}

int kestrel__sender_unnamed_now(kestrel__sender *s, uint32_t file, int64_t found)
{
    int yes;
    if (!__atomic_load_n(&s->t->names_chunks, __ATOMIC_RELAXED) ||
        __atomic_load_n(&s->t->found_unnamed, __ATOMIC_RELAXED) != found)
        return 0;
    pthread_mutex_lock(&s->mu);
    yes = s->probe_file == file && s->probe_found == 0 && s->probe_missing >= KESTREL__PUSH_PROBE_BYTES;
    pthread_mutex_unlock(&s->mu);
    return yes;
}

int kestrel__sender_unnamed_room(kestrel__sender *s, size_t n)
{
    int rc;
    pthread_mutex_lock(&s->mu);
    rc = kestrel__array_grow((void **)&s->named, &s->named_cap, n, sizeof(*s->named));
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int by_digest(const void *a, const void *b)
{
    return strcmp(((const kestrel__chunk_ref *)a)->hex, ((const kestrel__chunk_ref *)b)->hex);
}

static int by_place(const void *a, const void *b)
{
    const kestrel__chunk_ref *x = *(kestrel__chunk_ref *const *)a, *y = *(kestrel__chunk_ref *const *)b;
    if (x->file != y->file)
        return x->file < y->file ? -1 : 1;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

int kestrel__send_missing(kestrel__transport *t, const kestrel__chunk_ref *refs, size_t n,
                          const kestrel__push_files *files, kestrel__progress *pr, size_t *sent, kestrel__sender *s)
{
    kestrel__chunk_ref *sorted = malloc((n + 1) * sizeof(*sorted)), **todo = NULL;
    size_t ntodo = 0, with_digest = 0, unnamed = n;
    int rc;
    if (sorted == NULL)
        return kestrel__error_oom();
    for (size_t i = 0; i < n; i++)   /* those with a digest first, to be asked about; then the others */
        sorted[refs[i].unnamed ? --unnamed : with_digest++] = refs[i];
    if (with_digest > 1)
        qsort(sorted, with_digest, sizeof(*sorted), by_digest);
    if ((rc = t->ops->missing(t, sorted, with_digest)) == 0 && (todo = malloc((n + 1) * sizeof(*todo))) == NULL)
        rc = kestrel__error_oom();
    if (rc == 0 && s) {
        pthread_mutex_lock(&s->mu);
        for (size_t i = 0; i < with_digest; i++)   /* a chunk stored, or repeated in the file: dedupe pays here */
            if (sorted[i].file == s->probe_file) {
                int again = i > 0 && sorted[i - 1].file == s->probe_file && !strcmp(sorted[i - 1].hex, sorted[i].hex);
                s->probe_missing += sorted[i].missing && !again ? sorted[i].len : 0;
                s->probe_found += !sorted[i].missing || again;
            }
        pthread_mutex_unlock(&s->mu);
    }
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (i >= with_digest || (sorted[i].missing && (ntodo == 0 || strcmp(todo[ntodo - 1]->hex, sorted[i].hex))))
            todo[ntodo++] = &sorted[i];   /* one copy of each digest, and each unnamed chunk */
    if (rc == 0 && ntodo > 1)
        qsort(todo, ntodo, sizeof(*todo), by_place);   /* read each file front to back */
    if (rc == 0 && ntodo) {
        struct stat read;   /* unnamed chunks are all the probe file's: the push waits for them at its end */
        if (s) {
            pthread_mutex_lock(&s->mu);
            read = s->probe_st;
            pthread_mutex_unlock(&s->mu);
        }
        rc = t->ops->send(t, files, todo, ntodo, pr, s && with_digest < n ? &read : NULL);
    }
    if (rc == 0 && s && with_digest < n) {
        pthread_mutex_lock(&s->mu);
        for (size_t i = with_digest; i < n; i++)
            memcpy(s->named[sorted[i].seq], sorted[i].hex, sizeof(sorted[i].hex));
        s->filled += n - with_digest;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
    if (sent)
        *sent = ntodo;
    free(todo);
    free(sorted);
    return rc;
}

static void *sender_main(void *arg)
{
    kestrel__sender *s = arg;
    for (;;) {
        kestrel__chunk_ref *batch;
        size_t n;
        int rc;
        pthread_mutex_lock(&s->mu);
        while (s->nq == 0 && !s->closing)
            pthread_cond_wait(&s->cv, &s->mu);
        batch = s->q;
        n = s->nq;
        s->q = NULL;
        s->nq = s->capq = 0;
        s->qread = 0;
        pthread_cond_broadcast(&s->cv);   /* the hashing may hand over more (handover) */
        pthread_mutex_unlock(&s->mu);
        if (n == 0) {
            free(batch);
            break;   /* closing, and everything sent */
        }
        rc = kestrel__send_missing(s->t, batch, n, s->files, &s->pr, NULL, s);
        free(batch);
        if (rc < 0 && !__atomic_load_n(&s->abort, __ATOMIC_ACQUIRE)) {   /* kept for the push's thread */
            kestrel__error_keep(&s->err);
            __atomic_store_n(&s->rc, rc, __ATOMIC_RELEASE);
        }
        if (rc < 0)
            break;
    }
    pthread_mutex_lock(&s->mu);
    s->done = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* The sender's progress callback: stop once the push was told to. */
static int sender_stop(const kestrel_progress *p, void *payload)
{
    (void)p;
    return __atomic_load_n(&((kestrel__sender *)payload)->abort, __ATOMIC_ACQUIRE);
}

int kestrel__sender_failed(kestrel__sender *s)
{
    int rc = __atomic_load_n(&s->rc, __ATOMIC_ACQUIRE);
    return rc < 0 ? kestrel__error_restore(&s->err) : 0;
}

/* With s->mu held: wait for the sender for up to 100 ms, then (unless quiet, or it has ended) report
 * its progress on this thread, s->mu released meanwhile. A callback that says stop: its error. */
static int wait_and_report(kestrel__sender *s, kestrel__progress *pr, int quiet)
{
    int rc;
    kestrel__progress_wait(&s->cv, &s->mu);
    if (quiet || s->done)
        return 0;
    pthread_mutex_unlock(&s->mu);
    pr->p.bytes_new = __atomic_load_n(&s->pr.p.bytes_new, __ATOMIC_RELAXED);
    pr->p.chunks_new = __atomic_load_n(&s->pr.p.chunks_new, __ATOMIC_RELAXED);
    rc = kestrel__progress_report(pr, 0);
    pthread_mutex_lock(&s->mu);
    return rc;
}


int kestrel__sender_start(kestrel__sender *s, kestrel__transport *t, const kestrel__push_files *files)
{
    memset(s, 0, sizeof(*s));
    s->t = t;
    s->files = files;
    s->pr.p.version = 1;
    s->pr.cb = sender_stop;
    s->pr.payload = s;
    s->tick_was = t->tick;
    t->tick = &s->pr;   /* a request of the sender's that waits on the repository sees a stop at once */
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->th, NULL, sender_main, s) != 0) {
        t->tick = s->tick_was;
        return kestrel__error_set(KESTREL_ENOMEM, "cannot start the sender thread");
    }
    s->running = 1;
    return 0;
}

int kestrel__sender_finish(kestrel__sender *s, int stop, kestrel__progress *pr)
{
    int rc = 0;
    if (s->running) {
        pthread_mutex_lock(&s->mu);
        if (stop) {
            s->nq = 0;
            __atomic_store_n(&s->abort, 1, __ATOMIC_RELEASE);
        }
        s->closing = 1;
        pthread_cond_broadcast(&s->cv);
        while (!s->done) {
            int r = wait_and_report(s, pr, stop || rc < 0);
            if (r < 0) {   /* cancelled: the sender stops at its next chunk */
                rc = r;
                __atomic_store_n(&s->abort, 1, __ATOMIC_RELEASE);
            }
        }
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->th, NULL);
        s->running = 0;
        if (rc == 0 && !stop)
            rc = kestrel__sender_failed(s);
    }
    s->t->tick = s->tick_was;   /* the phase around it (a commit's resend) goes on seeing a stop */
    free(s->q);
    s->q = NULL;
    free(s->named);
    s->named = NULL;
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    return rc;
}

void kestrel__sender_progress(kestrel__sender *s, kestrel__progress *pr)
{
    pr->p.bytes_new = __atomic_load_n(&s->pr.p.bytes_new, __ATOMIC_RELAXED);
    pr->p.chunks_new = __atomic_load_n(&s->pr.p.chunks_new, __ATOMIC_RELAXED);
}

/* Where the sender has QUEUED_MAX chunks still to take, the push waits for it: what is handed over
 * waits in memory, and hashing far ahead of a slow repository would hold a whole directory's chunks. */
int kestrel__sender_put(kestrel__sender *s, const kestrel__chunk_ref *refs, size_t n, int64_t read, kestrel__progress *pr)
{
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    while (s->nq > 0 && (s->nq + n > QUEUED_MAX || s->qread + read > QUEUED_BYTES) && !s->done && rc == 0)
        rc = wait_and_report(s, pr, 0);
    if (rc == 0 && s->done)   /* it failed while this waited */
        rc = kestrel__sender_failed(s);
    if (rc == 0)
        rc = kestrel__array_grow(&s->q, &s->capq, s->nq + n + 1, sizeof(*s->q));
    if (rc == 0) {
        memcpy(s->q + s->nq, refs, n * sizeof(*s->q));
        s->nq += n;
        s->qread += read;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int kestrel__sender_names(kestrel__sender *s, kestrel__chunk_ref *refs, size_t n, uint32_t count, kestrel__progress *pr)
{
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    while (rc == 0 && s->filled < count && !s->done)
        rc = wait_and_report(s, pr, 0);
    if (rc == 0 && s->filled < count && (rc = kestrel__sender_failed(s)) == 0)   /* it ended first */
        rc = kestrel__error_set(KESTREL_EPROTO, "kestreld did not name every chunk sent unnamed");
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (refs[i].unnamed) {
            memcpy(refs[i].hex, s->named[refs[i].seq], sizeof(refs[i].hex));
            refs[i].unnamed = 0;
        }
    s->filled = 0;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

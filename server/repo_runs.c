/* server/repo_runs.c - runs: a file's whole SHA-256 as its chunks stream in (see repo_runs.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <openssl/evp.h>
#include "repo_runs.h"
#include "internal.h"

#define MAX_RUNS 1024   /* about 0.5 KiB each */
#define DEPTH (KD_RUN_BUFFERS - 1)   /* chunks a pack may hand its helper ahead of it, at most */

typedef struct {
    char id[33];            /* "" : a free slot */
    int64_t user;
    EVP_MD_CTX *whole;      /* the chunks' bytes, in order */
    EVP_MD_CTX *list;       /* "HEX SIZE\n" per chunk: which chunks, in which order */
    int64_t bytes, chunks;
    char list_hex[65];      /* list's digest as the last pack left it */
    int busy;               /* a pack is feeding it */
    int stored_only;        /* its chunks stored in order, whole not hashed: no commit takes it */
    int64_t used;           /* when last touched (a counter): the least recent gives way */
} run;

struct kd_runs {
    pthread_mutex_t mu;
    run r[MAX_RUNS];
    int64_t tick;
};

struct kd_run_feed {
    kd_runs *runs;
    run *r;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t depth;           /* chunks this pack may hand its helper ahead of it (<= DEPTH) */
    kestrel_buf q[DEPTH];   /* ring: [head, head + n) to hash and store */
    char hex[DEPTH][65];
    int tag[DEPTH];
    kd_run_chunk_fn fn;     /* and to store through (NULL: none) */
    void *ctx;
    int fn_failed;          /* fn returned < 0: no call starts after this is set */
    size_t head, n;
    size_t hashed;          /* of [head, head + n), the ones the helper hashed */
    unsigned char claimed[DEPTH], stored[DEPTH];   /* a thread is storing it; it is stored */
    kestrel_buf spare[DEPTH + 1];   /* hashed and stored, ready to be handed back */
    size_t nspare;
    int closing, failed;
};

static void slot_clear(run *r)
{
    EVP_MD_CTX_free(r->whole);
    EVP_MD_CTX_free(r->list);
    memset(r, 0, sizeof(*r));
}

kd_runs *kd_runs_new(void)
{
    kd_runs *runs = calloc(1, sizeof(*runs));
    if (runs)
        pthread_mutex_init(&runs->mu, NULL);
    return runs;
}

void kd_runs_free(kd_runs *runs)
{
    if (runs == NULL)
        return;
    for (int i = 0; i < MAX_RUNS; i++)
        slot_clear(&runs->r[i]);
    pthread_mutex_destroy(&runs->mu);
    free(runs);
}

/* Entry `at` of the ring, just claimed by this thread: fn on it, unless fn failed before. Called and
 * returns with f->mu held; fn runs without it. */
static void store_one(kd_run_feed *f, size_t at)
{
    kestrel_buf b = f->q[at];
    char hex[65];
    int tag = f->tag[at], skip = f->fn == NULL || f->fn_failed, bad = 0;
    memcpy(hex, f->hex[at], 65);
    pthread_mutex_unlock(&f->mu);
    if (!skip)
        bad = f->fn(f->ctx, hex, &b, tag) < 0;
    pthread_mutex_lock(&f->mu);
    if (bad)
        f->fn_failed = f->failed = 1;   /* the pack's own failure: the run is dropped */
    f->stored[at] = 1;
}

/* The oldest entries, hashed and stored, give their buffers back. Under f->mu. */
static void release_done(kd_run_feed *f)
{
    while (f->hashed && f->stored[f->head]) {
        f->q[f->head].size = 0;
        f->spare[f->nspare++] = f->q[f->head];
        f->claimed[f->head] = f->stored[f->head] = 0;
        f->head = (f->head + 1) % DEPTH;
        f->n--;
        f->hashed--;
    }
    pthread_cond_broadcast(&f->cv);
}

/* Another chunk of the ring, not stored yet, has the same digest as entry at (a file's repeated
 * bytes). Under f->mu. */
static int twin_unstored(const kd_run_feed *f, size_t at)
{
    for (size_t j = 0; j < f->n; j++) {
        size_t k = (f->head + j) % DEPTH;
        if (k != at && !f->stored[k] && !strcmp(f->hex[k], f->hex[at]))
            return 1;
    }
    return 0;
}

/* The feeding thread stores the newest chunk the helper has not come to: 1, or 0 when there is none
 * (each is hashed, or claimed). One with a twin in the ring not stored yet is left to the helper,
 * which stores them in order, so the later twin finds the earlier one stored (counted as held, as
 * before this thread stored any) and the two are never written at once. Under f->mu. */
static int store_ahead(kd_run_feed *f)
{
    size_t j = f->n, at = 0;
    while (j > f->hashed && (f->claimed[at = (f->head + j - 1) % DEPTH] || twin_unstored(f, at)))
        j--;
    if (j == f->hashed)
        return 0;
    f->claimed[at] = 1;
    store_one(f, at);
    release_done(f);
    return 1;
}

/* The helper: each chunk in turn stored (unless the feeding thread claimed it) and hashed. */
static void *feed_main(void *arg)
{
    kd_run_feed *f = arg;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        kestrel_buf b;
        char line[96];
        int len, bad;
        size_t at;
        while (f->hashed == f->n && !f->closing)
            pthread_cond_wait(&f->cv, &f->mu);
        if (f->hashed == f->n)
            break;
        at = (f->head + f->hashed) % DEPTH;
        if (!f->claimed[at]) {
            f->claimed[at] = 1;
            store_one(f, at);
        }
        b = f->q[at];
        len = snprintf(line, sizeof(line), "%s %zu\n", f->hex[at], b.size);
        bad = f->failed;   /* the run is dropped already: not hashed on */
        pthread_mutex_unlock(&f->mu);
        bad = bad || (!f->r->stored_only && EVP_DigestUpdate(f->r->whole, b.ptr ? b.ptr : "", b.size) != 1) ||
              EVP_DigestUpdate(f->r->list, line, (size_t)len) != 1;
        f->r->bytes += (int64_t)b.size;
        f->r->chunks++;
        pthread_mutex_lock(&f->mu);
        f->failed |= bad;   /* the run is dropped; the pack's own calls go on */
        f->hashed++;
        release_done(f);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

static int is_hex32(const char *s)
{
    size_t n = s ? strspn(s, "0123456789abcdef") : 0;
    return n == 32 && s[32] == '\0';
}

kd_run_feed *kd_run_feed_begin(kd_runs *runs, int64_t user, const char *id, int64_t at, unsigned buffers,
                               int whole, kd_run_chunk_fn fn, void *ctx)
{
    kd_run_feed *f;
    run *r = NULL;
    if (runs == NULL || !is_hex32(id) || at < 0 || buffers < 2 || buffers > KD_RUN_BUFFERS ||
        (f = calloc(1, sizeof(*f))) == NULL)
        return NULL;
    f->depth = buffers - 1;
    pthread_mutex_lock(&runs->mu);
    for (int i = 0; i < MAX_RUNS && r == NULL; i++)
        if (runs->r[i].id[0] && runs->r[i].user == user && !strcmp(runs->r[i].id, id))
            r = &runs->r[i];
    if (r && (r->busy || (at > 0 && (r->bytes != at || r->stored_only != !whole))))
        r = NULL;   /* another pack has it, or this pack does not follow its last one (or asks otherwise) */
    else if (r == NULL && at == 0) {   /* a new run: a free slot, else the least recently used idle one */
        for (int i = 0; i < MAX_RUNS; i++)
            if (!runs->r[i].busy && (r == NULL || !runs->r[i].id[0] || (r->id[0] && runs->r[i].used < r->used)))
                r = &runs->r[i];
    }
    if (r && at == 0) {
        slot_clear(r);
        snprintf(r->id, sizeof(r->id), "%s", id);
        r->user = user;
        r->stored_only = !whole;
        if ((r->whole = EVP_MD_CTX_new()) == NULL || (r->list = EVP_MD_CTX_new()) == NULL ||
            EVP_DigestInit_ex(r->whole, EVP_sha256(), NULL) != 1 || EVP_DigestInit_ex(r->list, EVP_sha256(), NULL) != 1) {
            slot_clear(r);
            r = NULL;
        }
    }
    if (r) {
        r->busy = 1;
        r->used = ++runs->tick;
    }
    pthread_mutex_unlock(&runs->mu);
    f->runs = runs;
    f->r = r;
    f->fn = fn;
    f->ctx = ctx;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    if (r == NULL || pthread_create(&f->th, NULL, feed_main, f) != 0) {
        if (r) {
            pthread_mutex_lock(&runs->mu);
            slot_clear(r);
            pthread_mutex_unlock(&runs->mu);
        }
        pthread_mutex_destroy(&f->mu);
        pthread_cond_destroy(&f->cv);
        free(f);
        return NULL;
    }
    return f;
}

void kd_run_feed_chunk(kd_run_feed *f, const char *hex, kestrel_buf *chunk, int tag)
{
    kestrel_buf fresh = KESTREL_BUF_INIT;
    pthread_mutex_lock(&f->mu);
    while (f->n == f->depth)   /* full: store one the helper has not come to, rather than wait */
        if (!store_ahead(f))
            pthread_cond_wait(&f->cv, &f->mu);
    f->q[(f->head + f->n) % DEPTH] = *chunk;
    snprintf(f->hex[(f->head + f->n) % DEPTH], 65, "%s", hex);
    f->tag[(f->head + f->n) % DEPTH] = tag;
    f->n++;
    if (f->nspare)
        fresh = f->spare[--f->nspare];
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    *chunk = fresh;   /* a buffer already grown to a chunk's size, or a new one */
}

void kd_run_feed_end(kd_run_feed *f, int ok)
{
    kd_runs *runs;
    run *r;
    if (f == NULL)
        return;
    runs = f->runs;
    r = f->r;
    pthread_mutex_lock(&f->mu);
    while (store_ahead(f))   /* the pack's last chunks: stored beside the helper, not after it */
        ;
    f->closing = 1;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->th, NULL);
    pthread_mutex_lock(&runs->mu);
    if (ok && !f->failed) {   /* the list's digest so far, for a commit to find the run by */
        EVP_MD_CTX *c = EVP_MD_CTX_new();
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int n = 0;
        if (c && EVP_MD_CTX_copy_ex(c, r->list) == 1 && EVP_DigestFinal_ex(c, md, &n) == 1) {
            kestrel__hex(md, 32, r->list_hex);
            r->busy = 0;
            r->used = ++runs->tick;
        } else
            slot_clear(r);
        EVP_MD_CTX_free(c);
    } else
        slot_clear(r);
    pthread_mutex_unlock(&runs->mu);
    for (size_t i = 0; i < f->nspare; i++)
        kestrel_buf_dispose(&f->spare[i]);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    free(f);
}

int kd_runs_take(kd_runs *runs, int64_t user, char *const *hex, const int64_t *size, size_t k, char out[65])
{
    EVP_MD_CTX *list = EVP_MD_CTX_new(), *whole = NULL;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    char want[65];
    int found = 0;
    if (runs == NULL || list == NULL || k == 0 || EVP_DigestInit_ex(list, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(list);
        return 0;
    }
    for (size_t i = 0; i < k; i++) {
        char line[96];
        int len = snprintf(line, sizeof(line), "%s %lld\n", hex[i], (long long)size[i]);
        EVP_DigestUpdate(list, line, (size_t)len);
    }
    EVP_DigestFinal_ex(list, md, &n);
    EVP_MD_CTX_free(list);
    kestrel__hex(md, 32, want);
    pthread_mutex_lock(&runs->mu);
    for (int i = 0; i < MAX_RUNS && !found; i++) {
        run *r = &runs->r[i];
        if (!r->id[0] || r->busy || r->user != user || r->stored_only || r->chunks != (int64_t)k ||
            strcmp(r->list_hex, want))
            continue;
        if ((whole = EVP_MD_CTX_new()) != NULL && EVP_MD_CTX_copy_ex(whole, r->whole) == 1 &&
            EVP_DigestFinal_ex(whole, md, &n) == 1) {
            kestrel__hex(md, 32, out);
            found = 1;
        }
        EVP_MD_CTX_free(whole);
        slot_clear(r);   /* used up (or useless) */
    }
    pthread_mutex_unlock(&runs->mu);
    return found;
}

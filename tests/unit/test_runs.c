/* Unit tests: a run's whole-file SHA-256 as a pack feeds it (server/repo_runs.h), with the feeding
 * thread storing chunks when the helper is a full ring behind. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "internal.h"
#include "repo_fixture.h"   /* random_bytes */
#include "repo_runs.h"
#include "store.h"

#define N 96
#define RUN_ID "0123456789abcdef0123456789abcdef"

typedef struct {
    char *hex[N];
    int64_t size[N];
    char whole[65];
} chunks;

typedef struct {
    const chunks *c;
    pthread_t feeder;
    int calls[N];           /* fn's calls, by tag */
    int on_feeder;          /* calls on the feeding thread */
    int wrong;              /* calls whose bytes were not the chunk's, or whose digest was another's */
    int busy[N];            /* calls under way, by tag */
    int twins_at_once;      /* calls that began while one for the same digest was under way */
    int fail_at;            /* the tag fn fails on (-1: none) */
    int after_failure;      /* calls that started once fn had failed */
    int failed;
    pthread_mutex_t mu;
} fake_store;

/* Stores nothing: checks the bytes it is handed and counts, slowly on the helper so that its ring
 * fills. A buffer handed back while a call still reads it is a wrong chunk (or a race helgrind sees). */
static int slow_store(void *ctx, const char *hex, const kestrel_buf *chunk, int tag)
{
    fake_store *s = ctx;
    int mine = pthread_equal(pthread_self(), s->feeder), bad;
    char got[65];
    pthread_mutex_lock(&s->mu);
    s->calls[tag]++;
    s->after_failure += s->failed;
    s->on_feeder += mine;
    for (int t = 0; t < N; t++)
        s->twins_at_once += s->busy[t] && !strcmp(s->c->hex[t], hex);
    s->busy[tag] = 1;
    pthread_mutex_unlock(&s->mu);
    if (!mine)
        usleep(2000);
    kestrel__sha256_hex(chunk->ptr, chunk->size, got);
    bad = strcmp(got, hex) || strcmp(hex, s->c->hex[tag]);
    pthread_mutex_lock(&s->mu);
    s->wrong += bad;
    s->busy[tag] = 0;
    if (tag == s->fail_at)
        s->failed = 1;
    pthread_mutex_unlock(&s->mu);
    return tag == s->fail_at ? -1 : 0;
}

/* N chunks of 1 to 64 KiB of pseudo-random bytes (with twins: every fourth the same bytes as the one
 * two before it): their digests, sizes and the SHA-256 of them all. */
static void make_chunks(chunks *c, uint8_t **data, int twins)
{
    kestrel_buf all = KESTREL_BUF_INIT;
    for (int i = 0; i < N; i++) {
        int twin = twins && i % 4 == 3;
        size_t len = twin ? (size_t)c->size[i - 2] : 1 + (size_t)i * 2654435761u % (64 * 1024);
        data[i] = random_bytes(len, (uint64_t)i + 1);
        assert_non_null(data[i]);
        if (twin)
            memcpy(data[i], data[i - 2], len);
        c->size[i] = (int64_t)len;
        c->hex[i] = malloc(65);
        assert_non_null(c->hex[i]);
        kestrel__sha256_hex(data[i], len, c->hex[i]);
        assert_int_equal(kestrel__buf_put(&all, data[i], len), 0);
    }
    kestrel__sha256_hex(all.ptr, all.size, c->whole);
    kestrel_buf_dispose(&all);
}

static void free_chunks(chunks *c, uint8_t **data)
{
    for (int i = 0; i < N; i++) {
        free(c->hex[i]);
        free(data[i]);
    }
}

/* Feeds the N chunks, `buffers` deep, in two packs (the second continues the run), each asking
 * whole as kd_run_feed_begin takes it; 1 when a commit could take the run and its digest is the one
 * of all the bytes, 0 when it was dropped (or stored only). */
static int feed(fake_store *s, unsigned buffers, const chunks *c, uint8_t **data, int whole)
{
    kd_runs *runs = kd_runs_new();
    kestrel_buf b = KESTREL_BUF_INIT;
    char out[65] = "";
    int64_t at = 0;
    int kept;
    assert_non_null(runs);
    s->feeder = pthread_self();
    s->c = c;
    for (int pack = 0; pack < 2; pack++) {
        kd_run_feed *f = kd_run_feed_begin(runs, 7, RUN_ID, at, buffers, whole, slow_store, s);
        if (f == NULL && pack > 0)
            break;   /* the first pack dropped the run: nothing to continue */
        assert_non_null(f);
        for (int i = pack * N / 2; i < (pack + 1) * N / 2; i++) {
            b.size = 0;
            assert_int_equal(kestrel__buf_put(&b, data[i], (size_t)c->size[i]), 0);
            kd_run_feed_chunk(f, c->hex[i], &b, i);   /* b: a spare buffer, or a new one */
            at += c->size[i];
        }
        kd_run_feed_end(f, 1);
    }
    kestrel_buf_dispose(&b);
    kept = kd_runs_take(runs, 7, c->hex, c->size, N, out);
    if (kept)
        assert_string_equal(out, c->whole);
    kd_runs_free(runs);
    return kept;
}

/* Each chunk stored once, with its own bytes, some by the feeding thread (the helper was slow, and a
 * pack's end stores what the helper has not come to; which thread stores the rest is the
 * scheduler's), never two of one digest at once, and the run's digest is still the SHA-256 of the
 * bytes in order: at the deepest ring, the least kestreld uses, and a ring of one. */
static void test_feeder_stores_when_the_helper_is_behind(void **state)
{
    uint8_t *data[N];
    chunks c;
    unsigned depths[] = { KD_RUN_BUFFERS, KD_RUN_BUFFERS_LEAST, 2 };
    (void)state;
    for (int twins = 0; twins < 2; twins++) {
        make_chunks(&c, data, twins);
        for (size_t d = 0; d < sizeof(depths) / sizeof(depths[0]); d++) {
            fake_store s = { .fail_at = -1 };
            pthread_mutex_init(&s.mu, NULL);
            assert_int_equal(feed(&s, depths[d], &c, data, 1), 1);
            for (int i = 0; i < N; i++)
                assert_int_equal(s.calls[i], 1);
            assert_true(s.on_feeder > 0);
            assert_int_equal(s.wrong, 0);
            assert_int_equal(s.twins_at_once, 0);
            pthread_mutex_destroy(&s.mu);
        }
        free_chunks(&c, data);
    }
}

/* A store that fails drops the run, and no chunk is stored twice. Calls may start on the other
 * thread while the failing one returns (fewer than a ring), not once its thread has its answer. */
static void test_a_failed_store_drops_the_run(void **state)
{
    uint8_t *data[N];
    chunks c;
    fake_store s = { .fail_at = 20 };
    (void)state;
    make_chunks(&c, data, 0);
    pthread_mutex_init(&s.mu, NULL);
    assert_int_equal(feed(&s, KD_RUN_BUFFERS, &c, data, 1), 0);
    for (int i = 0; i < N; i++)
        assert_true(s.calls[i] <= 1);
    assert_int_equal(s.calls[20], 1);
    assert_true(s.after_failure < KD_RUN_BUFFERS);
    assert_int_equal(s.wrong, 0);
    pthread_mutex_destroy(&s.mu);
    free_chunks(&c, data);
}

/* A run of a push whose commit settles its digests later (whole 0): its chunks all stored, once, in
 * both packs (the second continued it), and no commit takes it; a pack that asks otherwise than the
 * run began gets no run. */
static void test_a_run_stored_only_is_not_taken(void **state)
{
    uint8_t *data[N];
    chunks c;
    fake_store s = { .fail_at = -1 };
    kd_runs *runs = kd_runs_new();
    kestrel_buf b = KESTREL_BUF_INIT;
    kd_run_feed *f;
    (void)state;
    make_chunks(&c, data, 0);
    pthread_mutex_init(&s.mu, NULL);
    assert_int_equal(feed(&s, KD_RUN_BUFFERS, &c, data, 0), 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(s.calls[i], 1);
    assert_int_equal(s.wrong, 0);
    assert_non_null(runs);
    assert_non_null(f = kd_run_feed_begin(runs, 7, RUN_ID, 0, 2, 0, NULL, NULL));
    assert_int_equal(kestrel__buf_put(&b, data[0], (size_t)c.size[0]), 0);
    kd_run_feed_chunk(f, c.hex[0], &b, 0);
    kd_run_feed_end(f, 1);
    assert_null(kd_run_feed_begin(runs, 7, RUN_ID, c.size[0], 2, 1, NULL, NULL));
    kestrel_buf_dispose(&b);
    kd_runs_free(runs);
    pthread_mutex_destroy(&s.mu);
    free_chunks(&c, data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_feeder_stores_when_the_helper_is_behind),
        cmocka_unit_test(test_a_failed_store_drops_the_run),
        cmocka_unit_test(test_a_run_stored_only_is_not_taken),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

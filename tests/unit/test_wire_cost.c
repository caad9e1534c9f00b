/* Unit tests: kestrel__wire_decode_cost, the memory a body takes decoded, read before decoding it.
 * protobuf: the peak of protobuf-c's allocations, counted by an allocator of this test. JSON: what the
 * decoded message kept, measured by glibc (mallinfo2; under ASan, which keeps its own heap, 0). */
#include <malloc.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "wire.h"

#define FILES 2000

/* A directory version as a push commits it: FILES files, a chunk each, digests in hex; with_sha: each
 * file's digest too (an older kestreld's push; to one that fills them in, a push leaves them out). */
static void dataset_manifest(kestrel_buf *pb, kestrel_buf *json, int with_sha)
{
    static char paths[FILES][40], hex[FILES][65];
    static Kestrel__V1__TreeFile files[FILES], *fp[FILES];
    static Kestrel__V1__ChunkRef chunks[FILES], *cp[FILES];
    Kestrel__V1__Manifest m = KESTREL__V1__MANIFEST__INIT;
    for (int i = 0; i < FILES; i++) {
        kestrel__v1__tree_file__init(&files[i]);
        kestrel__v1__chunk_ref__init(&chunks[i]);
        snprintf(paths[i], sizeof(paths[i]), "images/dir%03d/img%06d.jpg", i / 100, i);
        snprintf(hex[i], sizeof(hex[i]), "%064x", i + 1);
        files[i].path = paths[i];
        files[i].size = 8192 + i;
        files[i].sha256 = with_sha ? hex[i] : (char *)protobuf_c_empty_string;
        files[i].mode = 0644;
        files[i].chunks = 1;
        chunks[i].digest = hex[i];
        chunks[i].size = 8192 + i;
        fp[i] = &files[i];
        cp[i] = &chunks[i];
    }
    m.name = "team/images";
    m.size = (int64_t)FILES * 8192;
    m.files = fp;
    m.n_files = FILES;
    m.chunks = cp;
    m.n_chunks = FILES;
    assert_int_equal(kestrel__wire_pack(pb, &m.base), 0);
    assert_int_equal(kestrel__wire_to_json(json, &m.base, 0), 0);
}

/* Decode data; what the decoded message holds of the heap (0 where glibc does not keep the heap). */
static uint64_t kept_by_decoding(const char *ctype, const void *data, size_t len)
{
    ProtobufCMessage *m = NULL;
    size_t before = mallinfo2().uordblks, after;
    assert_int_equal(kestrel__wire_decode(&m, &kestrel__v1__manifest__descriptor, ctype, data, len), 0);
    after = mallinfo2().uordblks;
    protobuf_c_message_free_unpacked(m, NULL);
    return after > before ? after - before : 0;
}

/* protobuf-c's allocations, each as glibc holds it (its header, rounded to 16, at least 32): the most
 * held at once while it decodes, its records of scanned fields included. */
typedef struct {
    uint64_t now, peak;
} counter;

static uint64_t held_as(size_t n)
{
    uint64_t b = (n + 8 + 15) & ~(uint64_t)15;
    return b < 32 ? 32 : b;
}

static void *count_alloc(void *data, size_t size)
{
    counter *c = data;
    size_t *p = malloc(size + 16);
    if (p == NULL)
        return NULL;
    p[0] = size;
    if ((c->now += held_as(size)) > c->peak)
        c->peak = c->now;
    return p + 2;
}

static void count_free(void *data, void *ptr)
{
    counter *c = data;
    size_t *p = ptr;
    if (p == NULL)
        return;
    c->now -= held_as(p[-2]);
    free(p - 2);
}

static uint64_t peak_of_unpacking(const void *data, size_t len)
{
    counter c = { 0, 0 };
    ProtobufCAllocator a = { count_alloc, count_free, &c };
    ProtobufCMessage *m = protobuf_c_message_unpack(&kestrel__v1__manifest__descriptor, &a, len, data);
    assert_non_null(m);
    protobuf_c_message_free_unpacked(m, &a);
    assert_int_equal(c.now, 0);
    return c.peak;
}

static void a_real_manifest_costs_a_few_times_its_bytes(void **state)
{
    (void)state;
    for (int with_sha = 0; with_sha < 2; with_sha++) {
        kestrel_buf pb = KESTREL_BUF_INIT, json = KESTREL_BUF_INIT;
        uint64_t cost = 1, peak, kept;
        dataset_manifest(&pb, &json, with_sha);
        assert_int_equal(kestrel__wire_decode_cost(&kestrel__v1__manifest__descriptor, KESTREL__CT_PROTOBUF, pb.ptr,
                                                   pb.size, &cost), 0);
        peak = peak_of_unpacking(pb.ptr, pb.size);
        print_message("protobuf%s: %zu bytes, cost %llu, peak of decoding %llu\n", with_sha ? " with digests" : "",
                      pb.size, (unsigned long long)cost, (unsigned long long)peak);
        assert_true(cost >= peak);                 /* an upper bound */
        assert_true(cost <= peak + peak / 10);     /* and near: a real commit is not refused for its bound */
        assert_true(cost <= 4 * pb.size);          /* main.c's default budget holds a manifest 4 times over */
        /* JSON: cJSON's tree and the message, held at once */
        assert_int_equal(kestrel__wire_decode_cost(&kestrel__v1__manifest__descriptor, KESTREL__CT_JSON, json.ptr,
                                                   json.size, &cost), 0);
        kept = kept_by_decoding(KESTREL__CT_JSON, json.ptr, json.size);
        print_message("JSON: %zu bytes, cost %llu, decoding kept %llu\n", json.size, (unsigned long long)cost,
                      (unsigned long long)kept);
        assert_true(cost >= kept + json.size);   /* the message and at least cJSON's copy of the strings */
        assert_true(cost <= 16 * json.size);   /* cJSON: a node of 80 bytes a value, its keys copied */
        kestrel_buf_dispose(&pb);
        kestrel_buf_dispose(&json);
    }
}

/* The hostile test's body: a name, then n empty chunk references (two bytes each). */
static void empty_elements_cost_what_they_take(void **state)
{
    const size_t n = 200000;
    kestrel_buf body = KESTREL_BUF_INIT;
    uint64_t cost = 0, kept;
    (void)state;
    assert_int_equal(kestrel__buf_put(&body, "\x0a\x06team/x", 8), 0);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(kestrel__buf_put(&body, "\x2a\x00", 2), 0);
    assert_int_equal(kestrel__wire_decode_cost(&kestrel__v1__manifest__descriptor, KESTREL__CT_PROTOBUF, body.ptr,
                                               body.size, &cost), 0);
    kept = peak_of_unpacking(body.ptr, body.size);
    print_message("%zu empty chunk references: %zu bytes, cost %llu, peak of decoding %llu\n", n, body.size,
                  (unsigned long long)cost, (unsigned long long)kept);
    assert_true(cost >= kept && cost <= kept + kept / 10);
    assert_true(cost >= 20 * body.size);   /* what the body's size alone hid */
    body.size = 0;
    /* the same in JSON: {"chunks":[{},{},...]} */
    assert_int_equal(kestrel__buf_put(&body, "{\"chunks\":[{}", 13), 0);
    for (size_t i = 1; i < n; i++)
        assert_int_equal(kestrel__buf_put(&body, ",{}", 3), 0);
    assert_int_equal(kestrel__buf_put(&body, "]}", 2), 0);
    assert_int_equal(kestrel__wire_decode_cost(&kestrel__v1__manifest__descriptor, KESTREL__CT_JSON, body.ptr,
                                               body.size, &cost), 0);
    kept = kept_by_decoding(KESTREL__CT_JSON, body.ptr, body.size);
    assert_true(cost >= kept);
    assert_true(cost >= 20 * body.size);
    kestrel_buf_dispose(&body);
}

static void malformed_protobuf_is_refused_before_it_is_counted(void **state)
{
    uint64_t cost = 0;
    (void)state;
    /* a chunk reference that claims 100 bytes where 2 follow */
    assert_int_equal(kestrel__wire_decode_cost(&kestrel__v1__manifest__descriptor, KESTREL__CT_PROTOBUF,
                                               "\x2a\x64\x0a\x00", 4, &cost), KESTREL_EINVALID);
    /* a nested message cut short inside: its length says 2, its inner string says 5 */
    assert_int_equal(kestrel__wire_decode_cost(&kestrel__v1__manifest__descriptor, KESTREL__CT_PROTOBUF,
                                               "\x2a\x02\x0a\x05", 4, &cost), KESTREL_EINVALID);
    assert_int_equal(kestrel__wire_decode_cost(&kestrel__v1__manifest__descriptor, KESTREL__CT_PROTOBUF, "", 0,
                                               &cost), 0);
    assert_true(cost > 0 && cost < 1024);   /* the message itself */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_real_manifest_costs_a_few_times_its_bytes),
        cmocka_unit_test(empty_elements_cost_what_they_take),
        cmocka_unit_test(malformed_protobuf_is_refused_before_it_is_counted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests: the generic protobuf <-> JSON mapper and the protobuf codec. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include "wire.h"

static Kestrel__V1__Job *sample_job(void)
{
    static char *argv[] = { "python", "train.py", "--lr=0.1 \"quoted\" \xc3\xa9" };
    static Kestrel__V1__KeyValue kv = KESTREL__V1__KEY_VALUE__INIT;
    static Kestrel__V1__KeyValue *kvs[] = { &kv };
    static Kestrel__V1__JobSpec spec = KESTREL__V1__JOB_SPEC__INIT;
    static Kestrel__V1__JobEvent ev = KESTREL__V1__JOB_EVENT__INIT;
    static Kestrel__V1__JobEvent *evs[] = { &ev };
    static Kestrel__V1__Job job = KESTREL__V1__JOB__INIT;
    kv.key = "team";
    kv.value = "vision";
    spec.argv = argv;
    spec.n_argv = 3;
    spec.labels = kvs;
    spec.n_labels = 1;
    spec.priority = KESTREL__V1__PRIORITY__URGENT;
    spec.gpus = 4;
    spec.no_retry = 1;
    ev.time_ms = 1700000000123LL;
    ev.from_state = KESTREL__V1__JOB_STATE__QUEUED;
    ev.to_state = KESTREL__V1__JOB_STATE__RUNNING;
    ev.reason = "started";
    job.id = 9007199254740993LL;   /* not representable as a double: must survive as a string */
    job.spec = &spec;
    job.state = KESTREL__V1__JOB_STATE__RUNNING;
    job.exit_code = -1;
    job.events = evs;
    job.n_events = 1;
    return &job;
}

static void json_round_trip(void **state)
{
    kestrel_buf a = KESTREL_BUF_INIT, b = KESTREL_BUF_INIT;
    ProtobufCMessage *m = NULL;
    Kestrel__V1__Job *j;
    (void)state;
    assert_int_equal(kestrel__wire_to_json(&a, &sample_job()->base, 0), 0);
    assert_non_null(strstr(a.ptr, "\"id\":\"9007199254740993\""));
    assert_non_null(strstr(a.ptr, "\"priority\":\"URGENT\""));
    assert_int_equal(kestrel__wire_from_json(&m, &kestrel__v1__job__descriptor, a.ptr, a.size), 0);
    j = (Kestrel__V1__Job *)m;
    assert_int_equal(j->id, 9007199254740993LL);
    assert_string_equal(j->spec->argv[2], "--lr=0.1 \"quoted\" \xc3\xa9");
    assert_int_equal(j->spec->priority, KESTREL__V1__PRIORITY__URGENT);
    assert_int_equal(j->spec->no_retry, 1);
    assert_string_equal(j->spec->labels[0]->value, "vision");
    assert_int_equal(j->events[0]->time_ms, 1700000000123LL);
    /* encoding the decoded message gives the same JSON */
    assert_int_equal(kestrel__wire_to_json(&b, m, 0), 0);
    assert_string_equal(a.ptr, b.ptr);
    protobuf_c_message_free_unpacked(m, NULL);
    kestrel_buf_dispose(&a);
    kestrel_buf_dispose(&b);
}

static void protobuf_round_trip(void **state)
{
    kestrel_buf pb = KESTREL_BUF_INIT, j1 = KESTREL_BUF_INIT, j2 = KESTREL_BUF_INIT;
    ProtobufCMessage *m = NULL;
    (void)state;
    assert_int_equal(kestrel__wire_pack(&pb, &sample_job()->base), 0);
    assert_int_equal(kestrel__wire_unpack(&m, &kestrel__v1__job__descriptor, (const uint8_t *)pb.ptr, pb.size), 0);
    kestrel__wire_to_json(&j1, &sample_job()->base, 0);
    kestrel__wire_to_json(&j2, m, 0);
    assert_string_equal(j1.ptr, j2.ptr);
    protobuf_c_message_free_unpacked(m, NULL);
    kestrel_buf_dispose(&pb);
    kestrel_buf_dispose(&j1);
    kestrel_buf_dispose(&j2);
}

static void json_accepts_proto3_forms(void **state)
{
    const char *in = "{\"argv\":[\"a\"],\"gitUrl\":\"u\",\"gpus\":\"3\",\"priority\":2,\"noRetry\":true,\"name\":null}";
    ProtobufCMessage *m = NULL;
    Kestrel__V1__JobSpec *s;
    (void)state;
    assert_int_equal(kestrel__wire_from_json(&m, &kestrel__v1__job_spec__descriptor, in, strlen(in)), 0);
    s = (Kestrel__V1__JobSpec *)m;
    assert_string_equal(s->git_url, "u");
    assert_int_equal(s->gpus, 3);
    assert_int_equal(s->priority, KESTREL__V1__PRIORITY__HIGH);
    assert_int_equal(s->no_retry, 1);
    assert_string_equal(s->name, "");
    protobuf_c_message_free_unpacked(m, NULL);
}

static void expect_json_error(const char *in, const char *fragment)
{
    ProtobufCMessage *m = (ProtobufCMessage *)1;
    int rc = kestrel__wire_from_json(&m, &kestrel__v1__job_spec__descriptor, in, strlen(in));
    assert_int_equal(rc, KESTREL_EINVALID);
    assert_null(m);
    if (strstr(kestrel_error_last()->message, fragment) == NULL)
        fail_msg("error '%s' lacks '%s' for input %s", kestrel_error_last()->message, fragment, in);
}

static void json_rejects_bad_input(void **state)
{
    (void)state;
    expect_json_error("{\"argv\":[\"a\"]", "malformed JSON");
    expect_json_error("[1,2]", "must be an object");
    expect_json_error("{\"argv\":[\"a\"],\"bogus\":1}", "unknown field 'bogus'");
    expect_json_error("{\"priority\":\"SUPERURGENT\"}", "unknown Priority value");
    expect_json_error("{\"priority\":77}", "unknown enum value");
    expect_json_error("{\"gpus\":1.5}", "not an integer");
    expect_json_error("{\"gpus\":4294967296}", "out of range");
    expect_json_error("{\"gpus\":\"many\"}", "not an integer");
    expect_json_error("{\"argv\":\"a\"}", "expected an array");
    expect_json_error("{\"argv\":[1]}", "expected a string");
    expect_json_error("{\"argv\":[\"a\",null]}", "null inside an array");
    expect_json_error("{\"no_retry\":1}", "expected true or false");
    expect_json_error("{\"env\":[{\"key\":\"A\",\"value\":5}]}", "env.value");
    expect_json_error("{\"env\":[{\"key\":\"A\"},{\"key\":\"B\",\"oops\":1}]}", "unknown field 'oops'");
    expect_json_error("{\"name\":\"a\",\"name\":\"b\"}", "duplicate field");
    expect_json_error("{\"name\":\"\xff\xfe\"}", "invalid UTF-8");
    /* one rule for both codecs: no NUL in a string, no number outside its type */
    expect_json_error("{\"name\":\"a\\u0000b\"}", "NUL character");
    expect_json_error("{\"priority\":4444444444444}", "unknown enum value");
    expect_json_error("{\"priority\":-1e300}", "unknown enum value");
    expect_json_error("{\"gpus\":1e400}", "out of range");
    {   /* an escaped backslash before u0000 is text, not a NUL */
        ProtobufCMessage *m = NULL;
        const char *ok = "{\"name\":\"a\\\\u0000\"}";
        assert_int_equal(kestrel__wire_from_json(&m, &kestrel__v1__job_spec__descriptor, ok, strlen(ok)), 0);
        assert_string_equal(((Kestrel__V1__JobSpec *)m)->name, "a\\u0000");
        protobuf_c_message_free_unpacked(m, NULL);
    }
}

static void protobuf_rejects_bad_input(void **state)
{
    /* field 5 (priority) varint 99: an unknown enum value; and a truncated message */
    static const uint8_t unknown_enum[] = { 0x28, 99 };
    static const uint8_t truncated[] = { 0x0a, 0x10, 'a' };
    ProtobufCMessage *m = NULL;
    (void)state;
    assert_int_equal(kestrel__wire_unpack(&m, &kestrel__v1__job_spec__descriptor, unknown_enum, sizeof(unknown_enum)),
                     KESTREL_EINVALID);
    assert_non_null(strstr(kestrel_error_last()->message, "unknown enum value 99"));
    assert_int_equal(kestrel__wire_unpack(&m, &kestrel__v1__job_spec__descriptor, truncated, sizeof(truncated)),
                     KESTREL_EINVALID);
    assert_non_null(strstr(kestrel_error_last()->message, "malformed protobuf"));
    assert_null(m);
    {   /* field 99 is not in JobSpec: refused, as the same JSON is */
        static const uint8_t unknown_field[] = { 0x0a, 0x01, 'a', 0x98, 0x06, 0x01 };
        static const uint8_t nul_string[] = { 0x1a, 0x03, 'a', 0x00, 'b' };   /* name = "a\0b" */
        static const uint8_t nested_nul[] = { 0x12, 0x05, 0x0a, 0x03, 'A', 0x00, 'B' };   /* env[0].key */
        static const uint8_t group[] = { 0x0b, 0x0c };
        assert_int_equal(kestrel__wire_unpack(&m, &kestrel__v1__job_spec__descriptor, unknown_field,
                                              sizeof(unknown_field)), KESTREL_EINVALID);
        assert_non_null(strstr(kestrel_error_last()->message, "no field number 99"));
        assert_int_equal(kestrel__wire_unpack(&m, &kestrel__v1__job_spec__descriptor, nul_string, sizeof(nul_string)),
                         KESTREL_EINVALID);
        assert_non_null(strstr(kestrel_error_last()->message, "NUL character"));
        assert_int_equal(kestrel__wire_unpack(&m, &kestrel__v1__job_spec__descriptor, nested_nul, sizeof(nested_nul)),
                         KESTREL_EINVALID);
        assert_non_null(strstr(kestrel_error_last()->message, "'key'"));
        assert_int_equal(kestrel__wire_unpack(&m, &kestrel__v1__job_spec__descriptor, group, sizeof(group)),
                         KESTREL_EINVALID);
        assert_null(m);
    }
}

static void decode_picks_codec_by_content_type(void **state)
{
    kestrel_buf pb = KESTREL_BUF_INIT;
    Kestrel__V1__TokenRequest req = KESTREL__V1__TOKEN_REQUEST__INIT;
    ProtobufCMessage *m = NULL;
    const char *json = "{\"user\":\"bob\"}";
    (void)state;
    req.user = "alice";
    kestrel__wire_pack(&pb, &req.base);
    assert_int_equal(kestrel__wire_decode(&m, &kestrel__v1__token_request__descriptor, "application/x-protobuf",
                                          pb.ptr, pb.size), 0);
    assert_string_equal(((Kestrel__V1__TokenRequest *)m)->user, "alice");
    protobuf_c_message_free_unpacked(m, NULL);
    assert_int_equal(kestrel__wire_decode(&m, &kestrel__v1__token_request__descriptor, "application/json; charset=utf-8",
                                          json, strlen(json)), 0);
    assert_string_equal(((Kestrel__V1__TokenRequest *)m)->user, "bob");
    protobuf_c_message_free_unpacked(m, NULL);
    kestrel_buf_dispose(&pb);
}

static void doubles_and_specials(void **state)
{
    Kestrel__V1__Metric met = KESTREL__V1__METRIC__INIT;
    kestrel_buf b = KESTREL_BUF_INIT;
    ProtobufCMessage *m = NULL;
    (void)state;
    met.name = "loss";
    met.value = 0.125;
    kestrel__wire_to_json(&b, &met.base, 0);
    assert_non_null(strstr(b.ptr, "\"value\":0.125"));
    assert_int_equal(kestrel__wire_from_json(&m, &kestrel__v1__metric__descriptor, "{\"value\":\"NaN\"}", 15), 0);
    assert_true(((Kestrel__V1__Metric *)m)->value != ((Kestrel__V1__Metric *)m)->value);
    protobuf_c_message_free_unpacked(m, NULL);
    kestrel_buf_dispose(&b);
}

/* m's JSON (unformatted, written a value at a time) is, byte for byte, what cJSON prints of the
 * whole tree (the pretty form is still made as one tree): read back and printed unformatted. */
static void assert_streamed_as_tree(const ProtobufCMessage *m)
{
    kestrel_buf flat = KESTREL_BUF_INIT, pretty = KESTREL_BUF_INIT;
    cJSON *tree;
    char *s;
    assert_int_equal(kestrel__wire_to_json(&flat, m, 0), 0);
    assert_int_equal(kestrel__wire_to_json(&pretty, m, 1), 0);
    assert_non_null(tree = cJSON_Parse(pretty.ptr));
    assert_non_null(s = cJSON_PrintUnformatted(tree));
    assert_string_equal(flat.ptr, s);
    cJSON_free(s);
    cJSON_Delete(tree);
    kestrel_buf_dispose(&flat);
    kestrel_buf_dispose(&pretty);
}

static void unformatted_is_the_tree_printed(void **state)
{
    Kestrel__V1__Manifest m = KESTREL__V1__MANIFEST__INIT;
    Kestrel__V1__TreeFile f[2] = { KESTREL__V1__TREE_FILE__INIT, KESTREL__V1__TREE_FILE__INIT };
    Kestrel__V1__TreeFile *files[] = { &f[0], &f[1] };
    Kestrel__V1__ChunkRef c = KESTREL__V1__CHUNK_REF__INIT;
    Kestrel__V1__ChunkRef *chunks[] = { &c, &c, &c };
    Kestrel__V1__Metric met = KESTREL__V1__METRIC__INIT;
    Kestrel__V1__ModelList empty = KESTREL__V1__MODEL_LIST__INIT;
    char *aliases[] = { "latest", "prod\"uction\\" };
    kestrel_buf before = KESTREL_BUF_INIT;
    (void)state;
    m.name = "team/ds";
    m.size = 9007199254740993LL;
    m.metadata_json = "{\"a\": \"\x01\ttab\nline \xc3\xa9 \xe2\x82\xac\"}";
    m.files = files;
    m.n_files = 2;
    m.chunks = chunks;
    m.n_chunks = 3;
    m.aliases = aliases;
    m.n_aliases = 2;
    f[0].path = "a/\"odd\" name\x7f";
    f[0].size = 3;
    f[0].chunks = 1;
    f[0].mode = 0644;
    f[1].path = "b";
    c.digest = "00ff";
    c.size = -1;
    assert_streamed_as_tree(&m.base);
    assert_streamed_as_tree(&sample_job()->base);
    met.name = "loss";
    met.value = 1.0 / 3.0;
    assert_streamed_as_tree(&met.base);
    met.value = -1e300;
    assert_streamed_as_tree(&met.base);
    met.value = 0.0 / 0.0;   /* "NaN", "Infinity", "-Infinity": strings, as proto3 JSON writes them */
    assert_streamed_as_tree(&met.base);
    met.value = 1.0 / 0.0;
    assert_streamed_as_tree(&met.base);
    met.value = -1.0 / 0.0;
    assert_streamed_as_tree(&met.base);
    assert_streamed_as_tree(&empty.base);   /* {"names":[]} */
    /* appended to what out held, which stays */
    kestrel__buf_puts(&before, "x");
    assert_int_equal(kestrel__wire_to_json(&before, &empty.base, 0), 0);
    assert_string_equal(before.ptr, "x{\"names\":[]}");
    kestrel_buf_dispose(&before);
}

/* The file writers (what a commit writes N.json and N.pb with) write what the buffer ones make, byte
 * for byte, across many blocks of 256 KiB; a file that cannot be written is KESTREL_EIO. */
static void file_bytes(int fd, kestrel_buf *out)
{
    char block[65536];
    ssize_t n;
    assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
    while ((n = read(fd, block, sizeof(block))) > 0)
        assert_int_equal(kestrel__buf_put(out, block, (size_t)n), 0);
}

static void written_into_a_file_as_made(void **state)
{
    enum { N = 20000 };   /* about 2 MB of JSON, 1.6 MB of protobuf */
    Kestrel__V1__Manifest m = KESTREL__V1__MANIFEST__INIT;
    Kestrel__V1__ChunkRef *c = calloc(N, sizeof(*c)), **cs = calloc(N, sizeof(*cs));
    Kestrel__V1__TreeFile *f = calloc(N, sizeof(*f)), **fs = calloc(N, sizeof(*fs));
    char (*digest)[65] = calloc(N, 65), (*path)[24] = calloc(N, 24);
    kestrel_buf want = KESTREL_BUF_INIT, got = KESTREL_BUF_INIT;
    char tmp[] = "/tmp/kestrel-wire-XXXXXX";
    int fd = mkstemp(tmp), full;
    (void)state;
    assert_true(fd >= 0);
    unlink(tmp);
    for (size_t i = 0; i < N; i++) {
        c[i] = (Kestrel__V1__ChunkRef)KESTREL__V1__CHUNK_REF__INIT;
        f[i] = (Kestrel__V1__TreeFile)KESTREL__V1__TREE_FILE__INIT;
        snprintf(digest[i], 65, "%064zx", i * 2654435761u);
        snprintf(path[i], 24, "d%02zu/f\"%05zu", i / 1000, i);
        c[i].digest = digest[i];
        c[i].size = 4096 + (int64_t)i;
        f[i].path = path[i];
        f[i].size = c[i].size;
        f[i].chunks = 1;
        f[i].sha256 = digest[i];
        cs[i] = &c[i];
        fs[i] = &f[i];
    }
    m.name = "team/ds";
    m.metadata_json = "{\"\u00e9\": 1}";
    m.chunks = cs;
    m.n_chunks = N;
    m.files = fs;
    m.n_files = N;
    assert_int_equal(kestrel__wire_to_json(&want, &m.base, 0), 0);
    assert_true(want.size > 8 * 256 * 1024);
    assert_int_equal(kestrel__wire_to_json_fd(fd, &m.base), 0);
    file_bytes(fd, &got);
    assert_int_equal(got.size, want.size);
    assert_memory_equal(got.ptr, want.ptr, want.size);
    assert_int_equal(ftruncate(fd, 0), 0);
    want.size = got.size = 0;
    assert_int_equal(kestrel__wire_pack(&want, &m.base), 0);
    assert_int_equal(kestrel__wire_pack_fd(fd, &m.base), 0);
    file_bytes(fd, &got);
    assert_int_equal(got.size, want.size);
    assert_memory_equal(got.ptr, want.ptr, want.size);
    close(fd);
    if ((full = open("/dev/full", O_WRONLY)) >= 0) {   /* no space left */
        assert_int_equal(kestrel__wire_to_json_fd(full, &m.base), KESTREL_EIO);
        assert_int_equal(kestrel__wire_pack_fd(full, &m.base), KESTREL_EIO);
        close(full);
    }
    kestrel_buf_dispose(&want);
    kestrel_buf_dispose(&got);
    free(c), free(cs), free(f), free(fs), free(digest), free(path);
}

/* A manifest packed without its chunks, then its chunks as records of that field, is the manifest
 * (what a push's commit sends: lib/repo/chunk_spool.h); the records read back one by one, and a
 * record cut short asks for more while one that is no such record is refused. */
static void elements_append_to_a_packed_message(void **state)
{
    Kestrel__V1__Manifest m = KESTREL__V1__MANIFEST__INIT, *back;
    Kestrel__V1__TreeFile f = KESTREL__V1__TREE_FILE__INIT;
    Kestrel__V1__TreeFile *files[] = { &f };
    Kestrel__V1__ChunkRef c[300], *cs[300];
    char digests[300][65];
    kestrel_buf whole = KESTREL_BUF_INIT, streamed = KESTREL_BUF_INIT;
    unsigned field = protobuf_c_message_descriptor_get_field_by_name(&kestrel__v1__manifest__descriptor, "chunks")->id;
    size_t at = 0, n, k = 0, head;
    const uint8_t *data;
    unsigned got, type;
    (void)state;
    m.name = "team/ds";
    m.size = 300LL * 70000;
    m.files = files;
    m.n_files = 1;
    f.path = "a/b.bin";
    f.size = m.size;
    f.chunks = 300;
    for (int i = 0; i < 300; i++) {
        kestrel__v1__chunk_ref__init(&c[i]);
        snprintf(digests[i], sizeof(digests[i]), "%064x", i * 7919);
        c[i].digest = digests[i];
        c[i].size = 70000 + (i % 3) * 100000;   /* lengths of one and several varint bytes */
        cs[i] = &c[i];
    }
    assert_int_equal(kestrel__wire_pack(&streamed, &m.base), 0);   /* without its chunks */
    head = streamed.size;
    for (int i = 0; i < 300; i++)
        assert_int_equal(kestrel__wire_pack_element(&streamed, field, &c[i].base), 0);
    m.chunks = cs;
    m.n_chunks = 300;
    assert_int_equal(kestrel__wire_pack(&whole, &m.base), 0);
    assert_int_equal(streamed.size, whole.size);
    assert_int_equal(kestrel__wire_unpack((ProtobufCMessage **)&back, &kestrel__v1__manifest__descriptor,
                                          (const uint8_t *)streamed.ptr, streamed.size), 0);
    assert_int_equal(back->n_chunks, 300);
    assert_string_equal(back->chunks[299]->digest, digests[299]);
    assert_int_equal(back->chunks[1]->size, c[1].size);
    assert_int_equal(back->n_files, 1);
    assert_string_equal(back->files[0]->path, "a/b.bin");
    protobuf_c_message_free_unpacked(&back->base, NULL);
    /* read back, record by record, from where the chunks start */
    at = head;
    while (kestrel__wire_next_field((const uint8_t *)streamed.ptr, streamed.size, &at, &got, &type, &data, &n) == 1) {
        Kestrel__V1__ChunkRef *r = (Kestrel__V1__ChunkRef *)protobuf_c_message_unpack(&kestrel__v1__chunk_ref__descriptor,
                                                                                       NULL, n, data);
        assert_non_null(r);
        assert_int_equal(got, field);
        assert_int_equal(type, 2);
        assert_string_equal(r->digest, digests[k]);
        k++;
        protobuf_c_message_free_unpacked(&r->base, NULL);
    }
    assert_int_equal(k, 300);
    assert_int_equal(at, streamed.size);
    /* cut short anywhere inside a record: asks for more, and at stays */
    at = head;
    assert_int_equal(kestrel__wire_next_field((const uint8_t *)streamed.ptr, streamed.size, &at, &got, &type, &data, &n), 1);
    for (size_t cut = head + 1, end = at; cut < end; cut++) {
        at = head;
        assert_int_equal(kestrel__wire_next_field((const uint8_t *)streamed.ptr, cut, &at, &got, &type, &data, &n), 0);
        assert_int_equal(at, head);
    }
    /* other wire types: a varint (its bytes), 64 and 32 bits; a group, or a key too long: refused */
    at = 0;
    assert_int_equal(kestrel__wire_next_field((const uint8_t *)"\x10\x85\x01", 3, &at, &got, &type, &data, &n), 1);
    assert_true(got == 2 && type == 0 && n == 2 && at == 3);
    at = 0;
    assert_int_equal(kestrel__wire_next_field((const uint8_t *)"\x19" "12345678" "\x1d" "1234", 14, &at, &got, &type, &data,
                                              &n), 1);
    assert_true(got == 3 && type == 1 && n == 8 && at == 9);
    assert_int_equal(kestrel__wire_next_field((const uint8_t *)"\x19" "12345678" "\x1d" "1234", 14, &at, &got, &type, &data,
                                              &n), 1);
    assert_true(got == 3 && type == 5 && n == 4 && at == 14);
    at = 0;
    assert_int_equal(kestrel__wire_next_field((const uint8_t *)"\x19" "1234", 5, &at, &got, &type, &data, &n), 0);
    at = 0;
    assert_int_equal(kestrel__wire_next_field((const uint8_t *)"\x13\x14", 2, &at, &got, &type, &data, &n), KESTREL_EINVALID);
    at = 0;
    assert_int_equal(kestrel__wire_next_field((const uint8_t *)"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11,
                                              &at, &got, &type, &data, &n), KESTREL_EINVALID);
    kestrel_buf_dispose(&whole);
    kestrel_buf_dispose(&streamed);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(unformatted_is_the_tree_printed),
        cmocka_unit_test(written_into_a_file_as_made),
        cmocka_unit_test(elements_append_to_a_packed_message),
        cmocka_unit_test(json_round_trip),
        cmocka_unit_test(protobuf_round_trip),
        cmocka_unit_test(json_accepts_proto3_forms),
        cmocka_unit_test(json_rejects_bad_input),
        cmocka_unit_test(protobuf_rejects_bad_input),
        cmocka_unit_test(decode_picks_codec_by_content_type),
        cmocka_unit_test(doubles_and_specials),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

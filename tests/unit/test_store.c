/* Unit tests: the store's own reads and writes under a file:// client: the manifest kestreld
 * streams (kestrel__store_manifest_open), and a collection beside a commit. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "chunk.h"
#include "store.h"
#include "repo.h"
#include "repo_fixture.h"

/* kestreld answers a version's manifest in protobuf as its N.pb followed by the records it adds
 * (kestrel__store_manifest_open): the bytes decode to exactly the manifest it answered when it decoded
 * N.pb and decorated it; where N.pb will not do, the caller is told to decode. */
static kestrel_buf served(kestrel__store *s, const char *name, int64_t version, int *fd_out)
{
    kestrel_buf b = KESTREL_BUF_INIT, tail = KESTREL_BUF_INIT;
    char block[4096];
    ssize_t n;
    int fd = -2;
    assert_int_equal(kestrel__store_manifest_open(s, name, version, &fd, &tail), 0);
    *fd_out = fd;
    if (fd < 0) {
        assert_int_equal(tail.size, 0);
        return b;
    }
    while ((n = read(fd, block, sizeof(block))) > 0)
        assert_int_equal(kestrel__buf_put(&b, block, (size_t)n), 0);
    close(fd);
    assert_int_equal(kestrel__buf_put(&b, tail.ptr ? tail.ptr : "", tail.size), 0);
    kestrel_buf_dispose(&tail);
    return b;
}

/* 1 when name@version's manifest is streamed (its N.pb will do), 0 when the caller must decode it. */
static int streams(kestrel__store *s, const char *name, int64_t version)
{
    int fd;
    kestrel_buf b = served(s, name, version, &fd);
    kestrel_buf_dispose(&b);
    return fd >= 0;
}

static void decorated_packed(kestrel__store *s, const char *ref, kestrel_buf *out)
{
    Kestrel__V1__Manifest *m = NULL;
    assert_int_equal(kestrel__store_resolve(s, ref, &m), 0);
    assert_int_equal(kestrel__store_decorate(s, m), 0);
    assert_int_equal(kestrel__wire_pack(out, &m->base), 0);
    kestrel__manifest_free(m);
}

static void a_served_manifest_is_its_pb_and_what_is_added(void **state)
{
    char src[128], path[256], root[160];
    uint8_t *big = random_bytes(2u << 20, 11);
    kestrel__store *s;
    int64_t v = 0;
    int fd;
    (void)state;
    snprintf(src, sizeof(src), "%s/src", dir);
    put_file(src, "a.bin", big, 2u << 20);
    put_file(src, "sub/b.txt", "b\n", 2);
    assert_int_equal(kestrel_model_push(&v, C, "team/served", src, NULL), 0);   /* a directory */
    snprintf(path, sizeof(path), "%s/a.bin", src);
    assert_int_equal(kestrel_model_push(&v, C, "team/served", path, NULL), 0);  /* a file */
    assert_int_equal(v, 2);
    snprintf(root, sizeof(root), "%s/store", dir);
    assert_int_equal(kestrel__store_open(&s, root), 0);
    assert_int_equal(kestrel__store_alias_set(s, "team/served", "prod", 1), 0);
    assert_int_equal(kestrel__store_alias_set(s, "team/served", "canary", 1), 0);
    for (int64_t k = 1; k <= 2; k++) {
        char ref[64];
        kestrel_buf want = KESTREL_BUF_INIT, got;
        Kestrel__V1__Manifest *m;
        snprintf(ref, sizeof(ref), "team/served@%lld", (long long)k);
        decorated_packed(s, ref, &want);   /* its N.pb is written by this read, if it was not */
        got = served(s, "team/served", k, &fd);
        assert_true(fd >= 0);
        m = (Kestrel__V1__Manifest *)protobuf_c_message_unpack(&kestrel__v1__manifest__descriptor, NULL, got.size,
                                                               (const uint8_t *)got.ptr);
        assert_non_null(m);
        assert_int_equal(m->n_aliases, k == 1 ? 2 : 1);   /* prod, canary; latest */
        assert_string_equal(m->metadata_json, "{}");
        assert_int_equal(m->file_count, k == 1 ? 2 : 0);
        assert_int_equal(m->chunk_count, (int64_t)m->n_chunks);
        kestrel_buf_dispose(&got);
        assert_int_equal(kestrel__wire_pack(&got, &m->base), 0);   /* decoded, it packs as the decorated one */
        assert_int_equal(got.size, want.size);
        assert_memory_equal(got.ptr, want.ptr, want.size);
        protobuf_c_message_free_unpacked(&m->base, NULL);
        kestrel_buf_dispose(&got);
        kestrel_buf_dispose(&want);
    }
    /* N.pb that will not do: the caller is told to decode (which mends it) */
    snprintf(path, sizeof(path), "%s/models/team/served/versions/1.pb", root);
    write_file(path, "\x0a\x05", 2);   /* cut short */
    assert_false(streams(s, "team/served", 1));
    {
        Kestrel__V1__Manifest *m = NULL, other;
        kestrel_buf b = KESTREL_BUF_INIT;
        char *aliases[] = { (char *)"stored" };
        assert_int_equal(kestrel__store_resolve(s, "team/served@1", &m), 0);   /* N.pb mended */
        assert_true(streams(s, "team/served", 1));
        other = *m;   /* aliases kept in N.pb: never written so, but not trusted to be absent */
        other.aliases = aliases;
        other.n_aliases = 1;
        assert_int_equal(kestrel__wire_pack(&b, &other.base), 0);
        write_file(path, b.ptr, b.size);
        assert_false(streams(s, "team/served", 1));
        other.aliases = NULL, other.n_aliases = 0;
        other.name = (char *)"team/other";   /* another model's */
        b.size = 0;
        assert_int_equal(kestrel__wire_pack(&b, &other.base), 0);
        write_file(path, b.ptr, b.size);
        assert_false(streams(s, "team/served", 1));
        /* N.pb itself whole, then a record that the whole's decoder refuses, or that no commit
         * stores: refused by the stream too; the decoder reads N.json and mends N.pb each time */
        {
            static const struct {
                const char *bytes;
                size_t n;
            } extra[] = {
                { "\x2a\x02\x08\x01", 4 },       /* a chunk whose digest is a varint */
                { "\x2a\x03\x0a\x01\xff", 5 },   /* a chunk whose digest is not UTF-8 */
                { "\x28\x01", 2 },               /* the chunks field as a varint */
                { "\xa0\x01\x01", 3 },           /* field 20: no such field */
                { "\x58\xe7\x07", 3 },           /* file_count 999: a listing's, never stored */
                { "\x4a\x02rc", 4 },             /* alias "rc": a commit's request, never stored */
            };
            for (size_t i = 0; i < sizeof(extra) / sizeof(extra[0]); i++) {
                Kestrel__V1__Manifest *mended = NULL;
                kestrel_buf whole = KESTREL_BUF_INIT;
                b.size = 0;
                assert_int_equal(kestrel__wire_pack(&b, &m->base), 0);
                assert_int_equal(kestrel__buf_put(&b, extra[i].bytes, extra[i].n), 0);
                write_file(path, b.ptr, b.size);
                assert_false(streams(s, "team/served", 1));
                assert_int_equal(kestrel__store_resolve(s, "team/served@1", &mended), 0);
                assert_int_equal(mended->file_count, 0);
                assert_string_equal(mended->alias, "");
                assert_int_equal(kestrel__wire_pack(&whole, &mended->base), 0);
                b.size = 0;
                assert_int_equal(kestrel__wire_pack(&b, &m->base), 0);
                assert_int_equal(whole.size, b.size);   /* N.json's manifest */
                assert_memory_equal(whole.ptr, b.ptr, b.size);
                kestrel_buf_dispose(&whole);
                assert_true(streams(s, "team/served", 1));   /* mended: streamed again */
                kestrel__manifest_free(mended);
            }
        }
        kestrel_buf_dispose(&b);
        kestrel__manifest_free(m);
    }
    assert_false(streams(s, "team/served", 9));   /* no such version */
    kestrel__store_close(s);
    free(big);
}

/* A collection takes its cutoff only while no commit is between its check of its chunks and its
 * link (store_gc.c): held, a collection in another process waits; released, it runs. Without the
 * hold, grace 0 beside commits left versions with holes (found by a hostile test). */
static void a_collection_waits_for_a_commit_between_its_check_and_its_link(void **state)
{
    char root[PATH_MAX], hex[KESTREL__HEX_LEN + 1], path[PATH_MAX];
    kestrel__store *s;
    int pipefd[2], hold, status;
    struct pollfd p;
    pid_t child;
    (void)state;
    snprintf(root, sizeof(root), "%s/held", dir);
    assert_int_equal(kestrel__store_open(&s, root), 0);
    kestrel__sha256_hex("loose", 5, hex);
    assert_int_equal(kestrel__store_put_chunk(s, hex, "loose", 5), 0);   /* named by no version */
    kestrel__store_chunk_path(s, hex, path, sizeof(path));
    assert_int_equal(pipe(pipefd), 0);
    assert_true((hold = kestrel__store_commit_hold(s)) >= 0);
    if ((child = fork()) == 0) {
        kestrel__store *c;
        kestrel__store_gc_stats st;
        int ok;
        close(hold);   /* the parent's hold, inherited: a flock belongs to the open file, now shared */
        if (write(pipefd[1], "r", 1) != 1)   /* ready: the collection starts now */
            _exit(1);
        ok = kestrel__store_open(&c, root) == 0 && kestrel__store_gc(c, 0, &st) == 0 && st.chunks_removed == 1;
        _exit(write(pipefd[1], ok ? "y" : "n", 1) == 1 ? 0 : 1);
    }
    assert_true(child > 0);
    p.fd = pipefd[0];
    p.events = POLLIN;
    assert_int_equal(poll(&p, 1, 30000), 1);            /* the child is about to collect */
    {
        char ready = 0;
        assert_int_equal(read(pipefd[0], &ready, 1), 1);
        assert_int_equal(ready, 'r');
    }
    assert_int_equal(poll(&p, 1, 700), 0);              /* held: the collection waits */
    assert_int_equal(access(path, F_OK), 0);
    kestrel__store_commit_release(hold);
    assert_int_equal(poll(&p, 1, 30000), 1);            /* released: it runs, the loose chunk goes */
    {
        char got = 0;
        assert_int_equal(read(pipefd[0], &got, 1), 1);
        assert_int_equal(got, 'y');
    }
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_int_not_equal(access(path, F_OK), 0);
    close(pipefd[0]);
    close(pipefd[1]);
    kestrel__store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(a_served_manifest_is_its_pb_and_what_is_added, setup, teardown),
        cmocka_unit_test_setup_teardown(a_collection_waits_for_a_commit_between_its_check_and_its_link, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

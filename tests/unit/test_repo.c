/* Unit tests: content-defined chunking and the repository through file:// URLs. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <poll.h>
#include <sys/stat.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "chunk.h"
#include "file_open.h"
#include "store.h"
#include "manifest_file.h"
#include "repo.h"
#include "repo_fixture.h"

static size_t cut_all(const uint8_t *b, size_t n, size_t *cuts, size_t max)
{
    size_t k = 0, off = 0;
    while (off < n && k < max) {
        size_t len = kestrel__chunk_next(b + off, n - off, 1);
        cuts[k++] = off += len;
    }
    return k;
}

static void chunks_have_bounded_sizes_and_survive_an_insertion(void **state)
{
    size_t n = 16u << 20, a[256], b[256], na, nb, shared = 0;
    uint8_t *data = random_bytes(n, 1), *ins = malloc(n + 100);
    (void)state;
    na = cut_all(data, n, a, 256);
    for (size_t i = 0; i < na; i++) {
        size_t len = a[i] - (i ? a[i - 1] : 0);
        assert_true(len <= KESTREL__CHUNK_MAX);
        if (i + 1 < na)
            assert_true(len >= KESTREL__CHUNK_MIN);
    }
    assert_true(na > 16 && na < 160);   /* about 16 MiB / 256 KiB */
    /* 100 bytes inserted at 3 MiB: boundaries after it shift by 100, all but one or two chunks stay */
    memcpy(ins, data, 3u << 20);
    memset(ins + (3u << 20), 0x5a, 100);
    memcpy(ins + (3u << 20) + 100, data + (3u << 20), n - (3u << 20));
    nb = cut_all(ins, n + 100, b, 256);
    for (size_t i = 0; i < na; i++)
        for (size_t k = 0; k < nb; k++)
            if (b[k] == a[i] || b[k] == a[i] + 100)
                shared++;
    assert_true(shared + 3 >= na);
    free(data);
    free(ins);
}

/* The cuts of fixed data, as every build since the first made them: a store's chunks dedupe against
 * a re-push only if the same bytes are cut the same way. Pseudo-random data of sizes at, around and
 * below the minimum, the average and the maximum (even and odd), and data without any cut point
 * (zeros, ones, a short repeated pattern: zero-filled runs are common in model files), where every
 * cut is a forced one at the maximum. The fold is FNV-1a's, over 64-bit offsets. */
static void the_cuts_are_those_of_every_earlier_build(void **state)
{
    static const size_t sizes[] = { 16u << 20, (64u << 10) + 1, (64u << 10) + 2, 200001, 262144, 300003,
                                    (1u << 20) + 1, (3u << 20) + 7, 64u << 10, 1000 };
    static const size_t flat = (3u << 20) + 5;
    uint64_t h = 14695981039346656037ull;
    size_t total = 0, cuts[512], k;
    (void)state;
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]) + 3; s++) {
        size_t n = s < sizeof(sizes) / sizeof(sizes[0]) ? sizes[s] : flat;
        uint8_t *data = random_bytes(n, 7 + s);
        size_t kind = s - sizeof(sizes) / sizeof(sizes[0]);   /* past the sizes: 0 zeros, 1 ones, 2 a pattern */
        for (size_t i = 0; s >= sizeof(sizes) / sizeof(sizes[0]) && i < n; i++)
            data[i] = kind == 0 ? 0 : kind == 1 ? 0xff : (uint8_t)"kestrel-pattern"[i % 15];
        k = cut_all(data, n, cuts, 512);
        if (s >= sizeof(sizes) / sizeof(sizes[0]))   /* no cut point: 1 MiB, 1 MiB, 1 MiB, the rest */
            for (size_t i = 0; i < k; i++)
                assert_int_equal(cuts[i], i + 1 < k ? (i + 1) * KESTREL__CHUNK_MAX : n);
        for (size_t i = 0; i < k; i++) {
            h = (h ^ (uint64_t)cuts[i]) * 1099511628211ull;
            total++;
        }
        free(data);
    }
    assert_int_equal(total, 95);
    assert_int_equal(h, 0xad7274577f74152bull);
}

/* The chunker's definition, one byte a turn (lib/repo/chunk.c works four at a time): the gear
 * table of splitmix64 from "kestrl01", a hash reset at the minimum, 20 top bits zero before the
 * average, 16 after, never past the maximum. */
static size_t cut_by_definition(const uint8_t *d, size_t len)
{
    static uint64_t gear[256];
    uint64_t x = 0x6b657374726c3031ull, h = 0;
    size_t i, normal = KESTREL__CHUNK_AVG, end = len < KESTREL__CHUNK_MAX ? len : KESTREL__CHUNK_MAX;
    for (int k = 0; k < 256; k++) {
        uint64_t z = (x += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        gear[k] = z ^ (z >> 31);
    }
    if (len <= KESTREL__CHUNK_MIN)
        return len;
    normal = end < normal ? end : normal;
    for (i = KESTREL__CHUNK_MIN; i < end; i++) {
        h = (h << 1) + gear[d[i]];
        if (!(h & (i < normal ? ((1ull << 20) - 1) << 44 : ((1ull << 16) - 1) << 48)))
            return i + 1;
    }
    return end;
}

/* Every cut of 16 MiB of random bytes, and of each length that ends a buffer short of a cut (the
 * last turn of four bytes cut short): past the minimum, around the average, and around the maximum
 * in bytes with no cut point (zeros), where only the maximum cuts. */
static void the_chunker_cuts_where_its_definition_does(void **state)
{
    size_t n = 16u << 20, off = 0, cuts = 0, by_residue[4] = { 0 };
    uint8_t *data = random_bytes(n + KESTREL__CHUNK_MAX, 23), *zeros = calloc(1, KESTREL__CHUNK_MAX + 16);
    (void)state;
    while (off < n) {
        size_t a = kestrel__chunk_next(data + off, n - off, 1);
        assert_int_equal(a, cut_by_definition(data + off, n - off));
        by_residue[a % 4]++;
        off += a;
        cuts++;
    }
    for (int r = 0; r < 4; r++)
        assert_true(by_residue[r] > 0);   /* cuts at every place in a turn of four */
    assert_true(cuts > 40);
    for (size_t len = KESTREL__CHUNK_MIN - 2; len < KESTREL__CHUNK_MIN + 9; len++)
        assert_int_equal(kestrel__chunk_next(data, len, 1), cut_by_definition(data, len));
    assert_true(cut_by_definition(data + 5, KESTREL__CHUNK_AVG + 8) > KESTREL__CHUNK_AVG - 9);   /* reaches it */
    for (size_t len = KESTREL__CHUNK_AVG - 9; len < KESTREL__CHUNK_AVG + 9; len++)
        assert_int_equal(kestrel__chunk_next(data + 5, len, 1), cut_by_definition(data + 5, len));
    for (size_t len = KESTREL__CHUNK_MAX - 9; len < KESTREL__CHUNK_MAX + 9; len++) {
        size_t a = kestrel__chunk_next(zeros, len, 0);
        assert_int_equal(a, cut_by_definition(zeros, len));
        assert_int_equal(a, len < KESTREL__CHUNK_MAX ? len : KESTREL__CHUNK_MAX);
    }
    free(zeros);
    free(data);
}

static int last_progress(const kestrel_progress *p, void *payload)
{
    *(kestrel_progress *)payload = *p;
    return 0;
}

static int64_t push(const char *name, const char *path, kestrel_progress *stats, const char *alias)
{
    kestrel_transfer_options o = KESTREL_TRANSFER_OPTIONS_INIT;
    int64_t v = 0;
    o.progress = last_progress;
    o.progress_payload = stats;
    o.alias = alias;
    o.metadata_json = "{\"framework\":\"keras\",\"job\":\"7\"}";
    if (kestrel_model_push(&v, C, name, path, &o) != 0)
        fail_msg("push: %s", kestrel_error_last()->message);
    return v;
}

static int same_file(const char *a, const char *b)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s'", a, b);
    return system(cmd) == 0;
}

/* A push reads a file 8 MiB at a time: its chunks are still the whole file's cuts, across windows. */
static void a_push_cuts_a_file_as_the_chunker_does(void **state)
{
    size_t n = 20u << 20, cuts[256], k;
    uint8_t *data = random_bytes(n, 11);
    char f[128], root[128];
    kestrel__store *s;
    Kestrel__V1__Manifest *m = NULL;
    kestrel_progress st;
    (void)state;
    snprintf(f, sizeof(f), "%s/windows.bin", dir);
    write_file(f, data, n);
    k = cut_all(data, n, cuts, 256);
    assert_true(push("team/windows", f, &st, NULL) >= 1);
    snprintf(root, sizeof(root), "%s/store", dir);
    assert_int_equal(kestrel__store_open(&s, root), 0);
    assert_int_equal(kestrel__store_resolve(s, "team/windows", &m), 0);
    assert_int_equal(m->n_chunks, k);
    for (size_t i = 0; i < k; i++)
        assert_int_equal(m->chunks[i]->size, cuts[i] - (i ? cuts[i - 1] : 0));
    kestrel__manifest_free(m);
    kestrel__store_close(s);
    free(data);
}

/* Whether openat2 (Linux 5.6) may be used here (a seccomp filter may refuse it): with it, a link
 * anywhere in a member's path is refused. */
static int has_openat2(void)
{
#ifdef SYS_openat2
    uint64_t how[3] = { O_RDONLY | O_CLOEXEC, 0, 0 };   /* struct open_how: flags, mode, resolve */
    int fd = (int)syscall(SYS_openat2, AT_FDCWD, "/", how, sizeof(how));
    if (fd >= 0)
        close(fd);
    return fd >= 0;
#else
    return 0;
#endif
}

/* A file a push reads is opened without waiting (a FIFO put there is no regular file, at once),
 * a directory's member without following a link, and a regular file ends up in blocking mode. */
static void a_file_a_push_reads_is_opened_without_surprises(void **state)
{
    char fifo[128], link[128], file[128];
    struct stat st;
    int fd;
    (void)state;
    snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
    snprintf(link, sizeof(link), "%s/link", dir);
    snprintf(file, sizeof(file), "%s/plain", dir);
    write_file(file, "abc", 3);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(symlink(file, link), 0);
    fd = kestrel__file_open(fifo, 1, &st);   /* no writer: a blocking open would never return */
    assert_true(fd >= 0 && S_ISFIFO(st.st_mode));
    close(fd);
    assert_int_equal(kestrel__file_open(link, 1, &st), -1);
    assert_int_equal(errno, ELOOP);
    fd = kestrel__file_open(link, 0, &st);   /* a pushed file's own path may be a link */
    assert_true(fd >= 0 && S_ISREG(st.st_mode) && !(fcntl(fd, F_GETFL) & O_NONBLOCK));
    close(fd);
    {   /* a folder of a pushed directory swapped for a link to another: not followed out of the tree */
        char real[PATH_MAX], sub[PATH_MAX + 8], member[PATH_MAX + 16], other[PATH_MAX + 16];
        assert_non_null(realpath(dir, real));   /* members are opened by the tree's resolved path */
        snprintf(sub, sizeof(sub), "%s/sub", real);
        snprintf(other, sizeof(other), "%s/other", real);
        assert_int_equal(mkdir(other, 0700), 0);
        snprintf(member, sizeof(member), "%s/other/plain", real);
        write_file(member, "secret", 6);
        assert_int_equal(symlink("other", sub), 0);
        snprintf(member, sizeof(member), "%s/sub/plain", real);
        fd = kestrel__file_open(member, 0, &st);   /* followed where links are allowed */
        assert_true(fd >= 0);
        close(fd);
        fd = kestrel__file_open(member, 1, &st);
        if (has_openat2()) {   /* the link in the path is refused, with the push's error */
            assert_int_equal(fd, -1);
            assert_int_equal(errno, ELOOP);
            assert_int_equal(kestrel__file_open_regular(-1, member, 1, &st), KESTREL_EINVALID);
            assert_non_null(strstr(kestrel_error_last()->message, "or a folder in its path, is a symbolic link"));
        } else if (fd >= 0) {   /* Linux < 5.6: only the file itself is checked */
            close(fd);
        }
        unlink(sub);
        snprintf(member, sizeof(member), "%s/other/plain", real);
        unlink(member);
        rmdir(other);
    }
    unlink(fifo);
    unlink(link);
    unlink(file);
}

static void push_pull_versions_aliases_and_dedupe(void **state)
{
    size_t n = 32u << 20;
    uint8_t *data = random_bytes(n, 7);
    char f1[128], f2[128], out[128];
    kestrel_progress st;
    kestrel_model_versions *vl;
    kestrel_buf names = KESTREL_BUF_INIT;
    (void)state;
    snprintf(f1, sizeof(f1), "%s/v1.bin", dir);
    snprintf(f2, sizeof(f2), "%s/v2.bin", dir);
    snprintf(out, sizeof(out), "%s/out.bin", dir);
    write_file(f1, data, n);
    assert_int_equal(push("team/resnet", f1, &st, NULL), 1);
    assert_int_equal(st.bytes_done, n);
    assert_int_equal(st.bytes_new, n);
    /* the same bytes again: a new version, no new chunk */
    assert_int_equal(push("team/resnet", f1, &st, "production"), 2);
    assert_int_equal(st.bytes_new, 0);
    assert_int_equal(st.chunks_new, 0);
    /* 5 % of the bytes changed in 8 regions: only the chunks around them are stored again (about
     * 2 x 256 KiB of edge per region; on the 1 GiB file of bench/repo that is ~6 %, here ~18 %) */
    for (int r = 0; r < 8; r++)
        memset(data + (size_t)r * (n / 8) + 1000, r + 1, n / 160);
    write_file(f2, data, n);
    assert_int_equal(push("team/resnet", f2, &st, NULL), 3);
    if (!(st.bytes_new > 0 && st.bytes_new <= (int64_t)(n * 0.25)))
        fail_msg("5%% changed in 8 regions stored %lld of %zu bytes again", (long long)st.bytes_new, n);
    assert_int_equal(kestrel_model_pull(C, "team/resnet", out, NULL), 0);   /* latest */
    assert_true(same_file(out, f2));
    assert_int_equal(kestrel_model_pull(C, "team/resnet@production", out, NULL), 0);
    assert_true(same_file(out, f1));
    assert_int_equal(kestrel_model_pull(C, "team/resnet@1", out, NULL), 0);
    assert_true(same_file(out, f1));
    assert_int_equal(kestrel_model_versions_get(&vl, C, "team/resnet"), 0);
    assert_int_equal(kestrel_model_versions_count(vl), 3);
    assert_string_equal(kestrel_model_versions_at(vl, 1)->aliases, "production");
    assert_string_equal(kestrel_model_versions_at(vl, 2)->aliases, "latest");
    assert_string_equal(kestrel_model_versions_at(vl, 0)->metadata_json, "{\"framework\":\"keras\",\"job\":\"7\"}");
    assert_int_equal(kestrel_model_versions_at(vl, 0)->size, n);
    kestrel_model_versions_free(vl);
    /* one version by its ref, its listing alone */
    {
        static const struct { const char *ref; int64_t version; } one[] = {
            { "team/resnet", 3 }, { "team/resnet@latest", 3 }, { "team/resnet@production", 2 }, { "team/resnet@1", 1 }
        };
        for (size_t i = 0; i < sizeof(one) / sizeof(one[0]); i++) {
            assert_int_equal(kestrel_model_version_get(&vl, C, one[i].ref), 0);
            assert_int_equal(kestrel_model_versions_count(vl), 1);
            assert_int_equal(kestrel_model_versions_at(vl, 0)->version, one[i].version);
            kestrel_model_versions_free(vl);
        }
        assert_int_equal(kestrel_model_version_get(&vl, C, "team/resnet@production"), 0);
        assert_string_equal(kestrel_model_versions_at(vl, 0)->aliases, "production");
        kestrel_model_versions_free(vl);
        assert_int_equal(kestrel_model_version_get(&vl, C, "team/resnet@9"), KESTREL_ENOTFOUND);
        assert_null(vl);
        assert_int_equal(kestrel_model_version_get(&vl, C, "team/resnet@nope"), KESTREL_ENOTFOUND);
        assert_int_equal(kestrel_model_version_get(&vl, C, "team/resnet@"), KESTREL_EINVALID);
        assert_int_equal(kestrel_model_version_get(&vl, C, "Team/X"), KESTREL_EINVALID);
        assert_int_equal(kestrel_model_version_get(NULL, C, "team/resnet"), KESTREL_EMISUSE);
    }
    assert_int_equal(kestrel_model_alias_set(C, "team/resnet", "staging", 3), 0);
    assert_int_equal(kestrel_model_alias_set(C, "team/resnet", "staging", 9), KESTREL_ENOTFOUND);
    assert_int_equal(kestrel_model_alias_set(C, "team/resnet", "latest", 1), KESTREL_EINVALID);
    /* deleting the newest version takes its aliases and moves latest back */
    assert_int_equal(kestrel_model_delete(C, "team/resnet", 3), 0);
    assert_int_equal(kestrel_model_pull(C, "team/resnet@staging", out, NULL), KESTREL_ENOTFOUND);
    assert_int_equal(kestrel_model_pull(C, "team/resnet", out, NULL), 0);
    assert_true(same_file(out, f1));
    push("other", f1, &st, NULL);
    assert_int_equal(kestrel_model_list(&names, C), 0);
    assert_string_equal(names.ptr, "other\nteam/resnet\n");
    kestrel_buf_dispose(&names);
    free(data);
}

static void damaged_chunk_is_an_error_never_a_wrong_file(void **state)
{
    size_t n = 2u << 20;
    uint8_t *data = random_bytes(n, 9);
    char f[128], out[128], cmd[512];
    kestrel_progress st;
    DIR *d;
    struct dirent *e;
    (void)state;
    snprintf(f, sizeof(f), "%s/in.bin", dir);
    snprintf(out, sizeof(out), "%s/pulled.bin", dir);
    write_file(f, data, n);
    push("m", f, &st, NULL);
    /* flip a byte in one stored chunk */
    snprintf(cmd, sizeof(cmd), "c=$(find %s/store/chunks -type f | head -n 1) && printf 'X' | dd of=$c bs=1 seek=100 conv=notrunc 2>/dev/null",
             dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(kestrel_model_pull(C, "m", out, NULL), KESTREL_EPROTO);
    assert_non_null(strstr(kestrel_error_last()->message, "damaged"));
    assert_int_equal(access(out, F_OK), -1);
    d = opendir(dir);
    while ((e = readdir(d)) != NULL)
        assert_null(strstr(e->d_name, "kestrel-tmp"));   /* nothing half-written left behind */
    closedir(d);
    free(data);
}

/* Every chunk as stored, but a version whose file digest says otherwise (a repository's answer is
 * input too): the whole-file check refuses it, names no chunk, reports none, leaves nothing. */
static void a_whole_that_does_not_match_is_an_error_even_when_every_chunk_does(void **state)
{
    size_t n = 3u << 20;
    uint8_t *data = random_bytes(n, 11);
    char f[128], out[128], path[256], json[8192], *at;
    kestrel_progress st;
    FILE *fp;
    (void)state;
    snprintf(f, sizeof(f), "%s/in.bin", dir);
    snprintf(out, sizeof(out), "%s/pulled.bin", dir);
    write_file(f, data, n);
    push("w", f, &st, NULL);
    /* the version's top-level digest (its first "sha256" field) turned into another valid one */
    snprintf(path, sizeof(path), "%s/store/models/w/versions/1.json", dir);
    assert_non_null(fp = fopen(path, "r+"));
    json[fread(json, 1, sizeof(json) - 1, fp)] = '\0';
    assert_non_null(at = strstr(json, "\"sha256\""));
    assert_non_null(at = strchr(at + 8, '"'));
    at[1] = at[1] == '0' ? '1' : '0';
    assert_int_equal(fseek(fp, 0, SEEK_SET), 0);
    assert_int_equal(fwrite(json, 1, strlen(json), fp), strlen(json));
    assert_int_equal(fclose(fp), 0);
    snprintf(path, sizeof(path), "%s/store/models/w/versions/1.pb", dir);   /* read from the JSON changed */
    assert_int_equal(unlink(path), 0);
    assert_int_equal(kestrel_model_pull(C, "w", out, NULL), KESTREL_EPROTO);
    assert_non_null(strstr(kestrel_error_last()->message, "does not match its digest"));
    assert_null(strstr(kestrel_error_last()->message, "damaged"));
    assert_int_equal(access(out, F_OK), -1);
    free(data);
}

static void bad_input(void **state)
{
    kestrel_client *http;
    char f[128], out[128];
    kestrel_job *j;
    (void)state;
    snprintf(f, sizeof(f), "%s/x.bin", dir);
    snprintf(out, sizeof(out), "%s/y.bin", dir);
    write_file(f, "abc", 3);
    assert_int_equal(kestrel_model_push(NULL, C, "Team/Upper", f, NULL), KESTREL_EINVALID);
    assert_int_equal(kestrel_model_push(NULL, C, "a/../b", f, NULL), KESTREL_EINVALID);
    assert_int_equal(kestrel_model_push(NULL, C, "a//b", f, NULL), KESTREL_EINVALID);
    assert_int_equal(kestrel_model_push(NULL, C, ".hidden", f, NULL), KESTREL_EINVALID);
    assert_int_equal(kestrel_model_push(NULL, C, "ok", "/nonexistent/file", NULL), KESTREL_EIO);
    assert_int_equal(kestrel_model_pull(C, "nothing-here", out, NULL), KESTREL_ENOTFOUND);
    assert_int_equal(kestrel_model_pull(C, "ok@x y", out, NULL), KESTREL_EINVALID);
    {
        kestrel_transfer_options o = KESTREL_TRANSFER_OPTIONS_INIT;
        o.metadata_json = "[1,2]";
        assert_int_equal(kestrel_model_push(NULL, C, "ok", f, &o), KESTREL_EINVALID);
    }
    assert_int_equal(kestrel_job_get(&j, C, 1), KESTREL_EUNSUPPORTED);   /* jobs need a kestreld */
    assert_int_equal(kestrel_client_new(&http, "http://127.0.0.1:1", NULL), 0);
    assert_int_equal(kestrel_model_push(NULL, http, "ok", f, NULL), KESTREL_ENET);   /* over HTTP: nobody listens */
    /* a reference's version or alias is checked before it goes anywhere near a URL or a path */
    assert_int_equal(kestrel_model_pull(http, "ok@../../jobs", out, NULL), KESTREL_EINVALID);
    assert_int_equal(kestrel_model_pull(http, "ok@1?x=2", out, NULL), KESTREL_EINVALID);
    assert_int_equal(kestrel_model_pull(http, "ok@0", out, NULL), KESTREL_EINVALID);
    assert_int_equal(kestrel_model_pull(C, "ok@a#b", out, NULL), KESTREL_EINVALID);
    kestrel_client_free(http);
}

static void concurrent_writers_get_distinct_versions(void **state)
{
    char f[4][128], out[128];
    int64_t seen[5] = { 0 };
    kestrel_model_versions *vl;
    (void)state;
    for (int i = 0; i < 4; i++) {
        uint8_t *d = random_bytes(1u << 20, 100 + (uint64_t)i);
        snprintf(f[i], sizeof(f[i]), "%s/c%d.bin", dir, i);
        write_file(f[i], d, 1u << 20);
        free(d);
    }
    for (int i = 0; i < 4; i++) {
        if (fork() == 0) {
            kestrel_client *c;
            int64_t v = 0;
            kestrel_client_new(&c, url, NULL);
            _exit(kestrel_model_push(&v, c, "shared/model", f[i], NULL) == 0 && v >= 1 && v <= 4 ? 0 : 1);
        }
    }
    for (int i = 0; i < 4; i++) {
        int st;
        wait(&st);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    assert_int_equal(kestrel_model_versions_get(&vl, C, "shared/model"), 0);
    assert_int_equal(kestrel_model_versions_count(vl), 4);
    for (size_t i = 0; i < 4; i++) {
        int64_t v = kestrel_model_versions_at(vl, i)->version;
        char ref[64];
        int match = 0;
        assert_true(v >= 1 && v <= 4 && !seen[v]);
        seen[v] = 1;
        snprintf(ref, sizeof(ref), "shared/model@%lld", (long long)v);
        snprintf(out, sizeof(out), "%s/c.out", dir);
        assert_int_equal(kestrel_model_pull(C, ref, out, NULL), 0);
        for (int k = 0; k < 4; k++)
            match |= same_file(out, f[k]);
        assert_true(match);
    }
    kestrel_model_versions_free(vl);
}

/* A directory through file://: pushed as a tree, pulled back file by file, replaced whole. */
static void directory_round_trip(void **state)
{
    char src[128], path[256], out[128], got[300];
    uint8_t *big = random_bytes(3u << 20, 7);
    int64_t v = 0;
    const char *files[] = { "a.bin", "empty", "sub/deep/c.bin", "sub/x.txt" };
    (void)state;
    snprintf(src, sizeof(src), "%s/src", dir);
    put_file(src, "a.bin", big, 3u << 20);
    put_file(src, "empty", "", 0);
    put_file(src, "sub/deep/c.bin", big + 1000, 300000);
    put_file(src, "sub/x.txt", "hello\n", 6);
    assert_int_equal(kestrel_model_push(&v, C, "team/tree", src, NULL), 0);
    assert_int_equal(v, 1);
    snprintf(out, sizeof(out), "%s/out", dir);
    assert_int_equal(kestrel_model_pull(C, "team/tree", out, NULL), 0);
    for (size_t i = 0; i < 4; i++) {
        snprintf(path, sizeof(path), "%s/%s", src, files[i]);
        snprintf(got, sizeof(got), "%s/%s", out, files[i]);
        assert_true(same_file(path, got));
    }
    /* a second version without sub/x.txt: pulling it over the first leaves no trace of that file */
    snprintf(path, sizeof(path), "%s/sub/x.txt", src);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(kestrel_model_push(&v, C, "team/tree", src, NULL), 0);
    assert_int_equal(kestrel_model_pull(C, "team/tree@2", out, NULL), 0);
    snprintf(got, sizeof(got), "%s/sub/x.txt", out);
    assert_int_not_equal(access(got, F_OK), 0);
    /* a symlink is refused, nothing is stored */
    snprintf(path, sizeof(path), "%s/link", src);
    assert_int_equal(symlink("a.bin", path), 0);
    assert_int_equal(kestrel_model_push(&v, C, "team/tree", src, NULL), KESTREL_EINVALID);
    free(big);
}

/* A pulled manifest's fields besides its lists are held in memory while it is read a window at a time
 * (manifest_file.c): up to KESTREL__MANIFEST_HEAD_MAX, then refused, with what is wrong. */
static void pulled_manifest_head_is_bounded(void **state)
{
    Kestrel__V1__Manifest m = KESTREL__V1__MANIFEST__INIT;
    kestrel_buf b = KESTREL_BUF_INIT;
    kestrel__mfile *f;
    char alias[1025], sha[65];
    size_t n = KESTREL__MANIFEST_HEAD_MAX / 1024 + 8;
    char **aliases = calloc(n, sizeof(*aliases));
    (void)state;
    assert_non_null(aliases);
    memset(alias, 'a', 1024);
    alias[1024] = '\0';
    memset(sha, 'e', 64);
    sha[64] = '\0';
    for (size_t i = 0; i < n; i++)
        aliases[i] = alias;
    m.name = "team/x", m.sha256 = sha, m.aliases = aliases;
    for (int round = 0; round < 2; round++) {
        m.n_aliases = round == 0 ? 3 : n;   /* within the bound, then past it */
        b.size = 0;
        assert_int_equal(kestrel__wire_pack(&b, &m.base), 0);
        assert_int_equal(kestrel__mfile_open(&f), 0);
        assert_int_equal(pwrite(kestrel__mfile_fd(f), b.ptr, b.size, 0), (ssize_t)b.size);
        if (round == 0) {
            assert_int_equal(kestrel__mfile_scan(f), 0);
            assert_int_equal(kestrel__mfile_head(f)->n_aliases, 3);
            assert_string_equal(kestrel__mfile_head(f)->name, "team/x");
        } else {
            assert_int_equal(kestrel__mfile_scan(f), KESTREL_EPROTO);
            assert_non_null(strstr(kestrel_error_last()->message, "besides the lists take more than 4 MiB"));
        }
        kestrel__mfile_close(f);
    }
    kestrel_buf_dispose(&b);
    free(aliases);
}

/* A file that is also a folder of a later path, with paths between them that sort between ("a",
 * "a-b", "a/c": '-' sorts before '/'), however deep; and lookalikes that are no such thing. The check
 * reads the files in order, once (kestrel__mcheck, a pull's check of a manifest it does not hold). */
static void tree_files_that_are_folders(void **state)
{
    static const struct {
        const char *paths[5];
        int ok;
    } cases[] = {
        { { "a", "a-b", "a/c" }, 0 },
        { { "a", "a!", "a-b", "a.c", "a/c" }, 0 },
        { { "a", "a-b", "a-b/c" }, 0 },
        { { "x", "x-y/z", "x/y/z" }, 0 },
        { { "d/e", "d/e-f", "d/e/g" }, 0 },
        { { "a", "a!", "a-b/c", "a0", "b/c" }, 1 },
        { { "a-b/c", "a/c", "a0/a" }, 1 },
        { { "a!/b", "a", "a0" }, 1 },   /* not sorted: refused for that */
    };
    (void)state;
    for (size_t k = 0; k < sizeof(cases) / sizeof(*cases); k++) {
        Kestrel__V1__Manifest m = KESTREL__V1__MANIFEST__INIT;
        Kestrel__V1__TreeFile f[5], *fp[5];
        char sha[65], d[65];
        size_t n = 0;
        memset(sha, 'e', 64);
        sha[64] = '\0';
        while (n < 5 && cases[k].paths[n]) {
            kestrel__v1__tree_file__init(&f[n]);
            f[n].path = (char *)cases[k].paths[n];
            f[n].sha256 = sha;
            fp[n] = &f[n];
            n++;
        }
        m.files = fp, m.n_files = n;
        kestrel__manifest_tree_digest(fp, n, d);
        m.sha256 = d;
        if (k == sizeof(cases) / sizeof(*cases) - 1) {
            assert_int_equal(kestrel__manifest_check(&m), KESTREL_EINVALID);
            assert_non_null(strstr(kestrel_error_last()->message, "sorted"));
        } else if (cases[k].ok) {
            assert_int_equal(kestrel__manifest_check(&m), 0);
        } else {
            assert_int_equal(kestrel__manifest_check(&m), KESTREL_EINVALID);
            assert_non_null(strstr(kestrel_error_last()->message, "is both a file and a directory"));
        }
    }
}

/* Tree manifests: what a path may be, and listings that do not add up (kestrel__manifest_check, as
 * kestreld runs it on a commit and a pull on what it resolved). */
static void tree_paths_and_listings(void **state)
{
    Kestrel__V1__Manifest m = KESTREL__V1__MANIFEST__INIT;
    Kestrel__V1__TreeFile f[3], *fp[3] = { &f[0], &f[1], &f[2] };
    Kestrel__V1__ChunkRef c[3], *cp[3] = { &c[0], &c[1], &c[2] };
    char sha[3][65], cd[3][65], d1[65], d2[65];
    (void)state;
    assert_true(kestrel__tree_path_valid("a") && kestrel__tree_path_valid("sub/x.bin") &&
                kestrel__tree_path_valid(".hidden/..x"));
    assert_false(kestrel__tree_path_valid("") || kestrel__tree_path_valid("/abs") || kestrel__tree_path_valid("a/") ||
                 kestrel__tree_path_valid("../a") || kestrel__tree_path_valid("a/../b") ||
                 kestrel__tree_path_valid("a//b") || kestrel__tree_path_valid("./a") || kestrel__tree_path_valid(NULL));
    for (int i = 0; i < 3; i++) {
        kestrel__v1__tree_file__init(&f[i]);
        kestrel__v1__chunk_ref__init(&c[i]);
        memset(sha[i], 'a' + i, 64);
        sha[i][64] = '\0';
        memset(cd[i], '0' + i, 64);
        cd[i][64] = '\0';
        f[i].sha256 = sha[i];
        c[i].digest = cd[i];
    }
    f[0].path = "a", f[0].size = 10, f[0].mode = 0644, f[0].chunks = 1;
    f[1].path = "b/c", f[1].size = 0, f[1].mode = 0600, f[1].chunks = 0;
    f[2].path = "b/d", f[2].size = 5, f[2].mode = 0644, f[2].chunks = 2;
    c[0].size = 10, c[1].size = 2, c[2].size = 3;
    m.files = fp, m.n_files = 3, m.chunks = cp, m.n_chunks = 3, m.size = 15;
    kestrel__manifest_tree_digest(fp, 3, d1);
    m.sha256 = d1;
    assert_int_equal(kestrel__manifest_check(&m), 0);
    sha[1][10] = 'X';                                                 /* not a SHA-256 in hex */
    assert_int_equal(kestrel__manifest_check(&m), KESTREL_EINVALID);
    sha[1][10] = 'b';
    m.size = 16;                                                      /* sizes do not add up */
    assert_int_equal(kestrel__manifest_check(&m), KESTREL_EINVALID);
    m.size = 15;
    c[0].size = 9, c[1].size = 3;                                     /* nor a file's chunks */
    assert_int_equal(kestrel__manifest_check(&m), KESTREL_EINVALID);
    c[0].size = 10, c[1].size = 2;
    f[2].chunks = 1;                                                  /* chunk counts do not add up */
    assert_int_equal(kestrel__manifest_check(&m), KESTREL_EINVALID);
    f[2].chunks = 2;
    f[1].path = "b";                                                  /* "b" is a file and a directory */
    assert_int_equal(kestrel__manifest_check(&m), KESTREL_EINVALID);
    f[1].path = "a";                                                  /* duplicate, unsorted */
    assert_int_equal(kestrel__manifest_check(&m), KESTREL_EINVALID);
    f[1].path = "b/c";
    f[1].mode = 04755;                                                /* setuid is not stored */
    assert_int_equal(kestrel__manifest_check(&m), KESTREL_EINVALID);
    f[1].mode = 0600;
    assert_int_equal(kestrel__manifest_check(&m), 0);
    f[2].mode = 0755;                                                 /* the digest covers modes, */
    kestrel__manifest_tree_digest(fp, 3, d2);
    assert_string_not_equal(d1, d2);
    assert_int_equal(kestrel__manifest_check(&m), KESTREL_EINVALID);   /* so the listing is not its digest's */
    f[2].mode = 0644;
    f[2].path = "b/e";                                                /* and names */
    kestrel__manifest_tree_digest(fp, 3, d2);
    assert_string_not_equal(d1, d2);
    f[2].path = "b/d";
    assert_int_equal(kestrel__manifest_check(&m), 0);
    f[0].chunks = 1, f[1].chunks = 0, f[2].chunks = INT64_MAX;        /* counts that wrap: refused, never read past */
    assert_int_equal(kestrel__manifest_check(&m), KESTREL_EINVALID);
    f[2].chunks = 2, f[2].size = INT64_MAX;                           /* sizes that wrap */
    assert_int_equal(kestrel__manifest_check(&m), KESTREL_EINVALID);
    f[2].size = 5;
    /* a commit may leave whole-file digests to the repository; a stored or pulled manifest may not */
    f[2].sha256 = "";
    m.sha256 = "";
    assert_int_equal(kestrel__manifest_check_commit(&m), 0);
    assert_true(kestrel__manifest_digests_open(&m));
    assert_int_equal(kestrel__manifest_check(&m), KESTREL_EINVALID);
    m.sha256 = d1;                                                    /* a listing digest beside an open one: */
    assert_int_equal(kestrel__manifest_check_commit(&m), 0);          /* checked once the repository filled it */
    f[2].sha256 = sha[2];
    assert_int_equal(kestrel__manifest_check_commit(&m), 0);
    assert_false(kestrel__manifest_digests_open(&m));
    m.sha256 = "";                                                    /* the listing's own, open */
    assert_int_equal(kestrel__manifest_check_commit(&m), 0);
    assert_int_equal(kestrel__manifest_check(&m), KESTREL_EINVALID);
    m.sha256 = d1;
    f[1].path = "../b";                                               /* an open digest excuses nothing else */
    f[2].sha256 = "";
    assert_int_equal(kestrel__manifest_check_commit(&m), KESTREL_EINVALID);
    f[1].path = "b/c";
    f[2].sha256 = "xyz";                                              /* given, it must be a SHA-256 */
    assert_int_equal(kestrel__manifest_check_commit(&m), KESTREL_EINVALID);
    f[2].sha256 = sha[2];
    assert_int_equal(kestrel__manifest_check(&m), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(chunks_have_bounded_sizes_and_survive_an_insertion),
        cmocka_unit_test(the_cuts_are_those_of_every_earlier_build),
        cmocka_unit_test(the_chunker_cuts_where_its_definition_does),
        cmocka_unit_test(tree_paths_and_listings),
        cmocka_unit_test(tree_files_that_are_folders),
        cmocka_unit_test(pulled_manifest_head_is_bounded),
        cmocka_unit_test_setup_teardown(a_push_cuts_a_file_as_the_chunker_does, setup, teardown),
        cmocka_unit_test_setup_teardown(a_file_a_push_reads_is_opened_without_surprises, setup, teardown),
        cmocka_unit_test_setup_teardown(directory_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(push_pull_versions_aliases_and_dedupe, setup, teardown),
        cmocka_unit_test_setup_teardown(damaged_chunk_is_an_error_never_a_wrong_file, setup, teardown),
        cmocka_unit_test_setup_teardown(a_whole_that_does_not_match_is_an_error_even_when_every_chunk_does, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(bad_input, setup, teardown),
        cmocka_unit_test_setup_teardown(concurrent_writers_get_distinct_versions, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

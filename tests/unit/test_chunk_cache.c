/* Unit tests: the pull cache's bounds on its tree packs (lib/repo/chunk_cache.c). A tree pack's index
 * is made here at the size a pulled directory's would have (a sparse file: trimming looks at sizes
 * and times only), so that 64 MiB of them cost nothing to make. */
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include "chunk_cache.h"
#include "own_dir.h"
#include "store.h"

static char dir[160], packs[200];

/* packs/ID + suffix (ID: i as a pack's 32 hex digits), size bytes (sparse), last used at used. */
static void pack_file(int i, const char *suffix, off_t size, time_t used)
{
    char path[256];
    struct timespec t[2] = { { used, 0 }, { used, 0 } };
    int fd;
    snprintf(path, sizeof(path), "%s/%032x%s", packs, i, suffix);
    assert_true((fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600)) >= 0);
    assert_int_equal(ftruncate(fd, size), 0);
    assert_int_equal(futimens(fd, t), 0);
    close(fd);
}

/* A tree pack: its index alone. */
static void tree_pack(int i, off_t size, time_t used)
{
    pack_file(i, ".tree", size, used);
}

/* A file pack: its file of size bytes, and its index, whose time says when it was last used. */
static void file_pack(int i, off_t size, time_t used)
{
    pack_file(i, "", size, used);
    pack_file(i, ".idx", 0, used);
}

/* Whether packs/ID + suffix is still there. */
static int pack_kept(int i, const char *suffix)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%032x%s", packs, i, suffix);
    return access(path, F_OK) == 0;
}

static int kept(int i)
{
    return pack_kept(i, ".tree");
}

/* A fresh cache in a folder of its own under $TMPDIR (else /tmp), KESTREL_CACHE_MAX as given (NULL: the
 * default, 10G). */
static void cache_in_fresh_folder(kestrel__chunk_cache *cache, const char *max)
{
    char root[192];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/kestrel-cache-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_non_null(mkdtemp(dir));
    snprintf(root, sizeof(root), "%s/cache", dir);
    snprintf(packs, sizeof(packs), "%s/packs", root);
    setenv("KESTREL_CACHE_DIR", root, 1);
    if (max)
        setenv("KESTREL_CACHE_MAX", max, 1);
    else
        unsetenv("KESTREL_CACHE_MAX");
    kestrel__cache_open(cache);
    assert_true(cache->on);
}

static void tree_packs_keep_the_newest_within_their_count_and_their_bytes(void **state)
{
    kestrel__chunk_cache cache;
    (void)state;
    cache_in_fresh_folder(&cache, NULL);   /* 10G: far above all of them */
    /* three indexes of 30 MiB (about 280,000 small files each): the newest two fit in 64 MiB */
    for (int i = 0; i < 3; i++)
        tree_pack(i, 30 << 20, 1000 + i);
    kestrel__cache_trim(&cache);
    assert_false(kept(0));
    assert_true(kept(1) && kept(2));
    /* 40 small ones, newer: the newest 32 stay, and nothing older */
    for (int i = 10; i < 50; i++)
        tree_pack(i, 100, 2000 + i);
    kestrel__cache_trim(&cache);
    for (int i = 0; i < 50; i++)
        assert_int_equal(kept(i), i >= 18);
    kestrel__cache_close(&cache);
    kestrel__rm_tree(dir);
}

/* A tree pack's index counts toward KESTREL_CACHE_MAX with the packs' bytes, least recently used
 * first, whichever kind that is. */
static void tree_indexes_and_file_packs_go_least_recently_used_first(void **state)
{
    kestrel__chunk_cache cache;
    (void)state;
    cache_in_fresh_folder(&cache, "1M");
    file_pack(1, 600 << 10, 1000);   /* older than the tree: it goes */
    tree_pack(2, 600 << 10, 2000);
    kestrel__cache_trim(&cache);
    assert_false(pack_kept(1, ""));
    assert_true(kept(2));
    file_pack(3, 600 << 10, 3000);   /* newer than the tree: the tree goes */
    kestrel__cache_trim(&cache);
    assert_false(kept(2));
    assert_true(pack_kept(3, ""));
    kestrel__cache_close(&cache);
    kestrel__rm_tree(dir);
}

/* KESTREL_CACHE_MAX: a size with an optional unit, 0 for no caches, else the default (10 GiB), never
 * a value past int64_t (a review: NaN, inf and 1e30G were cast as they were). */
static void the_cache_bound_is_a_size_or_the_default(void **state)
{
    static const struct { const char *set; int64_t want; } cases[] = {
        { NULL, 10ll << 30 }, { "0", 0 }, { "10G", 10ll << 30 }, { "512M", 512ll << 20 }, { "1.5k", 1536 },
        { "garbage", 10ll << 30 }, { "-1", 10ll << 30 }, { "12X", 10ll << 30 }, { "nan", 10ll << 30 },
        { "inf", 10ll << 30 }, { "1e30G", 10ll << 30 }, { "9e18", 9000000000000000000ll },
    };
    char was[64] = "";
    const char *env = getenv("KESTREL_CACHE_MAX");
    (void)state;
    if (env)
        snprintf(was, sizeof(was), "%s", env);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (cases[i].set)
            setenv("KESTREL_CACHE_MAX", cases[i].set, 1);
        else
            unsetenv("KESTREL_CACHE_MAX");
        if (kestrel__cache_max() != cases[i].want)
            fail_msg("KESTREL_CACHE_MAX=%s: %lld, not %lld", cases[i].set ? cases[i].set : "(unset)",
                     (long long)kestrel__cache_max(), (long long)cases[i].want);
    }
    if (env)
        setenv("KESTREL_CACHE_MAX", was, 1);
    else
        unsetenv("KESTREL_CACHE_MAX");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tree_packs_keep_the_newest_within_their_count_and_their_bytes),
        cmocka_unit_test(tree_indexes_and_file_packs_go_least_recently_used_first),
        cmocka_unit_test(the_cache_bound_is_a_size_or_the_default),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

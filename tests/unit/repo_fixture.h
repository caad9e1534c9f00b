/* tests/unit/repo_fixture.h - what the repository's unit tests share: a file:// store in a fresh
 * temp folder (setup, teardown), bytes and files to push. */
#ifndef KESTREL_TEST_REPO_FIXTURE_H
#define KESTREL_TEST_REPO_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "store.h"

static char dir[64], url[128];
static kestrel_client *C;

static inline uint8_t *random_bytes(size_t n, uint64_t seed)
{
    uint8_t *b = malloc(n);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        b[i] = (uint8_t)(seed >> 56);
    }
    return b;
}

static inline void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

/* root/rel holding n bytes of data, its folders made first. */
static inline void put_file(const char *root, const char *rel, const void *data, size_t n)
{
    char path[512];
    const char *slash = strrchr(rel, '/');
    if (slash) {
        snprintf(path, sizeof(path), "%s/%.*s", root, (int)(slash - rel), rel);
        assert_int_equal(kestrel__mkdirs(path, 0755), 0);
    } else {
        assert_int_equal(kestrel__mkdirs(root, 0755), 0);
    }
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    write_file(path, data, n);
}

static inline int setup(void **state)
{
    kestrel_client_options o = KESTREL_CLIENT_OPTIONS_INIT;
    (void)state;
    kestrel_init();
    snprintf(dir, sizeof(dir), "/tmp/kestrel-repo-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(url, sizeof(url), "file://%s/store", dir);
    assert_int_equal(kestrel_client_new(&C, url, &o), 0);
    return 0;
}

static inline int teardown(void **state)
{
    char cmd[128];
    (void)state;
    kestrel_client_free(C);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    kestrel_shutdown();
    return 0;
}

#endif

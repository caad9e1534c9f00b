/* bench/bench_store_floor.c - the floor the store's format sets on a push: kestreld's own store
 * (kestrel__store_put_chunk, then kestrel__store_sync) writing a file's bytes as chunk files of one
 * size, with nothing else: no hashing, no chunking, no network. bench/repo.py runs it beside dd on
 * the same bytes, so the push can be read against what its store alone costs on this disk.
 *
 *     bench_store_floor SRC STORE_DIR CHUNK_BYTES     prints the seconds it took (reading SRC too)
 *
 * The names are made up (64 hex digits spread over the 256 folders as SHA-256 spreads them), never
 * a real chunk's: STORE_DIR is a store of its own, for this run only. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "store.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    kestrel__store *s = NULL;
    char hex[KESTREL__HEX_LEN + 1];
    long chunk = argc == 4 ? strtol(argv[3], NULL, 10) : 0;
    char *buf;
    int fd;
    double t0;
    uint64_t n = 0;
    if (chunk <= 0 || chunk > (64L << 20)) {
        fprintf(stderr, "usage: %s SRC STORE_DIR CHUNK_BYTES (1 to 64 MiB)\n", argv[0]);
        return 2;
    }
    if ((buf = malloc((size_t)chunk)) == NULL || (fd = open(argv[1], O_RDONLY | O_CLOEXEC)) < 0) {
        perror(argv[1]);
        return 1;
    }
    t0 = now_s();
    if (kestrel__store_open(&s, argv[2]) < 0) {
        fprintf(stderr, "%s: %s\n", argv[2], kestrel_error_last()->message);
        return 1;
    }
    for (;;) {
        size_t got = 0;
        ssize_t r = 1;
        while (got < (size_t)chunk && (r = read(fd, buf + got, (size_t)chunk - got)) > 0)
            got += (size_t)r;
        if (r < 0) {
            perror(argv[1]);
            return 1;
        }
        if (got == 0)
            break;
        snprintf(hex, sizeof(hex), "%02x%062llx", (unsigned)((n * 2654435761u) >> 8) & 0xffu, (unsigned long long)n);
        n++;
        if (kestrel__store_put_chunk(s, hex, buf, got) < 0) {
            fprintf(stderr, "%s\n", kestrel_error_last()->message);
            return 1;
        }
        if (got < (size_t)chunk)
            break;
    }
    if (kestrel__store_sync(s) < 0) {
        fprintf(stderr, "%s\n", kestrel_error_last()->message);
        return 1;
    }
    printf("%.3f\n", now_s() - t0);
    kestrel__store_close(s);
    close(fd);
    free(buf);
    return 0;
}

/* lib/filehash.c - whole-file SHA-256 (OpenSSL EVP) on a helper thread. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <openssl/evp.h>
#include "filehash.h"
#include "internal.h"

#define HASH_BUF (4u * 1024 * 1024)

struct kestrel__filehash {
    pthread_t thread;
    int fd;
    int stop;                /* set (atomically) to abandon the hash */
    int err;                 /* errno of a failed read, -1 for an OpenSSL failure */
    long long size;
    unsigned char md[EVP_MAX_MD_SIZE];
};

static void *hash_main(void *arg)
{
    kestrel__filehash *h = arg;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char *buf = malloc(HASH_BUF);
    unsigned int n = 0;
    if (ctx == NULL || buf == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1)
        h->err = -1;
    while (h->err == 0 && !__atomic_load_n(&h->stop, __ATOMIC_RELAXED)) {
        ssize_t r = read(h->fd, buf, HASH_BUF);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            h->err = errno;
        if (r <= 0)
            break;
        h->size += r;
        if (EVP_DigestUpdate(ctx, buf, (size_t)r) != 1)
            h->err = -1;
    }
    if (h->err == 0 && EVP_DigestFinal_ex(ctx, h->md, &n) != 1)
        h->err = -1;
    EVP_MD_CTX_free(ctx);
    free(buf);
    return NULL;
}

int kestrel__filehash_start(kestrel__filehash **out, const char *path)
{
    kestrel__filehash *h = calloc(1, sizeof(*h));
    *out = NULL;
    if (h == NULL)
        return kestrel__error_oom();
    if ((h->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        int e = errno;
        free(h);
        return kestrel__error_set(KESTREL_EIO, "cannot read %s: %s", path, strerror(e));
    }
    posix_fadvise(h->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    if (pthread_create(&h->thread, NULL, hash_main, h) != 0) {
        close(h->fd);
        free(h);
        return kestrel__error_oom();
    }
    *out = h;
    return 0;
}

int kestrel__filehash_finish(kestrel__filehash *h, long long expect_size, char hex[65])
{
    int rc = 0;
    if (h == NULL)
        return 0;
    if (expect_size < 0)
        __atomic_store_n(&h->stop, 1, __ATOMIC_RELAXED);
    pthread_join(h->thread, NULL);
    close(h->fd);
    if (h->err > 0)
        rc = kestrel__error_set(KESTREL_EIO, "cannot read the file: %s", strerror(h->err));
    else if (h->err < 0)
        rc = kestrel__error_oom();
    else if (h->size != expect_size && expect_size >= 0)
        rc = kestrel__error_set(KESTREL_EIO, "the file changed while it was pushed (%lld bytes, then %lld)",
                                expect_size, h->size);
    else
        for (int i = 0; i < 32; i++)
            snprintf(hex + 2 * i, 3, "%02x", h->md[i]);
    free(h);
    return rc;
}

/* lib/repo/filehash.c - whole-file SHA-256 (OpenSSL EVP) on a helper thread. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <openssl/evp.h>
#include "file_open.h"
#include "filehash.h"
#include "internal.h"

#define HASH_BUF (4u * 1024 * 1024)

struct kestrel__filehash {
    pthread_t thread;
    pthread_mutex_t mu;      /* follow mode: guards ready */
    pthread_cond_t cv;
    int follow;              /* hash only up to ready, which the caller advances */
    long long ready;         /* bytes from offset 0 that may be hashed */
    int done;                /* ready is final */
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
        size_t want = HASH_BUF;
        ssize_t r;
        if (h->follow) {
            long long ready;
            int done;
            pthread_mutex_lock(&h->mu);
            while (!h->done && h->ready <= h->size && !__atomic_load_n(&h->stop, __ATOMIC_RELAXED))
                pthread_cond_wait(&h->cv, &h->mu);
            ready = h->ready;
            done = h->done;
            pthread_mutex_unlock(&h->mu);
            if (ready <= h->size) {
                if (done || __atomic_load_n(&h->stop, __ATOMIC_RELAXED))
                    break;
                continue;
            }
            if (ready - h->size < (long long)want)
                want = (size_t)(ready - h->size);
        }
        r = pread(h->fd, buf, want, h->size);
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

static int start(kestrel__filehash **out, int fd, int follow)
{
    kestrel__filehash *h = calloc(1, sizeof(*h));
    *out = NULL;
    if (h == NULL) {
        close(fd);
        return kestrel__error_oom();
    }
    h->fd = fd;
    h->follow = follow;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    posix_fadvise(h->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    if (pthread_create(&h->thread, NULL, hash_main, h) != 0) {
        close(h->fd);
        free(h);
        return kestrel__error_oom();
    }
    *out = h;
    return 0;
}

int kestrel__filehash_start(kestrel__filehash **out, const char *path, int nofollow)
{
    struct stat st;
    int fd = kestrel__file_open_regular(-1, path, nofollow, &st);
    *out = NULL;
    return fd < 0 ? fd : start(out, fd, 0);
}

int kestrel__filehash_follow(kestrel__filehash **out, int fd)
{
    int own = dup(fd);
    *out = NULL;
    if (own < 0)
        return kestrel__error_sys(KESTREL_EIO, errno, "cannot hash the file");
    return start(out, own, 1);
}

void kestrel__filehash_advance(kestrel__filehash *h, long long ready)
{
    pthread_mutex_lock(&h->mu);
    if (ready > h->ready) {
        h->ready = ready;
        pthread_cond_signal(&h->cv);
    }
    pthread_mutex_unlock(&h->mu);
}

int kestrel__filehash_finish(kestrel__filehash *h, long long expect_size, char hex[65])
{
    int rc = 0;
    if (h == NULL)
        return 0;
    pthread_mutex_lock(&h->mu);
    if (expect_size < 0)
        __atomic_store_n(&h->stop, 1, __ATOMIC_RELAXED);
    else if (h->follow) {
        h->ready = expect_size;   /* everything is written: hash to the end */
        h->done = 1;
    }
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->thread, NULL);
    close(h->fd);
    if (h->err > 0)
        rc = kestrel__error_sys(KESTREL_EIO, h->err, "cannot read the file");
    else if (h->err < 0)
        rc = kestrel__error_oom();
    else if (h->size != expect_size && expect_size >= 0)
        rc = kestrel__error_set(KESTREL_EIO, "the file changed while it was pushed (%lld bytes, then %lld)",
                                expect_size, h->size);
    else
        kestrel__hex(h->md, 32, hex);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h);
    return rc;
}

/* lib/repo/store.c - the filesystem store (layout and guarantees in store.h). */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <fcntl.h>
#include <pthread.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/evp.h>
#include "repo.h"
#include "chunk.h"
#include "store.h"

struct kestrel__store {
    char root[PATH_MAX];
    int fd;             /* for syncfs */
    int sole_writer;    /* this process is the only writer (kestreld): sync only what it wrote */
    long unsynced;      /* chunks written since the last sync (atomic) */
    pthread_mutex_t sync_mu;
};

int kestrel__store_open(kestrel__store **out, const char *root)
{
    kestrel__store *s = calloc(1, sizeof(*s));
    char path[PATH_MAX];
    if (s == NULL)
        return kestrel__error_oom();
    snprintf(s->root, sizeof(s->root), "%s", root);
    snprintf(path, sizeof(path), "%s/chunks", root);
    if (kestrel__mkdirs(path, 0755) < 0) {
        int rc = kestrel__io_error("cannot create", path);
        free(s);
        return rc;
    }
    snprintf(path, sizeof(path), "%s/models", root);
    if (kestrel__mkdirs(path, 0755) < 0 || (s->fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        int rc = kestrel__io_error("cannot open", root);
        free(s);
        return rc;
    }
    pthread_mutex_init(&s->sync_mu, NULL);
    *out = s;
    return 0;
}

void kestrel__store_close(kestrel__store *s)
{
    if (s) {
        pthread_mutex_destroy(&s->sync_mu);
        close(s->fd);
        free(s);
    }
}

void kestrel__store_chunk_path(const kestrel__store *s, const char *hex, char *out, size_t n)
{
    snprintf(out, n, "%s/chunks/%.2s/%s", s->root, hex, hex + 2);
}

const char *kestrel__store_root(const kestrel__store *s)
{
    return s->root;
}

/* Refreshes the chunk's mtime: a push that now relies on it keeps it from the collector. */
int kestrel__store_has_chunk(kestrel__store *s, const char *hex)
{
    char path[PATH_MAX];
    kestrel__store_chunk_path(s, hex, path, sizeof(path));
    return utimensat(AT_FDCWD, path, NULL, 0) == 0 || (errno != ENOENT && access(path, F_OK) == 0);
}

int kestrel__store_put_chunk(kestrel__store *s, const char *hex, const void *data, size_t len)
{
    char path[PATH_MAX], dir[PATH_MAX], tmp[PATH_MAX + 16];
    int rc;
    snprintf(dir, sizeof(dir), "%s/chunks/%.2s", s->root, hex);
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return kestrel__io_error("cannot create", dir);
    kestrel__store_chunk_path(s, hex, path, sizeof(path));
    if ((rc = kestrel__write_temp(path, data, len, tmp, sizeof(tmp), 0)) < 0)
        return rc;
    if (rename(tmp, path) < 0) {   /* same content under the same name: a concurrent writer is harmless */
        rc = kestrel__io_error("cannot store", path);
        unlink(tmp);
        return rc;
    }
    __atomic_add_fetch(&s->unsynced, 1, __ATOMIC_ACQ_REL);
    return 0;
}

/* The digest of one stored chunk as a file's: its name, once its size is the one expected. */
static int chunk_sized(kestrel__store *s, const char *hex, int64_t size, char out[KESTREL__HEX_LEN + 1])
{
    char path[PATH_MAX];
    struct stat st;
    kestrel__store_chunk_path(s, hex, path, sizeof(path));
    if (stat(path, &st) < 0)
        return errno == ENOENT ? kestrel__store_not_stored(hex) : kestrel__io_error("cannot read", path);
    if ((int64_t)st.st_size != size)
        return kestrel__error_set(KESTREL_EINVALID, "chunk %.12s holds %lld bytes, not the %lld the manifest says", hex,
                                  (long long)st.st_size, (long long)size);
    memcpy(out, hex, KESTREL__HEX_LEN + 1);
    return 0;
}

int kestrel__store_chunks_sized(kestrel__store *s, char *const *hexes, const int64_t *sizes, size_t n)
{
    char hex[KESTREL__HEX_LEN + 1];
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = chunk_sized(s, hexes[i], sizes[i], hex);
    return rc;
}

int kestrel__store_digest_chunks(kestrel__store *s, char *const *hexes, const int64_t *sizes, size_t n, int check,
                                 char out[KESTREL__HEX_LEN + 1])
{
    EVP_MD_CTX *ctx, *one = NULL;
    unsigned char md[EVP_MAX_MD_SIZE], *buf;
    unsigned int mdlen = 0;
    int rc = 0;
    if (n == 1)   /* its bytes hash to its name: checked as they came, so only its size is looked at */
        return chunk_sized(s, hexes[0], sizes[0], out);
    ctx = EVP_MD_CTX_new();
    buf = malloc(1 << 20);
    if (ctx == NULL || buf == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1 ||
        (check && (one = EVP_MD_CTX_new()) == NULL)) {
        rc = kestrel__error_oom();
        goto out;
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        char path[PATH_MAX];
        int64_t got = 0;
        size_t r;
        FILE *f;
        kestrel__store_chunk_path(s, hexes[i], path, sizeof(path));
        if ((f = fopen(path, "rb")) == NULL) {
            rc = errno == ENOENT ? kestrel__store_not_stored(hexes[i]) : kestrel__io_error("cannot read", path);
            break;
        }
        if (check)
            EVP_DigestInit_ex(one, EVP_sha256(), NULL);
        while ((r = fread(buf, 1, 1 << 20, f)) > 0) {
            EVP_DigestUpdate(ctx, buf, r);
            if (check)
                EVP_DigestUpdate(one, buf, r);
            got += (int64_t)r;
        }
        fclose(f);
        if (got != sizes[i])
            rc = kestrel__error_set(KESTREL_EINVALID, "chunk %.12s holds %lld bytes, not the %lld the manifest says",
                                    hexes[i], (long long)got, (long long)sizes[i]);
        else if (check) {   /* its bytes still its name's: else moved aside, and the file's digest not made */
            char hex[KESTREL__HEX_LEN + 1];
            EVP_DigestFinal_ex(one, md, &mdlen);
            kestrel__hex(md, 32, hex);
            if (strcmp(hex, hexes[i])) {
                (void)kestrel__store_check_chunk(s, hexes[i]);   /* moved aside, best effort */
                rc = kestrel__error_set(KESTREL_EINVALID, "chunk %.12s is damaged on the repository's disk (moved "
                                        "to its quarantine: a push of a file that holds it stores it again)", hexes[i]);
            }
        }
    }
    if (rc == 0) {
        EVP_DigestFinal_ex(ctx, md, &mdlen);
        kestrel__hex(md, 32, out);
    }
out:
    EVP_MD_CTX_free(ctx);
    EVP_MD_CTX_free(one);
    free(buf);
    return rc;
}

int kestrel__store_check_chunk(kestrel__store *s, const char *hex)
{
    char path[PATH_MAX], dir[PATH_MAX], to[PATH_MAX + 80], got[KESTREL__HEX_LEN + 1];
    EVP_MD_CTX *ctx;
    unsigned char md[EVP_MAX_MD_SIZE], *buf;
    unsigned int mdlen = 0;
    size_t r;
    FILE *f;
    kestrel__store_chunk_path(s, hex, path, sizeof(path));
    if ((f = fopen(path, "rb")) == NULL)
        return errno == ENOENT ? 0 : kestrel__io_error("cannot read", path);
    ctx = EVP_MD_CTX_new();
    buf = malloc(1 << 20);
    if (ctx == NULL || buf == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        fclose(f);
        EVP_MD_CTX_free(ctx);
        free(buf);
        return kestrel__error_oom();
    }
    while ((r = fread(buf, 1, 1 << 20, f)) > 0)
        EVP_DigestUpdate(ctx, buf, r);
    fclose(f);
    EVP_DigestFinal_ex(ctx, md, &mdlen);
    EVP_MD_CTX_free(ctx);
    free(buf);
    kestrel__hex(md, 32, got);
    if (!strcmp(got, hex))
        return 0;
    /* aside, under its name and when: no longer stored, so the next push sends it again */
    snprintf(dir, sizeof(dir), "%s/quarantine", s->root);
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return kestrel__io_error("cannot create", dir);
    snprintf(to, sizeof(to), "%s/%s.%lld", dir, hex, (long long)kestrel__now_ms());
    if (rename(path, to) < 0)
        return kestrel__io_error("cannot quarantine", path);
    return 1;
}

void kestrel__store_own(kestrel__store *s)
{
    s->sole_writer = 1;
    s->unsynced = 1;   /* whatever an earlier process left unsynced is made durable once */
}

int kestrel__store_sync(kestrel__store *s)
{
    long taken;
    int rc = 0;
    /* one sync at a time: a caller that finds nothing left to sync returns only once the sync that
     * took its chunks has finished (and failed over to it, when it failed) */
    pthread_mutex_lock(&s->sync_mu);
    taken = __atomic_exchange_n(&s->unsynced, 0, __ATOMIC_ACQ_REL);
    if ((!s->sole_writer || taken != 0) && syncfs(s->fd) < 0) {
        __atomic_add_fetch(&s->unsynced, taken ? taken : 1, __ATOMIC_ACQ_REL);
        rc = kestrel__io_error("cannot sync", s->root);
    }
    pthread_mutex_unlock(&s->sync_mu);
    return rc;
}

static void model_dir(const kestrel__store *s, const char *name, const char *sub, char *out, size_t n)
{
    snprintf(out, n, "%s/models/%s/%s", s->root, name, sub);
}

int kestrel__store_has_version(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int found = 0;
    while (d && !found && (e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name), k = strspn(e->d_name, "0123456789");
        found = k > 0 && n == k + 5 && !strcmp(e->d_name + k, ".json");
    }
    if (d)
        closedir(d);
    return found;
}

int kestrel__store_model_exists(kestrel__store *s, const char *name)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/models/%s/versions", kestrel__store_root(s), name);
    return kestrel__store_has_version(dir);
}

int kestrel__store_not_stored(const char *hex)
{
    return kestrel__error_set(KESTREL_EINVALID, "chunk %.12s of the manifest is not stored (never sent, or collected "
                              "since it was: a collection's grace shorter than the push)", hex);
}

int kestrel__store_versions(kestrel__store *s, const char *name, int64_t **out, size_t *n)
{
    char dir[PATH_MAX];
    DIR *d;
    struct dirent *e;
    int64_t *v = NULL;
    size_t cap = 0;
    *out = NULL;
    *n = 0;
    model_dir(s, name, "versions", dir, sizeof(dir));
    if ((d = opendir(dir)) == NULL)
        return errno == ENOENT ? kestrel__error_set(KESTREL_ENOTFOUND, "no model %s", name) : kestrel__io_error("cannot list", dir);
    while ((e = readdir(d)) != NULL) {
        char *end;
        long long x = strtoll(e->d_name, &end, 10);
        if (x <= 0 || strcmp(end, ".json"))
            continue;   /* temp files and anything else */
        if (kestrel__array_grow(&v, &cap, *n + 1, sizeof(*v)) < 0) {
            closedir(d);
            free(v);
            return KESTREL_ENOMEM;
        }
        v[(*n)++] = x;
    }
    closedir(d);
    for (size_t i = 1; i < *n; i++)   /* insertion sort: version lists are short */
        for (size_t k = i; k > 0 && v[k] < v[k - 1]; k--) {
            int64_t t = v[k];
            v[k] = v[k - 1];
            v[k - 1] = t;
        }
    if (*n == 0) {
        free(v);
        return kestrel__error_set(KESTREL_ENOTFOUND, "no model %s", name);
    }
    *out = v;
    return 0;
}

/* The highest version number ever committed in dir: live (N.json) or deleted (N.deleted). */
static int64_t highest_ever(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int64_t top = 0;
    while (d && (e = readdir(d)) != NULL) {
        char *end;
        long long x = strtoll(e->d_name, &end, 10);
        if (x > top && (!strcmp(end, ".json") || !strcmp(end, ".deleted")))
            top = x;
    }
    if (d)
        closedir(d);
    return top;
}

int64_t kestrel__store_top_version(kestrel__store *s, const char *name)
{
    char dir[PATH_MAX];
    model_dir(s, name, "versions", dir, sizeof(dir));
    return highest_ever(dir);
}

static int alias_read(kestrel__store *s, const char *name, const char *alias, int64_t *version)
{
    char path[PATH_MAX];
    kestrel_buf b = KESTREL_BUF_INIT;
    int rc;
    struct stat st;
    snprintf(path, sizeof(path), "%s/models/%s/aliases/%s", s->root, name, alias);
    rc = kestrel__read_text(path, &b);
    if (rc == KESTREL_ENOTFOUND) {   /* say which is missing: the model, or only its alias */
        snprintf(path, sizeof(path), "%s/models/%s", s->root, name);
        rc = stat(path, &st) < 0 && errno == ENOENT ? kestrel__error_set(KESTREL_ENOTFOUND, "no model %s", name)
                                                    : kestrel__error_set(KESTREL_ENOTFOUND, "%s has no alias %s", name, alias);
    }
    if (rc == 0)
        *version = strtoll(b.ptr, NULL, 10);
    kestrel_buf_dispose(&b);
    return rc;
}

int kestrel__store_alias_get(kestrel__store *s, const char *name, const char *alias, int64_t *version)
{
    return alias_read(s, name, alias, version);
}

int kestrel__store_resolve_version(kestrel__store *s, const char *ref, char name[256], int64_t *out)
{
    const char *at = strrchr(ref, '@');
    int64_t version = 0;
    int rc;
    snprintf(name, 256, "%.*s", (int)(at ? at - ref : (long)strlen(ref)), ref);
    if (!kestrel__repo_name_valid(name))
        return kestrel__error_set(KESTREL_EINVALID, "bad model name '%.64s': " KESTREL__NAME_RULE, name);
    if (at && at[1] >= '0' && at[1] <= '9') {
        char *end;
        errno = 0;
        version = strtoll(at + 1, &end, 10);
        if (*end || version <= 0 || errno == ERANGE)
            return kestrel__error_set(KESTREL_EINVALID, "bad version in '%.64s'", ref);
    } else {
        const char *alias = at ? at + 1 : "latest";
        if (!kestrel__alias_valid(alias))
            return kestrel__error_set(KESTREL_EINVALID, "bad alias in '%.64s'", ref);
        if (!strcmp(alias, "latest")) {
            /* the newest committed version, whatever the alias file says: a kill between a
             * version's commit and the move of "latest" must not hide it (or the model) */
            int64_t *vs = NULL;
            size_t n = 0;
            if ((rc = kestrel__store_versions(s, name, &vs, &n)) < 0)
                return rc;
            version = n ? vs[n - 1] : 0;
            free(vs);
            if (version == 0)
                return kestrel__error_set(KESTREL_ENOTFOUND, "no model %s", name);
        } else if ((rc = alias_read(s, name, alias, &version)) < 0) {
            return rc;
        }
    }
    *out = version;
    return 0;
}


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

int kestrel__mkdirs(const char *path, mode_t mode)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, mode) < 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return (mkdir(tmp, mode) < 0 && errno != EEXIST) ? -1 : 0;
}

static int io_error(const char *what, const char *path)
{
    return kestrel__error_sys(KESTREL_EIO, errno, "%s %s", what, path);
}

/* 1 when the segment at s (up to '/' or the end) is word. */
static int segment_is(const char *s, const char *word)
{
    size_t n = strlen(word);
    return !strncmp(s, word, n) && (s[n] == '/' || s[n] == '\0');
}

/* Segments of [a-z0-9._-] joined by '/', each starting with a letter or digit, <= 200 bytes. */
static int segments_valid(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    int seg_start = 1;
    if (n == 0 || n > 200 || name[n - 1] == '/')
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (c == '/') {
            if (seg_start)
                return 0;   /* empty segment */
            seg_start = 1;
            continue;
        }
        if (seg_start && !((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')))
            return 0;       /* also rules out "." and ".." */
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
            return 0;
        seg_start = 0;
    }
    return 1;
}

int kestrel__repo_name_valid(const char *name)
{
    if (!segments_valid(name))
        return 0;
    /* after the first segment, not a model's own folder (versions/, aliases/: "m/versions" would live
     * in m's) nor a word its routes cut at (.../NAME/versions, .../NAME/aliases/A) */
    for (const char *q = strchr(name, '/'); q; q = strchr(q + 1, '/'))
        if (segment_is(q + 1, "versions") || segment_is(q + 1, "aliases"))
            return 0;
    return 1;
}

int kestrel__alias_valid(const char *alias)
{
    /* ".tmp." marks the store's temp files (an alias is a file of its name): the collector removes them */
    return alias && !strchr(alias, '/') && segments_valid(alias) && (alias[0] < '0' || alias[0] > '9') &&
           !strstr(alias, ".tmp.");
}

void kestrel__sha256_hex(const void *data, size_t len, char hex[KESTREL__HEX_LEN + 1])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (EVP_Digest(data, len, md, &n, EVP_sha256(), NULL) != 1 || n != 32)
        hex[0] = '\0';   /* OpenSSL failed: equal to no digest, so nothing is taken for checked */
    else
        kestrel__hex(md, 32, hex);
}

int kestrel__store_open(kestrel__store **out, const char *root)
{
    kestrel__store *s = calloc(1, sizeof(*s));
    char path[PATH_MAX];
    if (s == NULL)
        return kestrel__error_oom();
    snprintf(s->root, sizeof(s->root), "%s", root);
    snprintf(path, sizeof(path), "%s/chunks", root);
    if (kestrel__mkdirs(path, 0755) < 0) {
        int rc = io_error("cannot create", path);
        free(s);
        return rc;
    }
    snprintf(path, sizeof(path), "%s/models", root);
    if (kestrel__mkdirs(path, 0755) < 0 || (s->fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        int rc = io_error("cannot open", root);
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

int kestrel__is_sha256_hex(const char *s)
{
    size_t i = 0;
    for (; s[i]; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return i == KESTREL__HEX_LEN;
}

/* Refreshes the chunk's mtime: a push that now relies on it keeps it from the collector. */
int kestrel__store_has_chunk(kestrel__store *s, const char *hex)
{
    char path[PATH_MAX];
    kestrel__store_chunk_path(s, hex, path, sizeof(path));
    return utimensat(AT_FDCWD, path, NULL, 0) == 0 || (errno != ENOENT && access(path, F_OK) == 0);
}

/* What fills a temp file: bytes, or a message written by the wire's writers a block at a time. */
typedef struct {
    const void *data;
    size_t len;
    const ProtobufCMessage *msg;
    int json;   /* msg as JSON, else as protobuf */
} temp_fill;

/* Write what into a unique temp file next to final (caller renames/links), its name in tmp. */
/* flags: bit 0 fsync; the bits above it, when not 0, the file's mode (set on the descriptor, so a
 * name swapped meanwhile in a folder someone else may write is never followed) */
static int write_temp_fill(const char *final, const temp_fill *what, char *tmp, size_t tn, int flags)
{
    int fd, rc = 0, do_fsync = flags & 1;
    mode_t mode = (mode_t)(flags >> 1);
    snprintf(tmp, tn, "%s.tmp.XXXXXX", final);
    if ((fd = mkostemp(tmp, O_CLOEXEC)) < 0)
        return io_error("cannot create", tmp);
    if (mode && fchmod(fd, mode) < 0)
        rc = io_error("cannot chmod", tmp);
    else if (what->msg && (what->json ? kestrel__wire_to_json_fd(fd, what->msg)
                                      : kestrel__wire_pack_fd(fd, what->msg)) < 0)
        rc = io_error("cannot write", tmp);   /* errno: the write's (or malloc's) */
    else if (!what->msg && kestrel__pwrite_all(fd, what->data, what->len, 0) < 0)
        rc = io_error("cannot write", tmp);
    if (rc < 0) {
        close(fd);
        unlink(tmp);
        return rc;
    }
    /* A chunk: start writing it back now, so the sync before the commit finds little left. Not a
     * chunk under the smallest cut (a small file's only chunk, or a file's tail): those are left to
     * that sync, which writes many at once. Kicked one by one, bench-repo's 20,000 files of 8-56 KB
     * cost kestreld 3.6-3.9 s of CPU, left to the sync 2.6-2.8 s, for the same push time. */
    if (!do_fsync && !what->msg && what->len >= KESTREL__CHUNK_MIN)
        (void)sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
    if ((do_fsync && fsync(fd) < 0) || close(fd) < 0) {
        rc = io_error("cannot sync", tmp);
        unlink(tmp);
        return rc;
    }
    return 0;
}

static int write_temp(const char *final, const void *data, size_t len, char *tmp, size_t tn, int flags)
{
    temp_fill what = { .data = data, .len = len };
    return write_temp_fill(final, &what, tmp, tn, flags);
}

/* tmp, written whole, as path (replacing it) */
static int rename_temp(const char *tmp, const char *path)
{
    int rc = 0;
    if (rename(tmp, path) < 0) {
        rc = io_error("cannot write", path);
        unlink(tmp);
    }
    return rc;
}

int kestrel__write_message_atomic(const char *path, const ProtobufCMessage *msg, int json, mode_t mode)
{
    char tmp[PATH_MAX + 16];
    temp_fill what = { .msg = msg, .json = json };
    int rc = write_temp_fill(path, &what, tmp, sizeof(tmp), 1 | (int)(mode << 1));
    return rc < 0 ? rc : rename_temp(tmp, path);
}

int kestrel__write_file_atomic(const char *path, const void *data, size_t len, mode_t mode)
{
    char tmp[PATH_MAX + 16];
    int rc = write_temp(path, data, len, tmp, sizeof(tmp), 1 | (int)(mode << 1));
    return rc < 0 ? rc : rename_temp(tmp, path);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(path);
}

void kestrel__rm_tree(const char *path)
{
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int kestrel__store_put_chunk(kestrel__store *s, const char *hex, const void *data, size_t len)
{
    char path[PATH_MAX], dir[PATH_MAX], tmp[PATH_MAX + 16];
    int rc;
    snprintf(dir, sizeof(dir), "%s/chunks/%.2s", s->root, hex);
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return io_error("cannot create", dir);
    kestrel__store_chunk_path(s, hex, path, sizeof(path));
    if ((rc = write_temp(path, data, len, tmp, sizeof(tmp), 0)) < 0)
        return rc;
    if (rename(tmp, path) < 0) {   /* same content under the same name: a concurrent writer is harmless */
        rc = io_error("cannot store", path);
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
        return errno == ENOENT ? kestrel__store_not_stored(hex) : io_error("cannot read", path);
    if ((int64_t)st.st_size != size)
        return kestrel__error_set(KESTREL_EINVALID, "chunk %.12s holds %lld bytes, not the %lld the manifest says", hex,
                                  (long long)st.st_size, (long long)size);
    memcpy(out, hex, KESTREL__HEX_LEN + 1);
    return 0;
}

int kestrel__store_digest_chunks(kestrel__store *s, char *const *hexes, const int64_t *sizes, size_t n,
                                 char out[KESTREL__HEX_LEN + 1])
{
    EVP_MD_CTX *ctx;
    unsigned char md[EVP_MAX_MD_SIZE], *buf;
    unsigned int mdlen = 0;
    int rc = 0;
    if (n == 1)   /* its bytes hash to its name: checked as they came, so only its size is looked at */
        return chunk_sized(s, hexes[0], sizes[0], out);
    ctx = EVP_MD_CTX_new();
    buf = malloc(1 << 20);
    if (ctx == NULL || buf == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
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
            rc = errno == ENOENT ? kestrel__store_not_stored(hexes[i]) : io_error("cannot read", path);
            break;
        }
        while ((r = fread(buf, 1, 1 << 20, f)) > 0) {
            EVP_DigestUpdate(ctx, buf, r);
            got += (int64_t)r;
        }
        fclose(f);
        if (got != sizes[i])
            rc = kestrel__error_set(KESTREL_EINVALID, "chunk %.12s holds %lld bytes, not the %lld the manifest says",
                                    hexes[i], (long long)got, (long long)sizes[i]);
    }
    if (rc == 0) {
        EVP_DigestFinal_ex(ctx, md, &mdlen);
        kestrel__hex(md, 32, out);
    }
out:
    EVP_MD_CTX_free(ctx);
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
        return errno == ENOENT ? 0 : io_error("cannot read", path);
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
        return io_error("cannot create", dir);
    snprintf(to, sizeof(to), "%s/%s.%lld", dir, hex, (long long)kestrel__now_ms());
    if (rename(path, to) < 0)
        return io_error("cannot quarantine", path);
    return 1;
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
        rc = io_error("cannot sync", s->root);
    }
    pthread_mutex_unlock(&s->sync_mu);
    return rc;
}

static int alias_write(kestrel__store *s, const char *name, const char *alias, int64_t version);
static int alias_read(kestrel__store *s, const char *name, const char *alias, int64_t *version);

int kestrel__store_claim(kestrel__store *s)
{
    kestrel_buf names = KESTREL_BUF_INIT;
    int rc;
    s->sole_writer = 1;
    s->unsynced = 1;   /* whatever an earlier process left unsynced is made durable once */
    /* a writer killed between a commit and the move of "latest": point it at the newest version */
    if (kestrel__store_list(s, &names) == 0 && names.ptr)
        for (char *save = NULL, *n = strtok_r(names.ptr, "\n", &save); n; n = strtok_r(NULL, "\n", &save)) {
            int64_t *vs = NULL, cur = 0;
            size_t k = 0;
            if (kestrel__store_versions(s, n, &vs, &k) == 0 && k &&
                (alias_read(s, n, "latest", &cur) < 0 || cur != vs[k - 1]))
                alias_write(s, n, "latest", vs[k - 1]);
            free(vs);
        }
    kestrel_buf_dispose(&names);
    if ((rc = kestrel__store_migrate(s)) < 0)   /* once: manifests of format 1 in the new form */
        return rc;
    return kestrel__store_sync(s);
}

static void model_dir(const kestrel__store *s, const char *name, const char *sub, char *out, size_t n)
{
    snprintf(out, n, "%s/models/%s/%s", s->root, name, sub);
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
        return errno == ENOENT ? kestrel__error_set(KESTREL_ENOTFOUND, "no model %s", name) : io_error("cannot list", dir);
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

int kestrel__store_read_text(const char *path, kestrel_buf *out)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    size_t r;
    if (f == NULL)
        return errno == ENOENT ? KESTREL_ENOTFOUND : io_error("cannot read", path);
    out->size = 0;
    /* room for all of it at once, read straight in (grown as it came through a 4 KiB buffer, a
     * 5 MB manifest took an 8 MiB one and a copy); more room only if it grew meanwhile */
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && st.st_size < (off_t)(1 << 30) &&
        kestrel__buf_reserve(out, (size_t)st.st_size + 2) < 0) {   /* + the NUL, + a byte to see the end */
        fclose(f);
        return kestrel__error_oom();
    }
    do {
        if (out->reserved < out->size + 2 && kestrel__buf_grow(out, 4096) < 0) {
            fclose(f);
            return kestrel__error_oom();
        }
        out->size += (r = fread(out->ptr + out->size, 1, out->reserved - out->size - 1, f));
    } while (r > 0);
    fclose(f);
    out->ptr[out->size] = '\0';
    return 0;
}

static int alias_write(kestrel__store *s, const char *name, const char *alias, int64_t version)
{
    char dir[PATH_MAX], path[PATH_MAX + 64], tmp[PATH_MAX + 96], text[32];
    int rc;
    model_dir(s, name, "aliases", dir, sizeof(dir));
    if (kestrel__mkdirs(dir, 0755) < 0)
        return io_error("cannot create", dir);
    snprintf(path, sizeof(path), "%s/%s", dir, alias);
    snprintf(text, sizeof(text), "%lld\n", (long long)version);
    if ((rc = write_temp(path, text, strlen(text), tmp, sizeof(tmp), 1)) < 0)
        return rc;
    if (rename(tmp, path) < 0) {
        rc = io_error("cannot set alias", path);
        unlink(tmp);
    }
    return rc;
}

static int alias_read(kestrel__store *s, const char *name, const char *alias, int64_t *version)
{
    char path[PATH_MAX];
    kestrel_buf b = KESTREL_BUF_INIT;
    int rc;
    struct stat st;
    snprintf(path, sizeof(path), "%s/models/%s/aliases/%s", s->root, name, alias);
    rc = kestrel__store_read_text(path, &b);
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

int kestrel__store_commit(kestrel__store *s, const char *name, Kestrel__V1__Manifest *m, int64_t *version_out)
{
    char dir[PATH_MAX], path[PATH_MAX + 32], tmp[PATH_MAX + 64];
    char **aliases = m->aliases, *alias = m->alias;
    size_t naliases = m->n_aliases;
    temp_fill json = { .msg = &m->base, .json = 1 };
    int64_t next;
    int rc;
    model_dir(s, name, "versions", dir, sizeof(dir));
    if (kestrel__mkdirs(dir, 0755) < 0)
        return io_error("cannot create", dir);
    if ((rc = kestrel__store_sync(s)) < 0)   /* every chunk durable before the manifest names it */
        return rc;
    next = highest_ever(dir) + 1;   /* a deleted number is never given out again */
    m->aliases = NULL;   /* what points at a version is the aliases folder's, not the manifest's */
    m->n_aliases = 0;
    m->alias = (char *)protobuf_c_empty_string;
    m->file_count = m->chunk_count = 0;   /* listings' counts: a manifest's lists say them */
    for (;; next++) {
        m->version = next;
        snprintf(path, sizeof(path), "%s/%lld.json", dir, (long long)next);
        /* written as it is made: a 50,000-file manifest's text, 13 MB, is never held */
        if ((rc = write_temp_fill(path, &json, tmp, sizeof(tmp), 1)) < 0)
            break;
        /* link() fails when the name exists: two writers never share a version number */
        if (link(tmp, path) == 0) {
            char tomb[PATH_MAX + 16];
            unlink(tmp);
            snprintf(tomb, sizeof(tomb), "%s/%lld.deleted", dir, (long long)next);
            if (access(tomb, F_OK) != 0)
                break;
            unlink(path);   /* the number was taken and deleted meanwhile: take the next */
            continue;
        }
        rc = errno;
        unlink(tmp);
        if (rc != EEXIST) {
            errno = rc;
            rc = io_error("cannot commit", path);
            break;
        }
        rc = 0;
    }
    if (rc == 0 && kestrel__store_pb_write(s, name, m, NULL) < 0)   /* what N.json says, for reads; best effort */
        kestrel_error_clear();
    m->aliases = aliases;
    m->n_aliases = naliases;
    m->alias = alias;
    if (rc < 0)
        return rc;
    {   /* the new directory entry is durable too */
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
    }
    if (version_out)
        *version_out = next;
    m->version = next;
    kestrel__store_listing_write(s, name, m);   /* best effort: a listing without it reads the manifest */
    kestrel_error_clear();
    return alias_write(s, name, "latest", next);
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

int kestrel__store_resolve(kestrel__store *s, const char *ref, Kestrel__V1__Manifest **out)
{
    char name[256];
    int64_t version;
    int rc = kestrel__store_resolve_version(s, ref, name, &version);
    return rc < 0 ? rc : kestrel__store_manifest(s, name, version, out);
}

int kestrel__store_alias_set(kestrel__store *s, const char *name, const char *alias, int64_t version)
{
    char path[PATH_MAX];
    int64_t now = 0;
    int rc;
    if (!kestrel__alias_valid(alias) || !strcmp(alias, "latest"))
        return kestrel__error_set(KESTREL_EINVALID, "bad alias '%.64s': " KESTREL__ALIAS_RULE ", not 'latest' (it "
                                  "follows pushes)", alias ? alias : "");
    snprintf(path, sizeof(path), "%s/models/%s/versions/%lld.json", s->root, name, (long long)version);
    if (access(path, F_OK) != 0)
        return kestrel__error_set(KESTREL_ENOTFOUND, "no version %lld of %s", (long long)version, name);
    if ((rc = alias_write(s, name, alias, version)) < 0)
        return rc;
    if (access(path, F_OK) != 0) {   /* deleted meanwhile, its aliases collected before this one was
                                      * written (found by a hostile test): the alias goes too */
        if (alias_read(s, name, alias, &now) == 0 && now == version)   /* unless set again since */
            kestrel__store_alias_delete(s, name, alias);
        return kestrel__error_set(KESTREL_ENOTFOUND, "no version %lld of %s", (long long)version, name);
    }
    return 0;
}

int kestrel__store_alias_forward(kestrel__store *s, const char *name, const char *alias, int64_t version)
{
    char dir[PATH_MAX];
    int64_t now = 0;
    int fd, rc;
    snprintf(dir, sizeof(dir), "%s/models/%s/versions", s->root, name);
    if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        return io_error("cannot open", dir);
    while (flock(fd, LOCK_EX) < 0 && errno == EINTR)
        ;
    if (alias_read(s, name, alias, &now) == 0 && now > version)
        rc = 0;   /* a push that made a newer version set it meanwhile: it stays */
    else {
        kestrel_error_clear();
        rc = kestrel__store_alias_set(s, name, alias, version);
    }
    close(fd);   /* and the lock with it */
    return rc;
}

int kestrel__store_alias_delete(kestrel__store *s, const char *name, const char *alias)
{
    char path[PATH_MAX];
    if (!kestrel__alias_valid(alias) || !strcmp(alias, "latest"))
        return kestrel__error_set(KESTREL_EINVALID, "bad alias '%.64s': " KESTREL__ALIAS_RULE, alias ? alias : "");
    snprintf(path, sizeof(path), "%s/models/%s/aliases/%s", s->root, name, alias);
    if (unlink(path) < 0)
        return errno == ENOENT ? kestrel__error_set(KESTREL_ENOTFOUND, "%s has no alias %s", name, alias)
                               : io_error("cannot delete", path);
    return 0;
}

int kestrel__store_delete(kestrel__store *s, const char *name, int64_t version)
{
    char path[PATH_MAX], dir[PATH_MAX];
    kestrel__alias_map aliases;
    int64_t *versions = NULL;
    size_t n = 0;
    int rc = 0, fd;
    snprintf(path, sizeof(path), "%s/models/%s/versions/%lld.json", s->root, name, (long long)version);
    if (access(path, F_OK) != 0)
        return errno == ENOENT ? kestrel__error_set(KESTREL_ENOTFOUND, "no version %lld of %s", (long long)version, name)
                               : io_error("cannot delete", path);
    snprintf(dir, sizeof(dir), "%s/models/%s/versions/%lld.deleted", s->root, name, (long long)version);
    /* a tombstone keeps the number from ever being given out again; it is empty: the version's
     * file names and metadata go with it (it was a link to the manifest, found by a hostile test) */
    if ((fd = open(dir, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644)) >= 0)
        close(fd);
    if ((fd < 0 && errno != EEXIST) || unlink(path) < 0)
        return errno == ENOENT ? kestrel__error_set(KESTREL_ENOTFOUND, "no version %lld of %s", (long long)version, name)
                               : io_error("cannot delete", path);
    /* its aliases, listed once it is gone: one set meanwhile either saw it gone (and took its alias
     * back, kestrel__store_alias_set) or was written before this listing */
    if (kestrel__store_alias_map(s, name, &aliases) < 0)
        kestrel_error_clear();   /* the version is gone: the rest is best effort */
    snprintf(path, sizeof(path), "%s/models/%s/versions/%lld.listing", s->root, name, (long long)version);
    unlink(path);   /* what listings showed of it (a kill before this: the collection removes it) */
    kestrel__store_pb_remove(s, name, version);   /* and its protobuf form, likewise */
    for (size_t i = 0; i < aliases.n; i++)   /* its aliases go with it */
        if (aliases.version[i] == version) {
            snprintf(dir, sizeof(dir), "%s/models/%s/aliases/%s", s->root, name, aliases.alias[i]);
            unlink(dir);
        }
    kestrel__alias_map_free(&aliases);
    /* "latest" goes back to the newest version left */
    if (kestrel__store_versions(s, name, &versions, &n) == 0 && n)
        rc = alias_write(s, name, "latest", versions[n - 1]);
    kestrel_error_clear();
    free(versions);
    return rc;
}

/* lib/tree.c - directories in the repository (a Keras model saved as a directory, a dataset): a
 * tree manifest lists each regular file (relative path, size, SHA-256, mode, how many of the
 * version's chunks are its own); the chunk list is the files' chunks in path order. Push walks the
 * tree; pull assembles the concatenation as for a file, then splits it into a fresh directory,
 * verifying every file, and renames that into place. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/evp.h>
#include "store.h"
#include "tree.h"

#define COPY_BUF (1u << 20)
#define MAX_FILES 1000000

int kestrel__tree_path_valid(const char *p)
{
    size_t len = p ? strlen(p) : 0;
    if (len == 0 || len > 4000 || p[0] == '/' || p[len - 1] == '/')
        return 0;
    for (const char *seg = p; seg;) {
        const char *slash = strchr(seg, '/');
        size_t sl = slash ? (size_t)(slash - seg) : strlen(seg);
        if (sl == 0 || (sl == 1 && seg[0] == '.') || (sl == 2 && seg[0] == '.' && seg[1] == '.'))
            return 0;
        seg = slash ? slash + 1 : NULL;
    }
    return 1;
}

void kestrel__tree_free(kestrel__tree_file *f, size_t n)
{
    for (size_t i = 0; f && i < n; i++)
        free(f[i].path);
    free(f);
}

static int by_path(const void *a, const void *b)
{
    return strcmp(((const kestrel__tree_file *)a)->path, ((const kestrel__tree_file *)b)->path);
}

typedef struct {
    kestrel__tree_file *f;
    size_t n, cap;
} listing;

static int walk(const char *root, const char *rel, listing *l, int depth)
{
    char dir[8192];
    DIR *d;
    struct dirent *de;
    int rc = 0;
    if (depth > 64)
        return kestrel__error_set(KESTREL_EINVALID, "%s: directories nested too deep", root);
    snprintf(dir, sizeof(dir), "%s%s%s", root, rel[0] ? "/" : "", rel);
    if ((d = opendir(dir)) == NULL)
        return kestrel__error_set(KESTREL_EIO, "cannot read %s: %s", dir, strerror(errno));
    while (rc == 0 && (de = readdir(d)) != NULL) {
        char sub[4200], path[8192 + 4200];
        struct stat st;
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if ((size_t)snprintf(sub, sizeof(sub), "%s%s%s", rel, rel[0] ? "/" : "", de->d_name) >= sizeof(sub) ||
            !kestrel__tree_path_valid(sub)) {
            rc = kestrel__error_set(KESTREL_EINVALID, "%s: unsupported file name '%.100s'", root, de->d_name);
            break;
        }
        snprintf(path, sizeof(path), "%s/%s", root, sub);
        if (lstat(path, &st) < 0) {
            rc = kestrel__error_set(KESTREL_EIO, "cannot read %s: %s", path, strerror(errno));
        } else if (S_ISDIR(st.st_mode)) {
            rc = walk(root, sub, l, depth + 1);
        } else if (S_ISREG(st.st_mode)) {
            if (l->n >= MAX_FILES)
                rc = kestrel__error_set(KESTREL_EINVALID, "%s: more than %d files", root, MAX_FILES);
            else if ((rc = kestrel__array_grow(&l->f, &l->cap, l->n + 1, sizeof(*l->f))) == 0) {
                kestrel__tree_file *f = &l->f[l->n];
                memset(f, 0, sizeof(*f));
                if ((f->path = kestrel__strdup(sub)) == NULL)
                    rc = kestrel__error_oom();
                f->size = (int64_t)st.st_size;
                f->mode = (uint32_t)(st.st_mode & 0777);
                l->n += rc == 0;
            }
        } else {
            rc = kestrel__error_set(KESTREL_EINVALID, "%s: '%s' is not a regular file or directory (symlinks and "
                                    "special files are not stored)", root, sub);
        }
    }
    closedir(d);
    return rc;
}

int kestrel__tree_list(const char *root, kestrel__tree_file **out, size_t *n)
{
    listing l = { NULL, 0, 0 };
    int rc = walk(root, "", &l, 0);
    if (rc < 0) {
        kestrel__tree_free(l.f, l.n);
        return rc;
    }
    if (l.n == 0)
        return kestrel__error_set(KESTREL_EINVALID, "%s: no files to push (an empty directory)", root);
    if (l.n > 1)
        qsort(l.f, l.n, sizeof(*l.f), by_path);
    *out = l.f;
    *n = l.n;
    return 0;
}

int kestrel__tree_select(const char *root, char *const *select, size_t n, kestrel__tree_file **out, size_t *nout)
{
    kestrel__tree_file *f;
    if (select == NULL)
        return kestrel__tree_list(root, out, nout);
    if (n == 0)
        return kestrel__error_set(KESTREL_EINVALID, "%s: no files to push", root);
    if (n > MAX_FILES)
        return kestrel__error_set(KESTREL_EINVALID, "%s: more than %d files", root, MAX_FILES);
    if ((f = calloc(n, sizeof(*f))) == NULL)
        return kestrel__error_oom();
    for (size_t i = 0; i < n; i++) {
        char path[8192];
        struct stat st;
        if (!kestrel__tree_path_valid(select[i])) {
            kestrel__tree_free(f, i);
            return kestrel__error_set(KESTREL_EINVALID, "%s: unsupported file name '%.100s'", root, select[i]);
        }
        snprintf(path, sizeof(path), "%s/%s", root, select[i]);
        if (lstat(path, &st) < 0) {
            int e = errno;
            kestrel__tree_free(f, i);
            return kestrel__error_set(KESTREL_EIO, "cannot read %s: %s", path, strerror(e));
        }
        if (!S_ISREG(st.st_mode)) {
            kestrel__tree_free(f, i);
            return kestrel__error_set(KESTREL_EINVALID, "%s: '%s' is not a regular file (symlinks and special "
                                      "files are not stored: list it in .kestrelignore)", root, select[i]);
        }
        if ((f[i].path = kestrel__strdup(select[i])) == NULL) {
            kestrel__tree_free(f, i);
            return kestrel__error_oom();
        }
        f[i].size = (int64_t)st.st_size;
        f[i].mode = (uint32_t)(st.st_mode & 0777);
    }
    qsort(f, n, sizeof(*f), by_path);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(f[i - 1].path, f[i].path)) {
            kestrel__tree_free(f, n);
            return kestrel__error_set(KESTREL_EINVALID, "%s: '%s' listed twice", root, f[i].path);
        }
    *out = f;
    *nout = n;
    return 0;
}

int kestrel__tree_check(const kestrel__tree_file *f, size_t n, int64_t size, size_t nchunks)
{
    int64_t total = 0, chunks = 0;
    for (size_t i = 0; i < n; i++) {
        if (!kestrel__tree_path_valid(f[i].path))
            return kestrel__error_set(KESTREL_EINVALID, "tree: bad path '%.100s'", f[i].path ? f[i].path : "");
        if (i && strcmp(f[i - 1].path, f[i].path) >= 0)
            return kestrel__error_set(KESTREL_EINVALID, "tree: paths must be unique and sorted ('%.100s')", f[i].path);
        if (i && !strncmp(f[i].path, f[i - 1].path, strlen(f[i - 1].path)) && f[i].path[strlen(f[i - 1].path)] == '/')
            return kestrel__error_set(KESTREL_EINVALID, "tree: '%.100s' is both a file and a directory", f[i - 1].path);
        if (f[i].size < 0 || f[i].chunks < 0 || (f[i].size > 0) != (f[i].chunks > 0) || (f[i].mode & ~0777u))
            return kestrel__error_set(KESTREL_EINVALID, "tree: bad entry '%.100s'", f[i].path);
        if (strspn(f[i].sha, "0123456789abcdef") != 64 || f[i].sha[64])
            return kestrel__error_set(KESTREL_EINVALID, "tree: the sha256 of '%.100s' is not 64 hex digits", f[i].path);
        total += f[i].size;
        chunks += f[i].chunks;
    }
    if (total != size || chunks != (int64_t)nchunks)
        return kestrel__error_set(KESTREL_EINVALID, "tree: the files do not add up to the version's size and chunks");
    return 0;
}

void kestrel__tree_digest(const kestrel__tree_file *f, size_t n, char hex[65])
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdn = 0;
    hex[0] = '\0';
    if (ctx == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(ctx);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        char line[128];
        int len = snprintf(line, sizeof(line), "%o %lld %s ", (unsigned)f[i].mode, (long long)f[i].size, f[i].sha);
        EVP_DigestUpdate(ctx, line, (size_t)len);
        EVP_DigestUpdate(ctx, f[i].path, strlen(f[i].path) + 1);   /* NUL-terminated: names may hold newlines */
    }
    EVP_DigestFinal_ex(ctx, md, &mdn);
    EVP_MD_CTX_free(ctx);
    for (unsigned int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

/* mkdir -p of the parents of rel under root. */
static int parents(const char *root, const char *rel)
{
    char path[8400];
    const char *slash = strrchr(rel, '/');
    if (slash == NULL)
        return 0;
    snprintf(path, sizeof(path), "%s/%.*s", root, (int)(slash - rel), rel);
    if (kestrel__mkdirs(path, 0755) < 0)
        return kestrel__error_set(KESTREL_EIO, "cannot create %s: %s", path, strerror(errno));
    return 0;
}

/* Copy one file's bytes out of the blob, hashing them; the file must match its digest. */
static int extract(int blob, int64_t at, const kestrel__tree_file *f, const char *dir, uint8_t *buf)
{
    char path[8400], hex[65];
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdn = 0;
    int64_t left = f->size;
    int fd, rc = 0;
    snprintf(path, sizeof(path), "%s/%s", dir, f->path);
    if (ctx == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(ctx);
        return kestrel__error_oom();
    }
    if ((rc = parents(dir, f->path)) < 0 ||
        (fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, f->mode ? f->mode : 0644)) < 0) {
        EVP_MD_CTX_free(ctx);
        return rc < 0 ? rc : kestrel__error_set(KESTREL_EIO, "cannot create %s: %s", path, strerror(errno));
    }
    while (left > 0 && rc == 0) {
        size_t want = left < (int64_t)COPY_BUF ? (size_t)left : COPY_BUF;
        ssize_t r = pread(blob, buf, want, at);
        if (r <= 0) {
            rc = kestrel__error_set(KESTREL_EIO, "the pulled data ends early (%s)", f->path);
            break;
        }
        EVP_DigestUpdate(ctx, buf, (size_t)r);
        for (ssize_t done = 0; done < r && rc == 0;) {
            ssize_t w = write(fd, buf + done, (size_t)(r - done));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                rc = kestrel__error_set(KESTREL_EIO, "cannot write %s: %s", path, strerror(errno));
            else
                done += w;
        }
        at += r;
        left -= r;
    }
    if (rc == 0 && fsync(fd) < 0)
        rc = kestrel__error_set(KESTREL_EIO, "cannot sync %s: %s", path, strerror(errno));
    close(fd);
    EVP_DigestFinal_ex(ctx, md, &mdn);
    EVP_MD_CTX_free(ctx);
    for (unsigned int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    if (rc == 0 && strcmp(hex, f->sha))
        rc = kestrel__error_set(KESTREL_EPROTO, "%s does not match its digest", f->path);
    return rc;
}

int kestrel__tree_install(int blob, const kestrel__tree_file *f, size_t n, int64_t size, size_t nchunks,
                          const char *want, const char *dest)
{
    char tmp[4200], old[4200] = "", hex[65];
    uint8_t *buf = NULL;
    int64_t at = 0;
    struct stat st;
    int rc, dfd;
    if ((rc = kestrel__tree_check(f, n, size, nchunks)) < 0)   /* a server's manifest is input too */
        return rc;
    kestrel__tree_digest(f, n, hex);
    if (want == NULL || strcmp(hex, want))
        return kestrel__error_set(KESTREL_EPROTO, "the tree of %s does not match its digest", dest);
    if (lstat(dest, &st) == 0 && !S_ISDIR(st.st_mode))
        return kestrel__error_set(KESTREL_EEXISTS, "%s exists and is not a directory", dest);
    snprintf(tmp, sizeof(tmp), "%s.kestrel-tmp.XXXXXX", dest);
    if (mkdtemp(tmp) == NULL)
        return kestrel__error_set(KESTREL_EIO, "cannot create a directory next to %s: %s", dest, strerror(errno));
    if ((buf = malloc(COPY_BUF)) == NULL)
        rc = kestrel__error_oom();
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc = extract(blob, at, &f[i], tmp, buf);
        at += f[i].size;
    }
    free(buf);
    if (rc == 0 && (dfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
        chmod(tmp, 0755);   /* mkdtemp made it 0700 */
        fsync(dfd);
        close(dfd);
    }
    if (rc == 0 && lstat(dest, &st) == 0) {   /* replace an existing directory: move it aside first */
        snprintf(old, sizeof(old), "%s.kestrel-old.XXXXXX", dest);
        if (mkdtemp(old) == NULL || rename(dest, old) < 0) {
            rc = kestrel__error_set(KESTREL_EIO, "cannot move the old %s aside: %s", dest, strerror(errno));
            if (old[0])
                rmdir(old);
            old[0] = '\0';
        }
    }
    if (rc == 0 && rename(tmp, dest) < 0) {
        rc = kestrel__error_set(KESTREL_EIO, "cannot rename to %s: %s", dest, strerror(errno));
        if (old[0])
            rename(old, dest);   /* put the old one back */
        old[0] = '\0';
    }
    if (rc < 0)
        kestrel__rm_tree(tmp);
    if (old[0])
        kestrel__rm_tree(old);
    return rc;
}

int kestrel__chunk_tree(const char *root, kestrel__tree_file *f, size_t nf, kestrel__chunk_ref **out, size_t *n,
                        kestrel__progress *pr, kestrel__chunk_sink sink, void *sink_ctx, kestrel__tree_each each,
                        void *each_ctx)
{
    kestrel__chunk_ref *all = NULL;
    size_t cap = 0;
    int rc = 0;
    *out = NULL;
    *n = 0;
    pr->tree_total = 0;
    for (size_t i = 0; i < nf; i++)
        pr->tree_total += f[i].size;
    pr->p.bytes_total = pr->tree_total;
    for (size_t i = 0; i < nf && rc == 0; i++) {
        char path[8400];
        kestrel__chunk_ref *refs = NULL;
        size_t k = 0;
        int64_t size = 0;
        snprintf(path, sizeof(path), "%s/%s", root, f[i].path);
        if ((rc = kestrel__chunk_file(path, &refs, &k, &size, f[i].sha, pr, sink, sink_ctx)) < 0)
            break;
        if (size != f[i].size)
            rc = kestrel__error_set(KESTREL_EIO, "%s changed while it was pushed", path);
        else if (each)
            rc = each(each_ctx, path, refs, k);
        if (rc == 0 && (rc = kestrel__array_grow(&all, &cap, *n + k + 1, sizeof(*all))) == 0) {
            if (k)
                memcpy(all + *n, refs, k * sizeof(*refs));
            *n += k;
            f[i].chunks = (int64_t)k;
        }
        free(refs);
        pr->base_bytes += size;
        pr->base_chunks += (int64_t)k;
    }
    pr->p.bytes_done = pr->base_bytes;
    if (rc < 0) {
        free(all);
        *n = 0;
        return rc;
    }
    *out = all;
    return 0;
}

cJSON *kestrel__tree_to_json(const kestrel__tree_file *f, size_t n)
{
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; arr && i < n; i++) {
        cJSON *e = cJSON_CreateArray();
        if (e == NULL || !cJSON_AddItemToArray(arr, e)) {
            cJSON_Delete(e);
            cJSON_Delete(arr);
            return NULL;
        }
        cJSON_AddItemToArray(e, cJSON_CreateString(f[i].path));
        cJSON_AddItemToArray(e, cJSON_CreateNumber((double)f[i].size));
        cJSON_AddItemToArray(e, cJSON_CreateString(f[i].sha));
        cJSON_AddItemToArray(e, cJSON_CreateNumber((double)f[i].mode));
        cJSON_AddItemToArray(e, cJSON_CreateNumber((double)f[i].chunks));
    }
    return arr;
}

int kestrel__tree_from_json(const cJSON *arr, kestrel__tree_file **out, size_t *n)
{
    const cJSON *e;
    size_t k = 0, count = (size_t)cJSON_GetArraySize(arr);
    kestrel__tree_file *f = calloc(count + 1, sizeof(*f));
    if (f == NULL)
        return kestrel__error_oom();
    cJSON_ArrayForEach(e, arr) {
        const char *path = cJSON_GetStringValue(cJSON_GetArrayItem(e, 0));
        const char *sha = cJSON_GetStringValue(cJSON_GetArrayItem(e, 2));
        if (path == NULL || sha == NULL || strlen(sha) != 64 || (f[k].path = kestrel__strdup(path)) == NULL) {
            kestrel__tree_free(f, k);
            return kestrel__error_set(KESTREL_EIO, "a tree manifest is damaged");
        }
        f[k].size = (int64_t)cJSON_GetNumberValue(cJSON_GetArrayItem(e, 1));
        memcpy(f[k].sha, sha, 65);
        f[k].mode = (uint32_t)cJSON_GetNumberValue(cJSON_GetArrayItem(e, 3));
        f[k].chunks = (int64_t)cJSON_GetNumberValue(cJSON_GetArrayItem(e, 4));
        k++;
    }
    *out = f;
    *n = k;
    return 0;
}

kestrel__tree_file *kestrel__tree_of_pb(const Kestrel__V1__Manifest *mf)
{
    kestrel__tree_file *f = calloc(mf->n_files + 1, sizeof(*f));
    for (size_t i = 0; f && i < mf->n_files; i++) {
        const Kestrel__V1__TreeFile *t = mf->files[i];
        f[i].path = t->path;   /* borrowed */
        f[i].size = t->size;
        snprintf(f[i].sha, sizeof(f[i].sha), "%s", t->sha256);
        f[i].mode = t->mode;
        f[i].chunks = t->chunks;
    }
    return f;
}

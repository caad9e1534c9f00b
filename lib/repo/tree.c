/* lib/repo/tree.c - directories in the repository (a Keras model saved as a directory, a dataset): a
 * version's listing (Manifest.files) names each regular file (relative path, size, SHA-256, mode,
 * how many of the version's chunks are its own); the chunk list is the files' chunks in path order.
 * A push lists the tree here; a pull assembles the concatenation as for a file, then splits it here
 * into a fresh directory, verifying every file, and renames that into place. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/evp.h>
#include "repo.h"
#include "store.h"

#define COPY_BUF (1u << 20)
#define MAX_FILES 1000000

static int by_path(const void *a, const void *b)
{
    return strcmp((*(Kestrel__V1__TreeFile *const *)a)->path, (*(Kestrel__V1__TreeFile *const *)b)->path);
}

/* Append a file (path copied) to m's listing. */
static int add_file(Kestrel__V1__Manifest *m, size_t *cap, const char *path, const struct stat *st)
{
    Kestrel__V1__TreeFile *f;
    if (m->n_files >= MAX_FILES)
        return kestrel__error_set(KESTREL_EINVALID, "more than %d files", MAX_FILES);
    if (kestrel__array_grow(&m->files, cap, m->n_files + 1, sizeof(*m->files)) < 0 || (f = malloc(sizeof(*f))) == NULL)
        return kestrel__error_oom();
    kestrel__v1__tree_file__init(f);
    if ((f->path = kestrel__strdup(path)) == NULL) {
        free(f);
        return kestrel__error_oom();
    }
    f->size = (int64_t)st->st_size;
    f->mode = (uint32_t)(st->st_mode & 0777);
    m->files[m->n_files++] = f;
    return 0;
}

static int walk(const char *root, const char *rel, Kestrel__V1__Manifest *m, size_t *cap, int depth)
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
        char sub[4200];
        struct stat st;
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if ((size_t)snprintf(sub, sizeof(sub), "%s%s%s", rel, rel[0] ? "/" : "", de->d_name) >= sizeof(sub) ||
            !kestrel__tree_path_valid(sub)) {
            rc = kestrel__error_set(KESTREL_EINVALID, "%s: unsupported file name '%.100s'", root, de->d_name);
            break;
        }
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            rc = kestrel__error_set(KESTREL_EIO, "cannot read %s/%s: %s", root, sub, strerror(errno));
        else if (S_ISDIR(st.st_mode))
            rc = walk(root, sub, m, cap, depth + 1);
        else if (S_ISREG(st.st_mode))
            rc = add_file(m, cap, sub, &st);
        else
            rc = kestrel__error_set(KESTREL_EINVALID, "%s: '%s' is not a regular file or directory (symlinks and "
                                    "special files are not stored)", root, sub);
    }
    closedir(d);
    return rc;
}

int kestrel__tree_list(const char *root, char *const *select, size_t nselect, Kestrel__V1__Manifest *m)
{
    size_t cap = 0;
    int rc = 0;
    if (select == NULL) {
        if ((rc = walk(root, "", m, &cap, 0)) < 0)
            return rc;
        if (m->n_files == 0)
            return kestrel__error_set(KESTREL_EINVALID, "%s: no files to push (an empty directory)", root);
    } else {
        if (nselect == 0)
            return kestrel__error_set(KESTREL_EINVALID, "%s: no files to push", root);
        for (size_t i = 0; i < nselect && rc == 0; i++) {
            char path[8192];
            struct stat st;
            if (!kestrel__tree_path_valid(select[i]))
                return kestrel__error_set(KESTREL_EINVALID, "%s: unsupported file name '%.100s'", root, select[i]);
            snprintf(path, sizeof(path), "%s/%s", root, select[i]);
            if (lstat(path, &st) < 0)
                return kestrel__error_set(KESTREL_EIO, "cannot read %s: %s", path, strerror(errno));
            if (!S_ISREG(st.st_mode))
                return kestrel__error_set(KESTREL_EINVALID, "%s: '%s' is not a regular file (symlinks and special "
                                          "files are not stored: list it in .kestrelignore)", root, select[i]);
            rc = add_file(m, &cap, select[i], &st);
        }
        if (rc < 0)
            return rc;
    }
    if (m->n_files > 1)
        qsort(m->files, m->n_files, sizeof(*m->files), by_path);
    for (size_t i = 1; i < m->n_files; i++)
        if (!strcmp(m->files[i - 1]->path, m->files[i]->path))
            return kestrel__error_set(KESTREL_EINVALID, "%s: '%s' listed twice", root, m->files[i]->path);
    return 0;
}

/* mkdir -p of the parents of rel under root; made (the last one) remembers what exists already, so
 * the files of one directory cost one mkdir between them. */
static int parents(const char *root, const char *rel, char *made, size_t n)
{
    char path[8400];
    const char *slash = strrchr(rel, '/');
    size_t len = slash ? (size_t)(slash - rel) : 0;
    if (slash == NULL || (strlen(made) == len && !strncmp(made, rel, len)))
        return 0;
    snprintf(path, sizeof(path), "%s/%.*s", root, (int)len, rel);
    if (kestrel__mkdirs(path, 0755) < 0)
        return kestrel__error_set(KESTREL_EIO, "cannot create %s: %s", path, strerror(errno));
    snprintf(made, n, "%.*s", (int)len, rel);
    return 0;
}

/* Copy one file's bytes out of the blob, hashing them; the file must match its digest. */
static int extract(int blob, int64_t at, const Kestrel__V1__TreeFile *f, const char *dir, uint8_t *buf, char *made)
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
    if ((rc = parents(dir, f->path, made, 4200)) < 0 ||
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
    if (close(fd) < 0 && rc == 0)
        rc = kestrel__error_set(KESTREL_EIO, "cannot write %s: %s", path, strerror(errno));
    EVP_DigestFinal_ex(ctx, md, &mdn);
    EVP_MD_CTX_free(ctx);
    for (unsigned int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    if (rc == 0 && strcmp(hex, f->sha256))
        rc = kestrel__error_set(KESTREL_EPROTO, "%s does not match its digest", f->path);
    return rc;
}

int kestrel__tree_install(int blob, const Kestrel__V1__Manifest *m, const char *dest)
{
    char tmp[4200], old[4200] = "", made[4200] = "";
    uint8_t *buf = NULL;
    int64_t at = 0;
    struct stat st;
    int rc = 0, dfd;
    if (lstat(dest, &st) == 0 && !S_ISDIR(st.st_mode))
        return kestrel__error_set(KESTREL_EEXISTS, "%s exists and is not a directory", dest);
    snprintf(tmp, sizeof(tmp), "%s.kestrel-tmp.XXXXXX", dest);
    if (mkdtemp(tmp) == NULL)
        return kestrel__error_set(KESTREL_EIO, "cannot create a directory next to %s: %s", dest, strerror(errno));
    if ((buf = malloc(COPY_BUF)) == NULL)
        rc = kestrel__error_oom();
    for (size_t i = 0; i < m->n_files && rc == 0; i++) {
        rc = extract(blob, at, m->files[i], tmp, buf, made);
        at += m->files[i]->size;
    }
    free(buf);
    /* every file and folder durable at once: one syncfs instead of an fsync a file */
    if (rc == 0 && (dfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
        chmod(tmp, 0755);   /* mkdtemp made it 0700 */
        if (syncfs(dfd) < 0)
            rc = kestrel__error_set(KESTREL_EIO, "cannot sync %s: %s", tmp, strerror(errno));
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

/* lib/repo/tree.c - directories in the repository (a Keras model saved as a directory, a dataset): a
 * version's listing (Manifest.files) names each regular file (relative path, size, SHA-256, mode,
 * how many of the version's chunks are its own); the chunk list is the files' chunks in path order.
 * A push lists the tree here. A pull (pull.c's pull_window) writes each window's chunks straight
 * into the files of a fresh directory here (kestrel__tree_out_write), checks every file of the
 * window (kestrel__tree_out_settle), and at the end renames the directory into place. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "filehash.h"
#include "own_dir.h"
#include "repo.h"
#include "store.h"

#define MAX_FILES 1000000

static int by_path(const void *a, const void *b, void *paths)
{
    return strcmp((const char *)paths + ((const kestrel__listed *)a)->at, (const char *)paths + ((const kestrel__listed *)b)->at);
}

const char *kestrel__push_file_path(const kestrel__push_files *f, uint32_t i, char buf[KESTREL__PUSH_PATH_MAX])
{
    if (f->list == NULL)
        snprintf(buf, KESTREL__PUSH_PATH_MAX, "%s", f->root);
    else
        snprintf(buf, KESTREL__PUSH_PATH_MAX, "%s/%s", f->root, kestrel__listed_path(f->list, i));
    return buf;
}

void kestrel__listing_free(kestrel__listing *l)
{
    free(l->paths);
    free(l->f);
    memset(l, 0, sizeof(*l));
}

/* Append a file (path copied) to the listing. */
static int add_file(kestrel__listing *l, const char *path, const struct stat *st)
{
    size_t len = strlen(path) + 1;
    if (l->n >= MAX_FILES)
        return kestrel__error_set(KESTREL_EINVALID, "more than %d files", MAX_FILES);
    if (kestrel__array_grow(&l->f, &l->cap, l->n + 1, sizeof(*l->f)) < 0 ||
        kestrel__array_grow(&l->paths, &l->paths_cap, l->paths_len + len, 1) < 0)
        return kestrel__error_oom();
    memcpy(l->paths + l->paths_len, path, len);
    l->f[l->n].at = l->paths_len;
    l->f[l->n].size = (int64_t)st->st_size;
    l->f[l->n].mode = (uint32_t)(st->st_mode & 0777);
    l->paths_len += len;
    l->n++;
    return 0;
}

/* name as an error shows it: printable ASCII as is, any other byte as \xNN; cut to fit n. */
static const char *escaped(const char *name, char *out, size_t n)
{
    size_t k = 0;
    for (const unsigned char *p = (const unsigned char *)name; *p && k + 5 < n; p++)
        k += (size_t)(*p >= 0x20 && *p < 0x7f && *p != '\\' ? snprintf(out + k, n - k, "%c", *p)
                                                           : snprintf(out + k, n - k, "\\x%02x", *p));
    out[k] = '\0';
    return out;
}

/* One directory at a time: its files are listed and its folders' names kept while it is open, then
 * it is closed before those folders are walked, so a walk holds one descriptor however deep the
 * tree. A folder is opened without following a link (one swapped in since its parent was read). */
static int walk(const char *root, const char *rel, kestrel__listing *l, int depth)
{
    char dir[8192], **subs = NULL;
    size_t nsubs = 0, capsubs = 0;
    DIR *d = NULL;
    struct dirent *de;
    int rc = 0, fd;
    if (depth > 64)
        return kestrel__error_set(KESTREL_EINVALID, "%s: directories nested too deep (at most 64 levels)", root);
    snprintf(dir, sizeof(dir), "%s%s%s", root, rel[0] ? "/" : "", rel);
    if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (rel[0] ? O_NOFOLLOW : 0))) < 0 ||
        (d = fdopendir(fd)) == NULL) {
        rc = errno == ELOOP || (errno == ENOTDIR && rel[0])
                 ? kestrel__error_set(KESTREL_EINVALID, "%s: '%s' is no longer a directory", root, rel)
                 : kestrel__error_sys(KESTREL_EIO, errno, "cannot read %s", dir);
        if (fd >= 0)
            close(fd);
        return rc;
    }
    while (rc == 0 && (de = readdir(d)) != NULL) {
        char sub[4200];
        struct stat st;
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if (!kestrel__utf8_valid(de->d_name, strlen(de->d_name))) {
            char shown[404];
            rc = kestrel__error_set(KESTREL_EINVALID, "%s: a file name in '%s' is not UTF-8: '%s' (rename it)", root,
                                    rel[0] ? rel : ".", escaped(de->d_name, shown, sizeof(shown)));
            break;
        }
        if ((size_t)snprintf(sub, sizeof(sub), "%s%s%s", rel, rel[0] ? "/" : "", de->d_name) >= sizeof(sub) ||
            strlen(sub) > KESTREL__TREE_PATH_MAX) {   /* each name may be fine: say it is the path */
            char shown[100];
            rc = kestrel__error_set(KESTREL_EINVALID, "%s: the path '%s...' is longer than the %d bytes a stored path "
                                    "may have (shorten its folders' names)", root, escaped(sub, shown, sizeof(shown)),
                                    KESTREL__TREE_PATH_MAX);
            break;
        }
        if (!kestrel__tree_path_valid(sub)) {
            char shown[404];
            rc = kestrel__error_set(KESTREL_EINVALID, "%s: unsupported file name '%s' (UTF-8, each name at most "
                                    "255 bytes)", root, escaped(de->d_name, shown, sizeof(shown)));
            break;
        }
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            rc = kestrel__error_sys(KESTREL_EIO, errno, "cannot read %s/%s", root, sub);
        else if (S_ISDIR(st.st_mode)) {
            if ((rc = kestrel__array_grow(&subs, &capsubs, nsubs + 1, sizeof(*subs))) == 0 &&
                (subs[nsubs] = kestrel__strdup(sub)) == NULL)
                rc = kestrel__error_oom();
            nsubs += rc == 0;
        } else if (S_ISREG(st.st_mode))
            rc = add_file(l, sub, &st);
        else
            rc = kestrel__error_set(KESTREL_EINVALID, "%s: '%s' is not a regular file or directory (symlinks and "
                                    "special files are not stored)", root, sub);
    }
    closedir(d);
    for (size_t i = 0; i < nsubs; i++) {
        if (rc == 0)
            rc = walk(root, subs[i], l, depth + 1);
        free(subs[i]);
    }
    free(subs);
    return rc;
}

int kestrel__tree_list(const char *root, char *const *select, size_t nselect, kestrel__listing *l)
{
    int rc = 0;
    if (select == NULL) {
        if ((rc = walk(root, "", l, 0)) < 0)
            return rc;
        if (l->n == 0)
            return kestrel__error_set(KESTREL_EINVALID, "%s: no files to push (an empty directory)", root);
    } else {
        if (nselect == 0)
            return kestrel__error_set(KESTREL_EINVALID, "%s: no files to push", root);
        for (size_t i = 0; i < nselect && rc == 0; i++) {
            char path[8192];
            struct stat st;
            char shown[404];
            if (!kestrel__tree_path_valid(select[i]))
                return kestrel__error_set(KESTREL_EINVALID, "%s: unsupported file name '%s' (UTF-8, relative, "
                                          "each name at most 255 bytes, no '.' or '..')", root, escaped(select[i], shown, sizeof(shown)));
            snprintf(path, sizeof(path), "%s/%s", root, select[i]);
            if (lstat(path, &st) < 0)
                return kestrel__error_sys(KESTREL_EIO, errno, "cannot read %s", path);
            if (!S_ISREG(st.st_mode))
                return kestrel__error_set(KESTREL_EINVALID, "%s: '%s' is not a regular file (symlinks and special "
                                          "files are not stored: list it in .kestrelignore)", root, select[i]);
            rc = add_file(l, select[i], &st);
        }
        if (rc < 0)
            return rc;
    }
    if (l->n > 1)
        qsort_r(l->f, l->n, sizeof(*l->f), by_path, l->paths);
    for (size_t i = 1; i < l->n; i++)
        if (!strcmp(kestrel__listed_path(l, i - 1), kestrel__listed_path(l, i)))
            return kestrel__error_set(KESTREL_EINVALID, "%s: '%s' listed twice", root, kestrel__listed_path(l, i));
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
    if (kestrel__mkdirs(path, 0777) < 0)   /* less the umask, as the top folder */
        return kestrel__error_sys(KESTREL_EIO, errno, "cannot create %s", path);
    snprintf(made, n, "%.*s", (int)len, rel);
    return 0;
}

struct kestrel__tree_out {
    const Kestrel__V1__Manifest *m;   /* the window being written (manifest_file.h) */
    char tmp[4200];
    char made[4200];
    int64_t *start;          /* where the window's file j begins in its files' concatenation */
    unsigned char *created;
    size_t cap;              /* room in start and created */
    int fd;                  /* the open file, and which */
    size_t fd_file;
    int lock;                /* open on tmp, locked while this process lives (pull_sweep.c) */
    int64_t touched;         /* when tmp's mtime was last made fresh */
};

int kestrel__tree_out_new(kestrel__tree_out **out, const char *dest)
{
    kestrel__tree_out *t = calloc(1, sizeof(*t));
    struct stat st;
    int rc;
    if (t == NULL)
        return kestrel__error_oom();
    t->fd = -1;
    t->lock = -1;
    if (lstat(dest, &st) == 0 && !S_ISDIR(st.st_mode)) {
        kestrel__tree_out_abandon(t);
        return kestrel__error_set(KESTREL_EEXISTS, S_ISLNK(st.st_mode) ? "%s is a symbolic link: a directory version "
                                  "replaces only a directory, and a link is never followed (pull into "
                                  "the folder it points to by its own path)" : "%s exists and is not a directory", dest);
    }
    if ((rc = kestrel__pull_temp_name(dest, KESTREL__PULL_TEMP_MARK, t->tmp, sizeof(t->tmp))) < 0) {
        kestrel__tree_out_abandon(t);   /* t->tmp "": nothing made */
        return rc;
    }
    if (mkdtemp(t->tmp) == NULL) {
        t->tmp[0] = '\0';
        kestrel__tree_out_abandon(t);
        return kestrel__error_sys(KESTREL_EIO, errno, "cannot create a directory next to %s", dest);
    }
    if ((t->lock = open(t->tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0)
        (void)kestrel__pull_temp_lock(t->lock);
    t->touched = (int64_t)time(NULL);
    *out = t;
    return 0;
}

int kestrel__tree_out_window(kestrel__tree_out *t, const Kestrel__V1__Manifest *w)
{
    int64_t at = 0;
    if (t->fd >= 0)
        close(t->fd);
    t->fd = -1;
    if (w->n_files + 1 > t->cap) {
        size_t cap = w->n_files + 1;
        int64_t *start = realloc(t->start, cap * sizeof(*start));
        unsigned char *created = start ? realloc(t->created, cap) : NULL;
        if (start)
            t->start = start;
        if (created)
            t->created = created;
        if (start == NULL || created == NULL)
            return kestrel__error_oom();
        t->cap = cap;
    }
    t->m = w;
    memset(t->created, 0, w->n_files + 1);
    for (size_t j = 0; j < w->n_files; j++) {
        t->start[j] = at;
        at += w->files[j]->size;
    }
    return 0;
}

/* Open file j for writing (made on first use 0600, the owner's alone, until finish sets its mode). */
static int open_file(kestrel__tree_out *t, size_t j)
{
    const Kestrel__V1__TreeFile *f = t->m->files[j];
    char path[8400];
    int rc;
    if (t->fd >= 0 && t->fd_file == j)
        return 0;
    if (t->fd >= 0)
        close(t->fd);
    t->fd = -1;
    snprintf(path, sizeof(path), "%s/%s", t->tmp, f->path);
    if (!t->created[j] && (rc = parents(t->tmp, f->path, t->made, sizeof(t->made))) < 0)
        return rc;
    t->fd = open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC | (t->created[j] ? 0 : O_CREAT | O_EXCL), 0600);
    if (t->fd < 0)
        return kestrel__error_sys(KESTREL_EIO, errno, "cannot create %s", path);
    t->created[j] = 1;
    t->fd_file = j;
    return 0;
}

int kestrel__tree_out_write(void *ctx, int64_t at, const void *data, size_t len)
{
    kestrel__tree_out *t = ctx;
    size_t lo = 0, hi = t->m->n_files;
    const char *p = data;
    int rc;
    kestrel__pull_temp_touch(t->lock, &t->touched);   /* a live pull's temp never looks stale */
    while (hi - lo > 1) {   /* the last file starting at or before at */
        size_t mid = lo + (hi - lo) / 2;
        if (t->start[mid] <= at)
            lo = mid;
        else
            hi = mid;
    }
    while (lo < t->m->n_files && t->m->files[lo]->size == 0)   /* empty files share their offset */
        lo++;
    if (lo >= t->m->n_files || at + (int64_t)len > t->start[lo] + t->m->files[lo]->size)
        return kestrel__error_set(KESTREL_EPROTO, "a chunk crosses the end of its file");
    if ((rc = open_file(t, lo)) < 0)
        return rc;
    if (kestrel__pwrite_all(t->fd, p, len, at - t->start[lo]) < 0)
        return kestrel__error_sys(KESTREL_EIO, errno, "cannot write %s/%s", t->tmp, t->m->files[lo]->path);
    return 0;
}

/* A file of several chunks, read back and hashed (filehash.c: its size is checked too); one chunk is
 * that chunk (verified as it came), no chunk the empty file. */
static int file_matches(const kestrel__tree_out *t, size_t j, size_t first_chunk)
{
    const Kestrel__V1__TreeFile *f = t->m->files[j];
    kestrel__filehash *h;
    char path[8400], hex[65];
    int rc;
    if (f->chunks == 1)
        return !strcmp(t->m->chunks[first_chunk]->digest, f->sha256) ? 0 : KESTREL_EPROTO;
    if (f->chunks == 0) {
        kestrel__sha256_hex("", 0, hex);
        return !strcmp(hex, f->sha256) ? 0 : KESTREL_EPROTO;
    }
    snprintf(path, sizeof(path), "%s/%s", t->tmp, f->path);
    if ((rc = kestrel__filehash_start(&h, path, 0)) < 0 || (rc = kestrel__filehash_finish(h, f->size, hex)) < 0)
        return rc;
    return !strcmp(hex, f->sha256) ? 0 : KESTREL_EPROTO;
}

int kestrel__tree_out_settle(kestrel__tree_out *t)
{
    size_t chunk = 0;
    int rc = 0;
    mode_t mask = kestrel__umask();
    if (t->fd >= 0)
        close(t->fd);
    t->fd = -1;
    for (size_t j = 0; j < t->m->n_files && rc == 0; j++) {
        const Kestrel__V1__TreeFile *f = t->m->files[j];
        char path[8400];
        if (!t->created[j] && (rc = open_file(t, j)) < 0)   /* an empty file */
            break;
        if ((rc = file_matches(t, j, chunk)) == KESTREL_EPROTO)
            rc = kestrel__error_set(KESTREL_EPROTO, "%s does not match its digest", f->path);
        chunk += (size_t)f->chunks;
        snprintf(path, sizeof(path), "%s/%s", t->tmp, f->path);
        /* its pushed bits less the umask, as tar gives a user: the pusher may be someone else, who
         * must not make the puller's files writable by others (found by a hostile test) */
        if (rc == 0 && chmod(path, f->mode & 0777 & ~mask) < 0)
            rc = kestrel__error_sys(KESTREL_EIO, errno, "cannot chmod %s", path);
    }
    if (t->fd >= 0)
        close(t->fd);
    t->fd = -1;
    return rc;
}

int kestrel__tree_out_finish(kestrel__tree_out *t, const char *dest)
{
    char old[4200] = "";
    struct stat st;
    int rc = 0, dfd;
    mode_t mask = kestrel__umask();
    /* every file and folder durable at once: one syncfs instead of an fsync a file */
    if ((dfd = open(t->tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
        chmod(t->tmp, 0777 & ~mask);   /* mkdtemp made it 0700; its folders were made with the umask */
        if (syncfs(dfd) < 0)
            rc = kestrel__error_sys(KESTREL_EIO, errno, "cannot sync %s", t->tmp);
        close(dfd);
    }
    /* replace what is at dest in one step: the new tree in, the old one out under the temp's name
     * (then removed; a pull killed before that leaves it where the next pull's sweep finds it), so no
     * moment has no dest. A file system without the exchange: the old one is moved aside first. */
    if (rc == 0 && lstat(dest, &st) == 0 && S_ISDIR(st.st_mode)) {
        if (renameat2(AT_FDCWD, t->tmp, AT_FDCWD, dest, RENAME_EXCHANGE) == 0) {
            snprintf(old, sizeof(old), "%s", t->tmp);
            t->tmp[0] = '\0';   /* dest is the new tree */
        } else if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP && errno != ENOENT) {   /* gone: renamed in */
            rc = kestrel__error_sys(KESTREL_EIO, errno, "cannot replace %s with the pulled tree (%s is left as it was)",
                                    dest, dest);
        }
    }
    if (rc == 0 && t->tmp[0] && lstat(dest, &st) == 0) {
        int made = 0;
        if ((rc = kestrel__pull_temp_name(dest, KESTREL__PULL_OLD_MARK, old, sizeof(old))) == 0 &&
            (!(made = mkdtemp(old) != NULL) || rename(dest, old) < 0)) {
            rc = kestrel__error_sys(KESTREL_EIO, errno, "cannot move the old %s aside", dest);
            if (made)
                rmdir(old);   /* the empty one mkdtemp made */
        }
        if (rc < 0)
            old[0] = '\0';
    }
    if (rc == 0 && t->tmp[0] && rename(t->tmp, dest) < 0) {
        int e = errno;
        rc = kestrel__error_sys(KESTREL_EIO, e, "cannot rename to %s%s", dest,
                                e == ENOTEMPTY || e == EEXIST ? " (it was made meanwhile: another pull to the same place?)" : "");
        if (old[0] && rename(old, dest) < 0)   /* put the old one back; else say where it is */
            rc = kestrel__error_sys(KESTREL_EIO, e, "cannot rename to %s (the directory that was there is now %s)",
                                    dest, old);
        old[0] = '\0';
    }
    if (rc == 0)
        t->tmp[0] = '\0';   /* it is dest now */
    if (old[0])
        kestrel__rm_tree(old);
    kestrel__tree_out_abandon(t);
    return rc;
}

void kestrel__tree_out_abandon(kestrel__tree_out *t)
{
    if (t == NULL)
        return;
    if (t->fd >= 0)
        close(t->fd);
    if (t->tmp[0])
        kestrel__rm_tree(t->tmp);   /* never half a directory */
    if (t->lock >= 0)
        close(t->lock);
    free(t->start);
    free(t->created);
    free(t);
}

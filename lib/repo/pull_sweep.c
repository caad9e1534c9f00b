/* lib/repo/pull_sweep.c - what a killed pull left beside its destination (a pull stopped any other
 * way removes its own). A pull's temp is DEST.kestrel-tmp.v2.XXXXXX, a file or a directory; the pull
 * holds a lock on it (flock, dropped by the kernel when the process ends, kill -9 included) and
 * keeps its mtime fresh (a file's with every write, a directory's at least every TOUCH_S seconds:
 * kestrel__pull_temp_touch). The next pull to DEST, or into it (DEST/NAME: a pull killed, then run
 * again at once, leaves its temp younger than that, and the later pulls go inside DEST, which now
 * exists), removes each such temp no process holds that is SWEEP_AGE_S (5 minutes) old. A temp of the older form, DEST.kestrel-tmp.XXXXXX, is never touched: its client
 * took no lock and did not keep a directory's mtime fresh. Only names of exactly the form, of this
 * user, a plain file or a directory, are touched; removal goes through descriptors checked to be
 * the ones examined, and never follows a link. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "dir_each.h"
#include "repo.h"

/* A live pull's temp is locked and its mtime never older than TOUCH_S (a directory's) or its last
 * write (a file's; a transfer that moves nothing for 60 s gives up): 5 minutes leave a wide margin
 * beside the lock (an hour kept a killed pull's gigabytes that long) */
#define SWEEP_AGE_S 300
#define TOUCH_S 30
#define SUFFIX_LEN 6   /* mkstemp's XXXXXX */

int kestrel__pull_temp_name(const char *dest, const char *mark, char *out, size_t n)
{
    const char *slash = strrchr(dest, '/'), *base = slash ? slash + 1 : dest;
    size_t keep = strlen(base), room = NAME_MAX - strlen(mark) - SUFFIX_LEN;
    out[0] = '\0';
    if (keep > NAME_MAX)   /* said before anything is fetched, not at the rename after it all */
        return kestrel__error_set(KESTREL_EINVALID, "a file name is at most %d bytes, not %zu: '%.40s...'", NAME_MAX,
                                  keep, base);
    if (keep > room) {   /* cut, never inside a UTF-8 character (its continuation bytes are 10xxxxxx) */
        keep = room;
        while (keep > 0 && ((unsigned char)base[keep] & 0xC0) == 0x80)
            keep--;
    }
    if ((size_t)snprintf(out, n, "%.*s%.*s%sXXXXXX", (int)(base - dest), dest, (int)keep, base, mark) >= n) {
        out[0] = '\0';
        return kestrel__error_set(KESTREL_EINVALID, "%.200s...: the path is too long", dest);
    }
    return 0;
}

int kestrel__pull_temp_lock(int fd)
{
    return flock(fd, LOCK_EX | LOCK_NB);
}

void kestrel__pull_temp_touch(int fd, int64_t *last)
{
    int64_t now = (int64_t)time(NULL);
    if (fd >= 0 && now - *last >= TOUCH_S && futimens(fd, NULL) == 0)
        *last = now;
}

static int same(int fd, const struct stat *st)
{
    struct stat now;
    return fstat(fd, &now) == 0 && now.st_ino == st->st_ino && now.st_dev == st->st_dev;
}

/* Files and links unlinked, folders (emptied first) removed; best effort (kestrel__dir_each). */
static void remove_entry(int at, const char *name, const struct stat *st, int walked, void *ctx)
{
    (void)ctx;
    if (!S_ISDIR(st->st_mode))
        unlinkat(at, name, 0);
    else if (walked)
        unlinkat(at, name, AT_REMOVEDIR);
}

int kestrel__dest_dir(const char *dest, char *dir, size_t n)
{
    const char *slash = strrchr(dest, '/');
    if (slash == NULL)
        snprintf(dir, n, ".");
    else if (slash == dest)
        snprintf(dir, n, "/");
    else if ((size_t)(slash - dest) < n)
        snprintf(dir, n, "%.*s", (int)(slash - dest), dest);
    else
        return -1;
    return 0;
}

static void sweep_beside(const char *dest)
{
    const char *slash = strrchr(dest, '/'), *base = slash ? slash + 1 : dest;
    char dir[PATH_MAX], prefix[NAME_MAX + 1];
    size_t plen;
    time_t now = time(NULL);
    DIR *d;
    struct dirent *e;
    int dfd;
    /* the temps' names: this pull's own, less the directory and the XXXXXX */
    if (!*base || kestrel__pull_temp_name(base, KESTREL__PULL_TEMP_MARK, prefix, sizeof(prefix)) < 0) {
        kestrel_error_clear();   /* best effort: a name too long for a temp has none to sweep */
        return;
    }
    plen = strlen(prefix) - SUFFIX_LEN;
    prefix[plen] = '\0';
    if (kestrel__dest_dir(dest, dir, sizeof(dir)) < 0)
        return;
    if ((dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        return;
    if ((d = fdopendir(dfd)) == NULL) {
        close(dfd);
        return;
    }
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        int fd, isdir;
        if (strncmp(e->d_name, prefix, plen) || strlen(e->d_name) != plen + SUFFIX_LEN ||
            fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || st.st_uid != geteuid() ||
            !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) || now - st.st_mtime < SWEEP_AGE_S)
            continue;
        isdir = S_ISDIR(st.st_mode);
        fd = openat(dfd, e->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | (isdir ? O_DIRECTORY : 0));
        if (fd < 0)
            continue;
        if (!same(fd, &st) || kestrel__pull_temp_lock(fd) < 0) {   /* swapped meanwhile, or a live pull's */
            close(fd);
            continue;
        }
        if (isdir) {
            int inner = dup(fd);
            if (inner >= 0)   /* emptied: a pull's tree is far less deep than this */
                kestrel__dir_each(inner, 4096, remove_entry, NULL);
        }
        {
            struct stat again;   /* still the one examined and locked: remove the name */
            if (fstatat(dfd, e->d_name, &again, AT_SYMLINK_NOFOLLOW) == 0 && again.st_ino == st.st_ino &&
                again.st_dev == st.st_dev)
                unlinkat(dfd, e->d_name, isdir ? AT_REMOVEDIR : 0);
        }
        close(fd);
    }
    closedir(d);
}

void kestrel__pull_sweep(const char *dest)
{
    char dir[PATH_MAX];
    sweep_beside(dest);
    /* and what killed pulls to the folder dest is in left beside it: a pull killed, then run again at
     * once to the same DEST, left its temp younger than the age, and the later pulls to DEST, which
     * now exists, go inside it (a hostile test found 190 MB that none removed) */
    if (strchr(dest, '/') && kestrel__dest_dir(dest, dir, sizeof(dir)) == 0 && strcmp(dir, "/") && strcmp(dir, "."))
        sweep_beside(dir);
}

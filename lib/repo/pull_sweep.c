/* lib/repo/pull_sweep.c - what a killed pull left beside its destination: DEST.kestrel-tmp.XXXXXX, a
 * file or a directory (a pull stopped any other way removes its own). A pull holds a lock on its
 * temp (flock, released by the kernel when the process ends, kill -9 included), so the next pull to
 * DEST removes those no process holds, once they are SWEEP_AGE_S old: one an older client is still
 * writing (it takes no lock) changes within a minute or fails. Only names of exactly that form, of
 * this user, a plain file or a directory (never a link, never followed) are touched. */
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
#include "repo.h"
#include "store.h"

#define SWEEP_AGE_S 3600
#define SUFFIX "XXXXXX"

int kestrel__pull_temp_lock(int fd)
{
    return flock(fd, LOCK_EX | LOCK_NB);
}

void kestrel__pull_sweep(const char *dest)
{
    const char *slash = strrchr(dest, '/'), *base = slash ? slash + 1 : dest;
    char dir[PATH_MAX], prefix[NAME_MAX + 16];
    size_t plen;
    time_t now = time(NULL);
    DIR *d;
    struct dirent *e;
    int dfd;
    if (!*base || (size_t)snprintf(prefix, sizeof(prefix), "%s.kestrel-tmp.", base) >= sizeof(prefix))
        return;
    plen = strlen(prefix);
    if (slash == NULL)
        snprintf(dir, sizeof(dir), ".");
    else if (slash == dest)
        snprintf(dir, sizeof(dir), "/");
    else if ((size_t)(slash - dest) < sizeof(dir))
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - dest), dest);
    else
        return;
    if ((dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        return;
    if ((d = fdopendir(dfd)) == NULL) {
        close(dfd);
        return;
    }
    while ((e = readdir(d)) != NULL) {
        struct stat st, held;
        char path[PATH_MAX + NAME_MAX + 2];
        int fd;
        if (strncmp(e->d_name, prefix, plen) || strlen(e->d_name) != plen + sizeof(SUFFIX) - 1 ||
            fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || st.st_uid != geteuid() ||
            !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) || now - st.st_mtime < SWEEP_AGE_S)
            continue;
        fd = openat(dfd, e->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | (S_ISDIR(st.st_mode) ? O_DIRECTORY : 0));
        if (fd < 0)
            continue;
        if (fstat(fd, &held) == 0 && held.st_ino == st.st_ino && held.st_dev == st.st_dev &&
            kestrel__pull_temp_lock(fd) == 0) {   /* no live pull holds it */
            if (S_ISREG(st.st_mode))
                unlinkat(dfd, e->d_name, 0);
            else if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) < sizeof(path))
                kestrel__rm_tree(path);   /* links inside it removed, never followed */
        }
        close(fd);
    }
    closedir(d);
}

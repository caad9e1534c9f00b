/* lib/repo/file_open.c - see file_open.h. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#if defined(SYS_openat2) && defined(__has_include)
#if __has_include(<linux/openat2.h>)   /* Linux headers of 5.6 and later */
#include <linux/openat2.h>
#define HAVE_OPENAT2 1
#endif
#endif
#include "file_open.h"
#include "internal.h"

#ifndef O_LARGEFILE
#define O_LARGEFILE 0
#endif

/* nofollow: no link anywhere in the path (openat2's RESOLVE_NO_SYMLINKS), so a folder of a pushed
 * directory swapped for a link since the listing is not followed out of it either. Where openat2 is
 * missing (Linux before 5.6, or a seccomp filter that refuses it), O_NOFOLLOW: the file itself. */
static int open_flags(const char *path, int flags, int nofollow)
{
    if (nofollow) {
#ifdef HAVE_OPENAT2
        static int missing;   /* set once this kernel had no openat2: not asked again (atomic) */
        if (!__atomic_load_n(&missing, __ATOMIC_RELAXED)) {
            struct open_how how;
            int fd;
            memset(&how, 0, sizeof(how));
            how.flags = (uint64_t)(flags | O_LARGEFILE);   /* which open() adds by itself */
            how.resolve = RESOLVE_NO_SYMLINKS;
            fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof(how));
            if (fd >= 0 || (errno != ENOSYS && errno != EPERM))
                return fd;
            if (errno == ENOSYS)   /* EPERM (a seccomp filter, or this file) is asked again */
                __atomic_store_n(&missing, 1, __ATOMIC_RELAXED);
        }
#endif
        flags |= O_NOFOLLOW;
    }
    return open(path, flags);
}

int kestrel__file_open(const char *path, int nofollow, struct stat *st)
{
    int flags = O_RDONLY | O_CLOEXEC | O_NOCTTY;
    int fd = open_flags(path, flags | O_NONBLOCK, nofollow), nonblocking = 1;
    if (fd < 0 && errno == EAGAIN) {   /* a lease held by another (Samba, NFS): wait for it to break */
        fd = open_flags(path, flags, nofollow);
        nonblocking = 0;
    }
    if (fd >= 0 && fstat(fd, st) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    if (fd >= 0 && nonblocking && S_ISREG(st->st_mode))
        (void)fcntl(fd, F_SETFL, 0);   /* O_NONBLOCK off (a FUSE file system may honour it) */
    return fd;
}

int kestrel__file_open_regular(int fd, const char *path, int nofollow, struct stat *st)
{
    if (fd < 0)
        fd = kestrel__file_open(path, nofollow, st);
    else if (fstat(fd, st) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        fd = -1;
    }
    if (fd < 0 && nofollow && errno == ELOOP)
        return kestrel__error_set(KESTREL_EINVALID, "%s, or a folder in its path, is a symbolic link now (a pushed "
                                  "directory's files are pushed as they are, links refused)", path);
    if (fd < 0)
        return kestrel__error_sys(KESTREL_EIO, errno, "cannot read %s", path);
    if (!S_ISREG(st->st_mode)) {
        close(fd);
        return kestrel__error_set(KESTREL_EINVALID, "%s is not a regular file", path);
    }
    return fd;
}

int kestrel__open_beneath(const char *top, const char *sub)
{
    char path[PATH_MAX], *save = NULL, *seg;
    int fd = open(top, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), next, e;
    if (fd < 0 || !*sub)
        return fd;
#ifdef HAVE_OPENAT2
    {   /* beneath top, links inside it followed, none out of it */
        struct open_how how;
        memset(&how, 0, sizeof(how));
        how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
        how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
        next = (int)syscall(SYS_openat2, fd, sub, &how, sizeof(how));
        if (next >= 0 || (errno != ENOSYS && errno != EPERM)) {
            e = errno;
            close(fd);
            errno = e;
            return next;
        }
    }
#endif
    /* no openat2: a folder at a time, no link followed at all */
    snprintf(path, sizeof(path), "%s", sub);
    for (seg = strtok_r(path, "/", &save); seg; seg = strtok_r(NULL, "/", &save)) {
        next = strcmp(seg, "..") ? openat(fd, seg, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
        e = strcmp(seg, "..") ? errno : EXDEV;
        close(fd);
        if ((fd = next) < 0) {
            errno = e;
            return -1;
        }
    }
    return fd;
}

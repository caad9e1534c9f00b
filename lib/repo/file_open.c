/* lib/repo/file_open.c - see file_open.h. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include "file_open.h"
#include "internal.h"

int kestrel__file_open(const char *path, int nofollow, struct stat *st)
{
    int flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | (nofollow ? O_NOFOLLOW : 0);
    int fd = open(path, flags | O_NONBLOCK), nonblocking = 1;
    if (fd < 0 && errno == EAGAIN) {   /* a lease held by another (Samba, NFS): wait for it to break */
        fd = open(path, flags);
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
        return kestrel__error_set(KESTREL_EINVALID, "%s is a symbolic link now (a pushed directory's files are "
                                  "pushed as they are, links refused)", path);
    if (fd < 0)
        return kestrel__error_set(KESTREL_EIO, "cannot read %s: %s", path, strerror(errno));
    if (!S_ISREG(st->st_mode)) {
        close(fd);
        return kestrel__error_set(KESTREL_EINVALID, "%s is not a regular file", path);
    }
    return fd;
}

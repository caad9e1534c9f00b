/* lib/repo/file_open.c - see file_open.h. */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include "file_open.h"

int kestrel__file_open(const char *path, int nofollow, struct stat *st)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | (nofollow ? O_NOFOLLOW : 0)), flags;
    if (fd < 0 && errno == EAGAIN)   /* a lease held by another (Samba, NFS): wait for it to break */
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | (nofollow ? O_NOFOLLOW : 0));
    if (fd >= 0 && fstat(fd, st) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    if (fd >= 0 && S_ISREG(st->st_mode) && (flags = fcntl(fd, F_GETFL)) >= 0 && (flags & O_NONBLOCK))
        (void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);   /* a FUSE file system may honour it */
    return fd;
}

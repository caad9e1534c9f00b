/* lib/fdio.c - writing a whole buffer at an offset of a file, the loop every writer of a temp file,
 * a pulled file or a spool needs (a short write goes on; EINTR is not an error). */
#include <errno.h>
#include <unistd.h>
#include "internal.h"

int kestrel__pwrite_all(int fd, const void *data, size_t n, int64_t at)
{
    const char *p = data;
    while (n > 0) {
        ssize_t w = pwrite(fd, p, n, (off_t)at);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (w == 0)
                errno = ENOSPC;
            return -1;
        }
        p += w;
        n -= (size_t)w;
        at += w;
    }
    return 0;
}

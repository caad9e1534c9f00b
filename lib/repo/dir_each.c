/* lib/repo/dir_each.c - one walk of a folder's tree through descriptors (dir_each.h). */
#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include "dir_each.h"

void kestrel__dir_each(int dfd, int depth, kestrel__dir_visit visit, void *ctx)
{
    DIR *d = fdopendir(dfd);
    struct dirent *e;
    if (d == NULL) {
        close(dfd);
        return;
    }
    while ((e = readdir(d)) != NULL) {
        struct stat st, now;
        int sub, walked = 0;
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
            fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (S_ISDIR(st.st_mode) && depth > 0 &&
            (sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) >= 0) {
            if (fstat(sub, &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev) {
                kestrel__dir_each(sub, depth - 1, visit, ctx);
                walked = 1;
            } else {
                close(sub);   /* swapped since it was examined */
            }
        }
        visit(dirfd(d), e->d_name, &st, walked, ctx);
    }
    closedir(d);
}

/* server/disk_floor.h - the room the data disk keeps free for the catalog (job states, tokens) and
 * everyone's jobs: a fiftieth of it, at most 1 GiB. The repository stores no chunk below it
 * (repo_pack.c); below it, the job whose files take the most is stopped; below its half, nothing
 * but job states and tokens is added to the catalog (job_disk.c). */
#ifndef KD_DISK_FLOOR_H
#define KD_DISK_FLOOR_H

#include <stdint.h>
#include <sys/statvfs.h>

/* The bytes free to kestreld on the disk of path, and the floor of that disk: 0, or -1 (errno set)
 * when statvfs cannot read it. */
static inline int kd_disk_floor(const char *path, int64_t *avail, int64_t *keep)
{
    struct statvfs v;
    if (statvfs(path, &v) < 0)
        return -1;
    *avail = (int64_t)v.f_bavail * (int64_t)v.f_frsize;
    *keep = (int64_t)v.f_blocks * (int64_t)v.f_frsize / 50;
    if (*keep > ((int64_t)1 << 30))
        *keep = (int64_t)1 << 30;
    return 0;
}

#endif

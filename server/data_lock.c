/* server/data_lock.c - one kestreld a data dir (see data_lock.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include "data_lock.h"
#include "internal.h"

/* Take the lock: 0, or an errno: EWOULDBLOCK with held set to the pid in the file of a live process
 * holding it (a daemon writes it just after it takes the lock), "" when none showed. The holder may
 * name no live process for a moment: a daemon that has just taken the lock and not yet written its
 * pid, or a child of one killed -9 between its fork and its exec, which holds the lock until it
 * execs (close-on-exec) or exits (a restart in test_faults found it held so, once in many runs).
 * So the lock is tried again for up to 3 s while the file names no live process. */
static int take(int fd, char *held, size_t n)
{
    for (int tries = 0; tries < 300; tries++) {
        ssize_t got;
        long pid;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0)
            return 0;
        if (errno != EWOULDBLOCK)
            return errno;
        got = pread(fd, held, n - 1, 0);
        held[got > 0 ? got : 0] = '\0';
        held[strspn(held, "0123456789")] = '\0';
        pid = atol(held);
        if (pid > 0 && pid != getpid() && (kill((pid_t)pid, 0) == 0 || errno == EPERM))
            return EWOULDBLOCK;
        usleep(10000);
    }
    held[0] = '\0';
    return EWOULDBLOCK;
}

int kd_data_dir_lock(const char *data_dir)
{
    char path[PATH_MAX + 32], pid[32], held[24] = "";
    struct stat st;
    int fd, n, e;
    snprintf(path, sizeof(path), "%s/kestreld.lock", data_dir);
    if ((fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600)) < 0)
        return errno == ELOOP ? kestrel__error_set(KESTREL_EIO, "%s is a symbolic link (remove it)", path)
                              : kestrel__error_set(KESTREL_EIO, "cannot open %s: %s", path, strerror(errno));
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 || st.st_uid != geteuid()) {
        close(fd);   /* not a file of ours alone: never truncated */
        return kestrel__error_set(KESTREL_EIO, "%s is not a plain file of this account's (remove it)", path);
    }
    if ((e = take(fd, held, sizeof(held))) != 0) {
        close(fd);
        if (e != EWOULDBLOCK)
            return kestrel__error_set(KESTREL_EIO, "cannot lock %s: %s", path, strerror(e));
        return kestrel__error_set(KESTREL_EEXISTS,
                                  "%s is in use by another kestreld%s%s%s: stop that one first, or give this one "
                                  "its own --data-dir",
                                  data_dir, held[0] ? " (pid " : "", held, held[0] ? ")" : "");
    }
    /* one write of a fixed width, then the tail of a longer old one cut: never empty meanwhile */
    n = snprintf(pid, sizeof(pid), "%-20ld\n", (long)getpid());
    if (pwrite(fd, pid, (size_t)n, 0) != n || ftruncate(fd, n) < 0) {
        int rc = kestrel__error_set(KESTREL_EIO, "cannot write %s: %s", path, strerror(errno));
        close(fd);
        return rc;
    }
    return fd;
}

int kd_data_dir_catalog_check(const char *data_dir)
{
    char path[PATH_MAX];
    struct stat st;
    struct dirent *de;
    DIR *d;
    int models = 0, rc;
    snprintf(path, sizeof(path), "%s/catalog.db", data_dir);
    /* missing, empty (a copy cut short) or a link to nothing: SQLite would make a new one (a review) */
    if ((rc = stat(path, &st)) == 0 && !(S_ISREG(st.st_mode) && st.st_size == 0))
        return 0;
    if (rc < 0 && errno != ENOENT)
        return kestrel__error_sys(KESTREL_EIO, errno, "cannot read %s", path);
    snprintf(path, sizeof(path), "%s/repo/models", data_dir);
    if ((d = opendir(path)) == NULL)
        return errno == ENOENT ? 0 : kestrel__error_sys(KESTREL_EIO, errno, "cannot read %s", path);
    while (!models && (de = readdir(d)) != NULL)
        models = strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
    closedir(d);
    if (!models)
        return 0;
    return kestrel__error_set(KESTREL_EINVALID,
                              "%s holds models but %s/catalog.db is missing or empty: who may read each model (and every "
                              "user, token and job) is in the catalog, and without it every private model would "
                              "be readable by every user. Restore catalog.db from the same backup as the "
                              "repository (kestrel admin backup copies both), or move %s/repo aside to start empty",
                              path, data_dir, data_dir);
}

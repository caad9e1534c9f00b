/* server/job_cgroup.c - each local job's processes in a cgroup v2 of its own (job_cgroup.h). A job
 * that started `setsid env -i sleep` outlived its cancel for good: its processes were found by the
 * KESTREL_CHECKPOINT_DIR in their environment, which a job controls (a hostile test). A cgroup is
 * not the job's to leave: its files are root's (0644), and moving a process needs write access to
 * both cgroups' cgroup.procs. Layout: MOUNT/KESTRELD'S OWN/kestrel-HASH/job-ID, HASH the FNV-1a of
 * the data dir's real path (a data dir has one kestreld: its lock). */
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "job_cgroup.h"

#define EMPTY_WAIT_MS 2000

static char base[PATH_MAX];   /* "" when jobs get no cgroups */

/* The cgroup2 mount point (the first; /sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host), and
 * the cgroup it shows at that point (its ROOT: "/" but in a container without its own namespace). */
static int cgroup2_mount(char *out, size_t n, char *root, size_t rn)
{
    FILE *f = fopen("/proc/self/mountinfo", "r");
    char line[4096];
    int found = 0;
    while (f && !found && fgets(line, sizeof(line), f)) {   /* "ID PARENT M:N ROOT POINT OPTS ... - TYPE SRC OPTS" */
        char point[PATH_MAX], at[PATH_MAX], *dash = strstr(line, " - ");
        if (dash && !strncmp(dash + 3, "cgroup2 ", 8) && sscanf(line, "%*s %*s %*s %4095s %4095s", at, point) == 2) {
            snprintf(out, n, "%s", point);
            snprintf(root, rn, "%s", strcmp(at, "/") ? at : "");
            found = 1;
        }
    }
    if (f)
        fclose(f);
    return found ? 0 : -1;
}

/* kestreld's own cgroup v2 path ("0::/PATH"). */
static int own_cgroup(char *out, size_t n)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    char line[PATH_MAX];
    int found = 0;
    while (f && !found && fgets(line, sizeof(line), f))
        if (!strncmp(line, "0::", 3)) {
            line[strcspn(line, "\n")] = '\0';
            snprintf(out, n, "%s", strcmp(line + 3, "/") ? line + 3 : "");
            found = 1;
        }
    if (f)
        fclose(f);
    return found ? 0 : -1;
}

static int write_file(const char *path, const char *s)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC), rc;
    if (fd < 0)
        return -1;
    rc = write(fd, s, strlen(s)) == (ssize_t)strlen(s) ? 0 : -1;
    close(fd);
    return rc;
}

static size_t count_procs(const char *dir)
{
    char path[PATH_MAX + 16], line[32];
    size_t n = 0;
    FILE *f;
    snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
    if ((f = fopen(path, "r")) == NULL)
        return 0;
    while (fgets(line, sizeof(line), f))
        n++;
    fclose(f);
    return n;
}

/* SIGKILL all of dir (cgroup.kill; kernels before 5.14: each pid, until none is left), wait until it
 * is empty, remove it. How many there were. */
static size_t kill_and_remove(const char *dir)
{
    char path[PATH_MAX + 16];
    size_t n = count_procs(dir);
    struct timespec pause = { 0, 10 * 1000000L };
    snprintf(path, sizeof(path), "%s/cgroup.kill", dir);
    for (int waited = 0; count_procs(dir) > 0 && waited < EMPTY_WAIT_MS; waited += 10) {
        if (write_file(path, "1") < 0) {
            pid_t pids[256];
            size_t k = 0;
            char procs[PATH_MAX + 16], line[32];
            FILE *f;
            snprintf(procs, sizeof(procs), "%s/cgroup.procs", dir);
            if ((f = fopen(procs, "r")) != NULL) {
                while (k < 256 && fgets(line, sizeof(line), f))
                    pids[k++] = (pid_t)atoi(line);
                fclose(f);
            }
            for (size_t i = 0; i < k; i++)
                if (pids[i] > 1)
                    kill(pids[i], SIGKILL);
        }
        nanosleep(&pause, NULL);
    }
    if (rmdir(dir) < 0 && errno != ENOENT)
        fprintf(stderr, "kestreld: cannot remove cgroup %s: %s\n", dir, strerror(errno));
    return n;
}

int kd_cgroup_start(const char *data_dir)
{
    char mnt[PATH_MAX], root[PATH_MAX], own[PATH_MAX], real[PATH_MAX], dir[PATH_MAX + 300];
    size_t cut;
    uint32_t h = 2166136261u;
    DIR *d;
    struct dirent *de;
    base[0] = '\0';
    if (geteuid() != 0)
        return 0;   /* jobs run as kestreld: single-tenant, said at start */
    if (cgroup2_mount(mnt, sizeof(mnt), root, sizeof(root)) < 0 || own_cgroup(own, sizeof(own)) < 0 ||
        realpath(data_dir, real) == NULL) {
        fprintf(stderr, "kestreld: no cgroup v2 here: a job's processes are found by their environment alone "
                "(one that rewrites it can outlive its job)\n");
        return 0;
    }
    for (const char *p = real; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    cut = strlen(root);   /* kestreld's cgroup is seen below the mount's root */
    snprintf(dir, sizeof(dir), "%s%s/kestrel-%08x", mnt, cut && !strncmp(own, root, cut) ? own + cut : own, h);
    if (strlen(dir) >= sizeof(base) || (mkdir(dir, 0755) < 0 && errno != EEXIST)) {
        fprintf(stderr, "kestreld: cannot make cgroup %s (%s): a job's processes are found by their environment "
                "alone (one that rewrites it can outlive its job)\n", dir, strerror(errno));
        return 0;
    }
    snprintf(base, sizeof(base), "%s", dir);
    if ((d = opendir(base)) == NULL)
        return 1;
    while ((de = readdir(d)) != NULL) {   /* a daemon before, killed: what its jobs left */
        char job[PATH_MAX + 300];
        size_t n;
        if (strncmp(de->d_name, "job-", 4))
            continue;
        snprintf(job, sizeof(job), "%s/%s", base, de->d_name);
        if ((n = kill_and_remove(job)) > 0)
            fprintf(stderr, "kestreld: %s: stopped %zu process%s left by the daemon before\n", de->d_name, n,
                    n == 1 ? "" : "es");
    }
    closedir(d);
    return 1;
}

void kd_cgroup_stop(void)
{
    if (base[0] && rmdir(base) < 0 && errno != ENOENT && errno != EBUSY)
        fprintf(stderr, "kestreld: cannot remove cgroup %s: %s\n", base, strerror(errno));
}

int kd_cgroup_job_open(int64_t id)
{
    char dir[PATH_MAX + 32], procs[PATH_MAX + 48];
    int fd;
    if (!base[0])
        return -1;
    snprintf(dir, sizeof(dir), "%s/job-%lld", base, (long long)id);
    if (mkdir(dir, 0755) < 0) {
        if (errno != EEXIST)
            goto fail;
        kill_and_remove(dir);   /* a run before it, whose end was never seen */
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
            goto fail;
    }
    snprintf(procs, sizeof(procs), "%s/cgroup.procs", dir);
    if ((fd = open(procs, O_WRONLY | O_CLOEXEC)) >= 0)
        return fd;
fail:
    fprintf(stderr, "kestreld: job %lld: no cgroup (%s: %s): its processes are found by their environment alone\n",
            (long long)id, dir, strerror(errno));
    return -1;
}

size_t kd_cgroup_job_end(int64_t id)
{
    char dir[PATH_MAX + 32];
    if (!base[0])
        return 0;
    snprintf(dir, sizeof(dir), "%s/job-%lld", base, (long long)id);
    if (access(dir, F_OK) < 0)
        return 0;
    return kill_and_remove(dir);
}

size_t kd_cgroup_job_pids(int64_t id, pid_t *pids, size_t max)
{
    char path[PATH_MAX + 48], line[32];
    size_t n = 0;
    FILE *f;
    if (!base[0])
        return 0;
    snprintf(path, sizeof(path), "%s/job-%lld/cgroup.procs", base, (long long)id);
    if ((f = fopen(path, "r")) == NULL)
        return 0;
    while (n < max && fgets(line, sizeof(line), f))
        pids[n++] = (pid_t)atoi(line);
    fclose(f);
    return n;
}

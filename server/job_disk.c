/* server/job_disk.c - the data disk kept for everyone. A job writes where it runs (DATA/jobs/ID:
 * its HOME, work dir and checkpoints), on the disk of the catalog and the repository: one job's
 * output filled it, and every other user's submit, token and log write failed after it (a hostile
 * test). Every DISK_EVERY_MS a thread adds up each running job's files (the blocks of the inodes
 * below its dir that are its own: a dataset is linked in from root's cache, and is not) and stops,
 * as kubelet's eviction does:
 *  - a job whose files pass --max-job-disk;
 *  - while the disk has less than its floor free (disk_floor.h), the job whose files take the most,
 *    where they are at least a quarter of what is missing (one at a time: none while one stopped so
 *    still ends, its files not yet removed (a review: the next largest went too); a disk filled by
 *    something else stops no job for nothing).
 * It fails with that reason within STOP_GRACE_MS (SIGTERM, then SIGKILL), and its files are removed
 * before its end is recorded (exec_local.c): a full disk could not record it, and a failed job's
 * scratch is nobody's. Files its processes deleted and hold open count too (through its cgroup,
 * job_cgroup.c); what a job writes outside its dir (/tmp) does not.
 * Below half the floor, nothing more is added to the catalog but job states and tokens: jobs' logs,
 * each within --max-log-bytes, their points, each within --max-metric-points, and submitted jobs
 * filled the catalog's disk too, a user's many jobs together (a hostile test). */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include "disk_floor.h"
#include "job_cgroup.h"
#include "job_disk.h"
#include "worker.h"

#define DISK_EVERY_MS 3000
#define TOLD_EVERY_MS 60000       /* a job's log says its output is dropped at most this often */
#define STOP_GRACE_MS 10000
#define MAX_DEPTH 256             /* deeper folders are not walked (each holds an fd): the job is over */
#define WALK_MS 2000              /* a job's walk stops past this too (its files then took kestreld's time) */
#define MAX_PIDS 4096             /* of a job's processes, those whose open files are looked at */
#define MAX_GONE 1024             /* deleted files still open, counted once each */
#define MAX_ENTRIES 1000000       /* a job's walk stops there too: past either, the job is over any bound (a
                                   * review: a million empty files walked first hid its large ones) */

struct kd_job_disk {
    kd_engine *e;
    kd_worker w;
};

typedef struct {
    int64_t id;
    int64_t bytes;
    int deep;                     /* past MAX_DEPTH, MAX_ENTRIES or WALK_MS: not measured, past any bound */
    int64_t until_ms;             /* the walk's deadline */
} measured;

/* Whether an inode below a job's dir is the job's: not root's (root's cache, linked in; the staged
 * tree before its hand-over). A kestreld that is not root runs jobs as itself: a dataset's
 * hard-linked read-only file is then the cache's. */
static int the_jobs(const struct stat *st)
{
    if (st->st_uid == 0)
        return 0;
    return geteuid() == 0 || !S_ISREG(st->st_mode) || st->st_nlink < 2 || (st->st_mode & 0222);
}

/* Add what dfd (taken over: closed here) holds to *bytes; links are not followed, other file systems
 * not entered, and nothing is opened that a job could swap for a link meanwhile (O_NOFOLLOW). */
static void walk(int dfd, dev_t dev, int depth, measured *m, int64_t *entries)
{
    DIR *d = fdopendir(dfd);
    struct dirent *de;
    if (d == NULL) {
        close(dfd);
        return;
    }
    while (!m->deep && (de = readdir(d)) != NULL) {
        struct stat st;
        int fd;
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
            fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || st.st_dev != dev)
            continue;
        if (++*entries >= MAX_ENTRIES || (*entries % 4096 == 0 && kestrel__now_ms() > m->until_ms))
            m->deep = 1;
        if (the_jobs(&st))
            m->bytes += (int64_t)st.st_blocks * 512;
        if (S_ISDIR(st.st_mode) && depth >= MAX_DEPTH)
            m->deep = 1;
        else if (S_ISDIR(st.st_mode) &&
                 (fd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) >= 0)
            walk(fd, dev, depth + 1, m, entries);
    }
    closedir(d);
}

/* Count a deleted file of the data disk (path: a /proc link to it, stat'd only once its mount is
 * known to be of the data disk: a file of a FUSE mount the job serves itself could hold the stat, and
 * this thread, for good), once. */
static void count_gone(measured *m, const char *path, dev_t dev, ino_t *seen, size_t *ns)
{
    struct stat st;
    size_t k = 0;
    if (stat(path, &st) < 0 || !S_ISREG(st.st_mode) || st.st_nlink != 0 || st.st_dev != dev || !the_jobs(&st))
        return;
    while (k < *ns && seen[k] != st.st_ino)
        k++;
    if (k < *ns || *ns == MAX_GONE)
        return;
    seen[(*ns)++] = st.st_ino;
    m->bytes += (int64_t)st.st_blocks * 512;
}

/* The ids of the mounts process pid sees of the data disk (its own mount namespace numbers them: a
 * job's has its own /tmp), at most n, into ids: how many. */
static size_t disk_mounts(int pid, dev_t dev, long long *ids, size_t n)
{
    char path[64], line[4400];
    size_t k = 0;
    FILE *f;
    snprintf(path, sizeof(path), "/proc/%d/mountinfo", pid);
    if ((f = fopen(path, "re")) == NULL)
        return 0;
    while (k < n && fgets(line, sizeof(line), f)) {   /* "ID PARENT MAJ:MIN ROOT POINT ..." */
        long long id;
        unsigned maj, min;
        if (sscanf(line, "%lld %*s %u:%u", &id, &maj, &min) == 3 && makedev(maj, min) == dev)
            ids[k++] = id;
    }
    fclose(f);
    return k;
}

/* The mount id of /proc/PID/fd/N (its fdinfo), or -1. */
static long long fd_mount(int pid, const char *n)
{
    char path[96], line[128];
    long long id = -1;
    FILE *f;
    snprintf(path, sizeof(path), "/proc/%d/fdinfo/%s", pid, n);
    if ((f = fopen(path, "re")) == NULL)
        return -1;
    while (id < 0 && fgets(line, sizeof(line), f))
        if (sscanf(line, "mnt_id: %lld", &id) != 1)
            id = -1;
    fclose(f);
    return id;
}

/* The files the job's processes (its cgroup) hold after deleting them, on the data disk: open, or
 * mapped with their descriptor closed. They take the disk as long as they are held (a hostile test
 * wrote 100 MiB so, unseen; then 30 MiB mapped). One passed in flight over a socket (SCM_RIGHTS) is
 * seen by no /proc file: a per-account quota would. */
static void deleted_open(measured *m, dev_t dev)
{
    static _Thread_local pid_t pids[MAX_PIDS];
    static _Thread_local ino_t seen[MAX_GONE];
    size_t np = kd_cgroup_job_pids(m->id, pids, MAX_PIDS), ns = 0;
    for (size_t i = 0; i < np; i++) {
        char dir[64], path[400], line[4400];
        long long mnts[16];
        size_t nm = disk_mounts((int)pids[i], dev, mnts, 16);
        DIR *d;
        FILE *maps;
        struct dirent *de;
        snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pids[i]);
        if (nm && (d = opendir(dir)) != NULL) {
            while ((de = readdir(d)) != NULL) {
                long long at = de->d_name[0] == '.' ? -1 : fd_mount((int)pids[i], de->d_name);
                size_t k = 0;
                while (k < nm && mnts[k] != at)
                    k++;
                if (k == nm)
                    continue;
                snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
                count_gone(m, path, dev, seen, &ns);
            }
            closedir(d);
        }
        snprintf(dir, sizeof(dir), "/proc/%d/maps", (int)pids[i]);
        if ((maps = fopen(dir, "re")) == NULL)
            continue;
        while (fgets(line, sizeof(line), maps)) {   /* "START-END PERMS OFF MAJ:MIN INODE PATH (deleted)" */
            char range[64];
            unsigned maj, min;
            if (!strstr(line, " (deleted)\n") || sscanf(line, "%63s %*s %*s %x:%x", range, &maj, &min) != 3 ||
                makedev(maj, min) != dev)
                continue;
            snprintf(path, sizeof(path), "/proc/%d/map_files/%s", (int)pids[i], range);
            count_gone(m, path, dev, seen, &ns);
        }
        fclose(maps);
    }
}

static void measure(const kd_engine *e, measured *m)
{
    char dir[4200];
    struct stat st;
    int64_t entries = 0;
    int fd;
    m->bytes = 0;
    m->deep = 0;
    m->until_ms = kestrel__now_ms() + WALK_MS;
    kd_engine_job_dir(e, m->id, NULL, dir, sizeof(dir));
    if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        return;
    if (fstat(fd, &st) < 0) {
        close(fd);
        return;
    }
    walk(fd, st.st_dev, 0, m, &entries);
    deleted_open(m, st.st_dev);
}

static void stop(kd_engine *e, kd_run *r, const char *why)
{
    int64_t by = kestrel__now_ms() + STOP_GRACE_MS;
    fprintf(stderr, "kestreld: job %lld: stopped: %s\n", (long long)r->id, why);
    kd_engine_terminate_locked(e, r, KD_TERM_DISK, why);
    if (r->kill_at_ms > by)
        r->kill_at_ms = by;
}

static void tick(void *ctx)
{
    kd_engine *e = ((struct kd_job_disk *)ctx)->e;
    measured *m = NULL, *most = NULL;
    size_t n = 0, cap = 0;
    int64_t avail = 0, keep = 0, max = e->cfg->max_job_disk;
    char why[400];
    int ending = 0;   /* a run stopped for disk still ends: its files are not gone yet */
    pthread_mutex_lock(&e->mu);
    for (const kd_run *r = e->runs; r; r = r->next)   /* started here (a process), not stopping already */
        if (r->term == KD_TERM_NONE && (r->pgid > 0 || r->rank_pgids) &&
            kestrel__array_grow(&m, &cap, n + 1, sizeof(*m)) == 0)
            m[n++].id = r->id;
    pthread_mutex_unlock(&e->mu);
    for (size_t i = 0; i < n; i++)
        measure(e, &m[i]);
    if (kd_disk_floor(e->cfg->data_dir, &avail, &keep) < 0)
        avail = keep;   /* unreadable: no pressure is assumed */
    pthread_mutex_lock(&e->mu);
    for (const kd_run *r = e->runs; r; r = r->next)
        ending |= r->term == KD_TERM_DISK;
    for (kd_run *r = e->runs; r; r = r->next)
        for (size_t i = 0; i < n; i++) {
            if (m[i].id != r->id || r->term != KD_TERM_NONE)
                continue;
            if (max > 0 && (m[i].bytes > max || m[i].deep)) {
                if (m[i].deep)
                    snprintf(why, sizeof(why), "its files nest deeper than %d folders, or pass %d entries, past what "
                             "kestreld measures against its --max-job-disk %lld MiB; they were removed", MAX_DEPTH,
                             MAX_ENTRIES, (long long)(max >> 20));
                else
                    snprintf(why, sizeof(why), "its files took %lld MiB, past kestreld's --max-job-disk %lld MiB; they "
                             "were removed", (long long)(m[i].bytes >> 20), (long long)(max >> 20));
                stop(e, r, why);
            } else if (!ending && avail < keep && (m[i].bytes * 4 >= keep - avail || m[i].deep) &&
                       (!most || m[i].deep > most->deep || (m[i].deep == most->deep && m[i].bytes > most->bytes))) {
                most = &m[i];
            }
        }
    for (kd_run *r = e->runs; r && most; r = r->next)
        if (r->id == most->id && r->term == KD_TERM_NONE) {
            snprintf(why, sizeof(why), "the data disk had %lld KiB free, under the %lld KiB it keeps, and this job's "
                     "files took the most (%lld KiB%s); they were removed", (long long)(avail >> 10),
                     (long long)(keep >> 10), (long long)(most->bytes >> 10), most->deep ? " and more: too many or too "
                     "deep to measure" : "");
            stop(e, r, why);
        }
    pthread_mutex_unlock(&e->mu);
    free(m);
}

/* Whether the data disk is below the catalog's part of its floor (its lower half) now: read at every
 * call (a statvfs, about a microsecond: read every 0.5 s, a job's output filled a small disk's last
 * 20 MiB in between), outside e->mu (a network file system's answer must not hold the engine), and
 * recorded under it: a new epoch each time it goes below. Its lower half: the repository stops at
 * the whole floor, and one user's chunks there must leave everyone else their submits. */
static int low_now(kd_engine *e)
{
    int64_t avail, keep;
    int low = kd_disk_floor(e->cfg->data_dir, &avail, &keep) == 0 && avail < keep / 2;
    pthread_mutex_lock(&e->mu);
    e->low_epoch += low && !e->disk_low;
    e->disk_low = low;
    pthread_mutex_unlock(&e->mu);
    return low;
}

int kd_job_disk_low(kd_engine *e)
{
    return low_now(e);
}

const kd_log_line *kd_job_disk_log_keep(kd_engine *e, int64_t job_id, const kd_log_line *lines, size_t *n,
                                        kd_log_line *note)
{
    static const char text[] = "kestrel: the job's output is dropped while the data disk has less than half its floor "
                               "free (kestreld keeps it for job states and tokens)";
    int say = 0;
    if (*n == 0 || !low_now(e))
        return lines;
    /* none of the lines, kestreld's own included (a build's or a clone's output is the user's
     * text: a review); a running job's log says so once each time the disk goes below, at most once
     * a minute (a job that swung the disk around the line stored 183 notes in 16 s: a hostile test) */
    pthread_mutex_lock(&e->mu);
    for (kd_run *r = e->runs; r && !say; r = r->next)
        if (r->id == job_id && r->low_told != e->low_epoch &&
            (r->low_told == 0 || kestrel__mono_ms() - r->low_told_ms >= TOLD_EVERY_MS)) {
            r->low_told = e->low_epoch;
            r->low_told_ms = kestrel__mono_ms();
            say = 1;
        }
    pthread_mutex_unlock(&e->mu);
    *note = (kd_log_line){ lines[0].time_ms, KESTREL_LOG_SYSTEM, text, sizeof(text) - 1 };
    *n = say;
    return note;
}

int kd_job_disk_start(kd_engine *e)
{
    struct kd_job_disk *d = calloc(1, sizeof(*d));
    if (d == NULL)
        return kestrel__error_oom();
    d->e = e;
    if (kd_worker_start(&d->w, DISK_EVERY_MS, tick, d, "job disk watch") < 0) {
        free(d);
        return KESTREL_ERROR;
    }
    e->job_disk = d;
    return 0;
}

void kd_job_disk_stop(kd_engine *e)
{
    if (e->job_disk == NULL)
        return;
    kd_worker_fini(&e->job_disk->w);
    free(e->job_disk);
    e->job_disk = NULL;
}

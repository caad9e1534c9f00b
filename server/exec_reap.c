/* server/exec_reap.c - /proc for the local executor (exec_reap.h): a process's stat (state, process
 * group, start time) and environment (a job's marker), and what a killed daemon's jobs left. */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "exec_reap.h"
#include "job_cgroup.h"

/* A process as /proc/PID/stat says: 0, or -1 when it is gone. */
typedef struct {
    pid_t pid;
    char state;
    long long ppid, pgrp;
    int64_t start;   /* clock ticks after boot */
} proc_info;

static int proc_read(pid_t pid, proc_info *pi)
{
    char path[64], buf[1024], *p;
    FILE *f;
    size_t n;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if ((f = fopen(path, "re")) == NULL)
        return -1;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* after "pid (comm)" (comm may hold spaces and parentheses): fields 3.. (state, ppid, pgrp, ...;
     * starttime is field 22: 21 is itrealvalue, always 0, read until 2026-12-05, which made every live
     * process "the same") */
    if ((p = strrchr(buf, ')')) == NULL ||
        sscanf(p + 1, " %c %lld %lld %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %" SCNd64,
               &pi->state, &pi->ppid, &pi->pgrp, &pi->start) != 4)
        return -1;
    pi->pid = pid;
    return 0;
}

int64_t kd_proc_start_time(pid_t pid)
{
    proc_info pi;
    return proc_read(pid, &pi) < 0 ? -1 : pi.start;
}

/* Every process but zombies, as /proc lists them now (*n of them; NULL when /proc cannot be read). */
static proc_info *proc_all(size_t *n)
{
    DIR *d = opendir("/proc");
    struct dirent *de;
    proc_info *all = NULL;
    size_t cap = 0;
    *n = 0;
    while (d && (de = readdir(d)) != NULL) {
        pid_t pid = (pid_t)atoi(de->d_name);
        if (pid <= 1)
            continue;
        if (*n == cap) {
            proc_info *more = realloc(all, (cap = cap ? 2 * cap : 256) * sizeof(*all));
            if (more == NULL)
                break;
            all = more;
        }
        if (proc_read(pid, &all[*n]) == 0 && all[*n].state != 'Z')
            (*n)++;
    }
    if (d)
        closedir(d);
    return all;
}

int kd_proc_uid_alive(uid_t uid)
{
    size_t n;
    proc_info *all = proc_all(&n);
    int alive = 0;
    for (size_t i = 0; i < n && !alive; i++) {
        char path[64], line[256];
        FILE *f;
        unsigned long real;
        snprintf(path, sizeof(path), "/proc/%d/status", (int)all[i].pid);
        if ((f = fopen(path, "re")) == NULL)
            continue;   /* gone since */
        while (fgets(line, sizeof(line), f))
            if (sscanf(line, "Uid: %lu", &real) == 1) {
                alive = real == (unsigned long)uid;
                break;
            }
        fclose(f);
    }
    free(all);
    return alive;
}

/* The value of the first entry name (with its '=') of process pid's environment (as the kernel shows
 * it: the process may have rewritten it in place), into out: read as it streams, however long. 0, or -1 when
 * it has none (or a longer one than out holds, or cannot be read). */
static int proc_env_get(pid_t pid, const char *name, char *out, size_t n)
{
    char path[64], chunk[4096], entry[PATH_MAX + 96];
    size_t plen = strlen(name), len = 0;
    ssize_t got;
    int fd, over = 0, found = -1;
    snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return -1;
    while (found < 0 && (got = read(fd, chunk, sizeof(chunk))) > 0)
        for (ssize_t k = 0; k < got && found < 0; k++) {
            if (chunk[k] != '\0') {
                if (len < sizeof(entry) - 1)
                    entry[len++] = chunk[k];
                else
                    over = 1;
                continue;
            }
            entry[len] = '\0';
            if (!over && len >= plen && !memcmp(entry, name, plen) && len - plen < n) {
                memcpy(out, entry + plen, len - plen + 1);
                found = 0;
            }
            len = 0;
            over = 0;
        }
    close(fd);
    return found;
}

/* The id of the job whose marker (prefix: the data dir's "DATA/jobs/", then "ID/checkpoint") process
 * pid's KESTREL_CHECKPOINT_DIR holds; -1 none. */
static int64_t proc_marker(pid_t pid, const char *prefix)
{
    char v[PATH_MAX + 96], *end;
    size_t plen = strlen(prefix);
    long long id;
    if (proc_env_get(pid, "KESTREL_CHECKPOINT_DIR=", v, sizeof(v)) < 0 || strncmp(v, prefix, plen))
        return -1;
    id = strtoll(v + plen, &end, 10);
    return end > v + plen && id > 0 && !strcmp(end, "/checkpoint") ? id : -1;
}

/* 1 when process pid is a child of another live kestreld (a copy of this data dir started on the same
 * host holds the live daemon's pids and start times in its catalog: without this, it stopped the live
 * daemon's jobs, a hostile test). The parent is what the job cannot choose: after its daemon's crash
 * a leader is an orphan (its parent init or a subreaper), and is reaped as before; its environment
 * the job could rewrite (a review: a job that named another data dir in it would have lived on). */
static int proc_foreign(pid_t pid)
{
    char path[64], exe[PATH_MAX], mine[PATH_MAX], *p;
    proc_info pi;
    ssize_t n;
    if (proc_read(pid, &pi) < 0 || pi.ppid <= 1 || pi.ppid == getpid())
        return 0;
    snprintf(path, sizeof(path), "/proc/%lld/exe", pi.ppid);
    if ((n = readlink(path, exe, sizeof(exe) - 1)) < 0)
        return 0;
    exe[n] = '\0';
    if ((n = readlink("/proc/self/exe", mine, sizeof(mine) - 1)) < 0)
        return 0;
    mine[n] = '\0';
    p = strrchr(exe, '/');
    return !strcmp(exe, mine) || !strncmp(p ? p + 1 : exe, "kestreld", 8);
}

static size_t find_job(const kd_job_row *rows, size_t n, int64_t id)
{
    size_t i = 0;
    while (i < n && rows[i].id != id)
        i++;
    return i;
}

/* Whether pid is gone or a zombie (its end is only waiting for a parent to read it). */
static int proc_ended(pid_t pid)
{
    proc_info pi;
    return proc_read(pid, &pi) < 0 || pi.state == 'Z';
}

/* Step 1 (exec_reap.h): the processes that carry a job's marker, and their groups; then until they
 * have ended (2 s at most), so that step 2 sees only what lives on. How many were stopped. */
static size_t reap_marked(const char *data_dir, const kd_job_row *rows, size_t n)
{
    char prefix[PATH_MAX + 64];
    size_t nall, nk = 0, *count = calloc(n, sizeof(*count));
    proc_info *all = proc_all(&nall);
    snprintf(prefix, sizeof(prefix), "%s/jobs/", data_dir);
    for (size_t k = 0; all && count && k < nall; k++) {
        size_t j;
        int64_t id;
        if (all[k].pid == getpid() || (id = proc_marker(all[k].pid, prefix)) < 0 || (j = find_job(rows, n, id)) == n)
            continue;
        kill(all[k].pid, SIGKILL);
        if (all[k].pgrp > 1)
            killpg((pid_t)all[k].pgrp, SIGKILL);
        count[j]++;
        all[nk++] = all[k];   /* all[0, nk): the ones killed */
    }
    for (size_t j = 0; count && j < n; j++)
        if (count[j])
            fprintf(stderr, "kestreld: job %lld: stopped %zu process%s its run left (by its KESTREL_CHECKPOINT_DIR)\n",
                    (long long)rows[j].id, count[j], count[j] == 1 ? "" : "es");
    for (int tries = 0; tries < 200; tries++) {
        size_t left = 0;
        for (size_t k = 0; k < nk; k++)
            left += !proc_ended(all[k].pid);
        if (!left)
            break;
        nanosleep(&(struct timespec){ 0, 10000000L }, NULL);
    }
    free(all);
    free(count);
    return nk;
}

size_t kd_exec_reap_left(const char *data_dir, int64_t id)
{
    kd_job_row row;
    size_t n;
    memset(&row, 0, sizeof(row));
    row.id = id;
    n = reap_marked(data_dir, &row, 1);
    return n + kd_cgroup_job_end(id);   /* what left its group and rewrote its environment too */
}

/* Step 2 for one recorded group: its leader pid, started at start (0: not known, or not this boot),
 * against the processes that live (all[0, nall)). */
static void reap_group(int64_t id, pid_t pid, int64_t start, const proc_info *all, size_t nall)
{
    size_t k = 0;
    int64_t now;
    while (k < nall && all[k].pgrp != pid)
        k++;
    if (pid <= 1 || k == nall)   /* nothing of it runs (its leader may wait as a zombie) */
        return;
    now = kd_proc_start_time(pid);
    if (proc_foreign(pid)) {
        fprintf(stderr, "kestreld: job %lld: process group %d is a job of another kestreld (a copy of this data dir "
                "started on the same host?): left running\n", (long long)id, (int)pid);
    } else if (now >= 0 && start > 0 && now == start) {   /* the very leader, running or a zombie holding the group */
        if (killpg(pid, SIGKILL) == 0)
            fprintf(stderr, "kestreld: job %lld: stopped process group %d, left by the daemon before\n",
                    (long long)id, (int)pid);
    } else {
        fprintf(stderr, "kestreld: job %lld: process group %d lives, but neither its leader's start time nor "
                "any environment in it is the job's: left running (if it is the job's run, stop it: "
                "kill -KILL -- -%d)\n", (long long)id, (int)pid, (int)pid);
    }
}

void kd_exec_reap(const char *data_dir, const kd_job_row *rows, size_t n)
{
    struct timespec up;
    int64_t boot_ms;
    size_t nall;
    proc_info *all;
    if (n == 0)   /* (no run to look for: no process's environment is read) */
        return;
    reap_marked(data_dir, rows, n);
    /* a start time counts only in the boot it was read in (a second's slack for the two clocks) */
    boot_ms = clock_gettime(CLOCK_BOOTTIME, &up) == 0
                  ? kestrel__now_ms() - ((int64_t)up.tv_sec * 1000 + up.tv_nsec / 1000000) : 0;
    all = proc_all(&nall);   /* what lives on after step 1, read once for every group */
    for (size_t i = 0; i < n; i++) {
        const kd_job_row *r = &rows[i];
        int this_boot = r->start_ms + 1000 >= boot_ms;
        char path[PATH_MAX];
        FILE *f;
        int pid;
        long long start;
        reap_group(r->id, (pid_t)r->pid, this_boot ? r->pid_start : 0, all, nall);
        snprintf(path, sizeof(path), "%s/gangs/%lld", data_dir, (long long)r->id);
        if ((f = fopen(path, "re")) == NULL)   /* (a line for each rank that had started) */
            continue;
        while (fscanf(f, "%d %lld", &pid, &start) == 2)
            if (pid != r->pid)   /* rank 0's is the job's own, seen above */
                reap_group(r->id, (pid_t)pid, this_boot ? start : 0, all, nall);
        fclose(f);
        unlink(path);
    }
    free(all);
}

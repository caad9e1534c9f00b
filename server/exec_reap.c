/* server/exec_reap.c - stops what a killed daemon's local jobs left running (exec_reap.h). It reads
 * /proc: each process's stat (state, process group) and environment (the job's marker). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "exec_local.h"
#include "exec_reap.h"

/* Process name's state and process group from /proc/NAME/stat: 0, or -1 when it is gone. */
static int proc_stat(const char *name, char *state, long long *pgrp)
{
    char path[64], buf[1024], *p;
    FILE *f;
    size_t n;
    snprintf(path, sizeof(path), "/proc/%s/stat", name);
    if ((f = fopen(path, "re")) == NULL)
        return -1;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* after "pid (comm)" (comm may hold spaces and parentheses): state, ppid, pgrp */
    if ((p = strrchr(buf, ')')) == NULL || sscanf(p + 1, " %c %*d %lld", state, pgrp) != 2)
        return -1;
    return 0;
}

/* The id of the job whose marker (prefix, then "ID/checkpoint") process name's environment holds, as
 * at its exec: read as it streams, however long (no job pushes its marker out of reach); -1 none. */
static int64_t proc_marker(const char *name, const char *prefix)
{
    char path[64], chunk[4096], entry[PATH_MAX + 96];
    size_t plen = strlen(prefix), len = 0;
    ssize_t got;
    int fd, over = 0;
    int64_t id = -1;
    snprintf(path, sizeof(path), "/proc/%s/environ", name);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return -1;
    while (id < 0 && (got = read(fd, chunk, sizeof(chunk))) > 0)
        for (ssize_t k = 0; k < got && id < 0; k++) {
            if (chunk[k] != '\0') {
                if (len < sizeof(entry) - 1)
                    entry[len++] = chunk[k];
                else
                    over = 1;
                continue;
            }
            entry[len] = '\0';
            if (!over && len > plen && !memcmp(entry, prefix, plen)) {
                char *end;
                long long v = strtoll(entry + plen, &end, 10);
                if (end > entry + plen && v > 0 && !strcmp(end, "/checkpoint"))
                    id = v;
            }
            len = 0;
            over = 0;
        }
    close(fd);
    return id;
}

static const kd_reap_job *find_job(const kd_reap_job *jobs, size_t n, int64_t id)
{
    for (size_t i = 0; i < n; i++)
        if (jobs[i].id == id)
            return &jobs[i];
    return NULL;
}

/* Whether pid is gone or a zombie (its end is only waiting for a parent to read it). */
static int proc_ended(pid_t pid)
{
    char name[24], state;
    long long pgrp;
    snprintf(name, sizeof(name), "%d", (int)pid);
    return proc_stat(name, &state, &pgrp) < 0 || state == 'Z';
}

/* Step 1 (exec_reap.h): the processes that carry a job's marker, and their groups. */
static void reap_marked(const char *data_dir, const kd_reap_job *jobs, size_t n)
{
    char prefix[PATH_MAX + 64];
    size_t *count = calloc(n ? n : 1, sizeof(*count)), cap = 0, nk = 0;
    pid_t *killed = NULL;
    DIR *d = opendir("/proc");
    struct dirent *de;
    snprintf(prefix, sizeof(prefix), "KESTREL_CHECKPOINT_DIR=%s/jobs/", data_dir);
    while (d && count && (de = readdir(d)) != NULL) {
        char state;
        long long pgrp;
        int64_t id;
        const kd_reap_job *j;
        pid_t pid = (pid_t)atoi(de->d_name);
        if (pid <= 1 || pid == getpid() || proc_stat(de->d_name, &state, &pgrp) < 0 || state == 'Z' ||
            (id = proc_marker(de->d_name, prefix)) < 0 || (j = find_job(jobs, n, id)) == NULL)
            continue;
        kill(pid, SIGKILL);
        if (pgrp > 1)
            killpg((pid_t)pgrp, SIGKILL);
        count[j - jobs]++;
        if (nk == cap) {
            pid_t *more = realloc(killed, (cap = cap ? 2 * cap : 16) * sizeof(*killed));
            if (more == NULL)
                continue;
            killed = more;
        }
        killed[nk++] = pid;
    }
    if (d)
        closedir(d);
    for (size_t i = 0; count && i < n; i++)
        if (count[i])
            fprintf(stderr, "kestreld: job %lld: stopped %zu process%s its run left (by its KESTREL_CHECKPOINT_DIR)\n",
                    (long long)jobs[i].id, count[i], count[i] == 1 ? "" : "es");
    /* until they have ended (2 s at most): step 2 then sees only what lives on */
    for (int tries = 0; tries < 200; tries++) {
        size_t left = 0;
        for (size_t k = 0; k < nk; k++)
            left += !proc_ended(killed[k]);
        if (!left)
            break;
        nanosleep(&(struct timespec){ 0, 10000000L }, NULL);
    }
    free(killed);
    free(count);
}

/* Whether a live (not zombie) process is in group pgid. */
static int group_lives(pid_t pgid)
{
    DIR *d = opendir("/proc");
    struct dirent *de;
    int found = 0;
    while (d && !found && (de = readdir(d)) != NULL) {
        char state;
        long long pgrp;
        found = de->d_name[0] >= '1' && de->d_name[0] <= '9' && proc_stat(de->d_name, &state, &pgrp) == 0 &&
                pgrp == pgid && state != 'Z';
    }
    if (d)
        closedir(d);
    return found;
}

/* Step 2 for one recorded group: its leader pid, started at start (0: not known, or not this boot). */
static void reap_group(int64_t id, pid_t pid, int64_t start)
{
    int64_t now;
    if (pid <= 1 || !group_lives(pid))   /* nothing of it runs (its leader may wait as a zombie) */
        return;
    now = kd_proc_start_time(pid);
    if (now >= 0 && start > 0 && now == start) {   /* the very leader, running or a zombie holding the group */
        if (killpg(pid, SIGKILL) == 0)
            fprintf(stderr, "kestreld: job %lld: stopped process group %d, left by the daemon before\n",
                    (long long)id, (int)pid);
    } else {
        fprintf(stderr, "kestreld: job %lld: process group %d lives, but neither its leader's start time nor "
                "any environment in it is the job's: left running\n", (long long)id, (int)pid);
    }
}

void kd_exec_reap(const char *data_dir, const kd_reap_job *jobs, size_t n)
{
    if (n == 0)   /* (no run to look for: no process's environment is read) */
        return;
    reap_marked(data_dir, jobs, n);
    for (size_t i = 0; i < n; i++) {
        char path[PATH_MAX];
        FILE *f;
        int pid;
        long long start;
        reap_group(jobs[i].id, jobs[i].pid, jobs[i].this_boot ? jobs[i].pid_start : 0);
        snprintf(path, sizeof(path), "%s/gangs/%lld", data_dir, (long long)jobs[i].id);
        if ((f = fopen(path, "re")) == NULL)   /* (a line for each rank that had started) */
            continue;
        while (fscanf(f, "%d %lld", &pid, &start) == 2)
            if (pid != jobs[i].pid)   /* rank 0's is the job's own, seen above */
                reap_group(jobs[i].id, (pid_t)pid, jobs[i].this_boot ? start : 0);
        fclose(f);
        unlink(path);
    }
}

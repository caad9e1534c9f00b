/* server/env_builder.c - the environment builder's account and a venv's files (env_builder.h). */
#include <dirent.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "env_builder.h"
#include "exec_reap.h"
#include "exec_util.h"
#include "store.h"

/* Every process of the builder account, killed: a build's code must not live on to write into the
 * venv after it is sealed, or into the next build (a hostile test: a wheel's .pth, run by the pip
 * freeze, left a process that planted code in the next user's venv). kill -KILL -1 run as that
 * account reaches exactly its processes, all but the kill itself; it runs again while /proc still
 * shows one alive (one forking meanwhile is caught the next time), at most KILL_ROUNDS times. */
#define KILL_ROUNDS 50
void kd_env_kill_builder(const kd_ident *id)
{
    char *argv[] = { "/bin/kill", "-KILL", "-1", NULL };
    kestrel_buf out = KESTREL_BUF_INIT;
    kd_exec_as as = { id, "/" };
    if (id == NULL || !id->isolated)
        return;
    for (int i = 0; i < KILL_ROUNDS; i++) {
        kd_exec_run(argv, "/", &out, &as);
        kestrel_buf_dispose(&out);
        if (!kd_proc_uid_alive(id->uid))
            break;
        nanosleep(&(struct timespec){ 0, 5 * 1000 * 1000 }, NULL);   /* SIGKILL is delivered, not yet done */
    }
}

/* Remove a build dir: as the builder while it is the builder's (root never walks a tree another
 * account may still change), then its now empty top as root. */
void kd_env_drop(const kd_ident *builder, const char *dir)
{
    struct stat st;
    if (lstat(dir, &st) == 0 && st.st_uid != 0 && builder->isolated)
        kd_ident_rm_tree(builder, dir, dir);
    else
        kestrel__rm_tree(dir);
    rmdir(dir);
}

/* real/lib/python3.X/site-packages, each step a real directory (lstat: a link the build left
 * would lead root's writes elsewhere). 0, or -1. */
int kd_env_site_packages(const char *real, char *out, size_t n)
{
    char lib[PATH_MAX + 8];
    struct stat st;
    DIR *d;
    struct dirent *de;
    int rc = -1;
    snprintf(lib, sizeof(lib), "%s/lib", real);
    if (lstat(lib, &st) < 0 || !S_ISDIR(st.st_mode) || (d = opendir(lib)) == NULL)
        return -1;
    while (rc < 0 && (de = readdir(d)) != NULL) {
        char py[PATH_MAX * 2];
        if (strncmp(de->d_name, "python3", 7))
            continue;
        snprintf(py, sizeof(py), "%s/%s", lib, de->d_name);
        if (lstat(py, &st) < 0 || !S_ISDIR(st.st_mode))
            continue;
        snprintf(out, n, "%s/site-packages", py);
        if (lstat(out, &st) == 0 && S_ISDIR(st.st_mode))
            rc = 0;
    }
    closedir(d);
    return rc;
}

static int to_root(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)ftw;
    if (geteuid() == 0 && lchown(path, 0, 0) < 0)   /* not root: the venv stays kestreld's own */
        return -1;
    if (flag == FTW_SL || S_ISLNK(st->st_mode))
        return 0;
    /* readable (and runnable where the builder could run it) by every job, writable by none of them */
    return chmod(path, (st->st_mode & 0700) | ((st->st_mode & 0100) || S_ISDIR(st->st_mode) ? 0055 : 0044));
}

int kd_env_seal(const char *real)
{
    return nftw(real, to_root, 32, FTW_PHYS);
}
